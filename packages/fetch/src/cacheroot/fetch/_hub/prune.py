"""``cacheroot hub prune``: keep the hub cache's store within an age and a size.

What a prune removes, it removes whole: an answer (one file) or a file's bytes (one blob). The
least recently used go first: a stored file is stamped each time it is served (its mtime), an
answer when it was last received from the upstream. A file being fetched is a partial and is
never touched; one a client is reading stays readable (an unlinked file lives on while open).
A partial whose writer died (a hub killed mid-download) is removed whatever the criteria, as
each hub does when it starts (:mod:`.partials` says how a dead writer is told from a live one).

The store is read as untrusted: the walk never follows a link (a planted one is removed like
any stray name, never its target), and only regular files are counted or removed.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass

from .. import _shared
from .partials import STALE_AFTER, sweep

__all__ = ["Pruned", "prune"]


@dataclass
class Pruned:
    """What a prune did: files and bytes removed, files and bytes kept."""

    removed: int = 0
    removed_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0
    #: Partial files of dead writers removed, and their bytes.
    partials: int = 0
    partial_bytes: int = 0


def _open_dir(parts: list[str] | tuple[str, ...], root: str) -> int:
    """A descriptor of ``root/parts...``, each part opened without following a link."""
    return _shared.open_below(root, os.path.join(*parts) if parts else "")


def _files(root: str, parts: list[str]) -> list[tuple[int, tuple[str, ...], str, int]]:
    """``(mtime_ns, directory parts, name, size)`` of the regular files in ``root/parts...``,
    and (for ``meta``) one level further down; partial files (dot names) left out."""
    found: list[tuple[int, tuple[str, ...], str, int]] = []
    try:
        fd = _open_dir(parts, root)
    except OSError:
        return found
    try:
        for name in os.listdir(fd):
            try:
                st = os.lstat(name, dir_fd=fd)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and parts == ["meta"]:
                found += _files(root, [*parts, name])
            elif stat.S_ISREG(st.st_mode) and not name.startswith("."):
                found.append((st.st_mtime_ns, tuple(parts), name, st.st_size))
    finally:
        os.close(fd)
    return found


def _remove(root: str, parts: tuple[str, ...], name: str) -> bool:
    """Unlink ``name`` in ``root/parts...``, reached without following a link."""
    try:
        fd = _open_dir(parts, root)
    except OSError:
        return False
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def prune(
    root: str,
    *,
    older_than: float | None = None,
    max_size: int | None = None,
    now: float | None = None,
    dry_run: bool = False,
    stale_after: float = STALE_AFTER,
) -> Pruned:
    """Remove the partials of dead writers; then what was not used for ``older_than``
    seconds, then the least recently used until the store holds at most ``max_size`` bytes."""
    clock = time.time() if now is None else now
    dead = sweep(root, now=clock, stale_after=stale_after, dry_run=dry_run)
    entries = sorted(_files(root, ["blobs"]) + _files(root, ["meta"]))
    total = sum(e[3] for e in entries)
    done = Pruned(partials=len(dead), partial_bytes=sum(size for _name, size in dead))
    cutoff = None if older_than is None else (clock - older_than) * 1e9
    for mtime_ns, parts, name, size in entries:
        old = cutoff is not None and mtime_ns < cutoff
        big = max_size is not None and total > max_size
        if (old or big) and (dry_run or _remove(root, parts, name)):
            done.removed += 1
            done.removed_bytes += size
            total -= size
        else:
            done.kept += 1
            done.kept_bytes += size
    return done
