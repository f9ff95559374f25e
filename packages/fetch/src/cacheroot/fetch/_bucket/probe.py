"""What this process may do with the bucket, asked once before its first write.

Creating an object only if absent (``If-None-Match: *``) is what makes leases exclusive and
records first-writer-wins. Some S3-compatible servers accept the header and ignore it; on those
two hosts both "create" the same lease. So the first write of a process is a probe: create a
private probe object, then create it again, which must be refused. A server that accepts both
is used without leases, said once: hosts may then download an entry twice, and what they
publish is still whole and verified (blobs are named by their content, records written after
them).

A first create that is denied (a bucket policy or credentials without ``PutObject``) makes the
tier read-only for this process, said once: it reads through and never writes.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError

from .failures import denied
from .lease import owner_name
from .names import probe_name

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["CONDITIONAL", "DENIED", "UNCONDITIONAL", "probe"]

#: What :func:`probe` finds: conditional writes honoured, ignored, or writes denied.
CONDITIONAL, UNCONDITIONAL, DENIED = "conditional", "unconditional", "denied"


def probe(store: ObjectStore) -> str:
    """:data:`CONDITIONAL`, :data:`UNCONDITIONAL` or :data:`DENIED` (see the module
    docstring); other errors of the bucket are raised. The probe object is removed."""
    name = probe_name(owner_name())
    try:
        obstore.put(store, name, b"cacheroot probe\n", mode="create")
    except Exception as exc:
        if denied(exc):
            return DENIED
        raise
    try:
        try:
            obstore.put(store, name, b"cacheroot probe again\n", mode="create")
        except (AlreadyExistsError, PreconditionError):
            return CONDITIONAL
        return UNCONDITIONAL
    finally:
        with contextlib.suppress(Exception):
            obstore.delete(store, name)
