"""An entry's record in the bucket: the small JSON object that makes its blob usable.

It is written *last*, created only if absent (``If-None-Match: *``), after the blob it names
is complete: a reader that finds a record finds a whole blob, and one that finds none takes
nothing. What it holds is what a reader needs to trust the blob and what ``cacheroot tier``
needs to place it: the URL's key (as the host's own record names it, with neither user
information nor query string: a signed URL's signature is a credential), the sha256 of that key
(what a reader compares), the digest, the size, the origin's ETag and the entry's path below
the cache root. Nothing else of the host's record is carried: a record is read by every job
that can read the bucket.

A record is read bounded (:data:`MAX_RECORD` bytes) and checked field by field: a record another
job planted can make a reader fetch from the origin, never take other bytes or write outside its
entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_RECORD", "Record", "key_hash", "parse", "shown_key"]

#: The largest record read (records are a few hundred bytes).
MAX_RECORD = 64 << 10
_HEX = re.compile(r"[0-9a-f]{64}")
_VERSION = 1


def shown_key(key: str) -> str:
    """``key`` (a URL) as a record may show it: no user information, no query, no fragment."""
    head, sep, rest = key.partition("://")
    if not sep:
        return key.split("?", 1)[0].split("#", 1)[0]
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    host, slash, path = rest.partition("/")
    return f"{head}://{host.rpartition('@')[2]}{slash}{path}"


def key_hash(key: str) -> str:
    """What a record stores to name ``key`` exactly without showing it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Record:
    """What the bucket says of one entry (see the module docstring)."""

    key_sha256: str
    url: str
    sha256: str
    size: int
    path: str
    etag: str | None = None

    def matches(self, key: str, digest: str | None) -> bool:
        """Whether this record is ``key``'s (with ``digest`` when the caller pins one)."""
        return self.key_sha256 == key_hash(key) and (digest is None or digest == self.sha256)

    def to_json(self) -> bytes:
        """The object's bytes."""
        doc: dict[str, Any] = {
            "version": _VERSION,
            "key_sha256": self.key_sha256,
            "url": self.url,
            "sha256": self.sha256,
            "size": self.size,
            "path": self.path,
        }
        if self.etag is not None:
            doc["etag"] = self.etag
        return json.dumps(doc, sort_keys=True).encode("utf-8")

    @classmethod
    def of(cls, key: str, rel: str, meta: dict[str, Any]) -> Record | None:
        """The record of the host's entry ``rel`` for ``key`` from its own record ``meta``;
        ``None`` when ``meta`` vouches for no digest and size."""
        digest, size = meta.get("sha256"), meta.get("size")
        if not isinstance(digest, str) or not _HEX.fullmatch(digest):
            return None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return None
        etag = meta.get("etag")
        return cls(
            key_hash(key),
            shown_key(key),
            digest,
            size,
            rel,
            etag if isinstance(etag, str) and len(etag) <= 256 else None,
        )


def _safe_rel(path: object) -> str | None:
    """``path`` if it is a relative path that stays below the cache root, else ``None``."""
    if not isinstance(path, str) or not path or len(path) > 4096:
        return None
    if path.startswith("/") or "\x00" in path or "\\" in path:
        return None
    parts = path.split("/")
    # No hidden component either: cacheroot's own files next to an entry (records, locks,
    # partials) all start with a dot, and no record may name one of them.
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    return os.path.join(*parts)


def parse(data: bytes) -> Record | None:
    """The record in ``data``, or ``None`` if it is not one this version can trust."""
    if len(data) > MAX_RECORD:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    key_sha, digest, size = doc.get("key_sha256"), doc.get("sha256"), doc.get("size")
    url, etag = doc.get("url"), doc.get("etag")
    rel = _safe_rel(doc.get("path"))
    ok = (
        isinstance(key_sha, str)
        and _HEX.fullmatch(key_sha) is not None
        and isinstance(digest, str)
        and _HEX.fullmatch(digest) is not None
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
        and isinstance(url, str)
        and rel is not None
        and (etag is None or isinstance(etag, str))
    )
    if not ok:
        return None
    return Record(key_sha, url, digest, size, rel, etag)  # type: ignore[arg-type]
