"""Whether a file is in use: what processes hold through ``/proc``, held locks, recent changes.

Removing a cache entry while a process reads it breaks that process, and copying a file that a
process is still writing publishes half of it. Locks protect only those that take them; most
libraries' caches (Triton, Inductor, the JIT caches) take none. So this looks at what processes
actually hold: every file descriptor, every mapped file (a loaded kernel, a ``mmap``-ed weight
file) and every working directory, as ``/proc/<pid>/fd``, ``maps`` and ``cwd`` show them,
identified by ``(st_dev, st_ino)`` so that any name of the file matches.

``/proc`` sees only the processes of this pid namespace, and (without privileges) only this
user's: a process in another container, on another host sharing the volume, or of another user
is invisible here. Files it holds are protected only by the locks and the settle time
(:data:`SETTLE`: a file changed this recently may still be being written).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from .._store import open_regular

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator

__all__ = [
    "DIR_FLAGS",
    "SETTLE",
    "Held",
    "Scan",
    "is_lock",
    "lock_held",
    "open_for_writing",
    "open_seen",
    "walk",
    "walk_held",
]

#: A file changed this recently (seconds) may still be being written: its entry is kept.
SETTLE = 30.0
#: How a directory of a tree others write is opened to be listed: never through a link.
DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _pids() -> list[int]:
    """The pids ``/proc`` shows now (none where there is no ``/proc``)."""
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _key(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of what ``path`` names (links followed), ``None`` if it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Held:
    """Files and directories that processes visible here hold: ``(st_dev, st_ino)`` -> pid.

    One look at ``/proc`` when made; ``hidden`` counts the processes it could not inspect
    (another user's), whose files it cannot see.
    """

    __slots__ = ("held", "hidden")

    def __init__(self) -> None:
        self.held: dict[tuple[int, int], int] = {}
        self.hidden = 0
        seen: dict[str, tuple[int, int] | None] = {}
        for pid in _pids():
            self._process(pid, seen)

    def _add(self, path: str, pid: int, seen: dict[str, tuple[int, int] | None]) -> None:
        if path not in seen:
            seen[path] = _key(path)
        key = seen[path]
        if key is not None:
            self.held.setdefault(key, pid)

    def _process(self, pid: int, seen: dict[str, tuple[int, int] | None]) -> None:
        where = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{where}/fd")
        except PermissionError:
            self.hidden += 1
            return
        except OSError:
            return  # gone meanwhile
        for fd in fds:
            key = _key(f"{where}/fd/{fd}")  # None: closed meanwhile
            if key is not None:
                self.held.setdefault(key, pid)
        key = _key(f"{where}/cwd")
        if key is not None:
            self.held.setdefault(key, pid)
        try:
            with open(f"{where}/maps", encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                self._add(fields[5].removesuffix(" (deleted)"), pid, seen)

    def by(self, st: os.stat_result) -> int | None:
        """The pid that holds the file ``st`` describes, if any."""
        return self.held.get((st.st_dev, st.st_ino))


def open_for_writing() -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every file a process visible here has open for writing."""
    found: set[tuple[int, int]] = set()
    for pid in _pids():
        base = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:
            continue
        for fd in fds:
            if _writable_fd(base, fd):
                key = _key(f"{base}/fd/{fd}")
                if key is not None:
                    found.add(key)
    return found


def _writable_fd(base: str, fd: str) -> bool:
    try:
        with open(f"{base}/fdinfo/{fd}", encoding="ascii") as f:
            for line in f:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & (os.O_WRONLY | os.O_RDWR) != 0
    except (OSError, ValueError):
        return False
    return False


def lock_held(path: str, *, dir_fd: int | None = None) -> bool:
    """Whether someone holds an ``flock`` on ``path`` now (it is tried, never waited for).
    With ``dir_fd``, ``path`` is a name in that held directory."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover - no locks to judge
        return False
    try:
        fd = open_regular(
            path, dir_fd=dir_fd
        )  # a FIFO planted as a lock file would block a plain open
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if it was taken
    return False


def is_lock(name: str) -> bool:
    """Whether ``name`` is a lock file (``*.lock``, ``*.lck``), which is never an entry."""
    return name.endswith((".lock", ".lck"))


class Scan:
    """One walk of an entry: its size, newest time, and why it is busy (``""``: it is not).

    Busy: a process holds a file or directory of it, a file or directory of it changed less
    than ``settle`` seconds before ``now``, or a lock file in it is held. With ``dir_fd``, the
    ``paths`` lie in that held directory and are reached from it (:func:`walk_held`).
    """

    __slots__ = ("busy", "newest", "size")

    def __init__(
        self,
        paths: Iterable[str],
        held: Held,
        now: float,
        settle: float,
        *,
        dir_fd: int | None = None,
    ) -> None:
        self.size = 0
        self.newest = 0.0
        self.busy = ""
        seen: set[tuple[int, int]] = set()
        for top in paths:
            for path, st, at, name in walk_held(top, dir_fd=dir_fd):
                key = (st.st_dev, st.st_ino)
                pid = held.by(st)
                if pid is not None and not self.busy:
                    self.busy = f"in use by pid {pid} ({path})"
                recent = settle > 0 and now - st.st_mtime < settle
                if stat.S_ISDIR(st.st_mode):
                    if recent and not self.busy:
                        self.busy = f"changed {now - st.st_mtime:.0f} s ago (may be being written)"
                    continue
                if key not in seen:
                    seen.add(key)
                    self.size += st.st_size
                self.newest = max(self.newest, st.st_mtime, st.st_atime)
                if recent and not self.busy:
                    self.busy = f"changed {now - st.st_mtime:.0f} s ago (may be being written)"
                if is_lock(name) and not self.busy and lock_held(name, dir_fd=at):
                    self.busy = f"its lock {path} is held"


def walk(top: str) -> Iterable[tuple[str, os.stat_result]]:
    """``top`` and everything under it, with ``lstat`` results (:func:`walk_held`)."""
    for path, st, _at, _name in walk_held(top):
        yield path, st


def walk_held(
    top: str, *, dir_fd: int | None = None, skip: Collection[str] = ()
) -> Iterator[tuple[str, os.stat_result, int | None, str]]:
    """``(path, lstat, directory descriptor, name)`` of ``top`` and of everything under it;
    ``name`` lies in the directory held open at the descriptor (valid until the next item).

    Links are never followed, not even to classify them (``os.walk`` stats through them):
    following a link sets its access time, which is how a use through it is seen. Each
    directory is opened relative to its parent's descriptor (``O_NOFOLLOW | O_DIRECTORY``) and
    listed through that descriptor, as :func:`shutil.rmtree` does: one swapped for a link since
    it was seen is refused, one swapped for another directory is left out (its identity moved),
    and nothing is ever listed by resolving its path again. With ``dir_fd``, ``top`` is the
    path of a name in that held directory. The paths in ``skip`` (under ``top``) are left out,
    and what is under them.
    """
    name = top if dir_fd is None else os.path.basename(top)
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return
    yield top, st, dir_fd, name
    if stat.S_ISDIR(st.st_mode):
        yield from _below(dir_fd, name, top, st, skip)


def _below(
    parent_fd: int | None, name: str, path: str, st: os.stat_result, skip: Collection[str] = ()
) -> Iterator[tuple[str, os.stat_result, int | None, str]]:
    """What is under the directory ``name`` of ``parent_fd`` that ``lstat`` saw as ``st``."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return  # gone, or swapped for a link: refused
    try:
        held = os.fstat(fd)
        if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino):
            return  # swapped for another directory since it was seen
        try:
            names = os.listdir(fd)
        except OSError:
            return
        for child in names:
            try:
                cst = os.lstat(child, dir_fd=fd)
            except OSError:
                continue
            here = os.path.join(path, child)
            if skip and here in skip:
                continue
            yield here, cst, fd, child
            if stat.S_ISDIR(cst.st_mode):
                yield from _below(fd, child, here, cst, skip)
    finally:
        os.close(fd)


def open_seen(
    fd: int, name: str, path: str, st: os.stat_result, say: Callable[[str], None]
) -> int | None:
    """The directory ``name`` of the one held at ``fd``, if it is still what ``lstat`` saw
    (``st``), opened without following a link; else ``None``, ``say`` told why (``path``: how
    the user knows it)."""
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            say(
                f"{path} became a symbolic link or no directory while it was surveyed; "
                "never followed, nothing under it listed"
            )
        return None
    held = os.fstat(child)
    if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino):
        os.close(child)
        say(
            f"{path} was replaced by another directory while it was surveyed; "
            "nothing under it listed (the next prune looks again)"
        )
        return None
    return child
