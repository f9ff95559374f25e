"""The hub cache's server: metadata kept and served stale on error, files stored and streamed.

One :class:`Hub` answers every request of the clients that have ``HF_ENDPOINT`` pointed at it,
handing each to the part that holds its job:

- **Metadata** (``GET /api/...``, ``HEAD`` of a file; :mod:`.routes`): the
  :class:`~.metacache.MetaCache` keeps it per URL and credential. An answer for a commit is fresh
  for good; for a branch or a tag it is fresh for ``ttl`` seconds and then asked again; a "not
  found" answer for ``negative_ttl``. When the upstream answers 429 or 5xx, times out past
  ``deadline``, refuses or resets, the last good answer is served (stale-if-error, RFC 5861),
  marked ``X-Cacheroot-Hub: stale``. After 3 failures in a row of a host, or one that asked for
  a wait (``Retry-After``, ``RateLimit``), that host is left alone for ``cooloff`` seconds or
  the wait (:mod:`.breaker`, a breaker per host): what is kept is served at once meanwhile, and
  what is not fails at once, with a status no client retries and a reason that says how to warm
  it (:mod:`.outage`), so no client waits behind retries stacked on retries. One upstream
  request per key at a time.
- **Files** (``GET .../resolve/REV/PATH``): the :class:`~.files.FileCache` fetches the bytes
  once, checks them against the digest the Hub gave for them (``X-Linked-Etag``: sha256;
  ``ETag``: git blob sha1) and the size, and publishes them into the store in one step. Clients
  that ask while the first download runs are streamed what has arrived, so a large file starts
  flowing at once. A stored file is served with ``Range`` and ``sendfile``.
- **Anything else** (uploads, other paths): forwarded as it is (:mod:`.passthrough`).
- **Store-only** (``offline``): nothing is asked upstream; what is kept is served, the rest
  fails at once (424, which clients do not retry, naming what to warm).

``GET /.cacheroot/hub`` answers the counters as JSON; ``POST /.cacheroot/hub/offline`` (body
``1`` or ``0``, from a loopback peer only) switches store-only on or off. The parts share the
settings, the store and one set of counters, which this server holds and reports.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import metrics, partials, routes, xet
from .breaker import Breakers
from .files import FileCache
from .grants import Grants
from .metacache import MetaCache
from .passthrough import PassThrough
from .responses import Responder, record_served
from .settings import Settings
from .store import Store, answer_key
from .upstream import Upstream, client_sessions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import aiohttp

__all__ = ["CONTROL", "Hub", "Settings", "serve"]

CONTROL = "/.cacheroot/hub"


class Hub:
    """The server: settings, store, upstreams and counters, shared by the parts it composes
    (the metadata cache, the files and their fills, pass-through), and the tasks they run."""

    def __init__(
        self,
        settings: Settings,
        session: aiohttp.ClientSession,
        downloads: aiohttp.ClientSession | None = None,
        meter: metrics.Meter | None = None,
    ) -> None:
        self.settings = settings
        #: The figures of ``/metrics`` beyond the counters (its sessions' trace, when given).
        self.meter = metrics.Meter() if meter is None else meter
        self.store = Store(
            settings.store, private_group=settings.private_group, answer_key=answer_key()
        )
        # One breaker per host contacted, shared by both upstreams (they may be one host).
        self.breakers = Breakers(cooloff=settings.cooloff, probe=settings.deadline + 1.0)
        ms = settings.modelscope_upstream or settings.upstream
        self.upstreams = {
            name: Upstream(
                base,
                session,
                deadline=settings.deadline,
                downloads=downloads,
                breakers=self.breakers,
                redirect_hosts=settings.redirect_hosts,
                observe=self.meter.answered,
            )
            for name, base in (("hf", settings.upstream), ("ms", ms))
        }
        self.upstream = self.upstreams["hf"]
        self.counts: Counter[str] = Counter()
        #: Who may be sent what came with a credential (see :mod:`.grants`).
        self.grants = Grants(self.store)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.responder = Responder(self.counts, self.upstreams)
        self.metacache = MetaCache(settings, self.store, self.upstreams, self.counts, self._spawn)
        self.files = FileCache(self.metacache, self.responder, self.grants, self.meter, self._spawn)
        self.passthrough = PassThrough(settings, self.upstreams, self.counts, self.responder)

    # -- the application ------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application answering every path."""
        app = web.Application(client_max_size=1 << 20)
        app.router.add_get(CONTROL, self._stats)
        app.router.add_post(CONTROL + "/offline", self._set_offline)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        metrics.install(app, self)  # /healthz, /metrics
        app.on_startup.append(self._sweep)
        app.on_shutdown.append(self._shutdown)
        return app

    async def _sweep(self, _app: web.Application) -> None:
        """Remove the partial files of hubs that died mid-download (:mod:`.partials`)."""
        gone = await asyncio.to_thread(partials.sweep, self.store.root)
        self.counts["partials_removed"] += len(gone)

    async def _shutdown(self, _app: web.Application) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _stats(self, _request: web.Request) -> web.Response:
        payload = {
            "counts": dict(sorted(self.counts.items())),
            "upstream": self.upstream.base,
            "modelscope_upstream": self.upstreams["ms"].base,
            "store": self.store.root,
            "offline": self.settings.offline,
            "breakers": self.breakers.report(time.time()),
            "slowest_fills": self.meter.slowest(),
        }
        return web.json_response(payload)

    async def _set_offline(self, request: web.Request) -> web.Response:
        peer = request.remote or ""
        if not (peer.startswith("127.") or peer == "::1"):
            return web.Response(status=403, text="only a loopback peer may switch store-only\n")
        body = (await request.text()).strip()
        if body not in ("0", "1"):
            return web.Response(status=400, text=f"expected 1 or 0, got {body[:20]!r}\n")
        self.settings.offline = body == "1"
        return web.Response(text=f"offline={body}\n")

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one client request (see the module docstring)."""
        target = request.raw_path
        path, _, query = target.partition("?")
        route = routes.classify(request.method, path, query)
        self.counts["requests"] += 1
        if route.kind == routes.OTHER:
            return await self.passthrough.forward(request, target)
        head = "HEAD" if route.kind == routes.FILE else request.method
        target, route, found = await self.metacache.on_commit(head, target, route, request.headers)
        if route.kind == routes.FILE:
            return await self.files.answer(request, target, route)
        answer, state = found or await self.metacache.meta(
            request.method, target, route, request.headers
        )
        answer = xet.clean(path, answer)
        if route.repo_id and route.path and answer.status == 200:
            record_served(self.store, route, answer.header("X-Repo-Commit") or "")
        return self.responder.respond(request, answer, state)


async def serve(settings: Settings, host: str, port: int, ready: Callable[[str], None]) -> None:
    """Run a hub cache on ``host:port`` until cancelled; ``ready`` gets its URL once it listens."""
    import socket  # noqa: PLC0415

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Metadata and files' bytes on separate connection pools (see `client_sessions`).
    meter = metrics.Meter()
    async with client_sessions([meter.tracing()]) as (session, downloads):
        hub = Hub(settings, session, downloads, meter)
        runner = web.AppRunner(
            hub.app(), access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
        ready(f"http://{shown}:{bound[1]}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
