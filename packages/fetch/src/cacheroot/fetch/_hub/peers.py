"""A fill another hub process of the store is running, followed from its partial file.

Hub processes on one store (replicas of a Deployment on a shared volume, or several on a
node) take the store's lock of a file before they download it, so the upstream is asked once.
A second process asked for that file meanwhile used to wait for the lock, that is for the
whole download, and after ``--deadline`` seconds download it a second time. Now it finds the
first one's partial file (:meth:`.store.Store.peer_partial`) and serves its clients from it as
it grows (:func:`follow`), the way the first process serves its own (:mod:`.fills`).

It trusts the other process for nothing: it reads the bytes back and hashes them itself, its
readers get only bytes it has hashed, and the last byte only once all of them match the digest
(:class:`.fills.BadBytesError` otherwise). A partial whose last link is gone (its writer failed
and removed it) or that stops growing for :data:`STALL` seconds ends the follow; if nothing was
read by then, the caller takes the lock and downloads the file itself.

What a writer of the store can do here: change bytes of the partial after they were hashed and
before they are sent (readers are sent from the file, by ``sendfile``). A writer of the store
can plant a partial as well as a file; a stored file is checked again on its first serve
(:mod:`.verified`).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from .fills import BadBytesError, new_hasher

if TYPE_CHECKING:
    from .fills import Fill

__all__ = ["POLL", "STALL", "follow"]

#: Seconds between two looks at a partial that has not grown.
POLL = 0.02
#: Seconds a partial may not grow before its writer counts as stalled.
STALL = 60.0
#: Bytes read back and hashed in one go.
STEP = 4 << 20


def _hash_range(fd: int, hasher: Any, start: int, stop: int) -> int:
    """Hash ``fd``'s bytes ``start`` to ``stop`` into ``hasher``; how many were there."""
    offset = start
    while offset < stop:
        data = os.pread(fd, min(STEP, stop - offset), offset)
        if not data:
            break
        hasher.update(data)
        offset += len(data)
    return offset - start


async def follow(fill: Fill, fd: int, etag: str) -> bool:
    """Serve ``fill``'s readers from the peer's partial open at ``fd``, hashing it as it grows.

    ``True`` once all of the declared size was read and matches ``etag`` (the readers may have
    every byte: :meth:`.fills.Fill.check`); ``False`` when the peer stopped first (its partial
    removed, or no growth for :data:`STALL` seconds). Raises :class:`.fills.BadBytesError` for
    bytes that do not match. ``fd`` becomes ``fill``'s: it closes it.
    """
    size = fill.size
    hasher = new_hasher(etag, size)
    if size is None or hasher is None:
        os.close(fd)
        return False
    fill.write_to(None, fd)
    done = 0
    grew = time.monotonic()
    while done < size:
        st = os.fstat(fd)
        if st.st_size > done:
            done += await fill.run(_hash_range, fd, hasher, done, min(st.st_size, size))
            fill.written = done
            fill.changed()
            grew = time.monotonic()
            continue
        if st.st_nlink == 0 or time.monotonic() - grew > STALL:
            return False
        await asyncio.sleep(POLL)
    found = hasher.hexdigest()
    if found != etag:
        raise BadBytesError(
            "the bytes another hub process of the store downloaded do not match the file's "
            f"digest: {etag} was expected, the bytes have {found}",
            "digest_mismatch",
        )
    fill.check()
    return True
