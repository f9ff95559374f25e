"""Unpacking zip and tar archives (plain, gz, bz2, xz) without trusting them.

An archive from the network decides every name, link and size it contains, so extraction is
done member by member by this module, never by ``extractall``:

- names are relative, without ``..``, NUL or drive letters, and short enough for the file
  system (``NAME_MAX`` per component, ``PATH_MAX`` in all); directories are created by us;
- regular files are written with ``O_EXCL | O_NOFOLLOW``, counting the bytes actually written
  (a declared size is a claim, not a bound), so the unpacked total and the member count are
  capped (zip bombs, tar bombs);
- hard links must name a regular file extracted before them; symbolic links are created last,
  after every file is written (nothing is ever written through one), each in a parent directory
  reached from the target one component at a time with ``O_NOFOLLOW`` (a link made by an earlier
  member is never walked through, so a chain such as ``a -> .`` then ``a/a/b -> ..`` cannot make
  anything outside the target), and each must resolve inside the target, not to the target
  itself, once all of them exist;
- device files, fifos and anything else are refused;
- where the interpreter has it (3.10.12+, 3.11.4+), ``tarfile.data_filter`` checks every tar
  member as well, as a second opinion.

Everything is unpacked into a private staging directory that is published by one rename, so a
refused or broken archive publishes nothing. The published tree's record names the sha256 of
the archive it came from: when the archive changes (its pin changed, it was fetched again) the
next use unpacks it again, and ``CACHEROOT_VERIFY=first-use`` re-hashes the tree once per
process (a tree that does not match its record is unpacked again). A refusal raises
:class:`ArchiveError`; a full disk (or another failure to write) raises
:class:`~._errors.DownloadError` naming where and what to do, with the errno.
"""

from __future__ import annotations

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

from ._errors import DownloadError, FetchError
from ._naming import EXTRACTED_SUFFIX
from ._store import read_meta, sha256_file, signature, staged_dir, write_meta
from ._used import touch_used

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("cacheroot.fetch")

#: Default bound on the bytes an archive may unpack to (16 GiB).
MAX_SIZE = 16 << 30
#: Default bound on the number of members of one archive.
MAX_MEMBERS = 100_000
#: Longest symbolic-link target stored in a zip member that we accept.
_MAX_LINK = 4096
_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")
#: Opening a directory on the way to a link's parent: never through a link.
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
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


def archive_kind(path: str | os.PathLike[str]) -> str | None:
    """``"zip"``, ``"tar"`` (any supported compression) or ``None`` for anything else."""
    p = os.fspath(path)
    if zipfile.is_zipfile(p):
        return "zip"
    try:
        return "tar" if tarfile.is_tarfile(p) else None
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return None


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


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


class _Unpacker:
    """The state of one extraction: counts, pending links, and the bounds."""

    def __init__(self, archive: str, target: str, max_size: int, max_members: int) -> None:
        self.archive = archive
        self.target = os.path.realpath(target)
        self.max_size = max_size
        self.max_members = max_members
        self.members = 0
        self.written = 0
        self.links: list[tuple[str, str]] = []
        #: The member being written (named when writing it fails).
        self.current = ""
        self.name_max = _limit(self.target, "PC_NAME_MAX", 255)
        self.path_max = _limit(self.target, "PC_PATH_MAX", 4096)

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

    def _parent(self, rel: str) -> None:
        self.path(rel)  # a name too long is refused as the member's, not its directory's
        head = posixpath.dirname(rel)
        if head:
            full = self.path(head)
            if os.path.lexists(full) and not stat.S_ISDIR(os.lstat(full).st_mode):
                raise ArchiveError(self.archive, rel, f"needs {head!r} to be a directory")
            os.makedirs(full, exist_ok=True)

    def directory(self, rel: str) -> None:
        if not rel:
            return
        full = self.path(rel)
        if os.path.lexists(full) and not stat.S_ISDIR(os.lstat(full).st_mode):
            raise ArchiveError(self.archive, rel, "is a directory over an existing file")
        self._parent(rel)
        os.makedirs(full, exist_ok=True)

    def file(self, rel: str, source: IO[bytes], declared: int, mode: int) -> None:
        if not rel:
            raise ArchiveError(self.archive, rel, "is a file without a name")
        if declared < 0 or self.written + declared > self.max_size:
            raise ArchiveError(
                self.archive,
                rel,
                f"declares {declared} bytes, past the bound of {self.max_size} bytes; {RAISE_SIZE}",
            )
        self._parent(rel)
        full = self.path(rel)
        if os.path.lexists(full):
            if not stat.S_ISREG(os.lstat(full).st_mode):
                raise ArchiveError(self.archive, rel, "would replace a directory or a link")
            os.unlink(full)  # a later copy of a member wins, as tar itself does
        perm = 0o755 if mode & 0o111 else 0o644
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(full, flags | getattr(os, "O_CLOEXEC", 0), perm)
        with open(fd, "wb") as out:
            while chunk := source.read(_CHUNK):
                self.written += len(chunk)
                if self.written > self.max_size:
                    raise ArchiveError(
                        self.archive,
                        rel,
                        f"unpacks past the bound of {self.max_size} bytes; {RAISE_SIZE}",
                    )
                out.write(chunk)

    def hardlink(self, rel: str, target: str) -> None:
        src = self.path(target)
        try:
            st = os.lstat(src)
        except OSError:
            st = None
        if not target or st is None or not stat.S_ISREG(st.st_mode):
            raise ArchiveError(
                self.archive, rel, f"is a hard link to {target!r}, not a file extracted before it"
            )
        self.written += st.st_size
        if self.written > self.max_size:
            raise ArchiveError(
                self.archive, rel, f"unpacks past the bound of {self.max_size} bytes; {RAISE_SIZE}"
            )
        self._parent(rel)
        full = self.path(rel)
        if os.path.lexists(full):
            raise ArchiveError(self.archive, rel, "is a hard link over an existing member")
        os.link(src, full)

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

    def _open_parent(self, rel: str) -> int:
        """A descriptor of the directory ``rel`` goes in, reached from the target one component
        at a time without following a link (missing directories are created on the way)."""
        fd = os.open(self.target, _DIR_FLAGS)
        for part in posixpath.dirname(rel).split("/") if "/" in rel else ():
            try:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise ArchiveError(
                    self.archive, rel, f"lies behind {part!r}, which is not a directory but a link"
                ) from None
            finally:
                os.close(fd)
            fd = child
        return fd

    def finish_links(self) -> None:
        """Create the symbolic links, then check each resolves inside the target.

        Each is made relative to a descriptor of its real parent (:meth:`_open_parent`), so no
        link is walked through to create it, and nothing is created outside the target even by a
        chain of links that each pass the lexical check.
        """
        for rel, link in self.links:
            self.path(rel)  # the length checks
            parent = self._open_parent(rel)
            try:
                os.symlink(link, posixpath.basename(rel), dir_fd=parent)
            except FileExistsError:
                raise ArchiveError(self.archive, rel, "is a link over an existing member") from None
            finally:
                os.close(parent)
        for rel, link in self.links:
            real = os.path.realpath(self.path(rel))
            if real == self.target:
                raise ArchiveError(
                    self.archive, rel, f"is a symbolic link {link!r} that resolves to the target"
                )
            if not _inside(self.target, real):
                raise ArchiveError(
                    self.archive,
                    rel,
                    f"is a symbolic link {link!r} that resolves out of the target",
                )


def _limit(directory: str, name: str, default: int) -> int:
    """The file system's ``pathconf`` limit ``name`` where ``directory`` lives (or ``default``)."""
    try:
        value = os.pathconf(directory, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value > 0 else default


def _untar(unpacker: _Unpacker, archive: str) -> None:
    data_filter: Callable[[tarfile.TarInfo, str], tarfile.TarInfo] | None = getattr(
        tarfile, "data_filter", None
    )
    with tarfile.open(archive, mode="r:*") as tf:
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


def _unzip(unpacker: _Unpacker, archive: str) -> None:
    with zipfile.ZipFile(archive) as zf:
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
    kind = archive_kind(src)
    if kind is None:
        raise ArchiveError(src, "", "is not a zip or tar archive (plain, gz, bz2 or xz)")
    unpacker = _Unpacker(src, dst, max_size, max_members)
    try:
        if kind == "zip":
            _unzip(unpacker, src)
        else:
            _untar(unpacker, src)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise ArchiveError(src, "", f"is damaged or truncated ({exc})") from None
    except (NotImplementedError, RuntimeError) as exc:
        # zipfile raises these for unsupported compression methods and encryption.
        raise ArchiveError(src, "", f"cannot be read ({exc})") from None
    except OSError as exc:
        # gzip and bz2 report a corrupt stream as an OSError without an errno; a real I/O
        # failure (a full disk: ENOSPC) keeps its errno and propagates as it is.
        if exc.errno is None:
            raise ArchiveError(src, "", f"is damaged or truncated ({exc})") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise ArchiveError(
                src, "", f"has a member name this file system cannot hold ({exc})"
            ) from None
        if unpacker.current:
            # A full disk reports no file name: say which member it stopped at.
            raise OSError(
                exc.errno, f"{exc.strerror or exc}, writing member {unpacker.current!r}"
            ) from exc
        raise
    unpacker.finish_links()


def tree_digest(root: str | os.PathLike[str]) -> tuple[str, int, int]:
    """``(sha256, bytes, files)`` over a directory tree: names, kinds, contents and link targets.

    Recorded when a directory entry is published and recomputed by ``cacheroot cache verify``.
    Links are not followed; file modes are not covered (only the contents matter to readers).
    """
    top = os.fspath(root)
    h = hashlib.sha256()
    total = files = 0
    for here, dirs, names in os.walk(top):
        dirs.sort()
        rel_here = os.path.relpath(here, top)
        for name in sorted(names + [d for d in dirs if os.path.islink(os.path.join(here, d))]):
            full = os.path.join(here, name)
            rel = os.path.normpath(os.path.join(rel_here, name))
            if os.path.islink(full):
                h.update(f"L {rel}\x00{os.readlink(full)}\x00".encode("utf-8", "surrogateescape"))
                continue
            digest, size = sha256_file(full)
            h.update(f"F {rel}\x00{digest}\x00".encode("utf-8", "surrogateescape"))
            total += size
            files += 1
        for d in dirs:
            if not os.path.islink(os.path.join(here, d)):
                rel = os.path.normpath(os.path.join(rel_here, d))
                h.update(f"D {rel}\x00".encode("utf-8", "surrogateescape"))
    return h.hexdigest(), total, files


def _not_stored(src: str, out: str, meta: dict[str, Any], exc: OSError) -> FetchError:
    """The error for an unpacking that could not be written (a full disk, most often)."""
    if isinstance(exc, NotADirectoryError) and os.path.lexists(out) and not os.path.isdir(out):
        return ArchiveError(src, "", f"cannot be unpacked where it belongs: {out} is a file")
    url = meta.get("url")
    where = f" ({exc.filename})" if exc.filename else ""
    return DownloadError(
        url if isinstance(url, str) else src,
        f"could not unpack {src} into {out}: {exc.strerror or exc}{where}; nothing was "
        f"published. Free space on the volume that holds {os.path.dirname(out) or '.'}, or "
        "point _VLLM_TEST_CACHE at a larger one, then fetch again",
        err=exc.errno,
    )


def extracted_path(entry: str | os.PathLike[str]) -> str:
    """Where the archive entry ``entry`` is (or will be) unpacked: ``<entry>.extracted``."""
    return os.fspath(entry) + EXTRACTED_SUFFIX


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
    """
    from ._lock import PathLock  # noqa: PLC0415
    from ._store import lock_path  # noqa: PLC0415 - loaded on need

    src = os.fspath(archive)
    out = extracted_path(src)
    if _stale(src, out, verify=verify) is not None:
        with PathLock(lock_path(out), timeout=lock_timeout):
            why = _stale(src, out, verify=verify)  # another process may have unpacked it
            if why is not None:
                if why:
                    log.warning("%s: %s; unpacking %s again", out, why, src)
                extract(src, out, max_size=max_size, max_members=max_members, replace=bool(why))
                _seen.pop(out, None)
    touch_used(out)
    return Path(out)


#: Unpacked trees this process found current: ``out`` -> (the archive's and the tree's
#: ``lstat`` signatures when it was checked, whether the tree was hashed). A hit costs two
#: ``lstat`` calls then.
_seen: dict[str, tuple[tuple[int, int, int, int], tuple[int, int, int, int], bool]] = {}


def _stale(src: str, out: str, *, verify: bool) -> str | None:
    """Why the tree ``out`` cannot be served for the archive ``src`` now, or ``None`` when it
    can: ``""`` when there is no tree, else what is wrong with it (it is unpacked again).

    The tree's record must name the archive's sha256 as the archive's record has it now (a new
    pin, or a refetch, makes a new archive); with ``verify`` the tree is also hashed once per
    process and must match its record.
    """
    try:
        tree_st = os.lstat(out)
        archive_st = os.lstat(src)
    except FileNotFoundError:
        return ""
    if not stat.S_ISDIR(tree_st.st_mode):
        return ""  # extract() says what is in the way
    now = (signature(archive_st), signature(tree_st))
    seen = _seen.get(out)
    if seen is not None and seen[:2] == now and (seen[2] or not verify):
        return None
    record = read_meta(out) or {}
    archive_sha = (read_meta(src) or {}).get("sha256") or sha256_file(src)[0]
    if record.get("archive_sha256") != archive_sha:
        return "the tree was unpacked from another version of the archive"
    if verify:
        try:
            tree = tree_digest(out)[0]
        except OSError:
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
    if os.path.isdir(out) and not replace:
        return Path(out)
    if os.path.lexists(out) and not os.path.isdir(out):
        raise ArchiveError(
            src,
            "",
            f"cannot be unpacked where it belongs: {out} is a file, not a directory (an entry "
            "fetched with that name?); move it away or remove it, then unpack again",
        )
    meta = read_meta(src) or {}
    try:
        with staged_dir(out, replace=replace) as staging:
            unpack(src, staging.path, max_size=max_size, max_members=max_members)
            tree, size, files = tree_digest(staging.path)
            archive_sha = meta.get("sha256") or sha256_file(src)[0]
            record = {
                "kind": "extracted",
                "archive": os.path.basename(src),
                "archive_sha256": archive_sha,
                "url": meta.get("url"),
                "tree_sha256": tree,
                "size": size,
                "files": files,
            }
            # The sidecar goes first (as for files): a crash before the rename leaves a record
            # that describes nothing, never a tree without one.
            write_meta(out, record)
    except OSError as exc:
        raise _not_stored(src, out, meta, exc) from exc
    if not staging.published:
        with contextlib.suppress(OSError):
            # Someone else published first: make the record describe the tree that is there.
            tree, size, files = tree_digest(out)
            write_meta(out, {**record, "tree_sha256": tree, "size": size, "files": files})
    return Path(out)
