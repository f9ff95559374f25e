"""What one simulated host of a shared-tier fleet does, inside its namespaces (``tests/hosts``).

The toolkit mounts the host's L1 (a private tmpfs) and, for the network case, its sshfs client of
the shared L2, sets the host's environment and waits at the gate; ``prepare`` readies what the
job names: the ``urls`` to fetch, a tree to copy into L1 (``l1_from``), a ``cli`` command to
run, a directory to ``build`` once (logged to ``builds``), and optionally a ``pause`` of the first
copy from L2. The report holds the sha256 of every file this host was served, what it built, the
file system types of L1 and L2 as this host sees them (the toolkit adds the log lines of
cacheroot: takeovers).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _fstype(path: str) -> str:
    argv = ["stat", "-f", "-c", "%T", path]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    return done.stdout.strip()


def _builder(directory: Path) -> None:
    with open(os.environ["BUILDS_LOG"], "a") as log:
        log.write(socket.gethostname() + "\n")
    (directory / "config.json").write_text('{"hidden_size": 8}')
    (directory / "weights.bin").write_bytes(bytes(range(256)) * 256)


def _pause_pulls(paused: str, resume: str, wait: Callable[[str], None]) -> None:
    """Make the first copy from L2 stop after its first chunk until ``resume`` exists."""
    from cacheroot.fetch import _shared, _store

    real = _shared._copy

    def copy(fd: int, part: _store.Partial, size: int) -> bool:
        with open(os.dup(fd), "rb") as f:
            part.write(f.read(min(1 << 20, size)))
            Path(paused).write_text("1")
            wait(resume)
            while part.size < size and (chunk := f.read(min(1 << 20, size - part.size))):
                part.write(chunk)
        _shared._copy = real
        return part.size == size

    _shared._copy = copy


def prepare(job: dict[str, Any], wait: Callable[[str], None]) -> Callable[[], dict[str, Any]]:
    """Before the gate: the fetcher and the patches the job asks for; returns the host's work."""
    from cacheroot.fetch import Fetcher, build_once

    if job.get("builds"):
        os.environ["BUILDS_LOG"] = job["builds"]
    if job.get("pause"):
        paused, resume = job["pause"]
        _pause_pulls(paused, resume, wait)
    fetcher = Fetcher(read_timeout=30.0, retries=1)

    def work() -> dict[str, Any]:
        report: dict[str, Any] = {"host": socket.gethostname(), "files": {}, "built": None}
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
        report["fs"] = {"l1": _fstype(job["l1"]), "l2": _fstype(job["l2"])}
        return report

    return work
