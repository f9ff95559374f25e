"""Directory entries (``build_once``) through the bucket: one host of a fleet builds, the others
unpack its verified tree.

A built tree travels as one blob: a tar archive of the directory (no compression; the
contents are what they are), named by its sha256 like every blob, so that it is verified as a
whole before a byte of it is unpacked. What makes it usable is a small record written after
the blob, ``trees/<h>.json`` (``<h>`` as for an entry's record: the hash of the directory's
path below the cache root), created only if absent. It names the archive's sha256 and size
and carries the builder's record (``tree_sha256`` over names, kinds, contents and link
targets, the key, the inputs), never this host's inode numbers.

Unpacking is bounded to what a directory entry may hold: the archive is streamed into a
private partial beside the entry (never more bytes than the record says), and unpacked as an
archive fetched with ``extract=True`` is (:func:`cacheroot.fetch._archive.unpack_tree`: no
absolute names, nothing that leaves the tree, no link that points out of it, no device or FIFO,
never more bytes than the recorded tree holds, every member made from a descriptor of the
entry's directory held since the walk from the cache root) into a private partial directory.
The unpacked tree's digest must equal the recorded ``tree_sha256`` before it is published under
the entry's name, its record first: a record another job planted can make a host build for
itself, never place other bytes than the builder's, and a directory swapped for a link after
the walk is never written through. The tree is packed the same way: walked through
descriptors, links archived as links, each file read from a descriptor opened without
following one.

Single flight across hosts is the entry's lease (:mod:`.lease`), as for files. A build the
bucket cannot take (a record too large to share, a FIFO or device in the tree) is simply not
shared.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import stat
import tarfile
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError

from .. import _store
from .._held import subdir
from .._shared import open_below
from .names import blob_name, entry_hash, lease_name
from .records import MAX_RECORD
from .tier import LOCAL, SHARED, bucket_of, rel_of, say_once
from .transfer import BAD, CHUNK, put_blob, stream_into

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from obstore.store import ObjectStore

    from .tier import Bucket

__all__ = ["TREES", "archive_of", "fill_dir", "tree_name"]

#: Where the records of directory entries are, below the bucket's prefix.
TREES = "trees"
_HEX = re.compile(r"[0-9a-f]{64}")
_VERSION = 1
#: Fields of the builder's record that describe this host's copy, never shared.
_LOCAL = ("stat", "ctime_ns", "fetched")


def tree_name(rel: str) -> str:
    """The record of the directory entry at ``rel`` (its path relative to the cache root)."""
    return f"{TREES}/{entry_hash(rel)}.json"


class _Unusable(Exception):  # noqa: N818 - internal: why a shared tree is not used
    """The bucket's tree is not usable (said once); this host builds instead."""


def _parse(data: bytes) -> tuple[str, int, dict[str, Any]]:
    """``(archive sha256, archive size, builder's record)`` of a tree record; :class:`_Unusable`
    for anything else."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise _Unusable("its record is not JSON") from None
    if not isinstance(obj, dict) or obj.get("version") != _VERSION:
        raise _Unusable("its record is of another version")
    sha256, size, meta = obj.get("archive_sha256"), obj.get("archive_size"), obj.get("meta")
    if not isinstance(sha256, str) or not _HEX.fullmatch(sha256):
        raise _Unusable("its record names no archive digest")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _Unusable("its record names no archive size")
    if not isinstance(meta, dict) or not _HEX.fullmatch(str(meta.get("tree_sha256", ""))):
        raise _Unusable("its record names no tree digest")
    return sha256, size, meta


def _read(bucket: Bucket, rel: str) -> tuple[str, int, dict[str, Any]] | None:
    """The tree record of ``rel`` (``None``: none yet); :class:`_Unusable` for a bad one."""
    return _read_at(bucket, tree_name(rel))


def _read_at(bucket: Bucket, name: str) -> tuple[str, int, dict[str, Any]] | None:
    try:
        got = obstore.get(bucket.clients.control, name)
    except FileNotFoundError:
        return None
    if int(got.meta["size"]) > MAX_RECORD:
        raise _Unusable(f"its record is over {MAX_RECORD} bytes")
    return _parse(bytes(got.bytes()))


def archive_of(bucket: Bucket, name: str) -> str | None:
    """The sha256 of the archive the tree record ``name`` names (``None``: gone, or not a
    record this version trusts)."""
    try:
        found = _read_at(bucket, name)
    except _Unusable:
        return None
    return None if found is None else found[0]


def _unpack(
    store: ObjectStore, found: tuple[str, int, dict[str, Any]], dest: str, pfd: int
) -> bool:
    """Stream the archive of ``found`` beside ``dest`` (in its held directory ``pfd``), check
    it, unpack it into a staging directory, check the tree, publish it with its record;
    whether this host's copy won."""
    sha256, size, meta = found
    name = blob_name(sha256)
    if name in BAD:
        raise _Unusable(f"its archive {name} did not verify before")
    try:
        got = obstore.get(store, name)
    except FileNotFoundError:
        raise _Unusable(f"its archive {name} is gone") from None
    if int(got.meta["size"]) != size:
        BAD.add(name)
        raise _Unusable(f"its archive holds {got.meta['size']} bytes, its record says {size}")
    part = _store.Partial(dest + ".tar", dir_fd=pfd)
    try:
        why = stream_into(got.stream(min_chunk_size=CHUNK), part, size)
        if not why and part.sha256 != sha256:
            why = f"does not match its record (sha256 {part.sha256})"
        if why:
            BAD.add(name)
            raise _Unusable(f"its archive {name} {why}")
        assert part.fd is not None  # noqa: S101 - open until discarded
        os.lseek(part.fd, 0, os.SEEK_SET)
        return _extract(part.fd, dest, meta, pfd)
    finally:
        part.discard()


def _extract(fd: int, dest: str, meta: dict[str, Any], pfd: int) -> bool:
    """Unpack the verified archive open at ``fd`` beside ``dest`` (in its held directory
    ``pfd``), every member made from a held descriptor and no more bytes than the record's
    tree holds; publish it with its record only if its digest is the recorded one. Whether
    this host's copy won."""
    from .._archive import MAX_SIZE, ArchiveError, unpack_tree  # noqa: PLC0415 - trees only

    def record(tree: str, _size: int, _files: int) -> dict[str, Any]:
        if tree != meta["tree_sha256"]:
            raise _Unusable("its unpacked tree is not the one its record names")
        return {k: v for k, v in meta.items() if k not in _LOCAL}

    recorded = meta.get("size")
    bound = recorded if isinstance(recorded, int) and recorded >= 0 else MAX_SIZE
    try:
        return unpack_tree(dest, dest, fd, pfd, record=record, max_size=bound) is None
    except (ArchiveError, OSError) as exc:
        raise _Unusable(f"its archive does not unpack here: {exc}") from None


class _Hashing:
    """A file-like that writes to ``fd`` and hashes what passes (a tar stream's output)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.hasher.update(data)
        self.size += len(data)
        return len(data)


def _plain(info: tarfile.TarInfo, st: os.stat_result) -> tarfile.TarInfo:
    """``info`` as every host may unpack it: no owner, the file's own mode and time."""
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _UnshareableError(Exception):
    """A built tree holds what no host may unpack (a FIFO, socket or device): not shared."""


def _pack(top_fd: int, fd: int) -> tuple[str, int]:
    """Write a tar archive of the directory held at ``top_fd`` into ``fd``: ``(sha256,
    size)``. The tree is walked through descriptors without following a link (links are
    archived as links), and each file is read from a descriptor opened without following
    one: a directory of the tree swapped for a link meanwhile puts nothing of its target in."""
    out = _Hashing(fd)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for here, dirs, files, dfd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
            dirs.sort()
            rel = posixpath.normpath(here)
            for entry in sorted(dirs + files):
                arcname = entry if rel == "." else f"{rel}/{entry}"
                st = os.lstat(entry, dir_fd=dfd)
                info = _plain(tarfile.TarInfo(arcname), st)
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(entry, dir_fd=dfd)
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    ffd, fst = _store.open_regular_stat(entry, dir_fd=dfd)
                    with os.fdopen(ffd, "rb") as f:
                        info.size = fst.st_size
                        tar.addfile(_plain(info, fst), f)
                else:
                    raise _UnshareableError(f"{arcname} is {_store.kind(st.st_mode)}")
    return out.hasher.hexdigest(), out.size


def _share(bucket: Bucket, dest: str, rel: str, pfd: int, *, conditional: bool, heal: bool) -> None:
    """Write the entry ``dest`` (in its held directory ``pfd``) through: its archive, then its
    tree record, created only if absent where the bucket honours conditional writes, or
    replacing the one found unusable (``heal``)."""
    name = os.path.basename(dest)
    meta = _store.read_meta(name, dir_fd=pfd)
    if meta is None or not isinstance(meta.get("tree_sha256"), str):
        return
    carried = {k: v for k, v in meta.items() if k not in _LOCAL}
    # An unnamed file in the entry's own file system: nothing to clean up, nothing to find.
    try:
        fd = _store.open_unnamed(pfd)
    except OSError as exc:  # a file system without unnamed files (some network ones)
        say_once(f"{dest}: not shared: no scratch file beside it ({exc.strerror or exc})")
        return
    try:
        tfd = subdir(pfd, name)
        try:
            sha256, size = _pack(tfd, fd)
        except _UnshareableError as exc:
            say_once(f"{dest}: not shared: {exc}, which no host may unpack")
            return
        finally:
            os.close(tfd)
        record = {
            "version": _VERSION,
            "archive_sha256": sha256,
            "archive_size": size,
            "meta": carried,
        }
        body = json.dumps(record, sort_keys=True).encode()
        if len(body) > MAX_RECORD:
            say_once(f"{dest}: its record is over {MAX_RECORD} bytes: not shared")
            return
        os.lseek(fd, 0, os.SEEK_SET)
        put_blob(bucket.clients.data, fd, size, sha256, conditional=conditional)
    finally:
        os.close(fd)
    with contextlib.suppress(AlreadyExistsError, PreconditionError):  # another host's first
        obstore.put(
            bucket.clients.control,
            tree_name(rel),
            body,
            mode="create" if conditional and not heal else "overwrite",
        )


def fill_dir(
    dest: str,
    build: Callable[[], None],
    *,
    timeout: float | None = 1800.0,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Make the missing directory entry ``dest`` present from the bucket, or by ``build()``
    (under the entry's lease, then written through); :data:`SHARED` or :data:`LOCAL`. Called
    with this host's lock on ``dest`` held."""
    found = bucket_of(environ)
    rel = None if found is None else rel_of(dest, found[1])
    if found is None or rel is None:
        build()
        return LOCAL
    bucket = found[0]
    try:
        pfd = open_below(found[1], posixpath.dirname(rel))
    except OSError:
        build()  # its directory is not one this host reaches without following a link
        return LOCAL
    try:
        return _fill(bucket, dest, rel, pfd, build, timeout=timeout)
    finally:
        os.close(pfd)


def _fill(
    bucket: Bucket,
    dest: str,
    rel: str,
    pfd: int,
    build: Callable[[], None],
    *,
    timeout: float | None,
) -> str:
    def pulled() -> bool:
        record = _read(bucket, rel)
        return record is not None and _unpack(bucket.clients.data, record, dest, pfd)

    lease = None
    writes: str | None = None
    heal = False
    try:
        try:
            if pulled():
                return SHARED
            writes = bucket.writes()
            if writes == "conditional":
                from .lease import Lease  # noqa: PLC0415 - only a bucket tier loads it

                lease = Lease(bucket.clients.control, lease_name(f"{TREES}/{rel}"))
                outcome = lease.acquire(lambda: _read(bucket, rel) is not None, timeout)
                if outcome != "held":
                    lease = None
                if outcome != "timeout" and pulled():
                    return SHARED
        except _Unusable as why:
            say_once(
                f"shared tier (bucket) at {bucket.url}: the built tree {rel} {why}: not used; "
                "built here (and shared in its place where this host may write)"
            )
            heal = True
            writes = writes or _writes(bucket)
        except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the build
            bucket.failed(exc, "serve this built tree")
            writes = None
        build()
        if writes is not None and not bucket.down:
            try:
                _share(bucket, dest, rel, pfd, conditional=writes == "conditional", heal=heal)
            except Exception as exc:  # noqa: BLE001 - the tree is here; sharing it failed: said
                bucket.failed(exc, "take this built tree")
    finally:
        if lease is not None:
            lease.release()
    return LOCAL


def _writes(bucket: Bucket) -> str | None:
    try:
        return bucket.writes()
    except Exception as exc:  # noqa: BLE001 - said; the tree is built here, not shared
        bucket.failed(exc, "take this built tree")
        return None
