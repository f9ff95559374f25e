"""Looking after the test cache: list, measure, verify and prune entries, and "last used".

The operations behind ``cacheroot cache`` (the command itself is :mod:`.cli`).

An entry is a file or directory ``<_VLLM_TEST_CACHE>/<namespace>/<name>`` whose name does not
start with a dot; its dot-files beside it belong to it (``.<name>.meta.json``, the record;
``.<name>.lock``, the single-flight lock; ``.<name>.used``, when it was last used;
``.<name>.<machine>-<pid>.<id>.partial``, a download or build in progress).

Namespaces nest (``gpt_oss/tiktoken``). Every directory at the top of the cache is a namespace;
below it, a directory is an entry when it has a record of its own (an unpacked archive
``X.extracted`` or a ``build_once`` tree always has one, written before the directory appears),
and otherwise a further level of namespace, down to :data:`~.._naming.MAX_DEPTH` levels, below
which everything is an entry. A name ending in ``.extracted`` is always an entry: no namespace
level below the top may have such a name (:func:`~.._naming.check_namespace`). Files directly in
the cache's root are nobody's entries, as before.

"Last used" is the mtime of ``.<name>.used`` (see :mod:`.._used`): set explicitly rather than
read from atime, so it works on ``noatime`` mounts, and refreshed at most once an hour.

Pruning never takes away what someone is working on: an entry is removed only while prune holds
its lock (taken without waiting; a busy entry is skipped), and not while a live process has a
partial of it; a partial is removed only when its writer is dead (or, on another machine,
silent for long) and it has been untouched for the grace period. A lock file goes with its
entry, or when nobody holds it and it belongs to an entry that is gone or to a holder known to
be dead (never one whose holder lives, or runs where this machine cannot tell).

On a cache shared by several users, an entry or lock this user cannot open is reported (kept,
or not checked) with what to do, and the command exits 1: it could not do all it was asked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _held, _proc
from .._errors import LockTimeout
from .._lock import PathLock, holder
from .._naming import EXTRACTED_SUFFIX, MAX_DEPTH, check_namespace
from .._redact import redact_url
from .._store import kind as _kind
from .._store import (
    lock_path,
    meta_path,
    open_regular,
    parse_partial,
    partial_abandoned,
    partial_path,
    partials,
    read_meta,
    record_problem,
    sha256_file,
    write_meta,
)
from .._used import forget, last_used, used_path
from .in_use import open_seen, walk_held

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

#: Default grace period before a dead writer's partial may be removed (seconds).
GRACE = 3600.0
#: A partial from another machine (its writer cannot be checked) counts as abandoned only when
#: untouched for at least this long, whatever the grace period.
FOREIGN_STALE = 3600.0
QUARANTINE = ".quarantine"
#: What :func:`quarantine` appends to a name: ``.<UTC time>.<pid>``.
_QUARANTINE_STAMP = re.compile(r"\.\d{8}T\d{6}Z\.\d+\Z")


# -- entries -------------------------------------------------------------------------------------


class Entry:
    """One cache entry as ``ls``, ``verify`` and ``prune`` see it."""

    __slots__ = ("kind", "last_used", "meta", "name", "namespace", "path", "size")

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        path: str,
        kind: str,
        size: int,
        last_used: float,
        meta: dict[str, Any] | None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.path = path
        self.kind = kind
        self.size = size
        self.last_used = last_used
        self.meta = meta

    def __repr__(self) -> str:
        return f"Entry({self.namespace!r}, {self.name!r}, {self.size})"

    @property
    def url(self) -> str | None:
        """Where the bytes came from (``None`` for built entries), credentials redacted.

        Records written before they were redacted may still hold a password: it is never shown.
        """
        value = (self.meta or {}).get("url")
        return redact_url(value) if isinstance(value, str) else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "path": self.path,
            "kind": self.kind,
            "size": self.size,
            "last_used": self.last_used,
            "url": self.url,
            "sha256": (self.meta or {}).get("sha256"),
        }


class TreeStats(NamedTuple):
    """What a tree holds: its bytes, its regular files, its newest modification time."""

    size: int
    files: int
    #: The newest ``st_mtime`` of a file in it (of a link, not its target), or of the directory
    #: itself where it holds no file: a directory's own changes when a lock or a partial beside
    #: the files comes and goes, which is no change of what it keeps (0: nothing there).
    newest: float


def tree_stats(path: str, skip: Collection[str] = (), *, dir_fd: int | None = None) -> TreeStats:
    """:class:`TreeStats` of ``path`` (a file, or a directory counted recursively; links not
    followed, a file with several links counted once). The paths in ``skip`` (directories or
    files in the tree) are left out: they belong to something else. With ``dir_fd``, ``path``
    is a name in that held directory. Walked through held descriptors (:func:`.in_use.walk_held`):
    a directory swapped for a link or another directory meanwhile is not counted."""
    total = files = 0
    newest = own = 0.0
    seen: set[tuple[int, int]] = set()
    for full, st, _at, _name in walk_held(path, dir_fd=dir_fd, skip=skip):
        if full == path:
            if not stat.S_ISDIR(st.st_mode):
                return TreeStats(st.st_size, int(stat.S_ISREG(st.st_mode)), st.st_mtime)
            own = st.st_mtime
            continue
        if stat.S_ISDIR(st.st_mode):
            continue  # its own entries are counted as the walk reaches them
        newest = max(newest, st.st_mtime)
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
            files += stat.S_ISREG(st.st_mode)
    return TreeStats(total, files, newest or own)


def tree_size(path: str, skip: Collection[str] = (), *, dir_fd: int | None = None) -> int:
    """Bytes in ``path`` (a file, or a directory counted recursively; links not followed), the
    paths in ``skip`` left out; with ``dir_fd``, ``path`` is a name in that held directory."""
    return tree_stats(path, skip, dir_fd=dir_fd).size


def _namespaces(fd: int) -> list[str]:
    """The top-level namespaces of the cache held at ``fd``: every directory at the top whose
    name does not start with a dot (a symbolic link to one is never followed: it is nobody's
    namespace)."""
    try:
        with os.scandir(fd) as it:
            found = [d.name for d in it if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(n for n in found if not n.startswith("."))


def _level(name: str, depth: int, *, is_dir: bool, recorded: bool, moved: bool) -> bool:
    """Whether the child ``name`` of a level ``depth`` levels deep is a further level (see
    :func:`_is_level`), from what its directory listing says of it."""
    return not (
        not is_dir
        or recorded
        or name.startswith(".")
        or depth >= MAX_DEPTH
        or name.endswith(EXTRACTED_SUFFIX)
        or (moved and _QUARANTINE_STAMP.search(name))
    )


class Level(NamedTuple):
    """One namespace level: its name, its directory, what is in it, and which of that is what."""

    namespace: str
    directory: str
    #: Every name in the directory (dot-files included), sorted.
    names: list[str]
    #: The entries among :attr:`names`.
    entries: list[str]
    #: The further namespace levels among :attr:`names`.
    levels: list[str]
    #: The directory, held open while the walk is at this level (closed when it moves on):
    #: what is in it is reached through this descriptor, never by its path again.
    fd: int = -1


def _say(notes: list[str] | None, line: str) -> None:
    """Tell the user ``line``: into ``notes``, or (none given) on standard error."""
    if notes is None:
        sys.stderr.write(f"note: {line}\n")
    else:
        notes.append(line)


def _open_level(fd: int, name: str, path: str, notes: list[str] | None) -> int | None:
    """The level ``name`` of the directory held at ``fd``, opened without following a link and
    only if it is still the directory its ``lstat`` shows (else ``None``, the user told why, in
    the words of the plain caches' survey)."""
    try:
        st = os.lstat(name, dir_fd=fd)
    except OSError:
        return None  # gone meanwhile
    return open_seen(fd, name, path, st, lambda why: _say(notes, why))


def _walk(
    fd: int, directory: str, namespace: str, *, moved: bool, notes: list[str] | None
) -> Iterator[Level]:
    """The level held at ``fd`` (``directory``), then those under it. ``moved``: in the
    quarantine, where what :func:`quarantine` moved is an entry by its name even if its record
    did not move with it. One listing per level, through its descriptor; the file type comes
    with it where the file system gives one. Each level below is opened relative to its
    parent's descriptor without following a link: one that became a link or another directory
    since it was listed gets a note, and nothing under it is listed."""
    try:
        with os.scandir(fd) as it:
            found = sorted((d.name, d.is_dir(follow_symlinks=False)) for d in it)
    except OSError:
        return
    names = [name for name, _ in found]
    present = set(names)
    depth = namespace.count("/") + 1
    below = [
        name
        for name, is_dir in found
        if _level(name, depth, is_dir=is_dir, recorded=meta_path(name) in present, moved=moved)
    ]
    skip = set(below)
    own = [n for n in names if not n.startswith(".") and n not in skip]
    yield Level(namespace, directory, names, own, below, fd)
    for name in below:
        yield from _walk_at(fd, name, directory, f"{namespace}/{name}", moved=moved, notes=notes)


def _walk_at(
    fd: int, name: str, directory: str, namespace: str, *, moved: bool, notes: list[str] | None
) -> Iterator[Level]:
    """:func:`_walk` of the level ``name`` of the directory held at ``fd`` (``directory``)."""
    path = os.path.join(directory, name)
    child = _open_level(fd, name, path, notes)
    if child is None:
        return
    try:
        yield from _walk(child, path, namespace, moved=moved, notes=notes)
    finally:
        os.close(child)


def open_in(cache: str, rel: str = "", *, create: bool = False) -> int:
    """A descriptor of the directory ``rel`` of the test cache ``cache``, every component
    opened without following a link from the cache root down where ``cache`` lies in it (the
    test cache itself swapped for a link is refused, as the downloads refuse it), else from
    ``cache``, the operator's own setting (:func:`.._shared.open_below`: ``OSError`` ``ELOOP``
    names the link)."""
    from cacheroot.envs import resolve  # noqa: PLC0415 - upkeep only

    from .._shared import open_below  # noqa: PLC0415 - keeps the hit path light

    root = resolve(os.environ).root
    top = root if root is not None and _inside(cache, root) else cache
    rel = os.path.normpath(os.path.join(os.path.relpath(cache, top), rel))
    return open_below(top, rel, create=create)


def _inside(path: str, top: str) -> bool:
    rel = os.path.relpath(path, top)
    return rel != os.pardir and not rel.startswith(os.pardir + os.sep)


def levels(
    cache: str,
    namespace: str | None = None,
    *,
    moved: bool = False,
    notes: list[str] | None = None,
    under: str = "",
) -> Iterator[Level]:
    """Every namespace level of ``cache`` (or ``namespace`` and those under it), in tree order:
    a level, then the levels under it, each list sorted by name.

    Walked through held descriptors from ``cache`` down (``cache`` itself is the operator's
    setting, followed): a level is listed through its descriptor, never by resolving its path
    again, and one swapped for a link (or another directory) while it is walked gets one line
    in ``notes`` (none given: on standard error) and nothing under it is listed. ``under``: the
    levels are those of ``cache/under`` (reached from ``cache`` without following a link), as
    the quarantine's.
    """
    top = os.path.join(cache, under) if under else cache
    rel = os.path.join(under, namespace) if namespace is not None else under
    try:
        fd = open_in(cache, rel)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            _say(
                notes,
                f"{os.path.join(cache, rel)} is a symbolic link or no directory (or a "
                "directory on the way is); never followed, nothing under it listed",
            )
        return
    try:
        if namespace is not None:
            yield from _walk(fd, os.path.join(top, namespace), namespace, moved=moved, notes=notes)
            return
        for ns in _namespaces(fd):
            yield from _walk_at(fd, ns, top, ns, moved=moved, notes=notes)
    finally:
        os.close(fd)


#: How many namespaces a message names at most.
_SHOWN = 20


def missing_namespace(cache: str, namespace: str) -> str:
    """Why ``namespace`` is not a namespace level of ``cache``, saying what to do (``""``: it is).

    A filter that names nothing must say so rather than report on nothing: a typo in
    ``--namespace`` would otherwise read as "verified 0 entries". Each level is looked at in
    its parent, held from the cache down without following a link (one that is a link is no
    namespace).
    """
    try:
        parts = check_namespace(namespace).split("/")
    except ValueError as exc:
        return str(exc)
    try:
        fd: int | None = open_in(cache)
    except OSError:
        fd = None
    directory = cache
    try:
        for depth, part in enumerate(parts):
            path = os.path.join(directory, part)
            here = "/".join(parts[: depth + 1])
            st = None if fd is None else _held.lstat_quiet(part, fd)
            if st is None or fd is None:
                return _no_such(cache, namespace, here)
            is_dir = stat.S_ISDIR(st.st_mode)
            recorded = _held.lstat_quiet(meta_path(part), fd) is not None
            if depth and not _level(part, depth, is_dir=is_dir, recorded=recorded, moved=False):
                return (
                    f"{here!r} is an entry of namespace {'/'.join(parts[:depth])!r}, not a "
                    "namespace; name the namespace that holds it"
                )
            child = open_seen(fd, part, path, st, _quiet) if is_dir else None
            if child is None:
                return f"{path} is not a directory, so {here!r} is no namespace; move it away"
            os.close(fd)
            fd, directory = child, path
    finally:
        if fd is not None:
            os.close(fd)
    return ""


def _no_such(cache: str, namespace: str, here: str) -> str:
    """What :func:`missing_namespace` says when the level ``here`` does not exist."""
    known = [lv.namespace for lv in levels(cache)]
    shown = ", ".join(known[:_SHOWN]) + (", ..." if len(known) > _SHOWN else "")
    return f"no namespace {namespace!r} in {cache} ({here!r} does not exist); " + (
        f"its namespaces are: {shown}" if known else "it has none yet"
    )


def _entry(level: Level, name: str) -> Entry:
    """The entry ``name`` of ``level``, read through the level's held directory."""
    from .._shared import held_path  # noqa: PLC0415 - keeps the hit path light

    path = os.path.join(level.directory, name)
    meta = read_meta(name, dir_fd=level.fd)
    try:
        is_dir = stat.S_ISDIR(os.lstat(name, dir_fd=level.fd).st_mode)
    except OSError:
        is_dir = False
    return Entry(
        namespace=level.namespace,
        name=name,
        path=path,
        kind="dir" if is_dir else "file",
        size=tree_size(path, dir_fd=level.fd),
        last_used=last_used(held_path(level.fd, path), meta),
        meta=meta,
    )


def entries(cache: str, namespace: str | None = None) -> list[Entry]:
    """Every entry of ``cache`` (or of ``namespace`` and the namespaces under it), in tree
    order: by namespace (a namespace, then those nested in it), then by name."""
    return [_entry(level, name) for level in levels(cache, namespace) for name in level.entries]


def quarantined(cache: str) -> list[Entry]:
    """What ``verify`` moved aside, as entries of the pseudo-namespace ``.quarantine``."""
    found: list[Entry] = []
    for level in levels(cache, moved=True, under=QUARANTINE):
        for name in level.entries:
            path = os.path.join(level.directory, name)
            try:
                st = os.lstat(name, dir_fd=level.fd)
            except OSError:
                continue
            found.append(
                Entry(
                    namespace=f"{QUARANTINE}/{level.namespace}",
                    name=name,
                    path=path,
                    kind="dir" if stat.S_ISDIR(st.st_mode) else "file",
                    size=tree_size(path, dir_fd=level.fd)
                    + tree_size(meta_path(path), dir_fd=level.fd),
                    last_used=st.st_mtime,
                    meta=read_meta(name, dir_fd=level.fd),
                )
            )
    return found


# -- du ------------------------------------------------------------------------------------------


def disk_usage(cache: str) -> dict[str, Any]:
    """Bytes per namespace of the test cache (the caches of the root: :mod:`.inventory`)."""
    namespaces = {}
    for level in levels(cache):
        # A level's own bytes: its entries and their dot-files, not the levels under it.
        own = [n for n in level.names if n not in level.levels]
        if own or not level.levels:
            namespaces[level.namespace] = sum(
                tree_size(os.path.join(level.directory, n), dir_fd=level.fd) for n in own
            )
    q = 0
    with contextlib.suppress(OSError):  # no cache yet: nothing set aside either
        top = open_in(cache)
        try:
            q = tree_size(os.path.join(cache, QUARANTINE), dir_fd=top)
        finally:
            os.close(top)
    if q:
        namespaces[QUARANTINE] = q
    return {
        "cache": cache,
        "exists": os.path.isdir(cache),
        "namespaces": namespaces,
        "total": sum(namespaces.values()),
    }


# -- verify --------------------------------------------------------------------------------------


def _found(st: os.stat_result | None) -> str:
    """What ``st`` (an ``lstat``: a link is not followed) says is there, in words."""
    return "nothing" if st is None else _kind(st.st_mode)


def _recorded_size(meta: dict[str, Any]) -> int | None:
    """The size a record gives its file (its ``size``, else the first field of its ``stat``)."""
    recorded = meta.get("size")
    if isinstance(recorded, int):
        return recorded
    st = meta.get("stat")
    return st[0] if isinstance(st, list) and st and isinstance(st[0], int) else None


def _check(name: str, meta: dict[str, Any] | None, fd: int) -> tuple[str, str]:
    """``(status, detail)`` of the entry ``name`` of its namespace's directory held at ``fd``,
    against its record ``meta``:
    ``ok``, ``corrupt``, ``unreadable`` (this user cannot read it) or ``unverified`` (nothing
    recorded to check). A record too large to be one was never read (:func:`record_problem`):
    the entry is ``corrupt``, so that ``verify`` moves it aside."""
    from .._shared import fd_path  # noqa: PLC0415 - upkeep only

    if meta is None:
        if why := record_problem(fd_path(fd, name)):
            return "corrupt", why
        meta = {}
    try:
        if isinstance(meta.get("sha256"), str):
            return _check_file(fd, name, meta["sha256"], _recorded_size(meta))
        if isinstance(meta.get("tree_sha256"), str):
            return _check_tree(fd, name, meta["tree_sha256"])
    except OSError as exc:
        return "unreadable", _unreadable(exc)
    return "unverified", "no recorded digest"


def _check_file(fd: int, name: str, recorded: str, size: int | None) -> tuple[str, str]:
    """Hash the file ``name`` of the directory held at ``fd`` against its record, unless what
    is there cannot be the recorded file: no regular file, another name for it elsewhere, or
    larger than recorded (a sparse giant planted in its place is judged unread)."""
    from .._shared import fd_path  # noqa: PLC0415 - upkeep only

    st = os.lstat(name, dir_fd=fd)
    if not stat.S_ISREG(st.st_mode):
        return "corrupt", (
            f"expected a file (its record holds the file's sha256), found {_found(st)}"
        )
    if st.st_nlink != 1:  # never read: the other name may be anyone's file
        return "corrupt", (
            f"expected a file with one name, found {st.st_nlink} (a hard link to another file)"
        )
    if size is not None and st.st_size > size:  # what is read stays within the record's size
        return "corrupt", (
            f"{st.st_size} bytes, more than the {size} recorded: not the recorded file, not read"
        )
    actual, read = sha256_file(fd_path(fd, name))  # O_NOFOLLOW, a regular file only
    if actual != recorded:
        return "corrupt", f"sha256 {actual} over {read} bytes, recorded {recorded}"
    return "ok", ""


def _check_tree(fd: int, name: str, recorded: str) -> tuple[str, str]:
    """Digest the tree ``name`` of the directory held at ``fd`` against its record."""
    from .._archive import tree_digest  # noqa: PLC0415
    from .._shared import fd_path  # noqa: PLC0415 - upkeep only

    st = _held.lstat_quiet(name, fd)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return "corrupt", (
            f"expected a directory (its record holds a tree digest), found {_found(st)}"
        )
    actual, size, files = tree_digest(fd_path(fd, name))
    if actual != recorded:
        return "corrupt", f"tree digest {actual} ({files} files, {size} bytes) changed"
    return "ok", ""


def _moving(exc: OSError) -> str:
    """Why an entry could not be moved to the quarantine, in words."""
    return f"{exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc.strerror or exc)


def _unreadable(exc: OSError) -> str:
    where = f" {exc.filename}" if exc.filename else ""
    return (
        f"cannot read{where} ({exc.strerror or exc}): not checked; run this as the user that "
        "owns the cache (or one of its group) to check it"
    )


def quarantine(cache: str, entry: Entry, fd: int) -> str:
    """Move ``entry`` (and its record) from its namespace's directory, held at ``fd``, to
    ``<cache>/.quarantine/<namespace>/`` (reached from ``cache`` without following a link);
    return where. The names move, whatever they are now: nothing is followed."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    where = os.path.join(QUARANTINE, entry.namespace)
    name = f"{entry.name}.{stamp}.{os.getpid()}"
    qfd = open_in(cache, where, create=True)  # group-shared where the volume is setgid
    try:
        _held.move(fd, entry.name, qfd, name)
        with contextlib.suppress(OSError):
            _held.move(fd, meta_path(entry.name), qfd, meta_path(name))
    finally:
        os.close(qfd)
    with contextlib.suppress(OSError):
        _held.unlink(fd, used_path(entry.name))
    return os.path.join(cache, where, name)


def _scrub(entry: Entry, fd: int) -> None:
    """Rewrite a record that still names its URL with a password (written before redaction);
    ``fd`` holds the entry's namespace directory."""
    url = (entry.meta or {}).get("url")
    if entry.meta is not None and isinstance(url, str) and redact_url(url) != url:
        with contextlib.suppress(OSError):  # read-only: it is never shown anyway
            write_meta(entry.name, {**entry.meta, "url": redact_url(url)}, dir_fd=fd)


def verify(cache: str, namespace: str | None = None, *, move: bool = True) -> list[dict[str, Any]]:
    """Re-hash every entry against its record; quarantine the corrupt ones (when ``move``).

    A mismatch is confirmed under the entry's lock before anything moves, so a download that
    replaced the file while it was being hashed is not mistaken for corruption. A record that
    still holds a URL's password (written before records were redacted) is scrubbed.
    """
    return [
        {**entry.as_dict(), **_verify_one(cache, entry, move=move)}
        for entry in entries(cache, namespace)
    ]


def _verify_one(cache: str, entry: Entry, *, move: bool) -> dict[str, Any]:
    """:func:`verify`'s row for ``entry`` (status, detail, where it moved). Its namespace's
    directory is reached again from ``cache`` without following a link (one swapped for a link
    since the walk is refused: nothing behind it is hashed, locked or moved) and held for the
    check, the lock, the check again and the move."""
    from .._shared import fd_path  # noqa: PLC0415 - upkeep only

    try:
        fd = open_in(cache, entry.namespace)
    except OSError as exc:
        return {
            "status": "unreadable",
            "detail": f"its namespace cannot be reached without following a link "
            f"({exc.strerror or exc}): not checked",
        }
    try:
        _scrub(entry, fd)
        status, detail = _check(entry.name, entry.meta, fd)
        detail = detail.replace(fd_path(fd), os.path.dirname(entry.path))  # the volume's path
        if status != "corrupt":
            return {"status": status, "detail": detail}
        lname = lock_path(entry.name)
        lock = PathLock(fd_path(fd, lname), timeout=30.0)
        try:
            with lock:
                status, detail = _check(entry.name, read_meta(entry.name, dir_fd=fd), fd)
                detail = detail.replace(fd_path(fd), os.path.dirname(entry.path))
                row: dict[str, Any] = {"status": status, "detail": detail}
                if status == "corrupt" and move:
                    try:
                        row["quarantined"] = quarantine(cache, entry, fd)
                    except OSError as exc:  # the quarantine's own directory is no directory
                        row["detail"] = f"{detail}; not moved aside ({_moving(exc)}), left in place"
                return row
        except LockTimeout:
            return {"status": status, "detail": f"{detail}; busy (locked), left in place"}
        except OSError as exc:
            why = _no_lock(fd, lname, lock_path(entry.path), exc)
            return {"status": status, "detail": f"{detail}; {why}, left in place"}
    finally:
        os.close(fd)


# -- acting through held directories -------------------------------------------------------------
#
# Every name upkeep removes or moves lies in a directory it holds open, reached from the cache
# root down without following a link (:func:`open_in`, the walk of :func:`levels`): the name is
# given to the system relative to that descriptor, so a directory above it swapped for a link
# after the walk leads nowhere, and the name itself is renamed or unlinked, never followed.


def _quiet(_why: str) -> None:
    """Drop a note of :func:`.in_use.open_seen`: upkeep just leaves such a directory alone."""


def remove_tree_at(fd: int, name: str) -> None:
    """Remove ``name`` of the directory held at ``fd`` and, when it is a directory, everything
    in it, through held descriptors and never following a link (:func:`.._held.remove_tree`).

    What this user may not remove stays: :class:`OSError` when ``name`` is still there.
    """
    _held.remove_tree(fd, name)
    if _held.lstat_quiet(name, fd) is not None:
        raise OSError(
            errno.ENOTEMPTY,
            "could not be removed entirely: this user may not remove some of it",
            name,
        )


def remove_name_at(fd: int, name: str) -> None:
    """Remove ``name`` from the directory held at ``fd``: a directory is renamed aside first
    (gone from its name at once, under a partial's name that a later prune also removes; the
    bytes follow), a link or file is unlinked, never followed."""
    if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
        aside = os.path.basename(partial_path(name)) + ".old"
        _held.move(fd, name, fd, aside)
        _held.remove_tree(fd, aside)  # what stays is an abandoned partial: pruned later
    else:
        _held.unlink(fd, name)


def entry_dir(entry: Entry) -> int:
    """A descriptor of the directory of ``entry`` (a test-cache entry or a quarantined one),
    reached from the cache root without following a link (:func:`open_in`)."""
    namespace = entry.namespace
    return open_in(entry.path[: -len(f"/{namespace}/{entry.name}")], namespace)


# -- prune ---------------------------------------------------------------------------------------


def _live_partials(fd: int, name: str) -> list[str]:
    """The partials of the entry ``name`` of the directory held at ``fd`` whose writer may
    still run."""
    return [
        p
        for p in partials(name, dir_fd=fd)
        if not partial_abandoned(p, stale_after=FOREIGN_STALE, dir_fd=fd)
    ]


def _no_lock(fd: int, name: str, shown: str, exc: OSError) -> str:
    """Why the lock ``name`` of the directory held at ``fd`` (``shown``: its path) could not be
    taken, and what to do."""
    st = _held.lstat_quiet(name, fd)
    owner = f" (it belongs to uid {st.st_uid})" if st is not None else ""
    return (
        f"cannot open its lock {shown}: {exc.strerror or exc}{owner}; run this as the cache's "
        "owner, or share the cache with a group (chgrp GROUP and chmod g+ws on its directories)"
    )


class Refused(Exception):  # noqa: N818 - control flow, shared with the budget
    """An entry could not be removed for want of permission (not because it is busy)."""


def remove_entry(entry: Entry) -> str:
    """Remove ``entry`` if nobody works on it; ``""`` when removed, else why it was kept.

    Its namespace's directory is reached from the cache without following a link (a namespace
    swapped for a link since the listing is refused) and held: the lock, the partials, the
    entry and its dot-files are all named relative to it. Raises :class:`Refused` (with the
    reason) when this user may not remove it.
    """
    try:
        fd = entry_dir(entry)
    except FileNotFoundError:
        return "gone meanwhile"
    except OSError as exc:
        raise Refused(f"cannot remove {entry.path}: {exc.strerror or exc}") from None
    try:
        return _remove_at(entry, fd)
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else ""
        shown = os.path.join(os.path.dirname(entry.path), os.path.basename(where))
        raise Refused(
            f"cannot remove {shown if where else entry.path}: {exc.strerror or exc}; run this "
            "as the cache's owner"
        ) from None
    finally:
        os.close(fd)


def _remove_at(entry: Entry, fd: int) -> str:
    """:func:`remove_entry` of ``entry``, a name in its namespace's directory held at ``fd``."""
    from .._shared import fd_path  # noqa: PLC0415 - removal only

    name = entry.name
    if entry.namespace.startswith(QUARANTINE):
        remove_name_at(fd, name)
        with contextlib.suppress(OSError):
            _held.unlink(fd, meta_path(name))
        return ""
    lname = lock_path(name)
    lock = PathLock(fd_path(fd, lname), timeout=0.0, poll=0.01)
    try:
        lock.acquire()
    except LockTimeout:
        record = holder(fd_path(fd, lname)) or {}
        return f"locked by pid {record.get('pid', '?')}"
    except OSError as exc:
        raise Refused(_no_lock(fd, lname, lock_path(entry.path), exc)) from None
    try:
        live = _live_partials(fd, name)
        if live:
            return f"being written ({live[0]})"
        remove_name_at(fd, name)
        # The lock file last, while we hold it: a new fetch makes a new one.
        for side in (meta_path(name), used_path(name), lname):
            with contextlib.suppress(OSError):
                _held.unlink(fd, side)
        forget(entry.path)
    finally:
        lock.release()
    return ""


def _listings(cache: str) -> Iterator[tuple[str, list[str], set[str], int]]:
    """Each namespace level's directory, its names, what they are for (no leading dot: its
    entries and the levels under it, whose own dot-files may sit beside them), and its held
    descriptor (valid until the next item)."""
    for level in levels(cache):
        present = {n for n in level.names if not n.startswith(".")}
        yield level.directory, level.names, present, level.fd


def _stray_files(cache: str, grace: float, now: float, *, dry_run: bool) -> list[dict[str, Any]]:
    """Remove (or with ``dry_run`` list) abandoned partials and orphaned records; the rows of
    what went. Each is removed while its level is held, by its name in that descriptor: a level
    swapped for a link after it was listed leads nowhere else."""
    rows: list[dict[str, Any]] = []
    for directory, names, present, fd in _listings(cache):
        for name in names:
            why = _stray_file(name, present, fd, grace, now)
            if not why:
                continue
            size = tree_size(os.path.join(directory, name), dir_fd=fd)
            if not dry_run:
                try:
                    remove_name_at(fd, name)
                except OSError:
                    continue
            rows.append({"path": os.path.join(directory, name), "size": size, "reason": why})
    return rows


def _stray_file(name: str, present: set[str], fd: int, grace: float, now: float) -> str:
    """Why ``name`` in the level held at ``fd`` may go (an abandoned partial, a record of a
    missing entry), or ``""``."""
    st = _held.lstat_quiet(name, fd)
    if st is None:
        return ""
    age = now - st.st_mtime
    parsed = parse_partial(name[: -len(".old")] if name.endswith(".old") else name)
    if parsed is not None:
        dead = name.endswith(".partial.old") or partial_abandoned(
            name, stale_after=max(grace, FOREIGN_STALE), dir_fd=fd
        )
        return "abandoned partial" if dead and age >= grace else ""
    for suffix in (".meta.json", ".used"):
        if name.startswith(".") and name.endswith(suffix):
            owner = name[1 : -len(suffix)]
            if (
                owner
                and owner not in present
                and not partials(owner, dir_fd=fd)
                and age >= min(grace, 60.0)
            ):
                return "record of a missing entry"
    return ""


def _take_free_lock(fd: int, name: str) -> int | None:
    """A descriptor holding the lock ``name`` of the directory held at ``fd`` if nobody holds
    it now (never waits), else None."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX only, as filelock's own
    except ImportError:  # pragma: no cover - no such lock files to judge
        return None
    try:
        lfd = open_regular(name, dir_fd=fd)  # a FIFO planted as a lock file would block
    except OSError:
        return None
    try:
        fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lfd)
        return None
    return lfd


def _stray_lock(fd: int, name: str, present: set[str], old_enough: float) -> str:
    """Why the lock file ``name`` in the level held at ``fd`` may go, or ``""`` (see
    :func:`_stray_locks`)."""
    from .._shared import fd_path  # noqa: PLC0415 - removal only

    st = _held.lstat_quiet(name, fd)
    if st is None or time.time() - st.st_mtime < old_enough:
        return ""  # may have just been made by a process about to lock it
    record = holder(fd_path(fd, name))
    if record is not None:
        if _proc.alive(record) is not False:
            return ""
        return f"lock of a dead holder (pid {record.get('pid', '?')})"
    owner = name[1 : -len(".lock")]
    if owner in present or partials(owner, dir_fd=fd):
        return ""  # the entry's own lock, free between fetches
    return "lock of a missing entry"


def _empty_levels(cache: str, grace: float, *, dry_run: bool) -> list[dict[str, Any]]:
    """Remove (or with ``dry_run`` list) namespace directories left empty (by a failed fetch,
    or once their entries went) and untouched for ``grace``, deepest first. Each is judged by
    the clock read when it is looked at: removing a level below it (or a stray lock in it)
    just stamped its modification time, after any clock read before. Each is judged and
    removed by its name in its parent, reached again from the cache without following a link
    (a parent swapped for a link since the walk is refused); ``rmdir`` removes only an empty
    directory, never a link, so a level that filled up meanwhile stays."""
    rows: list[dict[str, Any]] = []
    found = [(level.namespace, level.directory) for level in levels(cache)]
    for namespace, directory in sorted(found, key=lambda f: f[0].count("/"), reverse=True):
        parent_rel, name = os.path.split(namespace)
        try:
            parent = open_in(cache, parent_rel)
        except OSError:
            continue
        try:
            if not _empty_and_old(parent, name, grace, time.time()):
                continue
            if not dry_run:
                _held.remove(parent, name, directory=True)  # an empty directory only
                if _held.lstat_quiet(name, parent) is not None:
                    continue  # filled up meanwhile, or not ours to remove
        except OSError:
            continue
        finally:
            os.close(parent)
        rows.append({"path": directory, "size": 0, "reason": "empty namespace"})
    return rows


def _empty_and_old(parent: int, name: str, grace: float, now: float) -> bool:
    """Whether ``name`` in the directory held at ``parent`` is a directory, untouched for
    ``grace`` and empty (listed through a descriptor opened without following a link, and only
    while it is the directory ``lstat`` saw)."""
    st = _held.lstat_quiet(name, parent)
    if st is None or not stat.S_ISDIR(st.st_mode) or now - st.st_mtime < grace:
        return False
    fd = open_seen(parent, name, name, st, _quiet)
    if fd is None:
        return False
    try:
        return not os.listdir(fd)
    finally:
        os.close(fd)


def _stray_locks(cache: str, grace: float, *, dry_run: bool) -> list[dict[str, Any]]:
    """Remove (or with ``dry_run`` list) lock files nobody needs; the rows of what went.

    A lock file goes when nobody holds it now and either its holder's record names a process
    known to be dead, or it has no record and its entry is gone (nothing in progress either).
    One that a live process (or one this machine cannot judge) holds or last held stays.
    """
    rows: list[dict[str, Any]] = []
    for directory, names, present, level_fd in _listings(cache):
        for name in sorted(n for n in names if n.startswith(".") and n.endswith(".lock")):
            why = _stray_lock(level_fd, name, present, min(grace, 60.0))
            fd = _take_free_lock(level_fd, name) if why else None
            if fd is None:
                continue  # needed, or held after all
            try:
                if not dry_run:
                    for stale in (name + ".holder", name):
                        with contextlib.suppress(OSError):
                            _held.unlink(level_fd, stale)
            finally:
                os.close(fd)
            rows.append({"path": os.path.join(directory, name), "size": 0, "reason": why})
    return rows


def prune(
    cache: str,
    *,
    max_size: int | None = None,
    older_than: float | None = None,
    grace: float = GRACE,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Remove least recently used entries until under ``max_size``, and those unused for
    ``older_than`` seconds; clean abandoned partials. Returns what was (or would be) done.
    """
    now = time.time()
    todo = quarantined(cache) + entries(cache)
    # What verify set aside goes first, then the least recently used.
    todo.sort(key=lambda e: (not e.namespace.startswith(QUARANTINE), e.last_used))
    total = sum(e.size for e in todo)
    removed: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for entry in todo:
        why = ""
        if older_than is not None and now - entry.last_used > older_than:
            why = "unused for longer than the limit"
        elif max_size is not None and total > max_size:
            why = "over the size budget (least recently used)"
        if not why:
            continue
        try:
            busy = "" if dry_run else remove_entry(entry)
        except Refused as refused:
            kept.append({**entry.as_dict(), "reason": str(refused), "error": True})
            continue
        if busy:
            kept.append({**entry.as_dict(), "reason": busy, "error": False})
            continue
        total -= entry.size
        removed.append({**entry.as_dict(), "reason": why})
    strays = _stray_files(cache, grace, now, dry_run=dry_run)
    strays += _stray_locks(cache, grace, dry_run=dry_run)
    strays += _empty_levels(cache, grace, dry_run=dry_run)
    return {
        "cache": cache,
        "dry_run": dry_run,
        "removed": removed,
        "kept": kept,
        "strays": strays,
        "freed": sum(r["size"] for r in removed) + sum(s["size"] for s in strays),
        "total_after": total,
    }
