"""Publishing files and directories atomically, and recognising them later without re-hashing.

Every writer works on its own uniquely named partial (``.<name>.<machine>-<pid>.<uuid>.partial``
in the destination's directory, so the final ``os.replace`` never crosses a file system), flushes
and fsyncs it, and only then renames it into place and fsyncs the directory. A reader therefore
sees either nothing or a complete file, whatever crashes and whatever the lock did.

Next to each entry a JSON sidecar (``.<name>.meta.json``) records the URL, sha256, size, ETag,
time fetched, the entry's ``(size, mtime_ns, inode)`` (``stat``) and its ``st_ctime_ns``
(``ctime_ns``). A later hit compares all four with one ``os.stat`` and re-hashes only when one
changed. The ctime is what ``touch -d`` cannot restore: the kernel sets it on every write,
``chmod`` and rename, and no system call lets a user set it, so a byte changed in place is noticed
even when the mtime is put back. As the rename itself moves the ctime, the sidecar is written
twice: *before* the rename without the ctime (a crash in between leaves a sidecar whose triple
matches nothing, never an entry that is trusted without its record) and after it with the ctime
the published file has. A record without ``ctime_ns`` (a crash between the two, or a volume
written before it was recorded) vouches for nothing until the file has been hashed once.

A volume shared by several users works when its directory is setgid and group-writable
(``chgrp ci /vol && chmod 2775 /vol``): files created in a setgid directory take its group, and
everything cacheroot creates there (directories, partials, sidecars, lock files, records of use)
is made group-writable, ``0o2775`` for directories and ``0o664`` for files, whatever the umask.
Anywhere else the umask decides, as for any program.

Internal files all start with a dot; entry names never do, so they cannot collide.

The volume is written by other jobs, so every name on it is treated as planted: partials,
records and entries are opened with :func:`open_regular` (``O_NOFOLLOW``, and ``O_NONBLOCK`` so
that a FIFO cannot hang the open), which refuses anything but a regular file. A link or a
special file where one of our internal files belongs is removed (the name is ours), never
followed.

The directories above an entry are the volume's too: a writer reaches the entry's directory from
the cache root one component at a time without following a link
(:func:`cacheroot.fetch._shared.open_below`) and holds it open. Every function here that names
files next to an entry takes that descriptor as ``dir_fd``: the paths it is given are then only
what messages show, and every open, create, rename and remove is made relative to the held
directory by the path's last component, so a directory swapped for a link above it meanwhile
redirects nothing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import queue
import re
import shutil
import stat
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from . import _proc
from ._redact import printable

if TYPE_CHECKING:
    from collections.abc import Iterator

log = logging.getLogger("cacheroot.fetch")

#: The longest entry name accepted: NAME_MAX (255) less room for the partial and meta suffixes.
MAX_NAME = 200
_PARTIAL = re.compile(
    r"^\.(?P<name>.+)\.(?P<tag>[0-9a-f]{8})-(?P<pid>\d+)\.(?P<uid>[0-9a-f]{8})\.partial$"
)
_HASH_CHUNK = 1 << 20
#: Modes of what cacheroot creates in a setgid directory (a volume shared by a group).
SHARED_FILE = 0o664
SHARED_DIR = 0o2775
#: A partial starts writing back behind the download every this many bytes.
FLUSH_EVERY = 64 << 20
#: The largest record (sidecar, lock holder) that is read: records are a few hundred bytes, and
#: one planted far larger (a sparse file of gigabytes costs its planter no disk) would otherwise
#: be read whole into memory by every fetch, ``cache ls``, ``verify`` and ``prune`` that meets it.
#: A record over it is damaged: never read, its entry a miss.
MAX_RECORD = 256 << 10
#: Flags every open of a file on the volume adds: follow no final link, never block on a FIFO
#: (cleared once the file is known to be regular), keep the descriptor from children.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_SAFE = NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class RecordTooLargeError(OSError):
    """A record (sidecar, lock holder) larger than :data:`MAX_RECORD`: damaged, and not read.

    Reading it whole could take all the memory there is; nothing cacheroot writes is that large.
    """


class NotRegularFileError(OSError):
    """A name on the volume that should be a regular file is a link, FIFO, device or directory.

    It is refused, never followed or read: another job may have planted it there.
    """


def kind(mode: int) -> str:
    """What ``mode`` (``st_mode``) is, in words: ``"a regular file"``, ``"a FIFO"``, ..."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def not_regular(path: str, mode: int | None) -> NotRegularFileError:
    """The error for ``path``, found to be something else than a regular file."""
    what = "a symbolic link" if mode is None else kind(mode)
    return NotRegularFileError(
        errno.ELOOP if mode is None or stat.S_ISLNK(mode) else errno.EINVAL,
        f"expected a regular file, found {what}: refused, not followed (another job may have "
        "planted it; remove it if it is not yours)",
        path,
    )


def open_regular(
    path: str, flags: int = os.O_RDONLY, mode: int = 0o666, *, dir_fd: int | None = None
) -> int:
    """``os.open`` that follows no final link, never blocks on a FIFO, and refuses anything
    but a regular file (:class:`NotRegularFileError`, an :class:`OSError`).

    The descriptor is returned blocking again. With ``O_CREAT | O_EXCL`` a name that exists in
    any form (a dangling link too) raises :class:`FileExistsError`, as ``os.open`` does.
    """
    return open_regular_stat(path, flags, mode, dir_fd=dir_fd)[0]


def open_regular_stat(
    path: str, flags: int = os.O_RDONLY, mode: int = 0o666, *, dir_fd: int | None = None
) -> tuple[int, os.stat_result]:
    """:func:`open_regular` that also returns the ``fstat`` it judged the file by, so that a
    caller who needs the size or owner pays for no second system call."""
    try:
        fd = os.open(path, flags | _SAFE, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise not_regular(path, None) from None
        if exc.errno == errno.ENXIO:  # a socket, or O_WRONLY on a FIFO nobody reads
            raise not_regular(path, _lmode(path, dir_fd, stat.S_IFIFO)) from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            os.set_blocking(fd, True)
            return fd, st
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    raise not_regular(path, st.st_mode)


def _lmode(path: str, dir_fd: int | None, default: int) -> int:
    """The ``st_mode`` of ``path`` itself (no link followed), or ``default`` if it is gone:
    ``ENXIO`` comes from a socket as from a FIFO, and the message must name the right one."""
    try:
        return os.lstat(path, dir_fd=dir_fd).st_mode
    except OSError:
        return default


def read_small(path: str, *, dir_fd: int | None = None, limit: int = MAX_RECORD) -> bytes:
    """The whole content of the small regular file ``path`` (a record), read through
    :func:`open_regular` only after ``fstat`` says it holds at most ``limit`` bytes and has one
    name (a hard link planted under a record's name would have root read any file).

    A larger file raises :class:`RecordTooLargeError` and is not read; one that grows past
    ``limit`` while it is read raises the same, having read ``limit + 1`` bytes at most.
    """
    fd, st = open_regular_stat(path, dir_fd=dir_fd)
    try:
        if st.st_size > limit:
            raise _too_large(path, st.st_size, limit)
        if st.st_nlink != 1:  # another name for it may be anywhere: never read
            raise NotRegularFileError(
                errno.EMLINK,
                f"expected a record with one name, found {st.st_nlink} (a hard link to "
                "another file): refused, not read (another job may have planted it; remove it "
                "if it is not yours)",
                path,
            )
        chunks: list[bytes] = []
        got = 0
        # The size ``fstat`` gave, then small chunks: ``os.read`` allocates what it is asked
        # for, and a record of a few hundred bytes must not cost the largest one's memory.
        ask = st.st_size + 1
        while chunk := os.read(fd, min(ask, limit + 1 - got)):
            ask = _READ_CHUNK
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise _too_large(path, got, limit)
    finally:
        os.close(fd)
    return b"".join(chunks)


#: What :func:`read_small` asks for at a time past the size ``fstat`` gave (a growing file).
_READ_CHUNK = 1 << 16


def _too_large(path: str, size: int, limit: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        errno.EFBIG,
        f"record of {size} bytes, over the {limit}-byte limit of a record: damaged, not read",
        path,
    )


def _at(path: str, dir_fd: int | None) -> str:
    """What to hand a system call for ``path``: its last component when it lies in the held
    directory ``dir_fd``, else ``path`` itself."""
    return path if dir_fd is None else os.path.basename(path)


def read_json(path: str, *, dir_fd: int | None = None) -> dict[str, Any] | None:
    """The JSON object in the record ``path`` (:func:`read_small`); ``None`` when it is missing,
    unreadable, too large, not JSON or not an object: a damaged record is no record."""
    try:
        data = json.loads(read_small(path, dir_fd=dir_fd))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_planted(path: str, *, dir_fd: int | None = None) -> bool:
    """Remove ``path`` if it is there but is no regular file (a link, FIFO, device...): the
    name is one of cacheroot's own, next to an entry. Says whether something was removed.

    A directory is left alone (removing a tree is for ``cacheroot cache verify``). With
    ``dir_fd``, ``path`` lies in that held directory (see the module docstring).
    """
    name = _at(path, dir_fd)
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return False
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return False
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        return False
    log.warning("removed %s: %s where cacheroot keeps a file of its own", path, kind(st.st_mode))
    return True


def meta_path(dest: str) -> str:
    """Where the metadata sidecar of the entry ``dest`` lives."""
    head, name = os.path.split(dest)
    return os.path.join(head, f".{name}.meta.json")


def lock_path(dest: str) -> str:
    """The lock file that single-flights writers of the entry ``dest``."""
    head, name = os.path.split(dest)
    return os.path.join(head, f".{name}.lock")


def partial_path(dest: str) -> str:
    """A fresh partial name for ``dest``, unique to this process and call."""
    head, name = os.path.split(dest)
    tag = _proc.machine_tag()
    return os.path.join(head, f".{name}.{tag}-{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")


def parse_partial(filename: str) -> tuple[str, str, int] | None:
    """``(entry name, machine tag, pid)`` of a partial's base name, or ``None`` if it is not one."""
    m = _PARTIAL.match(filename)
    if m is None:
        return None
    return m["name"], m["tag"], int(m["pid"])


def partial_abandoned(path: str, *, stale_after: float = 3600.0, dir_fd: int | None = None) -> bool:
    """Whether the writer of partial ``path`` is gone (so its file may be adopted or removed).

    In this pid namespace the owner's pid is checked, where ``/proc`` shows it for certain (see
    :func:`cacheroot.fetch._proc.gone`); elsewhere (another host or container sharing the volume,
    or a ``/proc`` that hides other users' processes) only age tells: untouched for
    ``stale_after`` seconds. With ``dir_fd``, ``path`` lies in that held directory.
    """
    parsed = parse_partial(os.path.basename(path))
    if parsed is None:
        return False
    _, tag, pid = parsed
    if tag == _proc.machine_tag() and pid != os.getpid() and _proc.gone(pid):
        return True
    try:
        return time.time() - os.lstat(_at(path, dir_fd), dir_fd=dir_fd).st_mtime > stale_after
    except OSError:
        return False


def partials(dest: str, *, dir_fd: int | None = None) -> list[str]:
    """Paths of every partial of ``dest`` that exists now (any writer's); with ``dir_fd``,
    those in that held directory (the one ``dest`` lies in)."""
    head, name = os.path.split(dest)
    try:
        names = os.listdir(head or ".") if dir_fd is None else os.listdir(dir_fd)
    except OSError:
        return []
    found = []
    for entry in names:
        parsed = parse_partial(entry)
        if parsed is not None and parsed[0] == name:
            found.append(os.path.join(head, entry))
    return sorted(found)


def stat_key(st: os.stat_result) -> list[int]:
    """The triple recorded as ``stat``: size, mtime and inode of one published version."""
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def signature(st: os.stat_result) -> tuple[int, int, int, int]:
    """What identifies one version of a file: :func:`stat_key` and the ctime (``st_ctime_ns``)."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def vouches(meta: dict[str, Any], sig: tuple[int, int, int, int]) -> bool:
    """Whether the sidecar ``meta`` records the version of the file whose :func:`signature` is
    ``sig`` (a record without ``ctime_ns`` vouches for nothing)."""
    return meta.get("ctime_ns") == sig[3] and meta.get("stat") == [sig[0], sig[1], sig[2]]


def record_signature(meta: dict[str, Any], sig: tuple[int, int, int, int]) -> dict[str, Any]:
    """``meta`` with ``stat`` and ``ctime_ns`` set to the version whose signature is ``sig``."""
    return {**meta, "stat": [sig[0], sig[1], sig[2]], "ctime_ns": sig[3]}


def shared(directory: str, *, dir_fd: int | None = None) -> bool:
    """Whether ``directory`` (or the directory held at ``dir_fd``) is set up for a group to
    share: setgid (``chmod 2775``)."""
    try:
        st = os.stat(directory or ".") if dir_fd is None else os.fstat(dir_fd)
    except OSError:
        return False
    return bool(st.st_mode & stat.S_ISGID)


def share(fd: int, directory: str, *, dir_fd: int | None = None) -> None:
    """Make the file just created at ``fd`` group-writable if ``directory`` (or the directory
    held at ``dir_fd``) is :func:`shared`.

    The umask of whoever creates a file would otherwise decide (``022``: read-only for the
    group), and the next member of the group could not lock, adopt or refresh it.
    """
    if shared(directory, dir_fd=dir_fd):
        os.fchmod(fd, SHARED_FILE)


def makedirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``; each directory created in a :func:`shared` parent
    is made ``0o2775`` (it inherits the setgid bit and group, but the umask takes group write)."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        makedirs(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    if shared(parent or "."):
        os.chmod(path, SHARED_DIR)


def fsync_dir(path: str, *, dir_fd: int | None = None) -> None:
    """Make a rename in directory ``path`` (or the one held at ``dir_fd``) durable (best effort
    where directories cannot sync)."""
    if dir_fd is not None:
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def hash_version(path: str) -> tuple[str, int, tuple[int, int, int, int]] | None:
    """``(hex digest, size, signature)`` of the file at ``path`` as one version of it.

    The signature (:func:`signature`) is taken before and after hashing; ``None`` when they
    differ (the file was written or replaced while it was read: no verdict). A file with more
    than one name raises :class:`NotRegularFileError` unread: a hard link planted under the
    entry's name would have root read any file.
    """
    st = os.lstat(path)
    if st.st_nlink != 1:  # a published entry has one name; another may be anywhere
        raise NotRegularFileError(
            errno.EMLINK, f"expected one name, found {st.st_nlink}: not read", path
        )
    before = signature(st)
    digest, size = sha256_file(path)  # no link followed, nothing but a regular file read
    after = signature(os.lstat(path))
    return (digest, size, after) if after == before else None


def sha256_file(path: str) -> tuple[str, int]:
    """``(hex digest, size)`` of the regular file at ``path``, read in 1 MiB chunks.

    A link, FIFO or device there raises :class:`NotRegularFileError` (nothing is read through it).
    """
    fd = open_regular(path)
    try:
        return _sha256_fd(fd)
    finally:
        os.close(fd)


def _sha256_fd(fd: int) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(fd, "rb", buffering=0, closefd=False) as f:
        buf = bytearray(_HASH_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return h.hexdigest(), size


def open_unnamed(dir_fd: int) -> int:
    """A new file with no name in the held directory ``dir_fd`` (``O_TMPFILE``), for the
    process's own scratch bytes on the volume's file system: nothing is ever found there by
    name, and nothing is left when it is closed or the process dies."""
    return os.open(".", os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)


def read_meta(dest: str, *, dir_fd: int | None = None) -> dict[str, Any] | None:
    """The sidecar of ``dest`` (``None`` when missing, unreadable or over :data:`MAX_RECORD`:
    the entry is then a miss, never a read of a planted giant). With ``dir_fd``, ``dest`` lies
    in that held directory."""
    return read_json(_at(meta_path(dest), dir_fd), dir_fd=dir_fd)


def record_problem(dest: str) -> str:
    """Why the sidecar of ``dest`` is damaged beyond a missing one (``""`` if it is not): one
    too large to read, which :func:`read_meta` reads as none but ``verify`` should name."""
    try:
        size = os.lstat(meta_path(dest)).st_size
    except OSError:
        return ""
    if size > MAX_RECORD:
        return f"its record is {size} bytes, over the {MAX_RECORD}-byte limit: damaged, not read"
    return ""


def write_meta(dest: str, meta: dict[str, Any], *, dir_fd: int | None = None) -> None:
    """Write the sidecar of ``dest`` atomically (its own partial, then ``os.replace``); with
    ``dir_fd``, in that held directory (the one ``dest`` lies in)."""
    final = _at(meta_path(dest), dir_fd)
    tmp = _at(partial_path(meta_path(dest)), dir_fd)
    try:
        fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd=dir_fd)
        with open(fd, "w", encoding="utf-8") as f:
            share(f.fileno(), os.path.dirname(final), dir_fd=dir_fd)
            json.dump(meta, f, sort_keys=True)
        os.replace(tmp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def current_meta(dest: str, *, dir_fd: int | None = None) -> dict[str, Any] | None:
    """The sidecar of ``dest`` if the file on disk is still the one it describes, else ``None``.

    Size, mtime and inode must match, and the ctime too where the record has one (records of
    directories and of older volumes have none). With ``dir_fd``, ``dest`` lies in that held
    directory.
    """
    meta = read_meta(dest, dir_fd=dir_fd)
    if meta is None:
        return None
    try:
        st = os.lstat(_at(dest, dir_fd), dir_fd=dir_fd)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return None
    if "ctime_ns" in meta:
        return meta if vouches(meta, signature(st)) else None
    return meta if meta.get("stat") == stat_key(st) else None


class Hasher:
    """sha256 of a stream; past :attr:`THRESHOLD` bytes it is computed on a helper thread.

    Receiving, writing and hashing then overlap (the socket, ``os.write`` and ``hashlib`` all
    release the GIL), so a verified download costs about what the slowest of the three costs
    instead of their sum. Small files never start a thread. At most :attr:`QUEUE` chunks wait
    for the helper, which bounds the memory this takes.

    A reader can also borrow reusable buffers (:meth:`buffer`) and pass them back with the data
    (``update(view, owner=buf)``): the helper hashes the view without copying it and returns the
    buffer for the next read. Allocating a fresh chunk per read instead costs a page fault per
    4 KiB of every chunk, about a tenth of the CPU time of a large download.
    """

    THRESHOLD = 8 << 20
    QUEUE = 8

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self._seen = 0
        self._queue: queue.Queue[tuple[bytes | memoryview, bytearray | None] | None] | None = None
        self._thread: threading.Thread | None = None
        # Buffers the helper is done with; at most QUEUE + 3 ever exist (queued, being
        # hashed, being filled, on their way back), since one is made only when none is free.
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()

    def buffer(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes to read into, then pass to :meth:`update` as ``owner``."""
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            return bytearray(size)
        return buf if len(buf) == size else bytearray(size)

    def update(self, data: bytes | memoryview, owner: bytearray | None = None) -> None:
        """Add ``data``.

        ``owner`` is the buffer from :meth:`buffer` that ``data`` views: it is reused once
        hashed, so the caller must not touch it after this call. Other data that is not
        ``bytes`` is copied, since the caller may reuse it.
        """
        self._seen += len(data)
        if self._queue is None:
            if self._seen < self.THRESHOLD:
                self._h.update(data)
                if owner is not None:
                    self._free.put(owner)
                return
            self._queue = queue.Queue(maxsize=self.QUEUE)
            self._thread = threading.Thread(target=self._run, name="cacheroot-sha256", daemon=True)
            self._thread.start()
        if owner is None and not isinstance(data, bytes):
            data = bytes(data)
        self._queue.put((data, owner))

    def _run(self) -> None:
        assert self._queue is not None  # noqa: S101 - set before the thread starts
        while (item := self._queue.get()) is not None:
            data, owner = item
            self._h.update(data)
            if owner is not None:
                self._free.put(owner)

    @property
    def threaded(self) -> bool:
        """Whether a helper thread is hashing now."""
        return self._thread is not None

    def close(self) -> None:
        """Wait for the helper to catch up and stop it (idempotent)."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        self._queue = None
        self._thread = None

    def hexdigest(self) -> str:
        """Digest of everything added so far."""
        self.close()
        return self._h.hexdigest()


class UntrustedPartialError(OSError):
    """An abandoned partial that may not be adopted: linked elsewhere or someone else's."""


def _untrusted(st: os.stat_result) -> str:
    """Why the partial whose ``fstat`` is ``st`` may not be adopted (``""``: it may).

    Adopting means writing into that inode and publishing it as the entry. A second name for it
    (``st_nlink > 1``) is a hard link another job made to a file of its choosing, which would be
    rewritten and then served; a partial of another uid is bytes this user never wrote.
    """
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} names (a hard link to another file)"
    if st.st_uid not in (0, os.geteuid()):
        return f"it belongs to uid {st.st_uid}, neither root nor this user"
    return ""


class Partial:
    """One writer's partial file for ``dest``, hashed as it is written.

    Create it fresh, or :meth:`adopt` an abandoned partial (its bytes are re-hashed so that the
    final digest covers the whole file). :meth:`commit` publishes; :meth:`discard` removes it.

    ``dir_fd`` is the held directory ``dest`` lies in (see the module docstring): the partial is
    then created, renamed and removed relative to it, and :attr:`dest` and :attr:`path` are what
    messages show. The caller keeps it open for as long as the partial lives.
    """

    def __init__(self, dest: str, path: str | None = None, *, dir_fd: int | None = None) -> None:
        self.dest = dest
        self.path = path or partial_path(dest)
        self.dir_fd = dir_fd
        # A fresh partial is created (O_EXCL: nothing there is followed); an adopted one must
        # be the regular file it was, never a link planted under a partial's name.
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if path is None else 0)
        fd, st = open_regular_stat(self._name, flags, dir_fd=dir_fd)
        self.fd: int | None = fd
        if path is not None and (why := _untrusted(st)):
            os.close(fd)
            self.fd = None
            raise UntrustedPartialError(errno.EPERM, f"not adopted: {why}", self.path)
        if path is None:
            try:
                share(self.fd, os.path.dirname(self.path), dir_fd=dir_fd)
            except OSError:
                os.close(self.fd)
                os.unlink(self._name, dir_fd=dir_fd)
                raise
        self.hasher = Hasher()
        self.size = 0
        self._flushed = 0
        self._flusher: threading.Thread | None = None
        self._flush_error: OSError | None = None

    @property
    def _name(self) -> str:
        """The partial's name for system calls (relative to :attr:`dir_fd` when held)."""
        return _at(self.path, self.dir_fd)

    @classmethod
    def adopt(
        cls, dest: str, *, stale_after: float = 3600.0, dir_fd: int | None = None
    ) -> Partial | None:
        """Take over an abandoned partial of ``dest`` (the rename makes the claim exclusive).

        Other abandoned partials of ``dest`` are removed. Returns ``None`` when there is none.
        ``dir_fd``: the held directory ``dest`` lies in, as for the constructor.
        """
        mine: Partial | None = None
        at = {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}
        for old in partials(dest, dir_fd=dir_fd):
            if remove_planted(old, dir_fd=dir_fd) or not partial_abandoned(
                old, stale_after=stale_after, dir_fd=dir_fd
            ):
                continue
            if mine is not None:
                with contextlib.suppress(OSError):
                    os.unlink(_at(old, dir_fd), dir_fd=dir_fd)
                continue
            new = partial_path(dest)
            try:
                os.rename(_at(old, dir_fd), _at(new, dir_fd), **at)
            except OSError:
                continue  # another process claimed it first
            try:
                mine = cls(dest, new, dir_fd=dir_fd)
            except UntrustedPartialError as exc:
                log.warning("%s: %s; starting afresh", printable(old), exc.strerror)
                with contextlib.suppress(OSError):
                    # our name only: another name of the inode keeps its bytes
                    os.unlink(_at(new, dir_fd), dir_fd=dir_fd)
                continue
            except OSError:
                remove_planted(new, dir_fd=dir_fd)  # swapped for a link or FIFO since listed
                continue
            mine._rehash()
        return mine

    def _rehash(self) -> None:
        assert self.fd is not None  # noqa: S101 - internal invariant
        os.lseek(self.fd, 0, os.SEEK_SET)
        while chunk := os.read(self.fd, _HASH_CHUNK):
            self.hasher.update(chunk)
            self.size += len(chunk)

    def buffer(self, size: int) -> bytearray:
        """A reusable buffer of ``size`` bytes to read the next chunk into (see :meth:`write`)."""
        return self.hasher.buffer(size)

    def write(self, data: bytes | memoryview, *, owner: bytearray | None = None) -> None:
        """Append ``data`` (all of it; short writes are continued).

        ``owner``: the buffer from :meth:`buffer` that ``data`` views; it goes back to the pool
        once hashed, so the caller must not touch it after this call.
        """
        assert self.fd is not None  # noqa: S101 - internal invariant
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.hasher.update(data, owner)
        self.size += len(data)
        if self.size - self._flushed >= FLUSH_EVERY:
            self._flush_behind()

    def _flush_behind(self) -> None:
        """Start writing back what is written so far, so the final fsync has little left.

        One ``fdatasync`` at a time runs on a helper thread while the download goes on. Its
        error is kept and raised by :meth:`commit`: the kernel reports a writeback error to one
        fsync of a file only, and it must not be lost to this helper.
        """
        if self._flusher is not None and self._flusher.is_alive():
            return
        fd = self.fd
        if fd is None:
            return
        self._flushed = self.size

        def flush() -> None:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                self._flush_error = self._flush_error or exc

        self._flusher = threading.Thread(target=flush, name="cacheroot-flush", daemon=True)
        self._flusher.start()

    def _settle(self) -> None:
        """Wait for the write-behind helper; raise what it met."""
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        if self._flush_error is not None:
            error, self._flush_error = self._flush_error, None
            raise error

    def reset(self) -> None:
        """Drop everything written so far (the origin ignored a ``Range`` request)."""
        assert self.fd is not None  # noqa: S101 - internal invariant
        self._settle()
        self._flushed = 0
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        self.hasher.close()
        self.hasher = Hasher()
        self.size = 0

    def truncate(self, size: int) -> None:
        """Cut the file back to ``size`` bytes and re-hash them (after an unclear failure)."""
        assert self.fd is not None  # noqa: S101 - internal invariant
        self._settle()
        self._flushed = 0
        os.ftruncate(self.fd, size)
        self.hasher.close()
        self.hasher = Hasher()
        self.size = 0
        self._rehash()

    @property
    def sha256(self) -> str:
        """Hex digest of the bytes written so far."""
        return self.hasher.hexdigest()

    def commit(self, meta: dict[str, Any] | None = None, *, sidecar: bool = True) -> dict[str, Any]:
        """fsync, record the sidecar, ``os.replace`` into ``dest``, record the ctime, fsync the
        directory. ``sidecar=False`` writes none (a store whose files are named by their digest,
        as the hub cache's, keeps only the file).

        Returns the sidecar written (``meta`` plus ``sha256``, ``size``, ``fetched``, ``stat``,
        ``ctime_ns``). Raises :class:`FileNotFoundError` when the partial is no longer there
        (another process removed or took it): nothing is published then, and no sidecar written.
        """
        fd = self.fd
        assert fd is not None  # noqa: S101 - internal invariant
        self._settle()
        os.fsync(fd)
        st = os.fstat(fd)
        self._still_mine(st)
        record = {
            **(meta or {}),
            "sha256": self.sha256,
            "size": self.size,
            "fetched": time.time(),
            "stat": stat_key(st),
        }
        if sidecar:
            write_meta(self.dest, record, dir_fd=self.dir_fd)
        try:
            os.replace(
                self._name,
                _at(self.dest, self.dir_fd),
                src_dir_fd=self.dir_fd,
                dst_dir_fd=self.dir_fd,
            )
        except FileNotFoundError:
            self._still_mine(st)
            raise
        # The rename moved the ctime: record the one the published file has now.
        after = os.fstat(fd)
        self.fd = None
        os.close(fd)
        if sidecar and stat_key(after) == record["stat"]:
            record = record_signature(record, signature(after))
            # Published already; without the ctime the next hit hashes the file once instead.
            with contextlib.suppress(OSError):
                write_meta(self.dest, record, dir_fd=self.dir_fd)
        fsync_dir(os.path.dirname(self.dest) or ".", dir_fd=self.dir_fd)
        return record

    def _still_mine(self, st: os.stat_result) -> None:
        """Raise :class:`FileNotFoundError` unless :attr:`path` is still the file we wrote."""
        try:
            there = os.lstat(self._name, dir_fd=self.dir_fd)
        except FileNotFoundError:
            there = None
        if there is None or not os.path.samestat(there, st):
            raise FileNotFoundError(
                errno.ENOENT,
                "the partial file was removed or replaced by another process before it could be "
                "published",
                self.path,
            )

    def discard(self) -> None:
        """Close and remove the partial (idempotent)."""
        self.hasher.close()
        with contextlib.suppress(OSError):
            self._settle()
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        with contextlib.suppress(OSError):
            os.unlink(self._name, dir_fd=self.dir_fd)

    def present(self) -> bool:
        """Whether the partial's name is still there (another process may have removed it)."""
        try:
            os.lstat(self._name, dir_fd=self.dir_fd)
        except OSError:
            return False
        return True


def atomic_write(
    dest: str, data: bytes, meta: dict[str, Any] | None = None, *, dir_fd: int | None = None
) -> dict[str, Any]:
    """Publish ``data`` at ``dest`` in one step (small files: manifests, media entries); with
    ``dir_fd``, in that held directory (the one ``dest`` lies in)."""
    part = Partial(dest, dir_fd=dir_fd)
    try:
        part.write(data)
        return part.commit(meta)
    except BaseException:
        part.discard()
        raise


def _sync_tree(root: str) -> None:
    for here, _dirs, files in os.walk(root):
        for name in files:
            try:
                fd = open_regular(os.path.join(here, name))
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(here)


def publish_dir(staging: str, dest: str, *, replace: bool = False, sync: bool = True) -> bool:
    """Rename the finished directory ``staging`` to ``dest``; say whether ours was published.

    Without ``replace``, the first publisher wins: if ``dest`` already exists (non-empty), our
    copy is removed and ``False`` returned. With ``replace``, an existing ``dest`` is renamed
    aside and removed after ours is in place (readers see the old or the new tree, and for an
    instant nothing). ``staging`` must be in the same directory as ``dest``.
    """
    if sync:
        _sync_tree(staging)
    parent = os.path.dirname(dest) or "."
    try:
        os.rename(staging, dest)
    except OSError:
        if not os.path.isdir(dest):
            raise
        if not replace:
            shutil.rmtree(staging, ignore_errors=True)
            return False
        aside = partial_path(dest) + ".old"
        os.rename(dest, aside)
        os.rename(staging, dest)
        shutil.rmtree(aside, ignore_errors=True)
    fsync_dir(parent)
    return True


class Staging:
    """What :func:`staged_dir` yields: the private ``path`` to build in; ``published`` after."""

    __slots__ = ("dest", "path", "published")

    def __init__(self, dest: str, path: str) -> None:
        self.dest = dest
        self.path = path
        self.published: bool | None = None


@contextlib.contextmanager
def staged_dir(dest: str, *, replace: bool = False, sync: bool = True) -> Iterator[Staging]:
    """Build a directory privately, then publish it at ``dest`` atomically.

    ``with staged_dir(dest) as st: build into st.path``. On an exception the staging directory
    is removed and nothing is published. ``st.published`` says whether ours won.
    """
    parent = os.path.dirname(dest) or "."
    makedirs(parent)
    path = partial_path(dest)
    os.mkdir(path)
    if shared(parent):
        os.chmod(path, SHARED_DIR)
    staging = Staging(dest, path)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    staging.published = publish_dir(path, dest, replace=replace, sync=sync)


def remove_abandoned(directory: str, *, stale_after: float = 3600.0) -> list[str]:
    """Remove the partial files and staging directories in ``directory`` whose writer is gone.

    A partial of a live writer is left alone; returns the paths removed.
    """
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for entry in names:
        path = os.path.join(directory, entry)
        candidate = path[: -len(".old")] if entry.endswith(".partial.old") else path
        if entry.endswith(".partial.old") or (
            parse_partial(entry) is not None
            and partial_abandoned(candidate, stale_after=stale_after)
        ):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            removed.append(path)
    return sorted(removed)
