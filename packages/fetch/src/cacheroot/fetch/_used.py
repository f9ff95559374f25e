"""When a cache entry was last used, recorded cheaply enough for every cache hit.

Access times cannot be trusted (``noatime`` and ``relatime`` mounts, network file systems), so
"last used" is the mtime of a sidecar ``.<name>.used`` next to the entry, set explicitly. It is
refreshed at most once per :data:`TOUCH_EVERY` per entry, and a process remembers until when
its last refresh is good: on the hit path :func:`touch_used` costs one dictionary look-up
almost always, one ``stat`` once an hour, and one ``utime`` when the record is over an hour
old. This module imports only :mod:`os`, :mod:`stat` (which :mod:`os` imports anyway) and
:mod:`time`, so the hit path can import it freely.

The sidecar's name is on a volume others write: it is looked at with ``lstat``, its time set
without following a link, and created with ``O_EXCL | O_NOFOLLOW``. A link, FIFO or anything
else but a regular file under that name is removed and replaced by a file of our own, so a
dangling link there cannot make the caller create a file elsewhere.
"""

from __future__ import annotations

import os
import stat
import time

#: How stale "last used" may get before a hit refreshes it (seconds).
TOUCH_EVERY = 3600.0

_fresh_until: dict[str, float] = {}
#: Whether ``utime`` can leave a link alone (``utimensat``): everywhere but Windows.
_UTIME_NOFOLLOW = os.utime in os.supports_follow_symlinks


def used_path(entry: str) -> str:
    """The sidecar whose mtime records when ``entry`` was last used."""
    head, name = os.path.split(entry)
    return os.path.join(head, f".{name}.used")


def touch_used(entry: str | os.PathLike[str]) -> None:
    """Record that ``entry`` was just used (see the module docstring for what it costs).

    Never raises: a read-only cache just keeps its old times.
    """
    key = entry if isinstance(entry, str) else os.fspath(entry)
    now = time.time()
    if _fresh_until.get(key, 0.0) > now:
        return
    p = used_path(key)
    try:
        st: os.stat_result | None = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError:
        return
    mtime = now
    try:
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            mtime = st.st_mtime
            if now - mtime >= TOUCH_EVERY:
                os.utime(p, follow_symlinks=not _UTIME_NOFOLLOW)
                mtime = now
        else:
            if st is not None:
                os.unlink(p)  # planted (a link, a FIFO, a hard link): never followed; ours
            _create(p)
    except FileExistsError:
        pass  # created by another process a moment ago
    except OSError:
        return
    _fresh_until[key] = mtime + TOUCH_EVERY


def _create(path: str) -> None:
    """Create the empty record ``path``; group-writable in a setgid directory.

    Every member of a shared volume's group refreshes the records of entries others fetched,
    and ``utime`` needs write access to the file: in a setgid directory (the mark of a volume set
    up for sharing, see :func:`cacheroot.fetch._store.group_mode`) the file is made ``0o664``
    whatever the umask. Elsewhere the umask decides, as for any file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        if os.stat(os.path.dirname(path) or ".").st_mode & 0o2000:  # S_ISGID: see _store
            os.fchmod(fd, 0o664)
    except OSError:
        pass  # created by another member a moment earlier: its creator set the mode
    finally:
        os.close(fd)


def forget(entry: str) -> None:
    """Drop what this process remembers about ``entry`` (it was removed)."""
    _fresh_until.pop(entry, None)


def last_used(entry: str, meta: dict[str, object] | None = None) -> float:
    """When ``entry`` was last used: its ``.used`` sidecar, else when it was published."""
    try:
        st = os.lstat(used_path(entry))
        if stat.S_ISREG(st.st_mode):
            return st.st_mtime
    except OSError:
        pass
    times = [
        float(t)
        for t in ((meta or {}).get("fetched"), (meta or {}).get("built"))
        if isinstance(t, (int, float))
    ]
    try:  # noqa: SIM105 - this module imports only os and time
        times.append(os.lstat(entry).st_mtime)
    except OSError:
        pass
    return max(times) if times else 0.0
