"""The cache's directory on a volume other users write: every name reached from a held descriptor.

A media cache directory may sit on a volume a group shares (``chgrp ci && chmod 2775``): every
member can create, rename and remove names in it, so any name may have been planted by one of
them, and the cache may run as root. So:

- The directory is reached from ``/`` one component at a time, each opened with
  ``O_NOFOLLOW | O_DIRECTORY``. A symbolic link on the way is followed only where nobody but
  root or this user could have put it (a directory of theirs that no one else may write, or a
  sticky one whose link is theirs: ``/tmp`` -> ``/private/tmp`` on macOS, an administrator's
  ``/data`` -> ``/mnt/data``); anywhere else it is refused with :class:`RefusedPathError`, naming
  it. The descriptor is then held: every later open, create, rename and remove is made
  relative to it, so a directory swapped above it afterwards changes nothing.
- A file is used only as what it was opened as: :func:`cacheroot.fetch.store.open_regular`
  (``O_NOFOLLOW | O_NONBLOCK``: a link fails, a FIFO opens without waiting; anything but a
  regular file is refused), then ``fstat`` must say one link (a second name of a file may be
  anywhere on the file system: ``/etc/shadow`` on a volume without ``protected_hardlinks``)
  and an owner the directory trusts (:meth:`Directory.trusts`). Anything else is a
  :class:`RefusedFileError` before a byte is read.
- A record is read only after ``fstat`` says it holds at most :data:`MAX_RECORD` bytes, and
  never more than that is read, whatever the file grows to meanwhile.
- Files are created under random names with ``O_CREAT | O_EXCL | O_NOFOLLOW``: nothing planted
  under a name can be opened in its place (the create fails instead), and no name can be
  planted ahead for a pid. They are written, then renamed into place.
- Times and modes are changed only through descriptors of files this process created or
  checked, never through a name (:func:`stamp`).
- Scratch bytes spooled on the volume go to a file with no name at all (:func:`unnamed`):
  nothing can be planted under it, nothing else finds it, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import threading
import weakref
from typing import BinaryIO, NamedTuple

from cacheroot.fetch.store import (
    MAX_RECORD,
    SHARED_DIR,
    SHARED_FILE,
    NotRegularFileError,
    kind,
    open_regular,
    open_regular_stat,
)

#: The record cap (:data:`MAX_RECORD`) and the modes of a setgid volume (:data:`SHARED_FILE`,
#: :data:`SHARED_DIR`) are the download core's: the two caches share one volume and its rules.
#: A temporary file younger than this is never judged abandoned (its writer may not have
#: locked it yet); older and unlocked, its writer is gone. Where ``flock`` does not work, only
#: :data:`STALE_AFTER` tells.
GRACE = 60.0
STALE_AFTER = 3600.0
#: Links followed while reaching the directory (the kernel's own limit is 40), and directories
#: made on the way (each is made again if removed at once; a loop would be someone's doing).
_MAX_LINKS = 40
_MAX_TRIES = 64
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
_TMPFILE = getattr(os, "O_TMPFILE", 0)


class RefusedPathError(OSError):
    """A component of the cache directory's path is a link that may be planted, or no directory.

    Raised instead of following it: the cache then runs without its directory (said once).
    """


class RefusedFileError(OSError):
    """A regular file the cache may not use: another link to it exists, its owner is not one the
    volume trusts, or it is larger than any record. ``seen`` is its ``stat``, so that only that
    very file is ever removed."""

    def __init__(self, name: str, reason: str, seen: os.stat_result) -> None:
        super().__init__(errno.EPERM, reason, name)
        self.reason = reason
        self.seen = seen


class Listed(NamedTuple):
    """A name in the directory and its ``lstat`` (``None``: it vanished while listed)."""

    name: str
    st: os.stat_result | None


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Directory:
    """A directory held open (see the module docstring): the cache's own, or one below it.

    ``path`` is what messages show; the descriptor is what every call uses. The descriptor is
    opened on first use, and again once the directory was removed (``st_nlink`` 0); one that
    was replaced is kept open until this object goes, since another thread may still be
    using it.
    """

    def __init__(self, path: str, *, parent: Directory | None = None) -> None:
        self.path = os.path.abspath(path) if parent is None else path
        self._parent = parent
        self._fd: int | None = None
        self._st: os.stat_result | None = None
        self._guard = threading.Lock()
        self._fds: list[int] = []
        weakref.finalize(self, _close_all, self._fds)

    def child(self, name: str) -> Directory:
        """The directory ``name`` inside this one, never reached through a link."""
        return Directory(os.path.join(self.path, name), parent=self)

    def shown(self, name: str = "") -> str:
        """The path of ``name`` in this directory, for messages."""
        return os.path.join(self.path, name) if name else self.path

    # -- the descriptor -----------------------------------------------------------------------

    def fd(self, *, create: bool = False) -> int:
        """The held descriptor; :class:`FileNotFoundError` when the directory is missing (unless
        ``create``), :class:`RefusedPathError` for a planted link on the way."""
        fd = self._fd
        if fd is not None:
            st = os.fstat(fd)
            if st.st_nlink > 0:
                self._st = st  # its owner, group and mode decide trust: kept current
                return fd
        with self._guard:
            if self._fd is not None and self._fd != fd:
                return self._fd  # another thread opened it again meanwhile
            new = self._open(create=create)
            self._fds.append(new)
            self._st = os.fstat(new)
            self._fd = new
            return new

    def _open(self, *, create: bool) -> int:
        if self._parent is None:
            return walk(self.path, create=create)
        parent = self._parent.fd(create=create)
        name = os.path.basename(self.path)
        for _ in range(_MAX_TRIES):
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as exc:
                raise _refusal(self.path, parent, name, exc) from None
            _mkdir(parent, name)
        raise FileNotFoundError(errno.ENOENT, "removed as soon as it was made", self.path)

    def trusts(self, st: os.stat_result) -> bool:
        """Whether a file with ``st`` is one the volume's own users wrote: owned by root, by
        this user or by the directory's owner, or, in a setgid directory (a group's), of the
        directory's group, which everything made inside it takes. A file of anyone else was
        moved or linked in from elsewhere."""
        own = self._st
        if own is None:  # pragma: no cover - set by fd(), which every caller went through
            return False
        if st.st_uid in (0, os.geteuid(), own.st_uid):
            return True
        return bool(own.st_mode & stat.S_ISGID) and st.st_gid == own.st_gid

    def owned(self) -> bool:
        """Whether this user owns the directory (it may then remove what was planted in it)."""
        return self._st is not None and self._st.st_uid == os.geteuid()

    def shared(self) -> bool:
        """Whether the directory is a group's (setgid): files made in it are group-writable."""
        return self._st is not None and bool(self._st.st_mode & stat.S_ISGID)

    # -- files --------------------------------------------------------------------------------

    def open_file(self, name: str) -> tuple[int, os.stat_result]:
        """``(descriptor, fstat)`` of the regular file ``name``, one the cache may read.

        :class:`~cacheroot.fetch.store.NotRegularFileError` for a link, FIFO, socket, device
        or directory (not followed, not waited on), :class:`RefusedFileError` for a file with
        another link or an untrusted owner, :class:`FileNotFoundError` when there is none.
        """
        fd, st = open_regular_stat(name, os.O_RDONLY, dir_fd=self.fd())
        reason = self._unusable(st)
        if reason:
            os.close(fd)
            raise RefusedFileError(name, reason, st)
        return fd, st

    def _unusable(self, st: os.stat_result) -> str:
        """Why the regular file with ``st`` may not be read, or ``""``."""
        if st.st_nlink != 1:
            return f"a file with {st.st_nlink} links (another name of it may be anywhere)"
        if not self.trusts(st):
            return f"a file of uid {st.st_uid}, not a user of this volume"
        return ""

    def read_small(self, name: str, cap: int = MAX_RECORD) -> bytes:
        """The bytes of ``name`` if it is a file :meth:`open_file` accepts of at most ``cap``
        bytes (:class:`RefusedFileError` if larger: nothing is read then)."""
        fd, st = self.open_file(name)
        try:
            if st.st_size > cap:
                raise RefusedFileError(
                    name, f"{st.st_size} bytes, more than a record holds ({cap})", st
                )
            data = os.read(fd, cap + 1)
            # A short read of a regular file is its end, unless the file was larger at fstat.
            while len(data) < min(st.st_size, cap + 1) and (
                more := os.read(fd, cap + 1 - len(data))
            ):
                data += more
        finally:
            os.close(fd)
        if len(data) > cap:  # it grew after the fstat
            raise RefusedFileError(name, f"more than {cap} bytes, more than a record holds", st)
        return data

    def create(self, base: str) -> tuple[int, str]:
        """``(descriptor, name)`` of a new empty file ``.<base>.<random>.partial`` of its own.

        ``O_EXCL`` makes the name ours (a planted one fails the create and another name is
        drawn); the file is ``flock``-ed for as long as the descriptor is open, which is how a
        scan tells it from a dead writer's (:meth:`abandoned`).
        """
        dfd = self.fd(create=True)
        for _ in range(8):
            name = f".{base}.{secrets.token_hex(8)}.partial"
            try:
                # 0o666 under the umask, as any program's files: the file is new and ours.
                fd = open_regular(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dfd)
            except FileExistsError:
                continue
            try:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if self.shared():
                    os.fchmod(fd, SHARED_FILE)
            except BaseException:
                os.close(fd)
                self.remove(name)
                raise
            return fd, name
        raise FileExistsError(errno.EEXIST, "no free temporary name", self.shown(base))

    def abandoned(self, name: str, st: os.stat_result, *, now: float) -> bool:
        """Whether the temporary file ``name`` (listed with ``st``) has no writer any more."""
        age = now - st.st_mtime
        if age < GRACE:
            return False
        try:
            fd = open_regular(name, os.O_RDONLY, dir_fd=self.fd())
        except OSError:
            return False
        try:
            if not os.path.samestat(os.fstat(fd), st):
                return False
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its writer holds it
        except OSError:
            return age > STALE_AFTER  # no flock here: only age tells
        finally:
            os.close(fd)
        return True

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` in this directory (whatever is at ``dst`` is replaced, and
        never followed)."""
        dfd = self.fd()
        os.replace(src, dst, src_dir_fd=dfd, dst_dir_fd=dfd)

    def remove(self, name: str) -> None:
        """Remove ``name`` (a link itself, never what it names); gone already is fine."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd())

    def remove_planted(self, name: str, seen: os.stat_result | None) -> bool:
        """Remove ``name`` if this user owns the directory and it is still what was refused:
        the file ``seen``, or (``seen`` ``None``) something other than a regular file or a
        directory. Says whether it was removed."""
        return self.owned() and self.remove_same(name, seen)

    def remove_same(self, name: str, seen: os.stat_result | None) -> bool:
        """Remove ``name`` if it is still the file ``seen`` (``None``: anything but a regular
        file or a directory); says whether it was removed."""
        try:
            now = os.stat(name, dir_fd=self.fd(), follow_symlinks=False)
        except OSError:
            return False
        if seen is not None:
            same = os.path.samestat(now, seen)
        else:
            same = not (stat.S_ISREG(now.st_mode) or stat.S_ISDIR(now.st_mode))
        if not same:
            return False
        try:
            os.unlink(name, dir_fd=self.fd())
        except OSError:
            return False
        return True

    def lstat(self, name: str) -> os.stat_result:
        """``lstat`` of ``name`` in this directory."""
        return os.stat(name, dir_fd=self.fd(), follow_symlinks=False)

    def sync(self) -> None:
        """Make the renames in this directory durable (best effort)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd())

    def listing(self) -> list[Listed]:
        """Every name in the directory with its ``lstat``, read through a descriptor of its own
        (one shared with other threads would share its read position too)."""
        dfd = os.open(".", os.O_RDONLY | _DIRECTORY | _CLOEXEC, dir_fd=self.fd())
        try:
            with os.scandir(dfd) as it:
                names = [entry.name for entry in it]
            found = []
            for name in names:
                try:
                    st: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                except OSError:
                    continue
                found.append(Listed(name, st))
            return found
        finally:
            os.close(dfd)

    def tree_bytes(self, name: str) -> int:
        """Bytes of every file below the directory ``name`` (links and swaps never followed)."""
        total = 0
        with contextlib.suppress(OSError):
            for _here, _dirs, files, here_fd in os.fwalk(name, dir_fd=self.fd()):
                for file in files:
                    with contextlib.suppress(OSError):
                        total += os.stat(file, dir_fd=here_fd, follow_symlinks=False).st_size
        return total


def walk(path: str, *, create: bool) -> int:
    """A descriptor of the directory ``path``, reached from ``/`` one component at a time.

    A component that is a symbolic link is followed only when :func:`_placed_by_trusted` says
    nobody else could have made it; otherwise :class:`RefusedPathError` names it. ``create`` makes
    the missing directories (``0o2775`` in a setgid parent).
    """
    pending = [p for p in reversed(os.path.abspath(path).split(os.sep)) if p]
    fd = os.open("/", os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    parents: list[int] = []
    here = "/"
    links = made = 0
    try:
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                if parents:
                    os.close(fd)
                    fd = parents.pop()
                    here = os.path.dirname(here)
                continue
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                made += 1
                if not create or made > _MAX_TRIES:
                    raise
                _mkdir(fd, part)
                pending.append(part)
                continue
            except OSError as exc:
                target = _trusted_link(fd, part)
                if target is None:
                    raise _refusal(os.path.join(here, part), fd, part, exc) from None
                links += 1
                if links > _MAX_LINKS:
                    raise RefusedPathError(errno.ELOOP, "too many links", path) from None
                if target.startswith("/"):
                    _close_all([fd, *parents])
                    fd, parents, here = os.open("/", os.O_RDONLY | _DIRECTORY | _CLOEXEC), [], "/"
                pending.extend(p for p in reversed(target.split("/")) if p)
                continue
            parents.append(fd)
            fd = nfd
            here = os.path.join(here, part)
    except BaseException:
        _close_all([fd, *parents])
        raise
    _close_all(parents)
    return fd


def _trusted_link(parent: int, name: str) -> str | None:
    """The target of the link ``name`` if only root or this user could have put it there."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode) or not _placed_by_trusted(os.fstat(parent), st):
            return None
        return os.readlink(name, dir_fd=parent)
    except OSError:
        return None


def _placed_by_trusted(parent: os.stat_result, link: os.stat_result) -> bool:
    """Whether a link in a directory with ``parent`` could only come from root or this user.

    The directory must be theirs, and writable by nobody else, or sticky (then only a link's
    owner and the directory's may replace it) with the link theirs too.
    """
    me = (0, os.geteuid())
    if parent.st_uid not in me:
        return False
    if not parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return True
    return bool(parent.st_mode & stat.S_ISVTX) and link.st_uid in me


def _refusal(where: str, parent: int, name: str, exc: OSError) -> OSError:
    """What to raise for the component ``name`` that would not open as a directory."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return exc
    if stat.S_ISLNK(st.st_mode):
        return RefusedPathError(
            errno.ELOOP,
            f"{where} is a symbolic link that a user other than root and uid {os.geteuid()} may "
            "have planted: refused, not followed; point the media cache at the directory "
            "itself, or remove the link if it is not yours",
        )
    if not stat.S_ISDIR(st.st_mode):
        return RefusedPathError(
            errno.ENOTDIR, f"{where} is {kind(st.st_mode)}, not a directory: refused, not used"
        )
    return exc


def _mkdir(parent: int, name: str) -> None:
    """Make the directory ``name``; ``0o2775`` in a setgid parent, as :mod:`cacheroot.fetch`
    makes its own (it inherits the group, but the umask takes the group's write bit)."""
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        return
    if os.fstat(parent).st_mode & stat.S_ISGID:
        with contextlib.suppress(OSError):
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(fd, SHARED_DIR)
            finally:
                os.close(fd)


def stamp(fd: int, *, atime_ns: int, mtime_ns: int) -> None:
    """Set the access and modification times of the file open at ``fd``.

    Through the descriptor, never through a name: the file whose times change is the one this
    process created or checked, whatever has been put under its name since.
    """
    os.utime(fd, ns=(atime_ns, mtime_ns))


def unnamed(dir_fd: int) -> BinaryIO:
    """A new read-write file with no name in the held directory ``dir_fd`` (``O_TMPFILE``).

    For the process's own scratch bytes on the volume's file system: no name can be planted
    ahead of it or found by anyone else, the directory's size accounting never sees it, and it
    is gone once closed or the process dies. :class:`OSError` (``EOPNOTSUPP``) where the
    platform has no ``O_TMPFILE``; the file system may refuse it too.
    """
    if not _TMPFILE:
        raise OSError(errno.EOPNOTSUPP, "no O_TMPFILE here")
    fd = os.open(".", os.O_RDWR | _TMPFILE | _CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        return open(fd, "w+b")
    except BaseException:
        os.close(fd)
        raise


def planted_kind(directory: Directory, name: str, error: OSError) -> str:
    """What ``name`` really is, in words, for a refusal (``open_regular`` says "a FIFO" for a
    socket too: the ``lstat`` knows better)."""
    if isinstance(error, RefusedFileError):
        return error.reason
    try:
        return kind(directory.lstat(name).st_mode)
    except OSError:
        return "not a regular file" if isinstance(error, NotRegularFileError) else str(error)
