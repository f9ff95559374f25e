"""What one simulated host does to warm a model snapshot, inside its namespaces (``tests/hosts``).

The toolkit mounts the host's L1 (a private tmpfs), sets the host's environment (the local hub's
URL, offline where the job says) and waits at the gate; ``prepare`` imports the hub's client
before it and, with ``pause``, makes the host write that file after it has copied its blobs and
links to L2 but before the record that makes them a complete revision, and then block (the test
kills it). The report holds the snapshot's path, the sha256 of each of its files, whether each
file's bytes lie on this host's own L1, and the error if the warm failed (the toolkit adds
cacheroot's log).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _pause_before_record(paused: str) -> None:
    """Stop the write-through after blobs and links, before the record (forever)."""
    from cacheroot.fetch._models import shared as _snapshot_shared

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


def prepare(job: dict[str, Any], wait: Callable[[str], None]) -> Callable[[], dict[str, Any]]:
    """Before the gate: the hub's client imported, the pause set; returns the host's work."""
    from cacheroot.fetch import Model
    from cacheroot.fetch._models.snapshot import warm_snapshot

    if job["spec"].get("hub", "hf") == "hf":
        import huggingface_hub
    else:
        import modelscope.hub.snapshot_download  # noqa: F401 - imported before the gate

    if job.get("pause"):
        _pause_before_record(job["pause"])

    def work() -> dict[str, Any]:
        report: dict[str, Any] = {"error": None}
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
        return report

    return work
