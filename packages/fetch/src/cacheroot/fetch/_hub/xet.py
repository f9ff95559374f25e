"""Keeping Xet clients on the hub cache: the Xet fields of the Hub's listings are removed.

huggingface_hub fetches a file from Xet's storage, around the cache, as soon as it knows the
file's Xet hash. It learns it from the ``X-Xet-*`` headers of the file's metadata (which
:mod:`.upstream` never keeps), and from the ``xetHash`` of the repository's listings: ``/tree``,
``/paths-info``, ``model_info`` with file metadata. Since 1.22 it also saves the listing next to
the snapshot (``trees/<commit>.json``) and, for a file with a Xet hash in it, skips the file's
metadata request altogether and asks for a Xet token instead. Its bytes then never reach the
store, and during an outage the token request fails with nothing to fall back on. So every
listing of a model, dataset or space is served with its Xet fields removed (any key that
starts with ``xet``, at any depth): the client downloads over plain HTTP, from the cache, and
the listing it saves has no hash to go back to.

Buckets (``/api/buckets/...``) are left as they are: their files live in Xet's storage only,
and huggingface_hub cannot read a bucket's listing without the hashes.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import Answer

__all__ = ["clean", "listing", "paths_info", "scrub_body"]

#: The Hub's API paths whose JSON answers carry the files of a repository (or a list of them).
_LISTING = re.compile(r"^/api/(?:models|datasets|spaces)(?:/|$)")
#: ``POST /api/{models,datasets,spaces}/REPO/paths-info/REV``: a listing that is passed through
#: unstored (its answer depends on the request's body).
_PATHS_INFO = re.compile(r"^/api/(?:models|datasets|spaces)/.+/paths-info/[^/]+$")
#: A JSON key that may be a Xet field; a body without one is served untouched, unparsed.
_KEY = re.compile(rb'"xet', re.IGNORECASE)


def listing(path: str) -> bool:
    """Whether answers to ``path`` (quoted, no query) are listings to clean."""
    return _LISTING.match(path) is not None


def paths_info(method: str, path: str) -> bool:
    """Whether ``method path`` asks for ``/paths-info`` (passed through, cleaned on its way)."""
    return method == "POST" and _PATHS_INFO.match(path) is not None


def _is_xet(key: object) -> bool:
    return isinstance(key, str) and key.lower().startswith("xet")


def _strip(value: Any) -> tuple[Any, bool]:
    """``value`` without the Xet keys of its objects, and whether there were any."""
    if isinstance(value, dict):
        changed = False
        kept = {}
        for key, item in value.items():
            if _is_xet(key):
                changed = True
                continue
            kept[key], inner = _strip(item)
            changed = changed or inner
        return (kept, True) if changed else (value, False)
    if isinstance(value, list):
        items = [_strip(item) for item in value]
        if any(inner for _item, inner in items):
            return [item for item, _inner in items], True
        return value, False
    return value, False


def scrub_body(body: bytes) -> bytes:
    """A JSON body without its Xet fields; any other body as it is."""
    if _KEY.search(body) is None:
        return body
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    stripped, changed = _strip(parsed)
    if not changed:
        return body
    return json.dumps(stripped, ensure_ascii=False, separators=(",", ":")).encode()


def _xet_header(name: str, value: str) -> bool:
    lower = name.lower()
    return lower.startswith("x-xet-") or (lower == "link" and "xet-auth" in value)


def clean(path: str, answer: Answer) -> Answer:
    """``answer`` to a request for ``path`` as the hub serves it: no Xet header, and for a
    listing (:func:`listing`) no Xet field.

    The headers are dropped when the upstream answers (:mod:`.upstream`); an answer kept by an
    older hub, or planted, is cleaned here all the same.
    """
    headers = tuple((k, v) for k, v in answer.headers if not _xet_header(k, v))
    body = scrub_body(answer.body) if listing(path) else answer.body
    if body is answer.body and len(headers) == len(answer.headers):
        return answer
    if body is not answer.body:
        headers = tuple((k, v) for k, v in headers if k.lower() != "content-length")
    return replace(answer, headers=headers, body=body)
