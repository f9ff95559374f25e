"""What a request's file is: the digest, size, headers and commit it is stored and served by.

Both come from metadata the :class:`~.metacache.MetaCache` keeps, so a file is known while the
upstream is down as long as its metadata was kept: a Hub file from its ``HEAD`` (``X-Linked-Etag``:
sha256, else ``ETag``: git blob sha1), a ModelScope file from its repository's listing (its file
answers carry no digest). When there is none, the answer to send instead (a 404, an outage).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import quote

from . import routes
from .responses import ERROR
from .store import Answer

if TYPE_CHECKING:
    from aiohttp import web

    from .metacache import MetaCache
    from .responses import Responder

__all__ = ["Found", "lookup", "normalize_etag"]

#: A file's digest, size (``None``: not said), the headers to send it with, and its commit.
Found: TypeAlias = tuple[str, int | None, dict[str, str], str]


def normalize_etag(value: str | None) -> str:
    """An ETag without its weak marker and quotes (as huggingface_hub reads it)."""
    if not value:
        return ""
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _ms_files(body: bytes) -> list[dict[str, Any]]:
    """The file entries of a ModelScope listing (``Data.Files``); ``[]`` when it is not one."""
    try:
        files = json.loads(body)["Data"]["Files"]
    except (ValueError, KeyError, TypeError):
        return []
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []


async def lookup(
    metacache: MetaCache,
    responder: Responder,
    request: web.Request,
    target: str,
    route: routes.Route,
) -> Found | web.StreamResponse:
    """The file ``route`` names, or the answer to send when its metadata says none."""
    if route.hub == "ms":
        return await _ms_file(metacache, responder, request, route)
    return await _hf_file(metacache, responder, request, target, route)


async def _hf_file(
    metacache: MetaCache,
    responder: Responder,
    request: web.Request,
    target: str,
    route: routes.Route,
) -> Found | web.StreamResponse:
    """A Hub file's digest, size, headers and commit, from its ``HEAD`` (kept like any
    metadata); or the answer to send when there is none."""
    head, state = await metacache.meta("HEAD", target, route, request.headers)
    if head.status != 200:
        return responder.respond(request, head, state)
    etag = normalize_etag(head.header("X-Linked-Etag") or head.header("ETag"))
    size_text = head.header("X-Linked-Size") or head.header("Content-Length") or ""
    headers = {
        name: value
        for name, value in head.headers
        if name.lower() not in ("content-length", "content-type", "accept-ranges")
    }
    size = int(size_text) if size_text.isdigit() else None
    return etag, size, headers, head.header("X-Repo-Commit") or ""


async def _ms_file(
    metacache: MetaCache, responder: Responder, request: web.Request, route: routes.Route
) -> Found | web.StreamResponse:
    """A ModelScope file's sha256, size and revision, from the repository's listing (its
    file answers carry no digest; the listing, kept like any metadata, does)."""
    listing = (
        f"/api/v1/models/{quote(route.repo_id, safe='/')}/repo/files"
        f"?Revision={quote(route.revision, safe='')}&Recursive=True"
    )
    answer, state = await metacache.meta(
        "GET",
        listing,
        routes.Route(routes.META, hub="ms"),
        {k: v for k, v in request.headers.items() if k.lower() == "authorization"},
    )
    if answer.status != 200:
        return responder.respond(request, answer, state)
    for entry in _ms_files(answer.body):
        if entry.get("Path") == route.path and isinstance(entry.get("Sha256"), str):
            size = entry.get("Size")
            commit = str(entry.get("Revision") or route.revision)
            return str(entry["Sha256"]), size if isinstance(size, int) else None, {}, commit
    missing = json.dumps(
        {"Code": 404, "Message": f"{route.path} is not in {route.repo_id}@{route.revision}"}
    ).encode()
    answer = Answer(404, (("Content-Type", "application/json"),), missing)
    return responder.respond(request, answer, ERROR)
