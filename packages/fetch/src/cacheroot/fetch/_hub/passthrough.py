"""Pass-through: what the hub cache does not keep (uploads, other paths), forwarded as it is.

Nothing is stored and nothing is served stale: the request goes to the upstream whose API it
names, its answer comes back streamed, with the upstream's address in its headers replaced by
this hub's. Only the Xet fields of a ``paths-info`` answer are taken out (:mod:`.xet`), as they
are from every answer the cache keeps. Store-only (``offline``), it fails at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from . import outage, routes, xet
from .responses import ERROR, PASSED, error_body
from .upstream import CHUNK

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Mapping

    from .responses import Responder
    from .settings import Settings
    from .upstream import Upstream

__all__ = ["PassThrough"]


class PassThrough:
    """Forwards the requests the cache does not keep to their upstream."""

    def __init__(
        self,
        settings: Settings,
        upstreams: Mapping[str, Upstream],
        counts: Counter[str],
        responder: Responder,
    ) -> None:
        self.settings = settings
        self.upstreams = upstreams
        self.counts = counts
        self.responder = responder

    async def forward(self, request: web.Request, target: str) -> web.StreamResponse:
        """Forward a request the cache does not keep (uploads, other paths), as it is."""
        self.counts[PASSED] += 1
        if self.settings.offline:
            refused = outage.store_only(routes.Route("other"), request.method, target)
            return self.responder.respond(request, refused, ERROR)
        import aiohttp  # noqa: PLC0415

        up = self.upstreams[routes.classify(request.method, target.split("?", 1)[0]).hub]
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower()
            not in ("host", "connection", "keep-alive", "transfer-encoding", "te", "upgrade")
        }
        data = request.content if request.body_exists else None
        try:
            async with up.session.request(
                request.method,
                up.url(target),
                headers=headers,
                data=data,
                allow_redirects=False,
            ) as answer:
                resp = web.StreamResponse(status=answer.status)
                for name, value in answer.headers.items():
                    lower = name.lower()
                    if lower in (
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                        "content-length",
                    ):
                        continue
                    resp.headers.add(name, self.responder.rewrite(request, value))
                if xet.paths_info(request.method, target.partition("?")[0]):
                    body = xet.scrub_body(await answer.read())
                    resp.content_length = len(body)
                    await resp.prepare(request)
                    await resp.write(body)
                    await resp.write_eof()
                    return resp
                if answer.content_length is not None and request.method != "HEAD":
                    resp.content_length = answer.content_length
                await resp.prepare(request)
                async for chunk in answer.content.iter_chunked(CHUNK):
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            failed = error_body(502, f"the upstream failed: {exc}")
            return self.responder.respond(request, failed, ERROR)
