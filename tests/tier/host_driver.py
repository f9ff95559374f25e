"""One simulated host of a fleet: runs inside its own mount, pid and uts namespaces.

Usage: ``python host_driver.py JOB.json``. The job names the host's L1 (a private tmpfs is
mounted over it here, so no other host sees it), the shared L2, what to fetch or build, and a gate
file to wait for (all hosts start together). The report, written atomically to ``out``, holds
the sha256 of every file this host was served, the log lines of cacheroot (takeovers), and the
file system types of L1 and L2 as this host sees them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _fstype(path: str) -> str:
    argv = ["stat", "-f", "-c", "%T", path]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    return done.stdout.strip()


def _mount_l1(job: dict[str, Any]) -> None:
    l1 = job["l1"]
    os.makedirs(l1, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", l1], check=True)
    if job.get("sshfs"):
        os.makedirs(job["l2"], exist_ok=True)
        subprocess.run([*job["sshfs"], job["l2"]], check=True)


def _wait(path: str | None, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while path and not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"gate {path} never opened")
        time.sleep(0.005)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _builder(directory: Path) -> None:
    with open(os.environ["BUILDS_LOG"], "a") as log:
        log.write(socket.gethostname() + "\n")
    (directory / "config.json").write_text('{"hidden_size": 8}')
    (directory / "weights.bin").write_bytes(bytes(range(256)) * 256)


def _pause_pulls(paused: str, resume: str) -> None:
    """Make the first copy from L2 stop after its first chunk until ``resume`` exists."""
    from cacheroot.fetch import _shared, _store

    real = _shared._copy

    def copy(fd: int, part: _store.Partial) -> None:
        with open(os.dup(fd), "rb") as f:
            part.write(f.read(1 << 20))
            Path(paused).write_text("1")
            _wait(resume)
            while chunk := f.read(1 << 20):
                part.write(chunk)
        _shared._copy = real

    _shared._copy = copy


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    _mount_l1(job)
    from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_SHARED, TABLE, apply

    # A host of its own: nothing derived from the test's root is carried over.
    for name in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        os.environ.pop(name, None)
    os.environ[CACHEROOT] = job["l1"]
    os.environ[CACHEROOT_SHARED] = job["l2"]
    apply()
    from cacheroot.fetch import Fetcher, _lease, build_once

    if "stale_after" in job:
        _lease.STALE_AFTER = job["stale_after"]
        _lease.BEAT = job["beat"]
    lines = _Lines()
    logger = logging.getLogger("cacheroot.fetch")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    if job.get("builds"):
        os.environ["BUILDS_LOG"] = job["builds"]
    if job.get("pause"):
        _pause_pulls(*job["pause"])
    fetcher = Fetcher(read_timeout=30.0, retries=1)
    report: dict[str, Any] = {"host": socket.gethostname(), "files": {}, "built": None}
    if job.get("ready"):
        Path(job["ready"]).write_text("1")
    _wait(job.get("gate"))
    for url in job.get("urls", []):
        got = str(fetcher.fetch(url))
        report["files"][url] = _sha(got)
        report.setdefault("paths", []).append(got)
    if job.get("l1_from"):
        import shutil

        shutil.copytree(job["l1_from"], job["l1"], dirs_exist_ok=True)
    if job.get("cli"):
        from cacheroot.envs._cli import main as cli

        report["cli"] = cli(job["cli"])
    if job.get("build"):
        built = build_once("dummy", _builder)
        report["built"] = {p.name: _sha(str(p)) for p in sorted(built.iterdir())}
    report["log"] = lines.lines
    report["fs"] = {"l1": _fstype(job["l1"]), "l2": _fstype(job["l2"])}
    tmp = job["out"] + ".tmp"
    Path(tmp).write_text(json.dumps(report))
    os.replace(tmp, job["out"])


if __name__ == "__main__":
    main()
