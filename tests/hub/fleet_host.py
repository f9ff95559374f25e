"""One simulated host warming a model snapshot: runs inside its own mount, pid and uts namespaces.

Usage: ``python fleet_host.py JOB.json``. The job names the host's L1 (a private tmpfs is
mounted over it here), the shared L2, the local hub's URL, the model, and optionally a file to
write once imported (``ready``) and a gate file to wait for (all hosts start together). With
``pause``, the host writes that file after it has copied its blobs and links to L2 but before
the record that makes them a complete revision, and then blocks (the test kills it). The report,
written atomically to ``out``, holds the snapshot's path, the sha256 of each of its files, whether
each file's bytes lie on this host's own L1, the error if the warm failed, and cacheroot's log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


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


def _pause_before_record(paused: str) -> None:
    """Stop the write-through after blobs and links, before the record (forever)."""
    from cacheroot.fetch import _snapshot_shared

    for name in ("_hf_push", "_ms_push"):
        real = getattr(_snapshot_shared, name)

        def stop(*args: Any, _real: Any = real) -> None:
            _real(*args)
            Path(paused).write_text("1")
            threading.Event().wait()

        setattr(_snapshot_shared, name, stop)


def _files(top: Path, l1: str) -> dict[str, list[Any]]:
    """``rel -> [sha256, bytes lie on L1]`` for every file of a snapshot directory."""
    found: dict[str, list[Any]] = {}
    for path in sorted(top.rglob("*")):
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[path.relative_to(top).as_posix()] = [
                digest,
                os.path.realpath(path).startswith(l1 + os.sep),
            ]
    return found


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    os.makedirs(job["l1"], exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", job["l1"]], check=True)
    from cacheroot.envs import (
        CACHEROOT,
        CACHEROOT_APPLIED,
        CACHEROOT_OFFLINE,
        CACHEROOT_SHARED,
        HF_HUB_OFFLINE,
        TABLE,
        apply,
    )

    # A host of its own: nothing derived from the test's root is carried over.
    for name in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        os.environ.pop(name, None)
    os.environ[CACHEROOT] = job["l1"]
    os.environ[CACHEROOT_SHARED] = job["l2"]
    os.environ.update(job["env"])
    if job.get("offline"):
        os.environ[CACHEROOT_OFFLINE] = "1"
        os.environ[HF_HUB_OFFLINE] = "1"
    apply()
    from cacheroot.fetch import Model, _lease
    from cacheroot.fetch._snapshot import warm_snapshot

    if job["spec"].get("hub", "hf") == "hf":
        import huggingface_hub
    else:
        import modelscope.hub.snapshot_download  # noqa: F401 - imported before the gate

    if "stale_after" in job:
        _lease.STALE_AFTER = job["stale_after"]
        _lease.BEAT = job["beat"]
    if job.get("pause"):
        _pause_before_record(job["pause"])
    lines = _Lines()
    logger = logging.getLogger("cacheroot.fetch")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    report: dict[str, Any] = {"error": None}
    if job.get("ready"):
        Path(job["ready"]).write_text("1")
    _wait(job.get("gate"))
    spec = Model(**job["spec"])
    try:
        path = warm_snapshot(spec, attempts=1)
        report["path"] = str(path)
        report["files"] = _files(path, job["l1"])
        if job.get("offline") and spec.hub == "hf":
            # huggingface_hub itself, offline, resolves the snapshot this host now holds.
            report["client"] = huggingface_hub.snapshot_download(
                spec.repo_id, revision=spec.revision
            )
    except Exception as error:  # reported to the test
        report["error"] = f"{type(error).__name__}: {error}"
    report["log"] = lines.lines
    tmp = job["out"] + ".tmp"
    Path(tmp).write_text(json.dumps(report))
    os.replace(tmp, job["out"])


if __name__ == "__main__":
    main()
