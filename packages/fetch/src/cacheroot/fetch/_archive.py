"""Unpacking zip and tar archives (plain, gz, bz2, xz) without trusting them.

An archive from the network decides every name, link and size it contains, so extraction is
done member by member by this module, never by ``extractall``:

- names are relative, without ``..``, NUL or drive letters, and short enough for the file
  system (``NAME_MAX`` per component, ``PATH_MAX`` in all); directories are created by us;
- every member is made relative to a descriptor of its directory, reached from the target one
  component at a time with ``O_NOFOLLOW``: nothing is ever written, linked or made through a
  link, whether an earlier member made it or someone planted it;
- regular files are written with ``O_EXCL | O_NOFOLLOW``, counting the bytes actually written
  (a declared size is a claim, not a bound), so the unpacked total and the member count are
  capped (zip bombs, tar bombs);
- hard links must name a regular file this unpacking wrote before them; symbolic links are
  created last, after every file is written (so a chain such as ``a -> .`` then ``a/a/b -> ..``
  cannot make anything outside the target), and each must resolve inside the target, not to
  the target itself, once all of them exist;
- device files, fifos and anything else are refused;
- where the interpreter has it (3.10.12+, 3.11.4+), ``tarfile.data_filter`` checks every tar
  member as well, as a second opinion.

Everything is unpacked into a private partial directory (``0700`` until it is published) that
is published by one rename, so a refused or broken archive publishes nothing; before that rename
the partial is walked again, and anything in it that this unpacking did not make (planted, or
swapped for something else meanwhile) refuses the archive. The published tree's record names the
sha256 of the archive it came from: when the archive changes (its pin changed, it was fetched
again) the next use unpacks it again, and ``CACHEROOT_VERIFY=first-use`` re-hashes the tree once
per process (a tree that does not match its record is unpacked again). A refusal raises
:class:`ArchiveError`; a full disk (or another failure to write) raises
:class:`~._errors.DownloadError` naming where and what to do, with the errno.

The cache volume is written by other jobs, so every name on it is treated as planted (see
``docs/explanation/threat-model.md``). The directory an archive entry lies in is reached from
the cache root one component at a time without following a link (as
:func:`cacheroot.fetch._shared.open_below` does) and held; the archive is opened there with
``O_NOFOLLOW | O_NONBLOCK`` and read only if ``fstat`` says a regular file with one name whose
size is the one its record gives; its tree's partial directory, record, lock and ``.used``
stamp are made, renamed and removed by their names in that held directory; and the tree itself
is walked from a descriptor, never through a link, when it is hashed or removed. A file of an
unpacked tree with a name outside it (a hard link planted there) is never read, and a first-use
check reads no more bytes than the tree's record says it holds. A link, FIFO, socket or device
where the tree belongs is removed (the ``.extracted`` name is cacheroot's own); a regular file
there is an error. Paths outside the cache root and the cache directory are the caller's own:
their directories are followed, as given.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import logging
import lzma
import os
import posixpath
import re
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from . import _held
from ._errors import DownloadError, FetchError, LockTimeout
from ._held import (
    drop_stage,
    held_path,
    lstat,
    lstat_quiet,
    make_partial,
    publish,
    reach,
    remove,
    subdir,
)
from ._naming import EXTRACTED_SUFFIX
from ._store import (
    SHARED_DIR,
    NotRegularFileError,
    kind,
    lock_path,
    open_regular_stat,
    partial_path,
    read_meta,
    remove_planted,
    shared,
    signature,
    write_meta,
)
from ._used import forget, touch_used

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._lock import PathLock

log = logging.getLogger("cacheroot.fetch")

#: Default bound on the bytes an archive may unpack to (16 GiB).
MAX_SIZE = 16 << 30
#: Default bound on the number of members of one archive.
MAX_MEMBERS = 100_000
#: Longest symbolic-link target stored in a zip member that we accept.
_MAX_LINK = 4096
_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Opening a directory below a held one: never through a link.
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
#: How many directories of the target an unpacking keeps open (most archives list their
#: members directory by directory).
_OPEN_DIRS = 32
#: How many symbolic links one name may go through before it counts as a loop (as Linux).
_MAX_HOPS = 40
#: What to do about the size bound, for an archive that is only large.
RAISE_SIZE = (
    "if the archive is trusted and only large, raise the bound: fetch(..., extract=True, "
    'max_unpacked=BYTES), max_unpacked = "40G" in its [[asset]] entry of a manifest, or '
    "extract(..., max_size=BYTES)"
)
RAISE_MEMBERS = (
    "if the archive is trusted and only large, raise the bound: extract(..., max_members=N) "
    "or extract_entry(..., max_members=N)"
)


class ArchiveError(FetchError, ValueError):
    """An archive was refused (unsafe member, over a bound, unreadable); nothing was published."""

    def __init__(self, archive: str, member: str, reason: str) -> None:
        where = f" member {member!r}" if member else ""
        super().__init__(f"refusing to unpack {archive}:{where} {reason}; nothing was published")
        self._archive, self._member, self._reason = archive, member, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._archive, self._member, self._reason))

    @property
    def archive(self) -> str:
        """The archive file."""
        return self._archive

    @property
    def member(self) -> str:
        """The offending member's name (empty when the archive as a whole is at fault)."""
        return self._member

    @property
    def reason(self) -> str:
        """What was wrong with it."""
        return self._reason


# -- the archive ----------------------------------------------------------------------------


def _open_archive(
    archive: str, dir_fd: int, name: str, *, on_volume: bool, meta: dict[str, Any] | None = None
) -> tuple[int, os.stat_result]:
    """The archive ``name`` in the directory held at ``dir_fd``, opened without following a
    link or blocking: ``(descriptor, fstat)``. On the volume it must have one name (another
    could be any file of the host); with ``meta`` (its record), the size the record gives."""
    try:
        fd, st = open_regular_stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ArchiveError(archive, "", "is not there (removed since it was fetched?)") from None
    except NotRegularFileError as exc:
        raise ArchiveError(archive, "", str(exc.strerror)) from None
    why = ""
    if on_volume and st.st_nlink != 1:
        why = (
            f"has {st.st_nlink} names (a hard link to another file): refused, not read "
            "(another job may have planted it; remove it if it is not yours)"
        )
    size = (meta or {}).get("size")
    if not why and isinstance(size, int) and size != st.st_size:
        why = (
            f"holds {st.st_size} bytes where its record says {size}: it changed since it was "
            "fetched (fetch it again)"
        )
    if why:
        os.close(fd)
        raise ArchiveError(archive, "", why)
    return fd, st


def _hash_fd(fd: int) -> str:
    """The sha256 of the file open at ``fd``, from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    while n := os.readv(fd, [buf]):
        h.update(view[:n])
    return h.hexdigest()


def _recorded_sha(meta: dict[str, Any] | None) -> str | None:
    sha = (meta or {}).get("sha256")
    return sha if isinstance(sha, str) and sha else None


def _kind_of(f: IO[bytes]) -> str | None:
    f.seek(0)
    try:
        if zipfile.is_zipfile(f):
            return "zip"
        f.seek(0)
        return "tar" if tarfile.is_tarfile(f) else None
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return None
    finally:
        f.seek(0)


def archive_kind(path: str | os.PathLike[str]) -> str | None:
    """``"zip"``, ``"tar"`` (any supported compression) or ``None`` for anything else (a file
    that cannot be read as a regular file with one name, on the volume, included)."""
    p = os.fspath(path)
    try:
        dfd, name, on_volume = reach(p, follow=True)
    except OSError:
        return None
    try:
        fd, _st = _open_archive(p, dfd, name, on_volume=on_volume)
    except ArchiveError:
        return None
    finally:
        os.close(dfd)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return _kind_of(f)
    finally:
        os.close(fd)


def _clean_name(archive: str, name: str) -> str:
    """The member's relative path, or :class:`ArchiveError` when it could land elsewhere."""
    if "\x00" in name:
        raise ArchiveError(archive, name, "has a NUL byte in its name")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ArchiveError(archive, name, "has an absolute path")
    parts = [p for p in re.split(r"[/\\]", name) if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(archive, name, "has a '..' component that would escape the target")
    return "/".join(parts)


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one object of a tree from another put in its place: its kind and inode, and
    for all but a directory (whose times move as it is filled) its modification time and size,
    which making a hard link to it leaves alone (an inode number is soon used again)."""
    kind_bits = stat.S_IFMT(st.st_mode)
    if kind_bits == stat.S_IFDIR:
        return kind_bits, st.st_ino, 0, 0
    return kind_bits, st.st_ino, st.st_mtime_ns, st.st_size


class _InTheWayError(Exception):
    """A directory on the way to a member is something else (``what``, in words)."""

    def __init__(self, rel: str, what: str) -> None:
        super().__init__(rel, what)
        self.rel, self.what = rel, what


class _Unpacker:
    """The state of one extraction into the directory held at ``fd`` (``target``: its path,
    for messages): counts, pending links, what it made, the directories it holds, the bounds."""

    def __init__(self, archive: str, fd: int, target: str, max_size: int, max_members: int) -> None:
        self.archive = archive
        self.fd = fd
        self.target = target
        self.max_size = max_size
        self.max_members = max_members
        self.members = 0
        self.written = 0
        self.links: list[tuple[str, str]] = []
        #: The member being written (named when writing it fails).
        self.current = ""
        self.name_max = _limit(fd, "PC_NAME_MAX", 255)
        self.path_max = _limit(fd, "PC_PATH_MAX", 4096)
        #: What this unpacking made: relative name -> :func:`_identity`. Anything else found
        #: in the target afterwards was put there by someone else.
        self.made: dict[str, tuple[int, int, int, int]] = {}
        self._dirs: collections.OrderedDict[str, int] = collections.OrderedDict()

    def close(self) -> None:
        """Let go of the directories held (the target's own descriptor is the caller's)."""
        while self._dirs:
            os.close(self._dirs.popitem()[1])

    def count(self, name: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveError(
                self.archive,
                name,
                f"is past the bound of {self.max_members} members; {RAISE_MEMBERS}",
            )

    def path(self, rel: str) -> str:
        """Where member ``rel`` goes; :class:`ArchiveError` if the file system cannot hold it."""
        self.current = rel
        parts = rel.split("/")
        for part in parts:
            size = len(os.fsencode(part))
            if size > self.name_max:
                raise ArchiveError(
                    self.archive,
                    rel,
                    f"has a name longer than this file system allows: {size} bytes in one "
                    f"component ({part[:24]!r}...), over NAME_MAX, {self.name_max} bytes",
                )
        full = os.path.join(self.target, *parts)
        size = len(os.fsencode(full))
        if size >= self.path_max:
            raise ArchiveError(
                self.archive,
                rel,
                f"has a path longer than this file system allows: {size} bytes once unpacked "
                f"at {self.target}, over PATH_MAX, {self.path_max} bytes",
            )
        return full

    def _made(self, rel: str, st: os.stat_result) -> None:
        """Record that ``rel`` (whose ``stat`` is ``st``) is ours; a directory found to be
        another one than before was swapped meanwhile."""
        before = self.made.setdefault(rel, _identity(st))
        if before != _identity(st):
            raise ArchiveError(
                self.archive, rel, "was replaced by someone else while the archive was unpacked"
            )

    def _dir(self, rel: str, *, create: bool) -> int:
        """A descriptor of the target's directory ``rel`` (held by this unpacker: not to be
        closed), reached from the nearest one held without following a link, made on the way
        with ``create``. :class:`_InTheWayError` names a component that is no directory;
        :class:`FileNotFoundError` one that is missing."""
        if not rel:
            return self.fd
        held = self._dirs.get(rel)
        if held is not None:
            self._dirs.move_to_end(rel)
            return held
        fd, start, cut = self.fd, 0, len(rel)
        while (cut := rel.rfind("/", 0, cut)) > 0:
            held = self._dirs.get(rel[:cut])
            if held is not None:
                fd, start = held, cut + 1
                break
        while start <= len(rel):
            end = rel.find("/", start)
            end = len(rel) if end < 0 else end
            here = rel[:end]
            try:
                child = subdir(fd, rel[start:end], create=create)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                    raise
                st = lstat_quiet(rel[start:end], fd)
                what = "a link" if st is not None and stat.S_ISLNK(st.st_mode) else "no directory"
                raise _InTheWayError(here, what) from None
            try:
                self._made(here, os.fstat(child))
            except BaseException:
                os.close(child)
                raise
            self._dirs[here] = child
            if len(self._dirs) > _OPEN_DIRS:
                os.close(self._dirs.popitem(last=False)[1])
            fd, start = child, end + 1
        return fd

    def _parent(self, rel: str) -> int:
        """The directory ``rel`` goes in, made where missing (:meth:`_dir`)."""
        self.path(rel)  # a name too long is refused as the member's, not its directory's
        head = posixpath.dirname(rel)
        try:
            return self._dir(head, create=True)
        except _InTheWayError as exc:
            if exc.what == "a link":
                reason = f"lies behind {exc.rel!r}, which is not a directory but a link"
            else:
                reason = f"needs {exc.rel!r} to be a directory"
            raise ArchiveError(self.archive, rel, reason) from None

    def directory(self, rel: str) -> None:
        if not rel:
            return
        parent = self._parent(rel)
        st = lstat(posixpath.basename(rel), parent)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise ArchiveError(self.archive, rel, "is a directory over an existing file")
        try:
            self._dir(rel, create=True)
        except _InTheWayError:
            raise ArchiveError(self.archive, rel, "is a directory over an existing file") from None

    def file(self, rel: str, source: IO[bytes], declared: int, mode: int) -> None:
        if not rel:
            raise ArchiveError(self.archive, rel, "is a file without a name")
        if declared < 0 or self.written + declared > self.max_size:
            raise ArchiveError(
                self.archive,
                rel,
                f"declares {declared} bytes, past the bound of {self.max_size} bytes; {RAISE_SIZE}",
            )
        parent = self._parent(rel)
        name = posixpath.basename(rel)
        st = lstat(name, parent)
        if st is not None:
            if not stat.S_ISREG(st.st_mode) or self.made.get(rel) != _identity(st):
                raise ArchiveError(
                    self.archive, rel, "would replace a directory, a link or a file not its own"
                )
            remove(parent, name, directory=False)  # a later copy of a member wins, as in tar
            del self.made[rel]
        perm = 0o755 if mode & 0o111 else 0o644
        try:
            fd, st = open_regular_stat(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, perm, dir_fd=parent
            )
        except FileExistsError:
            raise ArchiveError(self.archive, rel, "is a file over an existing member") from None
        try:
            while chunk := source.read(_CHUNK):
                self.written += len(chunk)
                if self.written > self.max_size:
                    raise ArchiveError(
                        self.archive,
                        rel,
                        f"unpacks past the bound of {self.max_size} bytes; {RAISE_SIZE}",
                    )
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self._made(rel, st)

    def hardlink(self, rel: str, target: str) -> None:
        not_before = f"is a hard link to {target!r}, not a file extracted before it"
        if not target:
            raise ArchiveError(self.archive, rel, not_before)
        self.path(target)
        try:
            src_dir = os.dup(self._dir(posixpath.dirname(target), create=False))
        except (OSError, _InTheWayError):
            raise ArchiveError(self.archive, rel, not_before) from None
        try:
            src = posixpath.basename(target)
            st = lstat_quiet(src, src_dir)
            if st is None or self.made.get(target) != _identity(st):
                raise ArchiveError(self.archive, rel, not_before)
            self.written += st.st_size
            if self.written > self.max_size:
                raise ArchiveError(
                    self.archive,
                    rel,
                    f"unpacks past the bound of {self.max_size} bytes; {RAISE_SIZE}",
                )
            parent = self._parent(rel)
            name = posixpath.basename(rel)
            if lstat(name, parent) is not None:
                raise ArchiveError(self.archive, rel, "is a hard link over an existing member")
            _held.link(src_dir, src, parent, name)
            made = lstat_quiet(name, parent)
            if made is None or _identity(made) != _identity(st):
                raise ArchiveError(self.archive, rel, not_before)
            self._made(rel, made)
        finally:
            os.close(src_dir)

    def symlink(self, rel: str, link: str) -> None:
        if not rel:
            raise ArchiveError(self.archive, rel, "is a link without a name")
        if "\x00" in link or link.startswith(("/", "\\")) or _DRIVE.match(link):
            raise ArchiveError(
                self.archive, rel, f"is a symbolic link to an absolute path {link!r}"
            )
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
        if resolved == ".." or resolved.startswith("../"):
            raise ArchiveError(self.archive, rel, f"is a symbolic link {link!r} out of the target")
        if resolved == ".":
            raise ArchiveError(
                self.archive, rel, f"is a symbolic link {link!r} to the target itself"
            )
        self.links.append((rel, link))

    def finish_links(self) -> None:
        """Create the symbolic links, then check each resolves inside the target.

        Each is made relative to a descriptor of its real parent (:meth:`_parent`), so no link
        is walked through to create it, and nothing is created outside the target even by a
        chain of links that each pass the lexical check.
        """
        for rel, _link in self.links:
            parent = self._parent(rel)
            name = posixpath.basename(rel)
            try:
                _held.symlink(parent, _link, name)
            except FileExistsError:
                raise ArchiveError(self.archive, rel, "is a link over an existing member") from None
            st = lstat_quiet(name, parent)
            if st is None:
                raise ArchiveError(self.archive, rel, "was removed as soon as it was made")
            self._made(rel, st)
        for rel, link in self.links:
            where = self._resolve(rel)
            if where == "":
                raise ArchiveError(
                    self.archive, rel, f"is a symbolic link {link!r} that resolves to the target"
                )
            if where is None:
                raise ArchiveError(
                    self.archive,
                    rel,
                    f"is a symbolic link {link!r} that resolves out of the target",
                )

    def _resolve(self, rel: str) -> str | None:
        """Where ``rel`` leads once its links are followed, relative to the target (``""``: the
        target itself), or ``None`` when that is outside it. As ``realpath`` without ``strict``,
        but each link is read in its directory reached from the target without following one:
        a missing name, or one below a file, is taken as it is written."""
        done: list[str] = []
        todo = rel.split("/")[::-1]
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    return None
                done.pop()
                continue
            try:
                st: os.stat_result | None = os.lstat(
                    part, dir_fd=self._dir("/".join(done), create=False)
                )
            except (OSError, _InTheWayError):
                st = None
            if st is None or not stat.S_ISLNK(st.st_mode):
                done.append(part)
                continue
            hops += 1
            if hops > _MAX_HOPS:
                return "/".join([*done, *todo[::-1]]) or "."  # a loop leads nowhere at all
            link = os.readlink(part, dir_fd=self._dir("/".join(done), create=False))
            if link.startswith("/"):
                return None
            todo.extend(link.split("/")[::-1])
        return "/".join(done)


def _limit(fd: int, name: str, default: int) -> int:
    """The file system's ``pathconf`` limit ``name`` where the directory held at ``fd`` lives
    (or ``default``)."""
    try:
        value = os.fpathconf(fd, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value > 0 else default


def _untar(unpacker: _Unpacker, archive: str, f: IO[bytes]) -> None:
    data_filter: Callable[[tarfile.TarInfo, str], tarfile.TarInfo] | None = getattr(
        tarfile, "data_filter", None
    )
    with tarfile.open(fileobj=f, mode="r:*") as tf:
        for member in tf:
            unpacker.count(member.name)
            rel = _clean_name(archive, member.name)
            if data_filter is not None:
                try:
                    data_filter(member, unpacker.target)
                except tarfile.TarError as exc:  # FilterError and its subclasses
                    raise ArchiveError(archive, member.name, f"is unsafe ({exc})") from None
            if member.isdir():
                unpacker.directory(rel)
            elif member.isreg():
                source = tf.extractfile(member)
                if source is None:  # pragma: no cover - isreg() members always have data
                    raise ArchiveError(archive, member.name, "has no data")
                with source:
                    unpacker.file(rel, source, member.size, member.mode)
            elif member.islnk():
                unpacker.hardlink(rel, _clean_name(archive, member.linkname))
            elif member.issym():
                unpacker.symlink(rel, member.linkname)
            else:
                kind = "a device file" if member.isdev() else "a special file"
                raise ArchiveError(archive, member.name, f"is {kind} (type {member.type!r})")


def _unzip(unpacker: _Unpacker, archive: str, f: IO[bytes]) -> None:
    with zipfile.ZipFile(f) as zf:
        for info in zf.infolist():
            unpacker.count(info.filename)
            rel = _clean_name(archive, info.filename)
            if info.flag_bits & 0x1:
                raise ArchiveError(archive, info.filename, "is encrypted")
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if info.is_dir() or kind == stat.S_IFDIR:
                unpacker.directory(rel)
            elif kind == stat.S_IFLNK:
                if info.file_size > _MAX_LINK:
                    raise ArchiveError(archive, info.filename, "is a link with a huge target")
                target = zf.read(info).decode("utf-8", errors="surrogateescape")
                unpacker.symlink(rel, target)
            elif kind in (0, stat.S_IFREG):
                with zf.open(info) as source:
                    unpacker.file(rel, source, info.file_size, mode)
            else:
                raise ArchiveError(archive, info.filename, f"is a special file (mode {mode:o})")


def _unpack_fd(unpacker: _Unpacker, archive: str, fd: int) -> None:
    """Unpack the archive open at ``fd`` with ``unpacker`` (see :func:`unpack`)."""
    with os.fdopen(fd, "rb", closefd=False) as f:
        kind = _kind_of(f)
        if kind is None:
            raise ArchiveError(archive, "", "is not a zip or tar archive (plain, gz, bz2 or xz)")
        try:
            if kind == "zip":
                _unzip(unpacker, archive, f)
            else:
                _untar(unpacker, archive, f)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise ArchiveError(archive, "", f"is damaged or truncated ({exc})") from None
        except (NotImplementedError, RuntimeError) as exc:
            # zipfile raises these for unsupported compression methods and encryption.
            raise ArchiveError(archive, "", f"cannot be read ({exc})") from None
        except OSError as exc:
            # gzip and bz2 report a corrupt stream as an OSError without an errno; a real I/O
            # failure (a full disk: ENOSPC) keeps its errno and propagates as it is.
            if exc.errno is None:
                raise ArchiveError(archive, "", f"is damaged or truncated ({exc})") from None
            if exc.errno == errno.ENAMETOOLONG:
                raise ArchiveError(
                    archive, "", f"has a member name this file system cannot hold ({exc})"
                ) from None
            if unpacker.current:
                # A full disk reports no file name: say which member it stopped at.
                raise OSError(
                    exc.errno, f"{exc.strerror or exc}, writing member {unpacker.current!r}"
                ) from exc
            raise
    unpacker.finish_links()


def unpack(
    archive: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    max_size: int = MAX_SIZE,
    max_members: int = MAX_MEMBERS,
) -> None:
    """Unpack ``archive`` into the existing, private, empty directory ``target``.

    Raises :class:`ArchiveError` on anything unsafe or over a bound; the caller then discards
    ``target`` (it may hold part of the archive). Use :func:`extract` to get publishing too.
    """
    src, dst = os.fspath(archive), os.fspath(target)
    dfd, name, on_volume = reach(src, follow=True)
    try:
        fd, _st = _open_archive(src, dfd, name, on_volume=on_volume)
    finally:
        os.close(dfd)
    try:
        pfd, tname, _on_volume = reach(dst, follow=True)
        try:
            tfd = subdir(pfd, tname) if tname else os.dup(pfd)
        finally:
            os.close(pfd)
        unpacker = _Unpacker(src, tfd, os.path.abspath(dst), max_size, max_members)
        try:
            _unpack_fd(unpacker, src, fd)
        finally:
            unpacker.close()
            os.close(tfd)
    finally:
        os.close(fd)


# -- trees ----------------------------------------------------------------------------------


class _OverLimitError(Exception):
    """A tree holds more bytes than it may (it is not the tree its record describes)."""


class _StrangerError(Exception):
    """A tree holds ``rel``, which its maker did not make (or not there, or not that one)."""

    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


def tree_digest(root: str | os.PathLike[str]) -> tuple[str, int, int]:
    """``(sha256, bytes, files)`` over a directory tree: names, kinds, contents and link targets.

    Recorded when a directory entry is published and recomputed by ``cacheroot cache verify``.
    Links are not followed; file modes are not covered (only the contents matter to readers).
    ``root`` itself is taken as given; below it the tree is walked from descriptors, without
    following a link, and a file is read only if it is a regular one (never a FIFO or device).
    """
    top = os.fspath(root)
    try:
        fd = subdir(None, top, follow=True)
    except OSError:
        return hashlib.sha256().hexdigest(), 0, 0  # nothing there: an empty walk
    try:
        return _digest(fd, top)
    finally:
        os.close(fd)


def _digest(  # noqa: PLR0915 - one walk, kept in one place so that its order is plain
    top: int,
    label: str,
    *,
    sync: bool = False,
    own_names: bool = False,
    limit: int | None = None,
    expect: dict[str, tuple[int, int, int, int]] | None = None,
) -> tuple[str, int, int]:
    """:func:`tree_digest` of the tree held at ``top`` (``label``: its path, for messages).

    ``sync`` fsyncs every file and directory as it goes (before a tree is published).
    ``own_names`` reads a file with several names only if all of them are in the tree (a hard
    link planted in an unpacked tree could name any file of the host): one with a name
    elsewhere raises :class:`NotRegularFileError`, unread. ``limit`` raises
    :class:`_OverLimitError` before a byte past that many is read. ``expect`` is what the tree
    must hold (:attr:`_Unpacker.made`): anything else raises :class:`_StrangerError`.
    """
    h = hashlib.sha256()
    later: list[bytes | int] | None = None  # once a file waits, what follows waits in order
    waiting: list[tuple[str, str, tuple[int, int]]] = []
    names: collections.Counter[tuple[int, int]] = collections.Counter()
    total = files = planned = 0
    found: set[str] = set()

    def put(data: bytes) -> None:
        if later is None:
            h.update(data)
        else:
            later.append(data)

    def expected(rel: str, st: os.stat_result) -> None:
        if expect is not None:
            if expect.get(rel) != _identity(st):
                raise _StrangerError(rel)
            found.add(rel)

    def hashed(fd: int, st: os.stat_result) -> str:
        nonlocal total, files
        digest = _hash_fd(fd)
        if sync:
            os.fsync(fd)
        total += st.st_size
        files += 1
        return digest

    def visit(fd: int, here: str) -> list[str]:
        """Hash the directory held at ``fd`` (``here``: its relative name); its directories."""
        nonlocal later, planned
        listing = sorted((name, os.lstat(name, dir_fd=fd)) for name in os.listdir(fd))
        dirs = [(name, st) for name, st in listing if stat.S_ISDIR(st.st_mode)]
        for name, st in listing:
            if stat.S_ISDIR(st.st_mode):
                continue
            rel = os.path.normpath(os.path.join(here, name))
            expected(rel, st)
            if stat.S_ISLNK(st.st_mode):
                put(
                    f"L {rel}\x00{os.readlink(name, dir_fd=fd)}\x00".encode(
                        "utf-8", "surrogateescape"
                    )
                )
                continue
            ffd, fst = open_regular_stat(name, dir_fd=fd)
            try:
                if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                    raise OSError(
                        errno.ESTALE, "replaced while the tree was read", f"{label}/{rel}"
                    )
                planned += fst.st_size
                if limit is not None and planned > limit:
                    raise _OverLimitError(rel)
                if own_names and fst.st_nlink > 1:
                    key = (fst.st_dev, fst.st_ino)
                    names[key] += 1
                    if later is None:
                        later = []
                    later.append(len(waiting))
                    waiting.append((here, name, key))
                    continue
                digest = hashed(ffd, fst)
            finally:
                os.close(ffd)
            put(f"F {rel}\x00{digest}\x00".encode("utf-8", "surrogateescape"))
        for name, st in dirs:
            rel = os.path.normpath(os.path.join(here, name))
            expected(rel, st)
            put(f"D {rel}\x00".encode("utf-8", "surrogateescape"))
        if sync:
            os.fsync(fd)
        return [name for name, _st in dirs]

    stack: list[tuple[int, str, list[str]]] = [(top, ".", visit(top, ".")[::-1])]
    try:
        while stack:
            fd, here, pending = stack[-1]
            if not pending:
                stack.pop()
                if fd != top:
                    os.close(fd)
                continue
            name = pending.pop()
            child = subdir(fd, name)  # swapped for a link since it was listed: refused
            rel = os.path.normpath(os.path.join(here, name))
            try:
                stack.append((child, rel, visit(child, rel)[::-1]))
            except BaseException:
                os.close(child)
                raise
    finally:
        for fd, _here, _pending in stack:
            if fd != top:
                os.close(fd)
    if expect is not None and len(found) != len(expect):
        raise _StrangerError(min(set(expect) - found))  # made, and gone since
    if later is not None:
        digests: dict[tuple[int, int], tuple[str, int]] = {}
        texts: list[bytes] = []
        for here, name, key in waiting:
            if key not in digests:
                digests[key] = _hash_waiting(
                    top, label, here, name, key=key, seen=names[key], sync=sync
                )
            digest, size = digests[key]
            total += size
            files += 1
            rel = os.path.normpath(os.path.join(here, name))
            texts.append(f"F {rel}\x00{digest}\x00".encode("utf-8", "surrogateescape"))
        for part in later:
            h.update(texts[part] if isinstance(part, int) else part)
    return h.hexdigest(), total, files


def _hash_waiting(
    top: int, label: str, here: str, name: str, *, key: tuple[int, int], seen: int, sync: bool
) -> tuple[str, int]:
    """``(sha256, size)`` of the file ``here/name`` of the tree held at ``top``, which has
    several names: read only if it is still the file ``key`` and the tree holds all of its
    names (``seen``)."""
    rel = os.path.normpath(os.path.join(here, name))
    fd = top
    try:
        for part in () if here == "." else here.split("/"):
            child = subdir(fd, part)
            if fd != top:
                os.close(fd)
            fd = child
        ffd, st = open_regular_stat(name, dir_fd=fd)
    finally:
        if fd != top:
            os.close(fd)
    try:
        if (st.st_dev, st.st_ino) != key:
            raise OSError(errno.ESTALE, "replaced while the tree was read", f"{label}/{rel}")
        if st.st_nlink > seen:
            raise NotRegularFileError(
                errno.EMLINK,
                f"has {st.st_nlink} names, {st.st_nlink - seen} of them outside the tree (a hard "
                "link to another file): not read",
                f"{label}/{rel}",
            )
        digest = _hash_fd(ffd)
        if sync:
            os.fsync(ffd)
        return digest, st.st_size
    finally:
        os.close(ffd)


def _digest_at(dir_fd: int, name: str, label: str, **how: Any) -> tuple[str, int, int]:
    """:func:`_digest` of the tree ``name`` in the directory held at ``dir_fd``, opened
    without following a link."""
    fd = subdir(dir_fd, name)
    try:
        return _digest(fd, label, **how)
    finally:
        os.close(fd)


# -- publishing -----------------------------------------------------------------------------


def _not_stored(src: str, out: str, meta: dict[str, Any], exc: OSError, dir_fd: int) -> FetchError:
    """The error for an unpacking that could not be written (a full disk, most often); the
    tree's place is looked at in the directory held at ``dir_fd``."""
    if isinstance(exc, NotADirectoryError):
        st = lstat_quiet(os.path.basename(out), dir_fd)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            what = "a file" if stat.S_ISREG(st.st_mode) else kind(st.st_mode)
            return ArchiveError(src, "", f"cannot be unpacked where it belongs: {out} is {what}")
    url = meta.get("url")
    where = f" ({exc.filename})" if exc.filename else ""
    advice = (
        f" Free space on the volume that holds {os.path.dirname(out) or '.'}, or point "
        "_VLLM_TEST_CACHE at a larger one, then fetch again"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, None)
        else f" Check that {os.path.dirname(out) or '.'} is writable by this user and holds "
        "nothing in the way, then fetch again"
    )
    return DownloadError(
        url if isinstance(url, str) else src,
        f"could not unpack {src} into {out}: {exc.strerror or exc}{where}; nothing was "
        f"published.{advice}",
        err=exc.errno,
    )


def _extract_at(
    src: str,
    out: str,
    src_fd: int,
    out_fd: int,
    *,
    name: str,
    on_volume: tuple[bool, bool],
    max_size: int,
    max_members: int,
    replace: bool,
) -> None:
    """:func:`extract` with the archive (``name``) in the directory held at ``src_fd`` and the
    tree in the one held at ``out_fd`` (the same descriptor for an archive entry);
    ``on_volume``: whether each of the two lies on the volume."""
    archive_name = name
    name = os.path.basename(out)
    st = lstat(name, out_fd)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        # A link, FIFO, socket or device where the tree belongs, on the volume: the name is
        # cacheroot's own (no entry may end with .extracted), so it goes, unfollowed.
        if on_volume[1] and not stat.S_ISREG(st.st_mode) and remove_planted(out, dir_fd=out_fd):
            st = None
        else:
            what = "a file" if stat.S_ISREG(st.st_mode) else kind(st.st_mode)
            raise ArchiveError(
                src,
                "",
                f"cannot be unpacked where it belongs: {out} is {what}, not a directory (an "
                "entry fetched with that name?); move it away or remove it, then unpack again",
            )
    if st is not None and not replace:
        return
    meta = read_meta(archive_name, dir_fd=src_fd) or {}
    fd, _st = _open_archive(src, src_fd, archive_name, on_volume=on_volume[0], meta=meta)
    try:
        try:
            _unpack_and_publish(
                src,
                out,
                fd,
                out_fd,
                meta=meta,
                max_size=max_size,
                max_members=max_members,
                replace=replace,
            )
        except OSError as exc:
            raise _not_stored(src, out, meta, exc, out_fd) from exc
    finally:
        os.close(fd)


def _describe_winner(
    dir_fd: int, name: str, out: str, record: dict[str, Any], *, own_names: bool
) -> None:
    """Another tree was published at ``name`` first: rewrite ``record`` to describe it (best
    effort: a tree that cannot be hashed keeps the record it has)."""
    with contextlib.suppress(OSError, _OverLimitError):
        tree, size, files = _digest_at(dir_fd, name, out, own_names=own_names)
        write_meta(
            name, {**record, "tree_sha256": tree, "size": size, "files": files}, dir_fd=dir_fd
        )


def _unpack_and_publish(
    src: str,
    out: str,
    fd: int,
    out_fd: int,
    *,
    meta: dict[str, Any],
    max_size: int,
    max_members: int,
    replace: bool,
) -> None:
    """Unpack the archive open at ``fd`` into a partial directory next to ``out`` (in the
    directory held at ``out_fd``), check it, record it and publish it."""

    def record(tree: str, size: int, files: int) -> dict[str, Any]:
        return {
            "kind": "extracted",
            "archive": os.path.basename(src),
            "archive_sha256": _recorded_sha(meta) or _hash_fd(fd),
            "url": meta.get("url"),
            "tree_sha256": tree,
            "size": size,
            "files": files,
        }

    published = unpack_tree(
        src,
        out,
        fd,
        out_fd,
        record=record,
        max_size=max_size,
        max_members=max_members,
        replace=replace,
    )
    if published is not None:
        # Someone else published first: make the record describe the tree that is there.
        _describe_winner(out_fd, os.path.basename(out), out, published, own_names=True)


def unpack_tree(
    src: str,
    out: str,
    fd: int,
    out_fd: int,
    *,
    record: Callable[[str, int, int], dict[str, Any]],
    max_size: int = MAX_SIZE,
    max_members: int = MAX_MEMBERS,
    replace: bool = False,
) -> dict[str, Any] | None:
    """Unpack the archive open at ``fd`` (``src``: its name, for messages) into a private
    partial directory next to ``out`` (in the directory held at ``out_fd``), every member made
    from a held descriptor; write the record ``record(tree_sha256, size, files)`` returns
    (it may raise to refuse the tree) and publish the tree under ``out``'s name.

    ``None`` when ours was published; the record we wrote when another process published
    first (ours is removed). Raises :class:`ArchiveError` on anything unsafe or over a bound,
    and nothing is left behind.
    """
    name = os.path.basename(out)
    stage = os.path.basename(partial_path(out))
    label = os.path.join(os.path.dirname(out), stage)
    sfd, mode = make_partial(out_fd, stage, label)
    try:
        unpacker = _Unpacker(src, sfd, label, max_size, max_members)
        try:
            _unpack_fd(unpacker, src, fd)
        finally:
            unpacker.close()
        try:
            tree, size, files = _digest(sfd, label, sync=True, own_names=True, expect=unpacker.made)
        except _StrangerError as exc:
            raise ArchiveError(
                src,
                exc.rel,
                "was planted or replaced in the partial directory while the archive was unpacked",
            ) from None
        written = record(tree, size, files)
        # The sidecar goes first (as for files): a crash before the rename leaves a record
        # that describes nothing, never a tree without one.
        write_meta(name, written, dir_fd=out_fd)
        os.fchmod(sfd, SHARED_DIR if shared("", dir_fd=out_fd) else mode)
        published = publish(out_fd, stage, name, sfd, replace=replace, out=out)
    except BaseException:
        drop_stage(out_fd, stage, sfd)
        raise
    finally:
        os.close(sfd)
    return None if published else written


def extracted_path(entry: str | os.PathLike[str]) -> str:
    """Where the archive entry ``entry`` is (or will be) unpacked: ``<entry>.extracted``."""
    return os.fspath(entry) + EXTRACTED_SUFFIX


def _unreachable(src: str, exc: OSError) -> FetchError:
    """The error for the directory of ``src`` that could not be reached (``exc``)."""
    where = exc.filename if isinstance(exc.filename, str) else os.path.dirname(src)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return ArchiveError(
            src,
            "",
            f"cannot be reached: {where} is a symbolic link or not a directory, not followed "
            "(another job may have planted it; remove it if it is not yours)",
        )
    if exc.errno == errno.ENOENT:
        return ArchiveError(src, "", f"is not there ({where} is missing)")
    return DownloadError(src, f"cannot unpack {src}: {where}: {exc.strerror or exc}", err=exc.errno)


def extract_entry(
    archive: str | os.PathLike[str],
    *,
    max_size: int = MAX_SIZE,
    max_members: int = MAX_MEMBERS,
    lock_timeout: float | None = 1800.0,
    verify: bool = False,
) -> Path:
    """The unpacked directory of the cached archive ``archive``, unpacking it once per volume.

    What ``fetch(..., extract=True)`` and ``cacheroot warm`` call after the archive itself is
    cached. The directory is ``<archive>.extracted``; the first caller unpacks it under that
    directory's lock while the others wait, then find it. Unpacking is local work, so it is done
    offline too. Raises :class:`ArchiveError` (nothing published) for an unsafe archive.

    A tree unpacked from another version of the archive (its record names another sha256) is
    unpacked again; with ``verify`` (``CACHEROOT_VERIFY=first-use``, as the fetcher passes it)
    the tree is also hashed once per process and unpacked again if it does not match its record.
    Everything is done in the archive's directory, reached from the cache root without following
    a link and held (see the module docstring).
    """
    src = os.fspath(archive)
    out = extracted_path(src)
    if _still_seen(src, out, verify=verify):
        touch_used(out)
        return Path(out)
    from ._lock import PathLock  # noqa: PLC0415 - loaded on need

    try:
        dfd, name, on_volume = reach(src)
    except OSError as exc:
        raise _unreachable(src, exc) from None
    try:
        if _stale(src, out, dfd, verify=verify, on_volume=on_volume) is not None:
            lock = PathLock(held_path(dfd, lock_path(out)), timeout=lock_timeout)
            _take(lock, src, out, f"cannot unpack {src}")
            try:
                # Another process may have unpacked it meanwhile.
                why = _stale(src, out, dfd, verify=verify, on_volume=on_volume)
                if why is not None:
                    if why:
                        log.warning("%s: %s; unpacking %s again", out, why, src)
                    _extract_at(
                        src,
                        out,
                        dfd,
                        dfd,
                        name=name,
                        on_volume=(on_volume, on_volume),
                        max_size=max_size,
                        max_members=max_members,
                        replace=bool(why),
                    )
                    _seen.pop(out, None)
            finally:
                lock.release()
        held = held_path(dfd, out)
        touch_used(held)
        if held != out:
            forget(held)
    finally:
        os.close(dfd)
    return Path(out)


def _still_seen(src: str, out: str, *, verify: bool) -> bool:
    """Whether this process judged the tree ``out`` servable for the archive ``src`` (through
    held directories, :func:`_stale`) and both are still the very objects it judged: the hit's
    fast path. Looked at by name: a directory swapped on the way shows other inodes (a link in
    the tree's place is a link), and the walk from the root decides again."""
    seen = _seen.get(out)
    if seen is None or (verify and not seen[2]):
        return False
    try:
        return (signature(os.lstat(src)), signature(os.lstat(out))) == seen[:2]
    except OSError:
        return False


def _take(lock: PathLock, subject: str, out: str, doing: str) -> None:
    """Take ``lock`` (a :class:`~._lock.PathLock` on the tree ``out``'s lock file, named
    through the held directory); errors name the lock by its path on the volume, and what could
    not be done (``doing``, e.g. ``cannot unpack ...``) for ``subject``."""
    shown = lock_path(out)
    try:
        lock.acquire()
    except LockTimeout as exc:
        _path, waited, holder = exc.__reduce__()[1]
        raise LockTimeout(shown, waited, holder) from None
    except FetchError:
        raise
    except OSError as exc:
        raise DownloadError(
            subject,
            f"{doing}: its lock {shown} cannot be taken: {exc.strerror or exc}",
            err=exc.errno,
        ) from None


#: Unpacked trees this process found current: ``out`` -> (the archive's and the tree's
#: ``lstat`` signatures when it was checked, whether the tree was hashed). A hit costs the walk
#: to their directory and two ``lstat`` calls then.
_seen: dict[str, tuple[tuple[int, int, int, int], tuple[int, int, int, int], bool]] = {}


def _stale(src: str, out: str, dir_fd: int, *, verify: bool, on_volume: bool) -> str | None:
    """Why the tree ``out`` cannot be served for the archive ``src`` now, or ``None`` when it
    can: ``""`` when there is no tree, else what is wrong with it (it is unpacked again). Both
    lie in the directory held at ``dir_fd``.

    The tree's record must name the archive's sha256 as the archive's record has it now (a new
    pin, or a refetch, makes a new archive); with ``verify`` the tree is also hashed once per
    process and must match its record.
    """
    name, tree_name = os.path.basename(src), os.path.basename(out)
    tree_st, archive_st = lstat(tree_name, dir_fd), lstat(name, dir_fd)
    if tree_st is None or archive_st is None or not stat.S_ISDIR(tree_st.st_mode):
        return ""  # nothing to serve (extract() says what is in the way)
    now = (signature(archive_st), signature(tree_st))
    seen = _seen.get(out)
    if seen is not None and seen[:2] == now and (seen[2] or not verify):
        return None
    record = read_meta(tree_name, dir_fd=dir_fd) or {}
    archive_sha = _recorded_sha(read_meta(name, dir_fd=dir_fd))
    if archive_sha is None:
        try:
            fd, _st = _open_archive(src, dir_fd, name, on_volume=on_volume)
        except ArchiveError as exc:
            return exc.reason
        try:
            archive_sha = _hash_fd(fd)
        finally:
            os.close(fd)
    if record.get("archive_sha256") != archive_sha:
        return "the tree was unpacked from another version of the archive"
    if verify:
        size = record.get("size")
        try:
            tree = _digest_at(
                dir_fd,
                tree_name,
                out,
                own_names=True,
                limit=size if isinstance(size, int) else None,
            )[0]
        except (OSError, _OverLimitError):
            tree = ""
        if tree != record.get("tree_sha256"):
            return "the tree does not match its record (changed since it was unpacked)"
    _seen[out] = (*now, verify)
    return None


def extract(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str] | None = None,
    *,
    max_size: int = MAX_SIZE,
    max_members: int = MAX_MEMBERS,
    replace: bool = False,
) -> Path:
    """Unpack ``archive`` into a directory published atomically at ``dest``; return ``dest``.

    ``dest`` defaults to :func:`extracted_path` of the archive (the entry's sibling in the
    cache). An existing ``dest`` is returned as it is: a directory is only ever published
    complete, so it is what an earlier call (here or in another process) unpacked. The caller
    serialises concurrent calls (the fetch lock) when it wants one extraction, not just a
    correct one: without it, concurrent callers each unpack privately and the first to publish
    wins. A sidecar next to ``dest`` records the archive's sha256 and the tree's digest. With
    ``replace``, an existing ``dest`` is replaced by a fresh unpacking (readers see the old tree
    or the new one).
    """
    src = os.fspath(archive)
    out = extracted_path(src) if dest is None else os.fspath(dest)
    try:
        src_fd, name, on_volume = reach(src, follow=True)
    except OSError as exc:
        raise _unreachable(src, exc) from None
    try:
        try:
            out_fd, _out_name, out_on_volume = reach(out, create=True)
        except OSError as exc:
            raise _unreachable(out, exc) from None
        try:
            _extract_at(
                src,
                out,
                src_fd,
                out_fd,
                name=name,
                on_volume=(on_volume, out_on_volume),
                max_size=max_size,
                max_members=max_members,
                replace=replace,
            )
        finally:
            os.close(out_fd)
    finally:
        os.close(src_fd)
    return Path(out)
