"""Streamed copies between this host's cache (L1) and the bucket, bounded whatever the size.

Down (:func:`pull`): the blob is read as a stream into an L1 partial (:class:`.._store.Partial`),
hashed on the way; a blob that holds more bytes than its record says is abandoned at the first
byte past them, and the partial is published only when size and sha256 match the record. Up
(:func:`push`): a small entry is sent in one request that creates the blob only if absent; a
large one as a multipart upload of :data:`PART` bytes, at most :data:`CONCURRENCY` parts in
flight, read from the L1 file as it goes and hashed on the way. The last part is handed over
only once the whole file hashed to the recorded digest: a file that changed under the upload
aborts it, and an aborted multipart upload publishes nothing. Either way the memory used is a
few parts, never the object.

A blob is named by its content, so a multipart upload that replaces one another host finished
meanwhile writes the same bytes; its record is created only if absent, after the blob.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError

from .. import _store
from .names import blob_name, git_blob_name, record_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from obstore import GetResult
    from obstore.store import ObjectStore

    from .records import Record

__all__ = [
    "CONCURRENCY",
    "PART",
    "BadBlobError",
    "hasher_for",
    "object_name",
    "publish_checked",
    "pull",
    "push",
    "put_blob",
]

#: Bytes per part of a multipart upload (S3's smallest part but the last) and per read.
PART = 5 << 20
#: Parts in flight at once during an upload.
CONCURRENCY = 2
#: The smallest chunk a download is handed in (the last may be smaller).
CHUNK = 1 << 20
#: Blobs found not to hold what their record says, by name: never pulled again by this
#: process, and replaced by this host's verified copy when it writes the entry through.
BAD: set[str] = set()


class BadBlobError(Exception):
    """A blob whose bytes are not the ones its record names (said once; not used)."""


class ChangedError(OSError):
    """The L1 file changed while it was uploaded: the upload is aborted."""


def pull(store: ObjectStore, record: Record, dest: str, key: str, *, dir_fd: int) -> bool:
    """Copy the blob of ``record`` into this host's entry ``dest`` (in the held directory
    ``dir_fd``), verified; whether it was published. :class:`BadBlobError` for a blob that does
    not match ``record``; errors of the bucket and of L1 are raised."""
    name = blob_name(record.sha256)
    if name in BAD:
        return False
    got = obstore.get(store, name)
    if got.meta["size"] != record.size:
        BAD.add(name)
        raise BadBlobError(
            f"blob {name} holds {got.meta['size']} bytes, its record says {record.size}"
        )
    meta: dict[str, object] = {"url": key}
    if record.etag is not None:
        meta["etag"] = record.etag
    part = _store.Partial(dest, dir_fd=dir_fd)
    why = publish_checked(
        got,
        part,
        record.size,
        lambda: (
            ""
            if part.sha256 == record.sha256
            else f"does not match its record (sha256 {part.sha256}; recorded {record.sha256})"
        ),
        lambda: part.commit(meta),
    )
    if why:
        BAD.add(name)
        raise BadBlobError(f"blob {name} {why}")
    return True


def publish_checked(
    got: GetResult,
    part: _store.Partial,
    size: int,
    judge: Callable[[], str],
    publish: Callable[[], object],
    *,
    also: hashlib._Hash | None = None,
) -> str:
    """Stream the object ``got`` into ``part`` (never more than ``size`` bytes; ``also`` hashes
    every chunk too, for a digest the partial does not compute), then ``publish()`` it if
    ``judge()`` finds nothing wrong; else discard it. Why it was not published (``""``: it
    was). The partial is discarded on any error, which is raised."""
    chunks: Iterable[bytes] = got.stream(min_chunk_size=CHUNK)
    if also is not None:
        chunks = _fed(chunks, also)
    try:
        why = stream_into(chunks, part, size) or judge()
        if not why:
            publish()
    except BaseException:
        part.discard()
        raise
    if why:
        part.discard()
    return why


def _fed(chunks: Iterable[bytes], hasher: hashlib._Hash) -> Iterator[bytes]:
    """``chunks``, each fed to ``hasher`` as it passes."""
    for chunk in chunks:
        hasher.update(chunk)
        yield chunk


def stream_into(chunks: Iterable[bytes], part: _store.Partial, size: int) -> str:
    """Write ``chunks`` into ``part``, never more than ``size`` bytes (the rest is never
    written); why they are not ``size`` bytes (``""``: they are). The caller judges the digest
    (``part`` hashed every byte)."""
    for chunk in chunks:
        if part.size + len(chunk) > size:
            return f"holds more than the {size} bytes expected"
        part.write(chunk)
    if part.size != size:
        return f"ended after {part.size} of the {size} bytes expected"
    return ""


def withheld_parts(fd: int, size: int, hasher: hashlib._Hash, digest: str) -> Iterator[bytes]:
    """The ``size`` bytes of the file open at ``fd`` in parts of :data:`PART`, the last one held
    back until all of them hashed (``hasher``, fresh) to ``digest``: :class:`ChangedError`
    otherwise, which aborts the upload, so that nothing is published."""
    done = 0
    pending: bytes | None = None
    while chunk := os.read(fd, min(PART, size + 1 - done)):
        done += len(chunk)
        if done > size:
            raise ChangedError(f"the file grew past its {size} bytes while uploaded")
        hasher.update(chunk)
        if pending is not None:
            yield pending
        pending = chunk
    if done != size or hasher.hexdigest() != digest:
        raise ChangedError("the file is not the bytes it is published as: not published")
    if pending is not None:
        yield pending


def _blob_present(store: ObjectStore, name: str, size: int) -> bool:
    try:
        return obstore.head(store, name)["size"] == size and name not in BAD
    except FileNotFoundError:
        return False


def push(
    control: ObjectStore,
    data: ObjectStore,
    record: Record,
    dest: str,
    *,
    dir_fd: int,
    conditional: bool,
) -> bool:
    """Write this host's verified entry ``dest`` through: its blob (unless there), then its
    record, created only if absent when the server honours ``conditional`` writes. Returns
    whether this host's record is now the bucket's (``False``: another host's was first)."""
    src = _store.open_regular(os.path.basename(dest), dir_fd=dir_fd)
    try:
        if os.fstat(src).st_size != record.size:
            raise ChangedError(f"{dest} no longer holds the {record.size} bytes recorded")
        put_blob(data, src, record.size, record.sha256, conditional=conditional)
    finally:
        os.close(src)
    try:
        obstore.put(
            control,
            record_name(record.path),
            record.to_json(),
            mode="create" if conditional else "overwrite",
        )
    except (AlreadyExistsError, PreconditionError):
        return False
    return True


def object_name(digest: str) -> str:
    """The object of the bytes named ``digest``: their sha256 (64 hex digits) or their git blob
    sha1 (40); :class:`ValueError` for anything else."""
    return blob_name(digest) if len(digest) == 64 else git_blob_name(digest)


def hasher_for(digest: str, size: int) -> hashlib._Hash:
    """What hashes ``size`` bytes into the form of their name ``digest`` (sha256, or git's blob
    sha1, whose header names the size)."""
    if len(digest) == 64:
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)


def put_blob(data: ObjectStore, fd: int, size: int, digest: str, *, conditional: bool) -> None:
    """Upload the ``size`` bytes of the file open at ``fd`` (from its current offset) as the
    object of ``digest`` (:func:`object_name`), unless the bucket has it: in one request created
    only if absent when small, else as a multipart upload whose last part waits for the bytes to
    hash to ``digest`` (:func:`withheld_parts`); :class:`ChangedError` when they do not."""
    name = object_name(digest)
    if _blob_present(data, name, size):
        return
    parts = withheld_parts(fd, size, hasher_for(digest, size), digest)
    if size <= PART and name not in BAD:
        body = b"".join(parts)  # one part at most: one request, created only if absent
        with contextlib.suppress(AlreadyExistsError, PreconditionError):
            # Refused: another host wrote these very bytes first.
            obstore.put(data, name, body, mode="create" if conditional else "overwrite")
    else:  # named by its content, hashed before its last part: what it replaces is the same
        obstore.put(
            data, name, parts, use_multipart=True, chunk_size=PART, max_concurrency=CONCURRENCY
        )
    BAD.discard(name)
