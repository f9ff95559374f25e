"""One simulated host of a fleet sharing a bucket: a process with its own cache root (L1).

Run as ``python host.py JOB.json``. The job names the ``urls`` to fetch (with ``sha256`` pins
or not), a ``gate`` file to wait for (so that several hosts start at once), and optionally a
lease lifetime (``ttl``) and a ``stall`` file: the first upload of a part then writes that file
and stops for good, so that the test can kill the host mid-upload. It prints one JSON line:
the sha256 of each file it was served, in order, and how far its peak resident memory rose
above the resident memory it had before each fetch (KiB). A job that names a ``snapshot`` (a
model entry) warms that model snapshot instead and reports it (:func:`warm_snapshot`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _stall_uploads(marker: str) -> None:
    """Make the first part of an upload announce itself in ``marker``, then hang."""
    from cacheroot.fetch._bucket import transfer

    real = transfer.withheld_parts

    def parts(fd: int, size: int, hasher: Any, digest: str) -> Any:
        for i, part in enumerate(real(fd, size, hasher, digest)):
            if i == 1:
                Path(marker).write_text("uploading")
                time.sleep(3600)
            yield part

    transfer.withheld_parts = parts


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak() -> int:
    """Reset this process's peak resident memory to its current one (Linux); that, in KiB."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def _peak() -> int:
    return _status_kib("VmHWM")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class _Lines(logging.Handler):
    """cacheroot's log from INFO on, kept for the report (as ``LEVEL: message``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def warm_snapshot(job: dict[str, Any]) -> int:
    """A job with ``snapshot`` (a model entry: ``repo_id``, ``revision``, ``hub``): warm it
    with the hub's own client after the gate; print the snapshot's path, the sha256 of each of
    its files, the error if the warm failed, and cacheroot's log."""
    from cacheroot.fetch import Model
    from cacheroot.fetch._models.snapshot import warm_snapshot as warm

    spec = Model(**job["snapshot"])
    if spec.hub == "hf":
        import huggingface_hub  # noqa: F401 - imported before the gate, as a suite does
    else:
        import modelscope_hub  # noqa: F401
    lines = _Lines()
    logger = logging.getLogger("cacheroot.fetch")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    gate = job.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    report: dict[str, Any] = {"error": None, "path": None, "files": {}}
    try:
        path = warm(spec, attempts=1)
        report["path"] = str(path)
        report["files"] = {
            p.relative_to(path).as_posix(): _sha256(p)
            for p in sorted(path.rglob("*"))
            if p.is_file()
        }
    except Exception as error:  # reported to the test
        report["error"] = f"{type(error).__name__}: {error}"
    report["log"] = lines.lines
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


def main() -> int:
    job: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
    if "snapshot" in job:
        return warm_snapshot(job)
    from cacheroot.fetch import Fetcher

    if "ttl" in job:
        from cacheroot.fetch._bucket import lease

        lease.TTL = float(job["ttl"])
    if "part" in job:
        from cacheroot.fetch._bucket import transfer

        transfer.PART = int(job["part"])
    if "stall" in job:
        _stall_uploads(job["stall"])
    gate = job.get("gate")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)
    fetcher = Fetcher(lock_timeout=job.get("lock_timeout", 60.0))
    served = []
    peaks = []
    for url, pin in job["urls"]:
        before = _reset_peak()
        path = fetcher.fetch(url, sha256=pin)
        peaks.append(_peak() - before)
        served.append(_sha256(path))
    sys.stdout.write(json.dumps({"served": served, "grown_kib": peaks}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
