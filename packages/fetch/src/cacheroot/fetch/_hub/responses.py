"""How an answer reaches the client, and the counter that says how it was served.

Every part of the server (:mod:`.metacache`, :mod:`.files`, :mod:`.passthrough`) answers
through one :class:`Responder`, so that each answer is counted once under the state it was
served in (``GET /.cacheroot/hub`` and ``/metrics`` read those counters), carries that state
in :data:`STATE_HEADER`, and names this hub, not the upstream, in its links and redirects.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from aiohttp import web

from .fills import in_background
from .store import Answer

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Mapping

    from . import routes
    from .store import Store
    from .upstream import Upstream

__all__ = [
    "ERROR",
    "HIT",
    "MISS",
    "PASSED",
    "REVALIDATED",
    "STALE",
    "STATE_HEADER",
    "Responder",
    "error_body",
    "record_served",
]

#: The counters' names, as ``GET /.cacheroot/hub`` reports them.
HIT, MISS, REVALIDATED, STALE, ERROR, PASSED = (
    "hit",
    "miss",
    "revalidated",
    "stale",
    "error",
    "pass",
)
#: The header that says how an answer was served.
STATE_HEADER = "X-Cacheroot-Hub"


def error_body(status: int, message: str) -> Answer:
    """An answer with a JSON ``{"error": message}`` body."""
    body = json.dumps({"error": message}).encode()
    return Answer(status, (("Content-Type", "application/json"),), body)


def record_served(store: Store, route: routes.Route, commit: str) -> None:
    """Record that ``route``'s file (at ``commit``) was served (what ``hub export`` lists):
    the first time in this process, written off the event loop."""
    line = store.served_line(
        {
            "hub": "modelscope" if route.hub == "ms" else "hf",
            "repo_type": route.repo_type,
            "repo_id": route.repo_id,
            "revision": route.revision,
            "commit": commit,
            "path": route.path,
        }
    )
    if line is not None:
        in_background(store.record_served, line)


class Responder:
    """Turns answers into responses, counting each under the state it was served in."""

    def __init__(self, counts: Counter[str], upstreams: Mapping[str, Upstream]) -> None:
        self.counts = counts
        self.upstreams = upstreams

    def rewrite(self, request: web.Request, value: str) -> str:
        """A header value with the upstream's address replaced by this hub's."""
        for up in self.upstreams.values():
            if up.base in value:
                return value.replace(up.base, f"{request.scheme}://{request.host}")
        return value

    def respond(self, request: web.Request, answer: Answer, state: str) -> web.StreamResponse:
        """The response that sends ``answer``, served as ``state`` (counted)."""
        self.counts[state] += 1
        headers: list[tuple[str, str]] = []
        length: str | None = None
        for name, value in answer.headers:
            lower = name.lower()
            if lower == "content-length":
                length = value
                continue
            headers.append(
                (name, self.rewrite(request, value) if lower in ("link", "location") else value)
            )
        headers.append((STATE_HEADER, state))
        if state in (HIT, STALE):
            headers.append(("Age", str(int(max(0.0, time.time() - answer.stored)))))
        if request.method == "HEAD":
            # A file's size is its Content-Length (huggingface_hub reads it from the HEAD).
            head = web.StreamResponse(status=answer.status, headers=headers)
            if length is not None and length.isdigit():
                head.content_length = int(length)
            return head
        return web.Response(status=answer.status, body=answer.body, headers=headers)
