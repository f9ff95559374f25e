"""``cacheroot hub prune``: keep the hub cache's store within an age and a size.

What a prune removes, it removes whole: an answer (one file) or a file's bytes (one blob). The
least recently used go first: a stored file is stamped each time it is served (its mtime), an
answer when it was last received from the upstream. A file being fetched is a partial and is
never touched; one a client is reading stays readable (an unlinked file lives on while open).
A partial whose writer died (a hub killed mid-download) is removed whatever the criteria, as
each hub does when it starts (:mod:`.partials` says how a dead writer is told from a live one).

The store is read as untrusted: the walk never follows a link (a planted one is neither
counted nor removed, and its target is never reached), and only regular files are counted or
removed.

``cacheroot cache prune`` weighs the store with every other cache of the root, in one least
recently used order: it lists the store's units here (:func:`stored`, :func:`dead_partials`)
and removes each through :func:`remove`, which looks at it once more right before (a file
served or replaced since it was listed stays); :func:`prune` removes its own the same way.
Only answers (``meta/``) and files (``blobs/``) are units; ``grants/``, ``verified/``,
``locks/``, ``served/`` and ``state/`` are never touched.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass

from .. import _held, _shared
from .partials import STALE_AFTER, abandoned, abandoned_in, sweep

__all__ = [
    "ANSWER",
    "FILE",
    "PARTIAL",
    "Pruned",
    "Stored",
    "dead_partials",
    "prune",
    "remove",
    "stored",
]

#: The kinds of unit a store holds: an answer, a file's bytes, a partial no writer will finish.
ANSWER, FILE, PARTIAL = "answer", "file", "partial"


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


@dataclass(frozen=True)
class Stored:
    """One unit of the store: ``kind`` (:data:`ANSWER`, :data:`FILE`, :data:`PARTIAL`), its
    path relative to the store (``blobs/<digest>``, ``meta/ab/<key>``), its size, when it was
    last used (its mtime, in nanoseconds) and which file it is (``dev``, ``ino``)."""

    kind: str
    rel: str
    size: int
    mtime_ns: int
    dev: int
    ino: int

    @property
    def last_used(self) -> float:
        """When it was last used, as a Unix time."""
        return self.mtime_ns / 1e9


def _open_dir(parts: list[str] | tuple[str, ...], root: str, top: str | None = None) -> int:
    """A descriptor of ``root/parts...``, each part opened without following a link: from
    ``root`` on, or (``top``: a directory ``root`` lies in) from ``top`` on."""
    rel = os.path.join(*parts) if parts else ""
    if top is None:
        return _shared.open_below(root, rel)
    return _shared.open_below(top, os.path.relpath(os.path.join(root, rel), top))


def _split(rel: str) -> tuple[tuple[str, ...], str]:
    parts = rel.split("/")
    return tuple(parts[:-1]), parts[-1]


def _units(root: str, parts: list[str], top: str | None) -> list[Stored]:
    """The answers (``meta``) or files (``blobs``) of the store: the regular files in
    ``root/parts...`` and (for ``meta``) one level further down, partial files (dot names) left
    out."""
    found: list[Stored] = []
    try:
        fd = _open_dir(parts, root, top)
    except OSError:
        return found
    try:
        for name in os.listdir(fd):
            try:
                st = os.lstat(name, dir_fd=fd)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and parts == ["meta"]:
                found += _units(root, [*parts, name], top)
            elif stat.S_ISREG(st.st_mode) and not name.startswith("."):
                kind = ANSWER if parts[0] == "meta" else FILE
                rel = "/".join([*parts, name])
                found.append(Stored(kind, rel, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino))
    finally:
        os.close(fd)
    return found


def stored(root: str, *, top: str | None = None) -> list[Stored]:
    """The answers and files of the store at ``root``, least recently used first (partials,
    links and whatever is no regular file left out). ``top``: a directory ``root`` lies in,
    from which on no link is followed (the cache root); else ``root`` itself is followed."""
    found = _units(root, ["blobs"], top) + _units(root, ["meta"], top)
    return sorted(found, key=lambda e: (e.mtime_ns, e.rel))


def dead_partials(
    root: str,
    *,
    now: float | None = None,
    stale_after: float = STALE_AFTER,
    top: str | None = None,
) -> list[Stored]:
    """The partials in the store's ``blobs`` that no writer will finish (:mod:`.partials`)."""
    clock = time.time() if now is None else now
    found: list[Stored] = []
    try:
        fd = _open_dir(["blobs"], root, top)
    except OSError:
        return found
    try:
        for name, st in abandoned_in(fd, clock, stale_after):
            rel = f"blobs/{name}"
            found.append(Stored(PARTIAL, rel, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino))
    finally:
        os.close(fd)
    return found


def remove(
    root: str,
    unit: Stored,
    *,
    now: float | None = None,
    stale_after: float = STALE_AFTER,
    top: str | None = None,
) -> str:
    """Remove ``unit`` (of :func:`stored` or :func:`dead_partials`): ``""`` once it is gone,
    else why it stays. It is looked at once more right before, reached without following a
    link: it stays when it is no longer that regular file, was used since it was listed (its
    mtime moved: served, or written anew), or is a partial whose writer may now live.
    :class:`OSError` when it cannot be removed (permissions)."""
    parts, name = _split(unit.rel)
    clock = time.time() if now is None else now
    try:
        fd = _open_dir(parts, root, top)
    except FileNotFoundError:
        return "gone meanwhile"
    try:
        why = _stays(fd, name, unit, clock, stale_after)
        if not why:
            _held.unlink(fd, name)
    except FileNotFoundError:
        return "gone meanwhile"
    finally:
        os.close(fd)
    return why


def _stays(fd: int, name: str, unit: Stored, now: float, stale_after: float) -> str:
    """Why ``unit`` (``name`` in the directory open at ``fd``) is not to be removed now."""
    st = os.lstat(name, dir_fd=fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (unit.dev, unit.ino):
        return "replaced meanwhile"
    if st.st_mtime_ns != unit.mtime_ns:
        return "used meanwhile"
    if unit.kind == PARTIAL and not abandoned(name, st, now, stale_after):
        return "its writer may still live"
    return ""


def _removed(root: str, unit: Stored, now: float, stale_after: float) -> bool:
    """Whether :func:`remove` removed ``unit``: not when it stays (used or replaced since it
    was listed, gone meanwhile) nor when it cannot be removed."""
    try:
        return not remove(root, unit, now=now, stale_after=stale_after)
    except OSError:
        return False


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
    seconds, then the least recently used until the store holds at most ``max_size`` bytes.

    Each goes through :func:`remove`, as ``cacheroot cache prune``'s do: one served or replaced
    since the listing stays (it is no longer the least recently used, or no longer the file
    listed)."""
    clock = time.time() if now is None else now
    dead = sweep(root, now=clock, stale_after=stale_after, dry_run=dry_run)
    units = stored(root)
    total = sum(unit.size for unit in units)
    done = Pruned(partials=len(dead), partial_bytes=sum(size for _name, size in dead))
    cutoff = None if older_than is None else (clock - older_than) * 1e9
    for unit in units:
        old = cutoff is not None and unit.mtime_ns < cutoff
        big = max_size is not None and total > max_size
        if (old or big) and (dry_run or _removed(root, unit, clock, stale_after)):
            done.removed += 1
            done.removed_bytes += unit.size
            total -= unit.size
        else:
            done.kept += 1
            done.kept_bytes += unit.size
    return done
