"""The hub cache's files and answers in the bucket tier: what :mod:`.._hub.fleet` and
:mod:`.._hub.store` do with a bucket.

A hub cache per node keeps the files it fetched under its store's ``blobs/<digest>``; with
``CACHEROOT_SHARED=s3://BUCKET/PREFIX`` a file another node's hub fetched is copied from the
bucket instead of asked of the upstream, and a file this node fetched is written through:

- a file named by its sha256 (the Hub's LFS files, ModelScope's files) is the object
  ``blobs/sha256/<hex>`` (:func:`.names.blob_name`), the one a fetch entry with the same bytes
  has: both share it;
- a small file named by its git blob sha1 is the object ``blobs/git-sha1/<hex>``
  (:func:`.names.git_blob_name`).

Either is hashed while copied, in both directions: a pull is published in the hub's store only
once its bytes hash to the name (the hub still checks a file it did not check itself on its
first serve, as it does for the file tier), an upload is completed only once the file did.

A pull never takes more bytes than the upstream announced (``size``): an object of another
size is refused before a byte is copied. An upload happens in trust tier ``rw`` only (the write
probe of :meth:`.tier.Bucket.writes` decides, as for fetch entries) and never replaces an
object of the right size: a small file is created only if absent, a large one (more than a
part) is sent as a multipart upload, read from the file as it goes, when a look found no object
(a multipart upload cannot be conditional; a name is its bytes, so a race writes the same
ones). An object this process found wrong (of another size, or not the bytes it is named by)
is replaced by its verified copy once the hub fetched that from the upstream. A file the hub
keeps from other users (it came with a credential: a gated repository's) is never sent, as
answers that came with one are not: every reader of the bucket could read it.

The hub's signed answers to API requests travel too (:func:`load_answer`, :func:`save_answer`):
an answer kept at ``meta/ab/<key>`` in the hub's store is the object ``answers/<h>``
(:func:`.names.answer_name`, ``<h>`` naming its path relative to the cache root, as the file
tier names its copy), so that a fleet of hubs asks the upstream once per request and TTL. The
store sends only answers it signed (its ``answer_key``) and none that came with a credential,
and checks the signature of one it reads, which binds it to its request: an object planted
without the key is no answer. A read takes at most the store's limit, judged by the object's
size before a byte of it is read; a write, in ``rw`` only, replaces the object (a fresh answer
replaces a stale one).

Nothing here raises: a bucket that fails costs one note per cause (:meth:`.tier.Bucket.failed`,
its rest period and its drop for the process included) and ``False`` (or ``None``), and the hub
asks the upstream. Every function blocks; the hub calls them off its event loop. The client
(obstore) is loaded only once the bucket opened: without it, the hub says so once and asks the
upstream.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from typing import TYPE_CHECKING

from .. import _store
from .names import answer_name, blob_name, git_blob_name
from .tier import bucket_of, rel_of, say_once

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["load_answer", "pull", "push", "save_answer"]

log = logging.getLogger("cacheroot.fetch")


def _object_name(digest: str) -> str:
    """The object of the hub file named ``digest`` (:class:`ValueError` for another name)."""
    return blob_name(digest) if len(digest) == 64 else git_blob_name(digest)


def _hasher(digest: str, size: int) -> hashlib._Hash:
    """What hashes a file of ``size`` bytes into the form of its name ``digest``."""
    if len(digest) == 64:
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)


def pull(path: str, *, dir_fd: int, size: int | None = None) -> bool:
    """Copy the hub file ``path`` (named by its digest, in the held directory ``dir_fd``) from
    the bucket; whether it is now published there. ``size``: the bytes the upstream announced
    (an object of another size is not copied). Never raises."""
    digest = os.path.basename(path)
    try:
        name = _object_name(digest)
    except ValueError:
        return False
    found = bucket_of(None)  # None without the client too (said there)
    if found is None:
        return False
    from .transfer import BadBlobError  # noqa: PLC0415 - the client is there: the bucket opened

    bucket = found[0]
    try:
        return _pull(bucket.clients.data, name, path, dir_fd, size)
    except BadBlobError as exc:
        say_once(
            f"shared tier (bucket) at {bucket.url}: {exc}: not used; the hub cache asks the "
            "upstream (a hub that may write the bucket replaces it with its verified copy)"
        )
    except OSError as exc:  # this node's store (the bucket's errors are not OSErrors)
        log.info("hub file %s not copied from the bucket: %s", digest, exc)
    except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the file
        bucket.failed(exc, "serve this hub file")
    return False


def _pull(store: ObjectStore, name: str, path: str, dir_fd: int, size: int | None) -> bool:
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import NotFoundError  # noqa: PLC0415

    from .transfer import BAD, BadBlobError, publish_checked  # noqa: PLC0415

    if name in BAD:
        return False
    try:
        got = obstore.get(store, name)
    except (FileNotFoundError, NotFoundError):
        return False  # not shared yet: a miss, not a failure
    held = int(got.meta["size"])
    if size is not None and held != size:
        BAD.add(name)
        raise BadBlobError(f"object {name} holds {held} bytes, the upstream announced {size}")
    digest = os.path.basename(path)
    # A git blob sha1 is hashed here as it arrives (the partial hashes sha256 only).
    sha1 = None if len(digest) == 64 else _hasher(digest, held)
    part = _store.Partial(path, dir_fd=dir_fd)

    def judge() -> str:
        found = part.sha256 if sha1 is None else sha1.hexdigest()
        kind = "sha256" if sha1 is None else "git blob sha1"
        return "" if found == digest else f"does not hold the bytes it is named by ({kind} {found})"

    # The hub's store keeps only the file, named by its digest.
    why = publish_checked(got, part, held, judge, lambda: part.commit(sidecar=False), also=sha1)
    if why:
        BAD.add(name)
        raise BadBlobError(f"object {name} {why}")
    return True


def push(path: str, *, dir_fd: int, size: int | None = None) -> bool:
    """Write the hub file ``path`` (in the held directory ``dir_fd``) through to the bucket,
    created only if absent, after hashing it to its name; whether this copy was published
    (``False`` too when the bucket holds it already). ``size``: the bytes the upstream announced
    (a file of another size is not sent). Never raises."""
    digest = os.path.basename(path)
    try:
        name = _object_name(digest)
    except ValueError:
        return False
    found = bucket_of(None)
    # None: no usable bucket, ro, writes denied, or the bucket failed (said there).
    writes = None if found is None else found[0].writes()
    if found is None or writes is None:
        return False
    bucket = found[0]
    try:
        fd, st = _store.open_regular_stat(digest, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        # A file the hub keeps from others (it came with a credential: a gated repository's)
        # stays on the node: every reader of the bucket could read it there.
        if (size is not None and st.st_size != size) or not st.st_mode & stat.S_IROTH:
            return False
        return _push(bucket.clients.data, name, fd, st.st_size, conditional=writes == "conditional")
    except OSError as exc:  # this node's store, or the file changed while sent (ChangedError)
        log.info("hub file %s not written to the bucket: %s", digest, exc)
    except Exception as exc:  # noqa: BLE001 - the file is here; sharing it failed: said
        bucket.failed(exc, "take this hub file")
    finally:
        os.close(fd)
    return False


def _push(store: ObjectStore, name: str, fd: int, size: int, *, conditional: bool) -> bool:
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import (  # noqa: PLC0415
        AlreadyExistsError,
        NotFoundError,
        PreconditionError,
    )

    from .transfer import BAD, CONCURRENCY, PART, withheld_parts  # noqa: PLC0415

    try:  # there already, and not found bad by this process: nothing to send
        if int(obstore.head(store, name)["size"]) == size and name not in BAD:
            return False
    except (FileNotFoundError, NotFoundError):
        pass
    digest = name.rsplit("/", 1)[1]
    parts = withheld_parts(fd, size, _hasher(digest, size), digest)
    if size <= PART and name not in BAD:
        body = b"".join(parts)  # one part at most: one request, created only if absent
        try:
            obstore.put(store, name, body, mode="create" if conditional else "overwrite")
        except (AlreadyExistsError, PreconditionError):
            return False  # another hub wrote these very bytes first
    else:  # named by its content, hashed before its last part: what it replaces is the same
        obstore.put(
            store, name, parts, use_multipart=True, chunk_size=PART, max_concurrency=CONCURRENCY
        )
    BAD.discard(name)
    return True


# -- answers ----------------------------------------------------------------------------------
def load_answer(path: str, *, limit: int) -> bytes | None:
    """The bytes another node's hub wrote through for the answer the hub store keeps at
    ``path`` (:func:`.names.answer_name` of its path relative to the cache root), at most
    ``limit`` of them; ``None``: no bucket, none there, a larger object (never read), ``path``
    outside the cache root, or a bucket that failed (said). Its signature is the caller's to
    check. Never raises."""
    found = bucket_of(None)
    rel = None if found is None else rel_of(path, found[1])
    if found is None or rel is None:
        return None
    bucket = found[0]
    try:
        return _load(bucket.clients.data, answer_name(rel), limit)
    except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the answer
        bucket.failed(exc, "serve this answer")
    return None


def _load(store: ObjectStore, name: str, limit: int) -> bytes | None:
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import NotFoundError  # noqa: PLC0415

    from .transfer import CHUNK  # noqa: PLC0415

    try:
        got = obstore.get(store, name)
    except (FileNotFoundError, NotFoundError):
        return None  # not shared yet: a miss, not a failure
    size = int(got.meta["size"])
    if size > limit:
        return None  # planted, or another version's: not a byte of it is read
    chunks: list[bytes] = []
    held = 0
    for chunk in got.stream(min_chunk_size=CHUNK):
        held += len(chunk)
        if held > size:
            return None  # more than the server announced: abandoned at once
        chunks.append(bytes(chunk))
    return b"".join(chunks) if held == size else None


def save_answer(path: str, data: bytes) -> bool:
    """Write ``data``, the signed answer the hub store keeps at ``path``, through to the bucket
    (replacing the one there: a fresh answer replaces a stale one), in trust tier ``rw`` only;
    whether it was written. The caller sends only answers it signed and none that came with
    a credential. Never raises."""
    found = bucket_of(None)
    rel = None if found is None else rel_of(path, found[1])
    # None: no usable bucket, ro, writes denied, or the bucket failed (said there).
    writes = None if found is None or rel is None else found[0].writes()
    if found is None or rel is None or writes is None:
        return False
    bucket = found[0]
    try:
        import obstore  # noqa: PLC0415 - the client is there: the bucket opened

        obstore.put(bucket.clients.data, answer_name(rel), data, mode="overwrite")
    except Exception as exc:  # noqa: BLE001 - the answer is here; sharing it failed: said
        bucket.failed(exc, "take this answer")
        return False
    return True
