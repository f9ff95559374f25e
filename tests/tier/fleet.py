"""Simulated hosts for the shared-tier tests: real namespaces, real mounts, real processes.

Each host is ``unshare --mount --pid --uts --fork --mount-proc``: its own host name (so its
partials and lock records name another machine), its own pid space and ``/proc``, and a private
tmpfs as its L1. The hosts share one L2 on another file system (the test's directory), or, for
the network case, each mounts the L2 over sshfs itself: one client per host, so locks taken on
one client mean nothing to the others, as on NFS.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

DRIVER = str(Path(__file__).with_name("host_driver.py"))


def namespaces_missing() -> str:
    """Why hosts cannot be simulated here (``""`` when they can)."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    if os.geteuid() != 0:
        return "simulated hosts need root (mount and pid namespaces, tmpfs mounts)"
    probe = ["unshare", "--mount", "--pid", "--uts", "--fork", "--mount-proc", "true"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        return "mount, pid and uts namespaces are not permitted here"
    return ""


def need_namespaces() -> None:
    """Skip the calling test where hosts cannot be simulated."""
    why = namespaces_missing()
    if why:
        pytest.skip(why)


class Host:
    """One simulated host running :data:`DRIVER` with a job."""

    def __init__(self, name: str, work: Path, l2: str, **job: Any) -> None:
        self.name = name
        self.out = work / f"{name}.json"
        self.job = {"l1": str(work / name / "l1"), "l2": l2, "out": str(self.out), **job}
        spec = work / f"{name}.job.json"
        spec.write_text(json.dumps(self.job))
        argv = [
            "unshare",
            "--mount",
            "--pid",
            "--uts",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            name,
            sys.executable,
            DRIVER,
            str(spec),
        ]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def report(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait for the host and return its report; fail with its output if it failed."""
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            output, _ = self.proc.communicate()
            pytest.fail(f"host {self.name} did not finish in {timeout} s:\n{output}")
        assert self.proc.returncode == 0, f"host {self.name} failed:\n{output}"
        result: dict[str, Any] = json.loads(self.out.read_text())
        return result

    def kill(self) -> None:
        """``kill -9`` every process of the host."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "") -> None:
    """Poll ``predicate`` (a cheap look at the file system) until true; fail after ``timeout``."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what or predicate}")
        time.sleep(0.01)


def visible_files(top: str) -> dict[str, bytes]:
    """Every non-hidden regular file under ``top`` (relative path -> bytes)."""
    found: dict[str, bytes] = {}
    for here, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if not name.startswith("."):
                path = os.path.join(here, name)
                found[os.path.relpath(path, top)] = Path(path).read_bytes()
    return found


def hidden_partials(top: str) -> list[str]:
    """Partial files and staging directories left under ``top``."""
    found = [
        os.path.join(here, name)
        for here, dirs, names in os.walk(top)
        for name in names + dirs
        if ".partial" in name
    ]
    return sorted(found)
