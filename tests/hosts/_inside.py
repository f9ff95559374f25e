"""A simulated host's own process: what runs inside its namespaces, around an area's driver.

Usage: ``python _inside.py DRIVER JOB.json`` (:class:`hosts.Host` runs it as a new host). It
imports neither its package nor pytest (a host's interpreter starts fast) and, in this order:

1. mounts a private tmpfs of ``l1_size`` over the job's ``l1`` (no other host sees it) and, where
   the job names an ``sshfs`` command, mounts the shared ``l2`` with it (one client per host,
   so locks taken on one client mean nothing to the others, as on NFS);
2. makes the environment a host's own: nothing derived from the test's root is carried over;
   ``CACHEROOT`` is ``l1``, ``CACHEROOT_SHARED`` is ``l2``, the job's ``env`` is added, and the
   layout is applied;
3. shortens the leases where the job says (``stale_after``, ``beat``) and captures the log of
   ``cacheroot.fetch``;
4. calls the driver's ``prepare(job, wait)``, which imports and patches what it needs and returns
   the work; writes the job's ``ready`` file, waits for its ``gate`` (all hosts start together),
   and runs the work, which returns the report;
5. adds the log lines to the report and writes it atomically to ``out``.

``wait(path)`` is the gate: it returns once ``path`` exists (at once for ``None``) and raises
:class:`TimeoutError` after a minute.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def wait(path: str | None, deadline: float = 60.0) -> None:
    """Return once ``path`` exists; raise after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while path and not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"gate {path} never opened")
        time.sleep(0.005)


class Lines(logging.Handler):
    """Every message logged, as text."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def mount(job: dict[str, Any]) -> None:
    """The host's own L1 (a tmpfs) and, over a network file system, its own client of L2."""
    os.makedirs(job["l1"], exist_ok=True)
    size = f"size={job['l1_size']}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", job["l1"]], check=True)
    if job.get("sshfs"):
        os.makedirs(job["l2"], exist_ok=True)
        subprocess.run([*job["sshfs"], job["l2"]], check=True)


def settle(job: dict[str, Any]) -> Lines:
    """The host's own environment and layout, its lease timings; the log captured from here on."""
    from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_SHARED, TABLE, apply

    for name in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        os.environ.pop(name, None)
    os.environ[CACHEROOT] = job["l1"]
    os.environ[CACHEROOT_SHARED] = job["l2"]
    os.environ.update(job.get("env", {}))
    apply()
    from cacheroot.fetch import _lease

    if "stale_after" in job:
        _lease.STALE_AFTER = job["stale_after"]
        _lease.BEAT = job["beat"]
    lines = Lines()
    logger = logging.getLogger("cacheroot.fetch")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    return lines


def main() -> None:
    driver, job = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    mount(job)
    lines = settle(job)
    work = runpy.run_path(driver)["prepare"](job, wait)
    if job.get("ready"):
        Path(job["ready"]).write_text("1")
    wait(job.get("gate"))
    report: dict[str, Any] = work()
    report["log"] = lines.lines
    tmp = job["out"] + ".tmp"
    Path(tmp).write_text(json.dumps(report))
    os.replace(tmp, job["out"])


if __name__ == "__main__":
    main()
