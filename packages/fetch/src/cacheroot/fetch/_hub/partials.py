"""Partial files that no writer will finish: found in the hub's store and removed.

A fill writes a file's bytes to ``blobs/.DIGEST.MACHINE-PID.ID.partial`` (the test cache's own
naming, :func:`cacheroot.fetch._store.partial_path`) and renames it into place once checked. A
hub that is killed mid-download (``kill -9``, the OOM killer, a lost node) leaves it behind, as
large as the download had got; nothing would ever remove it. Each hub removes such partials when
it starts, and so does ``cacheroot hub prune``.

Several hubs may share a store, so a partial is removed only when its writer is surely gone:

- written on this machine (same host, boot and pid namespace: the ``MACHINE`` tag), its pid runs
  no process (:func:`cacheroot.fetch._proc.gone`, which says so only where ``/proc`` shows the
  whole pid namespace);
- whoever wrote it, it was not written to for :data:`STALE_AFTER` seconds. That is all there is
  to go by for a partial of another host or container on the same volume (its pid means nothing
  here) or one named before the tag (``.DIGEST.PID.HEX.partial``), and it also catches a pid
  that was reused. A live fill writes steadily: the upstream's read timeout ends one that stalls
  long before that.

The directory is reached without following a link, and only regular files are removed.
"""

from __future__ import annotations

import os
import re
import stat
import time

from .. import _held, _proc, _store

__all__ = ["STALE_AFTER", "abandoned", "abandoned_in", "sweep"]

#: Seconds without a write after which a partial another machine wrote counts as abandoned.
STALE_AFTER = 3600.0
#: The hub's partials before they carried a machine tag.
_LEGACY = re.compile(r"^\..+\.\d+\.[0-9a-f]+\.partial$")


def abandoned(name: str, st: os.stat_result, now: float, stale_after: float) -> bool:
    """Whether the partial ``name`` (``st``: its ``lstat``) is one no writer will finish."""
    if not stat.S_ISREG(st.st_mode):
        return False
    parsed = _store.parse_partial(name)
    if parsed is None and _LEGACY.match(name) is None:
        return False  # not a partial of the hub
    if parsed is not None:
        _, tag, pid = parsed
        if tag == _proc.machine_tag():
            if pid == os.getpid():
                return False
            if _proc.gone(pid):
                return True
    return now - st.st_mtime > stale_after


def abandoned_in(fd: int, now: float, stale_after: float) -> list[tuple[str, os.stat_result]]:
    """The partials in the directory open at ``fd`` that no writer will finish, with their
    ``lstat``, by name."""
    found: list[tuple[str, os.stat_result]] = []
    for name in sorted(os.listdir(fd)):
        if not (name.startswith(".") and name.endswith(".partial")):
            continue
        try:
            st = os.lstat(name, dir_fd=fd)
        except OSError:
            continue
        if abandoned(name, st, now, stale_after):
            found.append((name, st))
    return found


def sweep(
    root: str,
    *,
    now: float | None = None,
    stale_after: float = STALE_AFTER,
    dry_run: bool = False,
) -> list[tuple[str, int]]:
    """Remove the abandoned partials in ``root/blobs``; ``(name, size)`` of each one removed
    (or, with ``dry_run``, that would be). Blocking: run it off the event loop."""
    clock = time.time() if now is None else now
    found: list[tuple[str, int]] = []
    try:
        fd = _held.tree(root, "blobs")
    except OSError:
        return found
    try:
        for name, st in abandoned_in(fd, clock, stale_after):
            if not dry_run:
                try:
                    _held.unlink(fd, name)
                except OSError:
                    continue
            found.append((name, st.st_size))
    finally:
        os.close(fd)
    return sorted(found)
