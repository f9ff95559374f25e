"""The hub cache's files on a fleet's shared tier (``CACHEROOT_SHARED``).

A hub cache per node (a CI sidecar) keeps its store under the node's root; with a shared tier,
a file another node's hub already fetched is copied from the shared tier instead of asked of
the Hub, and a file this node fetched is written through for the others. Files named by their
sha256 (the Hub's LFS files, ModelScope's files: the large ones) are verified while copied in
both directions; the Hub's small files, named by their git blob sha1, are checked by the hub
that serves them first (:mod:`.verified`), like any file it did not check itself. Answers
travel too when they are signed (the store's ``answer_key``, :meth:`.store.Store.load`).

As everything on the shared tier, the copies are reached without following a link and never
replace what another node published; a job whose trust tier is ``ro`` reads but never writes.

A blob is copied only at the size the Hub announced for it (``size``, when the caller knows
it): a file of another size under a blob's name (a sparse giant, which costs its planter no
disk) is refused before a byte is copied, instead of filling the disk it is copied to before
its hash fails.

With a bucket for the shared tier (``CACHEROOT_SHARED=s3://BUCKET/PREFIX``) the files travel
through it instead (:mod:`.._bucket.hub`, imported only then: a hub without a bucket never loads
its client): a file named by its sha256 is the very object a fetch entry with the same bytes
has; either name is checked both ways (a git blob sha1 by git's own hash), and an object found
wrong is replaced by this node's verified copy in ``rw``; a file that came with a credential
stays on the node. Signed answers travel as objects too. This node's store is still reached
through held descriptors.
"""

from __future__ import annotations

import contextlib
import logging
import os

from cacheroot.envs._shared_tier import shared_url

from .. import _held, _shared

__all__ = ["pull_blob", "push_blob"]

log = logging.getLogger("cacheroot.fetch")
_HEX = frozenset("0123456789abcdef")


def _digest_name(path: str) -> tuple[str, str | None] | None:
    """``(name, sha256 to check while copying)`` of a blob named by its digest; ``None`` for
    any other name. A git blob sha1 (the Hub's small files) is not checked while copied: the
    hub checks a file it did not check itself on its first serve (:mod:`.verified`)."""
    name = os.path.basename(path)
    if set(name) <= _HEX and len(name) in (40, 64):
        return name, name if len(name) == 64 else None
    return None


def pull_blob(path: str, *, size: int | None = None) -> bool:
    """Copy the blob ``path`` (in this node's store) from the shared tier, verified against its
    name; whether it is now here. ``size``: the bytes the Hub announced for it (a shared file
    of another size is not copied). Blocking: run it off the event loop."""
    named = _digest_name(path)
    if named is not None and shared_url(os.environ) is not None:
        return _through_bucket(path, size=size, pull=True)
    l2 = _shared.counterpart(path) if named else None
    if l2 is None or named is None:
        return False
    digest, sha256 = named
    top, rel = _shared.top_of(l2)
    try:
        src_dir = _shared.open_below(top, rel)
    except OSError:
        return False
    try:
        blobs = os.path.dirname(path)
        dst_dir = _held.tree(os.path.dirname(blobs), os.path.basename(blobs), create=True)
        try:
            published = _shared.copy_new(
                os.path.basename(l2),
                os.path.basename(path),
                sha256=sha256,
                size=size,
                src_dir_fd=src_dir,
                dst_dir_fd=dst_dir,
            )
        finally:
            os.close(dst_dir)
    except OSError as exc:
        log.info("hub blob %s not copied from the shared tier: %s", digest, exc)
        return False
    finally:
        os.close(src_dir)
    return published is not None and os.path.isfile(path)


def push_blob(path: str, *, size: int | None = None) -> bool:
    """Write the blob ``path`` through to the shared tier (never replacing one there);
    whether this copy was published. ``size``: the bytes the Hub announced for it (a local file
    of another size is not copied). Blocking: run it off the event loop."""
    named = _digest_name(path)
    if named is not None and shared_url(os.environ) is not None:
        return _through_bucket(path, size=size, pull=False)
    l2 = _shared.counterpart(path) if named else None
    if l2 is None or named is None or not _shared.may_write():
        return False
    top, rel = _shared.top_of(l2)
    with contextlib.suppress(OSError):
        dst_dir = _shared.open_below(top, rel, create=True)
        try:
            return bool(
                _shared.copy_new(
                    path, os.path.basename(l2), sha256=named[1], size=size, dst_dir_fd=dst_dir
                )
            )
        finally:
            os.close(dst_dir)
    return False


def _through_bucket(path: str, *, size: int | None, pull: bool) -> bool:
    """:func:`pull_blob` (``pull``) or :func:`push_blob` with a bucket for the shared tier, in
    the store's blobs directory held open (made if missing, for a pull)."""
    from .._bucket import hub  # noqa: PLC0415 - only a bucket tier loads its client

    blobs = os.path.dirname(path)
    try:
        dir_fd = _held.tree(os.path.dirname(blobs), os.path.basename(blobs), create=pull)
    except OSError as exc:
        log.info("hub blob %s not shared: %s", os.path.basename(path), exc)
        return False
    try:
        if pull:
            return hub.pull(path, dir_fd=dir_fd, size=size) and os.path.isfile(path)
        return hub.push(path, dir_fd=dir_fd, size=size)
    finally:
        os.close(dir_fd)
