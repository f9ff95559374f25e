"""The shared tier (L2) behind each host's own cache (L1): look there before the origin, and
publish there what the origin sent.

A fleet of CI hosts each has a fast local disk (``CACHEROOT``) and shares one slow persistent
volume (``CACHEROOT_SHARED``: NFS, a Kubernetes PVC). An entry of cacheroot's own (a fetched
file, a ``build_once`` directory) has the same path relative to either root. On an L1 miss:

1. the L2 copy, if its record names the same URL (and digest), is copied into an L1 partial,
   hashed as it is copied, and published in L1 only if the bytes match the record;
2. otherwise one host takes the entry's lease on L2 (:mod:`._lease`) and downloads; hosts that
   miss the same entry meanwhile wait for the L2 copy instead of asking the origin;
3. the download, published in L1 as always, is then copied to L2 (write-through): a private
   partial, fsync, a hard link that fails if the name exists (never replacing what another
   host published), its record after it, the directory fsynced.

The L2 volume may be slow, full, read-only or gone: every failure there is logged and the entry
is fetched as a single-tier cache would, so the shared tier can only save downloads, never cost a
test. Nothing trusts a lock or the lease: a copy is only ever published complete and verified.

A shared copy whose bytes do not match its record (damaged, or another file planted under the
entry's name) is reported once per process and not pulled again while it is that very file. A
host that may write the shared tier then downloads the entry, verifies it, and replaces the
shared copy with its own (a fresh name in that directory, then a rename over it, both through the
held directory), unless the copy changed meanwhile; otherwise every host would go to the origin
for that entry for as long as the copy stays. A host on ``ro`` writes nothing.

cacheroot never creates L2's root: a path that is not there is an unmounted volume or a typo,
and creating it would fill this host's own disk with a "shared" tier that no other host sees. A
root that is missing, not a directory, not writable, or that overlaps ``CACHEROOT`` leaves this
process on one tier, said once (:func:`counterpart`); sub-directories inside it are made as
needed.

Every name on the shared tier was written by some job, so none is trusted: a directory below its
root is opened component by component without following a link (:func:`open_below`), files are
created, linked and removed relative to that descriptor, sources are opened ``O_NOFOLLOW`` and must
be the regular file of one name the caller listed, and a copy never gets a permission bit its source
did not have. A process whose trust tier is ``ro`` (``CACHEROOT_SHARED_MODE=ro``, or a volume
mounted read-only) reads through the shared tier and never writes, leases or publishes there;
``off`` ignores it.

``CACHEROOT_SHARED=s3://BUCKET/PREFIX`` (or ``gs://``, ``az://``) puts the shared tier in a
bucket instead (:mod:`._bucket`): :func:`fill_file` and :func:`pull_only` hand such an entry
there, and everything else here (directories, model snapshots) sees no shared tier. The bucket's
client is imported only then: a hit, and a process without a bucket, never load it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import threading
from typing import TYPE_CHECKING, Any

from cacheroot.envs import CACHEROOT_SHARED, CACHEROOT_SHARED_MODE, resolve, shared_root
from cacheroot.envs._shared_tier import (
    OFF,
    RO,
    RW,
    overlap_problem,
    read_only_mount,
    shared_mode,
    shared_root_problem,
    shared_url,
)

from . import _store
from ._held import below, fd_path, held_path
from ._lease import Lease, lease_path
from ._redact import printable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "available",
    "copy_new",
    "counterpart",
    "fd_path",
    "fill_dir",
    "fill_entry",
    "fill_file",
    "held_path",
    "may_write",
    "open_below",
    "open_source",
    "publish_new",
    "pull_file",
    "pull_only",
    "push_file",
    "root_problem",
]

log = logging.getLogger("cacheroot.fetch")

#: What a fill did: served from the shared tier, or downloaded (or built) here.
SHARED, LOCAL = "shared", "local"
#: Record fields that describe one inode, not the bytes: never carried from one tier to another.
_LOCAL_FIELDS = ("stat", "ctime_ns", "fetched")
_CHUNK = 1 << 20
#: Errors that say a file system cannot make hard links (some FUSE and object-store mounts).
_NO_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK)
#: Shared copies this process found not to hold what their record says, by path: the version
#: (:func:`_version`) of the file that failed. That file is not pulled (nor reported) again;
#: a host that may write the shared tier replaces it with its own verified copy.
_BAD: dict[str, tuple[int, int, int, int, int]] = {}


def root_problem(l2: str) -> str:
    """Why the shared tier's root ``l2`` cannot be used (``""`` when it can), probed with a
    partial of this process (a leftover is removed as abandoned, and skipped by ``tier sync``)."""
    return shared_root_problem(l2, _store.partial_path(os.path.join(l2, "cacheroot-probe")))


def read_problem(l2: str) -> str:
    """Why ``l2`` cannot even be read through (``""``: it can); nothing is written to find out."""
    if os.path.isdir(l2):
        return ""
    why = "is not a directory" if os.path.lexists(l2) else "does not exist"
    return (
        f"{CACHEROOT_SHARED}={l2} {why}: expected the fleet's shared volume (cacheroot never "
        f"creates it); mount it there, or unset {CACHEROOT_SHARED} to use one tier"
    )


def read_only_note(l2: str) -> str:
    """What is said (once) of a shared tier found mounted read-only."""
    return (
        f"{CACHEROOT_SHARED}={l2} is mounted read-only: read through, never written (as with "
        f"{CACHEROOT_SHARED_MODE}=ro)"
    )


#: Verdicts per ``(root, l2, asked mode)``: ``(problem, mode used)``; a process asks once (the
#: probe writes to the volume).
_VERDICTS: dict[tuple[str, str, str], tuple[str, str]] = {}
#: The problems already logged: each is said once per process, not once per entry.
_SAID: set[str] = set()
_SAID_LOCK = threading.Lock()


def _say_once(problem: str, prefix: str = "shared tier not used by this process: ") -> None:
    with _SAID_LOCK:
        if problem in _SAID:
            return
        _SAID.add(problem)
    log.warning("%s%s", prefix, problem)


def _judge(root: str, l2: str, mode: str) -> tuple[str, str]:
    """``(problem, mode used)`` for ``l2`` behind ``root`` when ``mode`` is asked: a volume
    mounted read-only is used as ``ro``."""
    problem = overlap_problem(root, l2)
    if problem:
        return problem, mode
    if mode == RO:
        return read_problem(l2), RO
    if os.path.isdir(l2) and read_only_mount(l2):
        return "", RO
    return root_problem(l2), RW


def _tier(environ: Mapping[str, str] | None) -> tuple[str, str, str] | None:
    """``(root, l2, mode used)`` of the environment's shared tier; ``None`` when there is none,
    it is off, or it is unusable (said once per process)."""
    env = os.environ if environ is None else environ
    if shared_url(env) is not None:
        return None  # a bucket: only files go there (fill_file, pull_only), said there
    try:
        l2 = shared_root(env)
        asked = shared_mode(env) if l2 is not None else OFF
    except ValueError as exc:
        _say_once(str(exc))
        return None
    root = resolve(env).root
    if l2 is None or root is None or asked == OFF:
        return None
    verdict = _VERDICTS.get((root, l2, asked))
    if verdict is None:
        verdict = _VERDICTS[root, l2, asked] = _judge(root, l2, asked)
    elif not verdict[0] and not os.path.isdir(l2):  # usable, then gone (unmounted): not made again
        verdict = (root_problem(l2) if verdict[1] == RW else read_problem(l2), verdict[1])
    problem, used = verdict
    if problem:
        _say_once(problem)
        return None
    if used != asked:
        _say_once(read_only_note(l2), prefix="")
    return root, l2, used


def may_write(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process may write to its shared tier (its trust tier is ``rw`` and the
    volume is not mounted read-only)."""
    found = _tier(environ)
    return found is not None and found[2] == RW


def counterpart(path: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Where ``path`` (under this host's root) lives on the shared tier; ``None`` when there
    is no shared tier, it is off or unusable (said once per process), or ``path`` is not under
    the root."""
    found = _tier(environ)
    if found is None:
        return None
    root, l2, _mode = found
    rel = os.path.relpath(os.path.abspath(path), root)
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return None
    return os.path.join(l2, rel)


# -- trees we do not own ----------------------------------------------------------------------

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


#: A descriptor of a directory below a held top, reached without following a link
#: (:func:`._held.below`, under the name this module's callers know it by).
open_below = below


def open_source(
    path: str, *, dir_fd: int | None = None, expect: os.stat_result | None = None
) -> tuple[int, os.stat_result]:
    """Open the file ``path`` to read without following a link or blocking on a FIFO
    (:func:`cacheroot.fetch._store.open_regular`): ``(descriptor, its stat)``. Refused
    (:class:`OSError`) unless it is a regular file of one name and, with ``expect`` (what a walk
    saw), that very file.

    A second name may be anywhere: a hard link another job made to a file of its choosing (a
    root-only one) would have the copy read it and hand its bytes to the other tier.
    """
    fd, st = _store.open_regular_stat(path, dir_fd=dir_fd)
    if expect is not None and (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
        os.close(fd)
        raise OSError(errno.ESTALE, "was replaced after it was listed: refused", path)
    if st.st_nlink != 1:
        os.close(fd)
        raise _store.NotRegularFileError(
            errno.EMLINK,
            f"has {st.st_nlink} names (a hard link to another file): refused, not read (another "
            "job may have planted it; remove it if it is not yours)",
            path,
        )
    return fd, st


def top_of(l2: str) -> tuple[str, str]:
    """``(shared root, relative directory)`` of the shared path ``l2`` (its root is one that
    :func:`counterpart` handed out)."""
    for _root, top, _mode in _VERDICTS:
        rel = os.path.relpath(os.path.dirname(l2), top)
        if rel != ".." and not rel.startswith(".." + os.sep):
            return top, rel
    return os.path.dirname(l2), ""


def publish_new(tmp: str, final: str, *, durable: bool = True, dir_fd: int | None = None) -> bool:
    """Move the complete file ``tmp`` to ``final`` unless ``final`` exists; say whether it moved.

    ``link`` refuses an existing name atomically, on every host at once. Where a file system has
    no hard links, a rename after a look is used: two hosts may then both publish, each a
    complete file, and the last one stays. ``tmp`` is gone afterwards either way. ``durable``
    fsyncs the directory (a caller publishing many files into one may do that once instead).
    With ``dir_fd`` both names are relative to that directory.
    """
    at = {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}
    try:
        os.link(tmp, final, follow_symlinks=False, **at)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        try:
            os.lstat(final, dir_fd=dir_fd)
        except FileNotFoundError:
            os.rename(tmp, final, **at)
        else:
            return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
    if durable and dir_fd is not None:
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    elif durable:
        _store.fsync_dir(os.path.dirname(final))
    return True


def _copy(fd: int, part: _store.Partial, size: int) -> bool:
    """Append the bytes of the file open at ``fd`` to ``part`` (hashed as they are written);
    whether they were exactly ``size`` bytes.

    No more than ``size`` bytes are ever written: the copy stops at the first byte past them, so
    a shared file larger than its record says (a forged record next to a sparse giant) cannot
    fill this host's disk before its digest is compared.
    """
    while True:
        buf = part.buffer(_CHUNK)
        n = os.readv(fd, [memoryview(buf)[: min(_CHUNK, size + 1 - part.size)]])
        if not n:
            return part.size == size
        if part.size + n > size:
            return False
        part.write(memoryview(buf)[:n], owner=buf)


def _carried(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in _LOCAL_FIELDS}


def _wanted(meta: Mapping[str, Any] | None, key: str, digest: str | None) -> str | None:
    """The digest a shared record promises for ``key`` (and ``digest``), else ``None``.

    A record without a size is no promise either: the size is what bounds the copy.
    """
    if meta is None or meta.get("url") != key or _size(meta) is None:
        return None
    recorded = meta.get("sha256")
    if not isinstance(recorded, str) or (digest is not None and recorded != digest):
        return None
    return recorded


def _size(meta: Mapping[str, Any]) -> int | None:
    """The size in bytes a record gives its file, or ``None`` if it gives none that can be."""
    size = meta.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    return size


def _version(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies one version of a shared file: device, inode, size, mtime and ctime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _known_bad(l2: str, st: os.stat_result) -> bool:
    """Whether the shared file ``l2``, as ``st`` shows it, is the version found bad here."""
    return _BAD.get(l2) == _version(st)


def available(l2: str, key: str, digest: str | None) -> bool:
    """Whether the shared tier holds a recorded copy of ``key`` (with ``digest``) at ``l2``,
    other than one this process found not to match its record."""
    if l2 in _BAD:
        try:
            if _known_bad(l2, os.lstat(l2)):
                return False
        except OSError:
            return False
    return os.path.isfile(l2) and _wanted(_store.read_meta(l2), key, digest) is not None


def _found_bad(l2: str, st: os.stat_result, why: str) -> None:
    """Remember that the shared file ``l2`` (``st``) does not hold what its record says, and
    say so: once, as that version is never pulled again here."""
    _BAD[l2] = _version(st)
    log.warning(
        "%s on the shared tier %s; fetched from the origin instead (a host that may write the "
        "shared tier replaces it with its verified copy)",
        printable(l2),
        why,
    )


def pull_file(
    dest: str, l2: str, key: str, digest: str | None, *, dir_fd: int | None = None
) -> bool:
    """Copy the shared entry ``l2`` into this host's ``dest`` if it is ``key``'s, verified.

    Its record must name ``key`` (and ``digest`` when given); the bytes are hashed while they
    are copied and published only if they match. Returns whether ``dest`` was published. The
    shared copy is reached without following a link and must be a regular file. ``dir_fd``: the
    held directory ``dest`` lies in (:class:`.._store.Partial`). A copy that does not match its
    record is said once and not pulled again while it is that file.
    """
    meta = _store.read_meta(l2)
    expected = _wanted(meta, key, digest)
    size = None if meta is None else _size(meta)
    if expected is None or meta is None or size is None:
        return False
    top, rel = top_of(l2)
    try:
        dfd = open_below(top, rel)
    except FileNotFoundError:
        return False
    try:
        src, st = open_source(os.path.basename(l2), dir_fd=dfd)
    except FileNotFoundError:  # evicted from the shared tier while we looked
        return False
    finally:
        os.close(dfd)
    try:
        if _known_bad(l2, st):
            return False  # said when it was found
        if st.st_size != size:
            _found_bad(l2, st, f"holds {st.st_size} bytes, its record says {size}: not copied")
            return False
        return _pull_verified(src, st, dest, l2, meta, expected=expected, dir_fd=dir_fd)
    finally:
        os.close(src)


def _pull_verified(
    src: int,
    st: os.stat_result,
    dest: str,
    l2: str,
    meta: Mapping[str, Any],
    *,
    expected: str,
    dir_fd: int | None = None,
) -> bool:
    """Copy the ``st.st_size`` bytes of ``src`` into a partial of ``dest``; publish it if its
    sha256 is ``expected`` and the source held exactly that many bytes."""
    size = st.st_size
    if dir_fd is None:
        _store.makedirs(os.path.dirname(dest))
    part = _store.Partial(dest, dir_fd=dir_fd)
    try:
        if not _copy(src, part, size):
            log.warning(
                "%s on the shared tier changed size while it was copied (its record says %d "
                "bytes): not used; fetched from the origin instead",
                printable(l2),
                size,
            )
            part.discard()
            return False
        if part.sha256 != expected:
            _found_bad(
                l2,
                st,
                f"does not match its record (sha256 {part.sha256}, recorded {expected}): not used",
            )
            part.discard()
            return False
        part.commit(_carried(meta))
    except BaseException:
        part.discard()
        raise
    return True


def pull_only(
    dest: str,
    key: str,
    digest: str | None,
    environ: Mapping[str, str] | None = None,
    *,
    open_dir: Callable[[], int] | None = None,
) -> bool:
    """Cache-only runs: copy the shared tier's verified copy of ``key`` into ``dest``.

    The shared tier is local infrastructure, not the network, so a run that may not download
    still looks there before it calls an entry missing. No lease is taken (nothing will be
    downloaded) and no host lock: two processes pulling at once each publish the same verified
    bytes. Returns whether ``dest`` was published; a shared tier that fails is logged and read as
    holding nothing. ``open_dir`` returns a descriptor of the directory ``dest`` lies in (reached
    and made as the caller reaches it), in which the copy is published; it is called only when
    the shared tier has a copy to try, what it raises (a planted link on the way) is raised, and
    the caller closes the descriptor.
    """
    if shared_url(os.environ if environ is None else environ) is not None:
        from ._bucket import tier  # noqa: PLC0415 - only a bucket tier loads its client

        return tier.pull_only(dest, key, digest, environ, open_dir=open_dir)
    l2 = counterpart(dest, environ)
    if l2 is None or (open_dir is not None and not available(l2, key, digest)):
        return False
    dfd = None if open_dir is None else open_dir()
    try:
        return pull_file(dest, l2, key, digest, dir_fd=dfd)
    except OSError as exc:
        _unusable(l2, exc)
        return False


def _copy_fd(src_fd: int, dst_fd: int, size: int, hasher: _store.Hasher | None) -> int:
    """Copy ``src_fd`` to ``dst_fd``; in-kernel (``copy_file_range``) unless hashing.

    At most ``size + 1`` bytes are copied: a count over ``size`` says the source holds more than
    it should, and the copy stopped at the first byte past it instead of filling the disk.
    """
    done = 0
    if hasher is None and hasattr(os, "copy_file_range"):
        try:
            while done <= size:
                n = os.copy_file_range(src_fd, dst_fd, min(size + 1 - done, 1 << 30))
                if not n:
                    break
                done += n
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            if done:  # pragma: no cover - a file system that fails mid-file: start over
                os.lseek(src_fd, 0, os.SEEK_SET)
                os.lseek(dst_fd, 0, os.SEEK_SET)
                os.ftruncate(dst_fd, 0)
                done = 0
        else:
            return done
    while done <= size:
        buf = hasher.buffer(_CHUNK) if hasher is not None else bytearray(_CHUNK)
        n = os.readv(src_fd, [memoryview(buf)[: min(_CHUNK, size + 1 - done)]])
        if not n:
            return done
        view = memoryview(buf)[:n]
        while view:
            view = view[os.write(dst_fd, view) :]
        if hasher is not None:
            hasher.update(memoryview(buf)[:n], owner=buf)
        done += n
    return done


def copy_new(
    src: str,
    final: str,
    *,
    sha256: str | None = None,
    size: int | None = None,
    durable: bool = True,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
    expect: os.stat_result | None = None,
    over: os.stat_result | None = None,
) -> bool | None:
    """Publish a copy of the file ``src`` at ``final`` unless ``final`` exists (see
    :func:`publish_new`): ``True`` when this copy was published, ``False`` when something was
    there, ``None`` when the source did not hold still.

    ``over`` is a file at ``final`` to replace instead (one found damaged): the copy is renamed
    over it if ``final`` is still that very version of it (:func:`_version`), else ``False``.

    The copy keeps the source's permission bits, never more (and never write for others), and
    its mtime. With ``sha256`` the bytes are hashed as they are copied and must match; without,
    the source's size and mtime must be the same before and after the copy (it was not being
    written). Either way a mismatch publishes nothing. The source is opened without following a
    link and must be a regular file (with ``expect``, the one a walk saw: :func:`open_source`).
    ``src_dir_fd`` and ``dst_dir_fd`` make the names relative to those directories; the
    destination's directory must exist.

    ``size`` (what a record or the upstream says the file holds) is compared with the source's
    ``fstat`` before a byte is copied: a source of another size publishes nothing (``None``).
    Whatever the size, no more is copied than the source held when it was opened, plus one byte
    that shows it grew: a file on a volume others write cannot make the copy outgrow it.
    """
    tmp = _store.partial_path(final)
    src_fd, before = open_source(src, dir_fd=src_dir_fd, expect=expect)
    if size is not None and before.st_size != size:
        os.close(src_fd)
        log.info(
            "%s holds %d bytes where %d were expected: not copied",
            printable(src),
            before.st_size,
            size,
        )
        return None
    fd = -1
    try:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
            0o600,
            dir_fd=dst_dir_fd,
        )
        hasher = _store.Hasher() if sha256 is not None else None
        copied = _copy_fd(src_fd, fd, before.st_size, hasher)
        after = os.fstat(src_fd)
        same = copied == before.st_size and (after.st_size, after.st_mtime_ns) == (
            before.st_size,
            before.st_mtime_ns,
        )
        if not same or (hasher is not None and hasher.hexdigest() != sha256):
            os.unlink(tmp, dir_fd=dst_dir_fd)
            return None
        os.fchmod(fd, before.st_mode & 0o775)
        os.fsync(fd)
        if over is None:
            won = publish_new(tmp, final, durable=durable, dir_fd=dst_dir_fd)
        else:
            won = _replace_version(tmp, final, over, durable=durable, dir_fd=dst_dir_fd)
        if won:
            # Only once published: a partial with an old mtime would pass for abandoned.
            with contextlib.suppress(OSError):
                os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dst_dir_fd)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(src_fd)
    return won


def _replace_version(
    tmp: str, final: str, over: os.stat_result, *, durable: bool, dir_fd: int | None
) -> bool:
    """Rename the complete file ``tmp`` over ``final`` if ``final`` is still the version
    ``over`` of a file; say whether it was. ``tmp`` is gone afterwards either way."""
    try:
        try:
            now = os.lstat(final, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        if _version(now) != _version(over):
            return False
        os.replace(tmp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
    if durable:
        _store.fsync_dir(os.path.dirname(final), dir_fd=dir_fd)
    return True


def push_file(dest: str, l2: str, *, dir_fd: int | None = None) -> bool:
    """Publish this host's verified entry ``dest`` on the shared tier at ``l2`` (write-through).

    Never replaces a complete file another host published; a copy there without a record (its
    publisher died in between) gets ours if the bytes are the same, and one this process found
    not to match its record (:func:`pull_file`) is replaced by ours, if it is still that very
    file. Returns whether ours is now the shared copy. The directories on the shared tier are
    reached and made without following a link (:func:`open_below`). ``dir_fd``: the held
    directory ``dest`` lies in.
    """
    meta = _store.read_meta(dest, dir_fd=dir_fd)
    recorded = meta.get("sha256") if meta is not None else None
    if meta is None or not isinstance(recorded, str):
        return False
    src = dest if dir_fd is None else os.path.basename(dest)
    top, rel = top_of(l2)
    dfd = open_below(top, rel, create=True)
    try:
        name = os.path.basename(l2)
        there = fd_path(dfd, name)
        found = _lstat(name, dfd) if l2 in _BAD else None
        if found is not None and _known_bad(l2, found):
            return _heal(src, l2, meta, recorded, found, src_dir_fd=dir_fd, dst_dir_fd=dfd)
        if os.path.lexists(there) or not copy_new(
            src, name, sha256=recorded, size=_size(meta), src_dir_fd=dir_fd, dst_dir_fd=dfd
        ):
            return _adopt_unrecorded(there, meta, recorded)
        _store.write_meta(name, _carried(meta), dir_fd=dfd)
    finally:
        os.close(dfd)
    return True


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def _heal(
    src: str,
    l2: str,
    meta: Mapping[str, Any],
    recorded: str,
    damaged: os.stat_result,
    *,
    src_dir_fd: int | None,
    dst_dir_fd: int,
) -> bool:
    """Replace the shared copy ``l2``, found not to match its record, with this host's
    verified entry ``src`` (a new name in its directory, then a rename over it), and its record
    with this entry's; say whether it was replaced (not if it changed since it was found)."""
    name = os.path.basename(l2)
    won = copy_new(
        src,
        name,
        sha256=recorded,
        size=_size(meta),
        src_dir_fd=src_dir_fd,
        dst_dir_fd=dst_dir_fd,
        over=damaged,
    )
    if not won:
        return False
    _BAD.pop(l2, None)
    _store.write_meta(name, _carried(meta), dir_fd=dst_dir_fd)
    log.warning(
        "%s on the shared tier, which did not match its record, was replaced by this host's "
        "verified copy (sha256 %s)",
        printable(l2),
        recorded,
    )
    return True


def _adopt_unrecorded(l2: str, meta: Mapping[str, Any], recorded: str) -> bool:
    if _store.read_meta(l2) is not None:
        return False
    try:
        st = os.lstat(l2)
        if not stat.S_ISREG(st.st_mode):  # never a link, a FIFO or a device
            return False
        if st.st_size != _size(meta):  # another size cannot be the same bytes: not hashed
            return False
        digest, _length = _store.sha256_file(l2)
    except OSError:
        return False
    if digest != recorded:
        return False
    _store.write_meta(l2, _carried(meta))
    return True


def fill_entry(
    l2: str,
    *,
    pull: Callable[[], bool],
    ready: Callable[[], bool],
    produce: Callable[[], object],
    push: Callable[[], object],
    timeout: float | None = 1800.0,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The shared tier's protocol for one missing entry whose shared copy is ``l2``.

    ``pull()`` copies the shared copy into this host's cache if it is there and verifies
    (``True``); ``ready()`` says cheaply whether one is there to try; ``produce()`` downloads or
    builds the entry here; ``push()`` writes it through. The first look costs one ``pull()``;
    on a miss this host waits for the entry's lease (another host may be producing it: its copy
    is then pulled when ``ready()``), produces it holding the lease, and pushes it. ``timeout``
    bounds the wait, after which this host produces too. A shared tier that fails (``OSError``)
    is logged and the entry produced as with one tier. Returns :data:`SHARED` or :data:`LOCAL`.

    A process that may not write the shared tier (:func:`may_write`: trust tier ``ro``) pulls
    and otherwise produces here: no lease, no push.
    """
    if not may_write(environ):
        try:
            if pull():
                return SHARED
        except OSError as exc:
            _unusable(l2, exc)
        produce()
        return LOCAL
    lease: Lease | None = None
    dfd = -1
    try:
        try:
            if pull():
                return SHARED
            top, rel = top_of(l2)
            dfd = open_below(top, rel, create=True)  # held while the lease is: its directory
            lease = Lease(lease_path(fd_path(dfd, os.path.basename(l2))))
            outcome = lease.acquire(done=ready, timeout=timeout)
            if outcome != "held":
                lease = None
            # Another host may have published while this one waited, or between its first look
            # and the lease.
            if outcome != "timeout" and ready() and pull():
                return SHARED
        except OSError as exc:
            _unusable(l2, exc)
            produce()
            return LOCAL
        produce()
        try:
            push()
        except OSError as exc:
            _unusable(l2, exc)
        return LOCAL
    finally:
        if lease is not None:
            with contextlib.suppress(OSError):
                lease.release()
        if dfd >= 0:
            os.close(dfd)


def fill_file(
    dest: str,
    key: str,
    digest: str | None,
    download: Callable[[], None],
    *,
    timeout: float | None = 1800.0,
    environ: Mapping[str, str] | None = None,
    dir_fd: int | None = None,
) -> str:
    """Make the missing entry ``dest`` present: from the shared tier, or by ``download()``.

    Called with this host's lock on ``dest`` held. Returns :data:`SHARED` or :data:`LOCAL`.
    Without a shared tier this is ``download()``. ``timeout`` bounds the wait for another
    host's lease, after which this host downloads too. ``dir_fd``: the held directory ``dest``
    lies in (everything written next to it is written there). A bucket tier is the bucket's
    (:func:`._bucket.tier.fill_file`).
    """
    if shared_url(os.environ if environ is None else environ) is not None:
        from ._bucket import tier  # noqa: PLC0415 - only a bucket tier loads its client

        served = tier.fill_file(
            dest, key, digest, download, timeout=timeout, environ=environ, dir_fd=dir_fd
        )
        return SHARED if served == tier.SHARED else LOCAL
    l2 = counterpart(dest, environ)
    if l2 is None:
        download()
        return LOCAL
    return fill_entry(
        l2,
        pull=lambda: pull_file(dest, l2, key, digest, dir_fd=dir_fd),
        ready=lambda: available(l2, key, digest),
        produce=download,
        push=lambda: push_file(dest, l2, dir_fd=dir_fd),
        timeout=timeout,
        environ=environ,
    )


def _unusable(l2: str, exc: OSError) -> None:
    log.warning(
        "shared tier at %s unusable (%s): this entry is fetched as with one tier",
        l2,
        exc.strerror or exc,
    )


# -- directories (build_once) ---------------------------------------------------------------


def _tree(path: str) -> tuple[str, int, int]:
    from ._archive import tree_digest  # noqa: PLC0415 - only directory entries need it

    return tree_digest(path)


def pull_dir(dest: str, l2: str) -> bool:
    """Copy the shared directory entry ``l2`` to ``dest`` if its tree matches its record
    (reached without following a link; links inside it are copied as links)."""
    meta = _store.read_meta(l2)
    recorded = meta.get("tree_sha256") if meta is not None else None
    if meta is None or not isinstance(recorded, str):
        return False
    top, rel = top_of(l2)
    try:
        dfd = open_below(top, os.path.join(rel, os.path.basename(l2)))
    except FileNotFoundError:
        return False
    try:
        with _store.staged_dir(dest) as staging:
            os.rmdir(staging.path)
            try:
                shutil.copytree(fd_path(dfd), staging.path, symlinks=True)
            except (FileNotFoundError, shutil.Error):
                os.makedirs(staging.path, exist_ok=True)
                raise _WithdrawnError from None
            if _tree(staging.path)[0] != recorded:
                log.warning("%s on the shared tier does not match its record: not used", l2)
                raise _WithdrawnError
            _store.write_meta(dest, _carried(meta))
    finally:
        os.close(dfd)
    return bool(staging.published)


class _WithdrawnError(Exception):
    """A shared copy that vanished or did not verify while it was copied (nothing published)."""


def push_dir(dest: str, l2: str) -> bool:
    """Publish this host's directory entry ``dest`` on the shared tier (first one wins), its
    directories there reached and made without following a link."""
    meta = _store.read_meta(dest)
    if meta is None:
        return False
    top, rel = top_of(l2)
    dfd = open_below(top, rel, create=True)
    try:
        there = fd_path(dfd, os.path.basename(l2))
        if os.path.lexists(there):
            return False
        with _store.staged_dir(there) as staging:
            os.rmdir(staging.path)
            shutil.copytree(dest, staging.path, symlinks=True)
        if staging.published:
            _store.write_meta(there, _carried(meta))
    finally:
        os.close(dfd)
    return bool(staging.published)


def fill_dir(
    dest: str,
    build: Callable[[], None],
    *,
    timeout: float | None = 1800.0,
    environ: Mapping[str, str] | None = None,
) -> str:
    """:func:`fill_file` for a directory entry (``build_once``): copy it from the shared tier,
    or ``build()`` it under the tier's lease and publish it there."""
    l2 = counterpart(dest, environ)
    if l2 is None:
        build()
        return LOCAL

    def ready() -> bool:
        return os.path.isdir(l2) and _store.read_meta(l2) is not None

    def pull() -> bool:
        try:
            return ready() and pull_dir(dest, l2)
        except _WithdrawnError:
            return False

    return fill_entry(
        l2,
        pull=pull,
        ready=ready,
        produce=build,
        push=lambda: push_dir(dest, l2),
        timeout=timeout,
        environ=environ,
    )
