"""The hub cache's server: metadata kept and served stale on error, files stored and streamed.

One :class:`Hub` answers every request of the clients that have ``HF_ENDPOINT`` pointed at it:

- **Metadata** (``GET /api/...``, ``HEAD`` of a file; :mod:`.routes`): kept per URL and
  credential. An answer for a commit is fresh for good; for a branch or a tag it is fresh for
  ``ttl`` seconds and then asked again; a "not found" answer for ``negative_ttl``. When the
  upstream answers 429 or 5xx, times out past ``deadline``, refuses or resets, the last good
  answer is served (stale-if-error, RFC 5861), marked ``X-Cacheroot-Hub: stale``. After 3
  failures in a row of a host, or one that asked for a wait (``Retry-After``, ``RateLimit``),
  that host is left alone for ``cooloff`` seconds or the wait (:mod:`.breaker`, a breaker per
  host): what is kept is served at once meanwhile, and what is not fails at once, with a
  status no client retries and a reason that says how to warm it (:mod:`.outage`), so no
  client waits behind retries stacked on retries. One upstream request per key at a time.
- **Files** (``GET .../resolve/REV/PATH``): the bytes are fetched once, checked against the
  digest the Hub gave for them (``X-Linked-Etag``: sha256; ``ETag``: git blob sha1) and the
  size, and published into the store in one step. Clients that ask while the first download
  runs are streamed what has arrived, so a large file starts flowing at once. A stored file is
  served with ``Range`` and ``sendfile``.
- **Store-only** (``offline``): nothing is asked upstream; what is kept is served, the rest
  fails at once (424, which clients do not retry, naming what to warm).

``GET /.cacheroot/hub`` answers the counters as JSON; ``POST /.cacheroot/hub/offline`` (body
``1`` or ``0``, from a loopback peer only) switches store-only on or off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from . import branches, fills, fleet, metrics, outage, partials, peers, routes, xet
from .breaker import Breakers
from .grants import Grants
from .outage import unanswered
from .store import (
    PUBLIC,
    Answer,
    Store,
    authorization,
    carries_credential,
    credential,
    digest_of,
    key_of,
)
from .upstream import CHUNK, Upstream, UpstreamError, client_sessions
from .verified import Verified

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    import aiohttp

__all__ = ["Hub", "Settings"]

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
#: Statuses kept as "not found" answers (the Hub answers 401 for a repository it does not show).
_NEGATIVE = frozenset({401, 403, 404})
CONTROL = "/.cacheroot/hub"


@dataclass
class Settings:
    """How one hub cache behaves (``cacheroot hub serve``'s flags)."""

    upstream: str
    store: str
    #: ModelScope's API (``/api/v1/...``) goes here; ``""``: to ``upstream`` as well.
    modelscope_upstream: str = ""
    ttl: float = 300.0
    negative_ttl: float = 60.0
    deadline: float = 5.0
    cooloff: float = 30.0
    offline: bool = False
    #: Hosts a file's redirect may go to at any address (see :mod:`.redirects`).
    redirect_hosts: tuple[str, ...] = ()
    #: The group that may read what came with a credential (0640); ``""``: none (0600).
    private_group: str = ""


def normalize_etag(value: str | None) -> str:
    """An ETag without its weak marker and quotes (as huggingface_hub reads it)."""
    if not value:
        return ""
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _error_body(status: int, message: str) -> Answer:
    body = json.dumps({"error": message}).encode()
    return Answer(status, (("Content-Type", "application/json"),), body)


def _ms_files(body: bytes) -> list[dict[str, Any]]:
    """The file entries of a ModelScope listing (``Data.Files``); ``[]`` when it is not one."""
    try:
        files = json.loads(body)["Data"]["Files"]
    except (ValueError, KeyError, TypeError):
        return []
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []


class Hub:
    """The server's state: settings, store, upstream, counters and the requests in flight."""

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
        self.store = Store(settings.store, private_group=settings.private_group)
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
        self._flights: dict[str, asyncio.Task[Answer | UpstreamError]] = {}
        self._fills: dict[str, fills.Fill] = {}
        #: Files whose bytes failed their check lately: answered that, not fetched again.
        self._failures = fills.Failures()
        #: Stored files whose bytes this user's hubs checked (see :mod:`.verified`).
        self._verified = Verified(settings.store)
        #: Who may be sent what came with a credential (see :mod:`.grants`).
        self.grants = Grants(self.store)
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The commits the branches' revision answers name (see :mod:`.branches`).
        self._pins = branches.Pins()

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
            return await self._pass(request, target)
        head = "HEAD" if route.kind == routes.FILE else request.method
        target, route, found = await self._on_commit(head, target, route, request.headers)
        if route.kind == routes.FILE:
            return await self._file(request, target, route)
        answer, state = found or await self.meta(request.method, target, route, request.headers)
        answer = xet.clean(path, answer)
        if route.repo_id and route.path and answer.status == 200:
            self._served(route, answer.header("X-Repo-Commit") or "")
        return self._respond(request, answer, state)

    async def _on_commit(
        self, method: str, target: str, route: routes.Route, headers: Mapping[str, str]
    ) -> tuple[str, routes.Route, tuple[Answer, str] | None]:
        """A request for a branch, asked as the commit the branch names (see :mod:`.branches`):
        the target and route to ask, and the answer to ``method`` when it was asked already."""
        pin = branches.revision_target(route) if branches.movable(route) else target
        if pin == target:
            return target, route, None
        token = authorization(headers)
        auth = {"Authorization": token} if token else {}
        resolved, how = await self.meta("GET", pin, routes.classify("GET", pin), auth)
        commit = self._pins.commit(pin, credential(token), resolved)
        pinned = branches.on_commit(target, commit) if commit is not None else None
        if pinned is None:
            return target, route, None
        fixed = dataclasses.replace(route, immutable=True)
        answer, state = await self.meta(method, pinned, fixed, headers)
        if state == ERROR:
            # A store filled before branches were pinned holds the branch's answers only.
            return target, route, None
        # A branch the upstream could not confirm: what follows from it is as stale.
        return pinned, fixed, (answer, STALE if how == STALE and state == HIT else state)

    # -- metadata -------------------------------------------------------------------------
    def fresh(
        self, answer: Answer, route: routes.Route, now: float, *, credentialed: bool = False
    ) -> bool:
        """Whether a kept answer may be served without asking the upstream.

        A commit's answer never changes, but one asked with a credential is asked again after
        the TTL all the same: the upstream may have revoked that credential, or its access to
        a gated repository, meanwhile. While the upstream cannot be asked, the kept answer is
        served stale to the same credential (its key is that credential's).
        """
        age = max(0.0, now - answer.stored)
        if answer.status in _NEGATIVE:
            return age < self.settings.negative_ttl
        if route.immutable and not credentialed:
            return True
        return age < self.settings.ttl

    def _wait(self, up: Upstream, now: float) -> float:
        """Seconds ``up``'s API is still left alone for: its breaker is open (failures in a
        row, or a wait it asked for), or it asked another hub process of the store to wait."""
        return max(0.0, up.breaker.wait(now), self.store.blocked_until(up.base) - now)

    async def meta(  # noqa: PLR0911 - one return for each way an answer is served
        self, method: str, target: str, route: routes.Route, headers: Mapping[str, str]
    ) -> tuple[Answer, str]:
        """The answer to a metadata request, and how it was served (a counter's name)."""
        up = self.upstreams[route.hub]
        cred = credential(authorization(headers))
        key = key_of(up.base, method, target, cred)
        now = time.time()
        kept = self.store.load(key)
        if kept is not None and self.fresh(kept, route, now, credentialed=cred != PUBLIC):
            return kept, HIT
        fallback = kept
        if fallback is None and cred != PUBLIC:
            # What anyone may read, a credential may read too.
            fallback = self.store.load(key_of(up.base, method, target, PUBLIC))
        if self.settings.offline:
            if fallback is not None:
                return fallback, STALE
            return outage.store_only(route, method, target), ERROR
        wait = self._wait(up, now)
        if wait > 0:
            if fallback is not None:
                return fallback, STALE
            return self._down_answer(up, wait, route, method, target), ERROR
        flight = self._flights.get(key)
        if flight is None:
            flight = self._spawn(self._ask(up, method, target, headers, key=key, kept=kept))
            self._flights[key] = flight
            flight.add_done_callback(lambda _t: self._flights.pop(key, None))
        result = await asyncio.shield(flight)
        if isinstance(result, UpstreamError):
            if fallback is not None:
                return fallback, STALE
            return self._failed_answer(up, result, route, method, target), ERROR
        if kept is not None and result.stored <= kept.stored:
            return result, HIT  # another process refreshed it while we waited for the lock
        return result, (REVALIDATED if kept is not None else MISS)

    def _down_answer(
        self,
        up: Upstream,
        wait: float,
        route: routes.Route,
        method: str,
        target: str,
        *,
        timed_out: bool = False,
    ) -> Answer:
        """The answer to a request the store cannot answer while ``up`` is left alone (see
        :mod:`.outage`: a short wait is passed on, a longer one fails at once)."""
        breaker = up.breaker
        # A wait recorded in the store was asked for by the upstream (in another process, say).
        asked = breaker.asked or self.store.blocked_until(up.base) > time.time() + 0.05
        if breaker.failures and not asked:
            why = f"failed {breaker.failures} times in a row (last: {breaker.reason})"
        else:
            why = f"asked to be left alone ({breaker.reason or 'HTTP 429'})"
        why += f"; it is left alone for {math.ceil(wait)} s more"
        return unanswered(
            route,
            method,
            target,
            upstream=up.base,
            why=why,
            wait=wait,
            asked=asked,
            timed_out=timed_out,
        )

    def _failed_answer(
        self, up: Upstream, err: UpstreamError, route: routes.Route, method: str, target: str
    ) -> Answer:
        """The answer to a request the store cannot answer after asking ``up`` failed: as
        while it is left alone once this failure (or another) opened its breaker."""
        wait = self._wait(up, time.time())
        if wait > 0 or not err.contacted:
            return self._down_answer(up, wait, route, method, target, timed_out=err.timed_out)
        return unanswered(
            route,
            method,
            target,
            upstream=up.base,
            why=f"failed ({err.reason})",
            wait=0.0,
            status=err.status,
            timed_out=err.timed_out,
        )

    async def _ask(
        self,
        up: Upstream,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        key: str,
        kept: Answer | None,
    ) -> Answer | UpstreamError:
        lock = await self._lock(key)
        try:
            again = self.store.load(key)
            if again is not None and (kept is None or again.stored > kept.stored):
                return again
            self.counts["upstream"] += 1
            try:
                answer = await up.meta(method, target, headers)
            except UpstreamError as err:
                self._failed(up, err)
                return err
            answer = xet.clean(target.partition("?")[0], answer)
            if answer.status < 400 or answer.status in _NEGATIVE:
                # Written and synced in the fills' threads: an fsync on the loop stalls every
                # request while the store's disk (a network volume) syncs.
                save = functools.partial(
                    self.store.save, key, answer, private=carries_credential(headers)
                )
                with contextlib.suppress(OSError):
                    await fills.in_pool(save)
            return answer
        finally:
            if lock is not None:
                await asyncio.to_thread(lock.release)

    async def _lock(self, key: str, timeout: float | None = None) -> Any:
        """The store's lock of ``key`` (other processes of the store), or ``None`` when it is
        not free within ``timeout`` seconds (``--deadline`` unless said)."""
        import filelock  # noqa: PLC0415

        wait = self.settings.deadline if timeout is None else timeout
        try:
            lock = filelock.FileLock(self.store.lock_path(key), thread_local=False)
            await asyncio.to_thread(lock.acquire, timeout=wait)
        except (filelock.Timeout, OSError):
            return None  # a slow peer must not hold every caller: ask anyway
        return lock

    def _failed(self, up: Upstream, err: UpstreamError) -> None:
        """Count a failure of an upstream host. A wait the API asked for is also recorded in
        the store, so that every hub process on it obeys; the breakers themselves are told by
        :class:`Upstream`, per host (a request never sent, its breaker open, is no failure)."""
        if not err.contacted:
            return
        self.counts["upstream_errors"] += 1
        if err.wait is not None and err.origin == up.breaker.origin:
            self.store.block(up.base, time.time() + err.wait)

    # -- responses ------------------------------------------------------------------------
    def _rewrite(self, request: web.Request, value: str) -> str:
        """A header value with the upstream's address replaced by this hub's."""
        for up in self.upstreams.values():
            if up.base in value:
                return value.replace(up.base, f"{request.scheme}://{request.host}")
        return value

    def _respond(self, request: web.Request, answer: Answer, state: str) -> web.StreamResponse:
        self.counts[state] += 1
        headers: list[tuple[str, str]] = []
        length: str | None = None
        for name, value in answer.headers:
            lower = name.lower()
            if lower == "content-length":
                length = value
                continue
            headers.append(
                (name, self._rewrite(request, value) if lower in ("link", "location") else value)
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

    def _served(self, route: routes.Route, commit: str) -> None:
        self.store.record_served(
            {
                "hub": "modelscope" if route.hub == "ms" else "hf",
                "repo_type": route.repo_type,
                "repo_id": route.repo_id,
                "revision": route.revision,
                "commit": commit,
                "path": route.path,
            }
        )

    # -- files ----------------------------------------------------------------------------
    async def _file(
        self, request: web.Request, target: str, route: routes.Route
    ) -> web.StreamResponse:
        if route.hub == "ms":
            found = await self._ms_file(request, route)
        else:
            found = await self._hf_file(request, target, route)
        if isinstance(found, web.StreamResponse):
            return found
        etag, size, headers, commit = found
        headers["Content-Type"] = "application/octet-stream"
        self._served(route, commit)
        if not fills.checkable(etag):
            return await self._relay(request, route, target, headers, size)
        path = self.store.blob_path(etag)
        stored = await self._from_store(
            request, route, target, path=path, etag=etag, size=size, headers=headers
        )
        if stored is not None:
            return stored
        if self.settings.offline:
            answer = outage.store_only(route, request.method, target, "no copy of the file")
            return self._respond(request, answer, ERROR)
        return await self._fill_answer(
            request, route, target, path=path, etag=etag, size=size, headers=headers
        )

    async def _fill_answer(
        self,
        request: web.Request,
        route: routes.Route,
        target: str,
        *,
        path: str,
        etag: str,
        size: int | None,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        """Answer from the fill of ``path``: joined when one runs, else started (see
        :mod:`.fills`), unless its bytes failed their check lately."""
        fill = self._fills.get(path)
        if fill is None:
            failed = self._failures.recall(path)
            if failed is not None:
                self.counts[ERROR] += 1
                return fills.failure(502, failed)
            if size is not None and fills.unsatisfiable(request, size):
                return fills.not_satisfiable(size, headers)
            up = self.upstreams[route.hub]
            fill = self._start_fill(path, up, target, headers=request.headers, etag=etag, size=size)
            fill.owner = self._grantee(request, route)
            self.counts["file_miss"] += 1
            headers[STATE_HEADER] = MISS
        else:
            owner = fill.owner
            if (
                isinstance(owner, tuple)
                and owner[1] != PUBLIC
                and owner != self._grantee(request, route)
            ):  # a download with a credential, for another URL or credential
                refused = await self._vouch(request, route, target, etag, always=True)
                if refused is not None:
                    return refused
            self.counts["file_joined"] += 1
            headers[STATE_HEADER] = "joined"
        resp = await fills.follow(request, fill, headers)
        if resp.status >= 500:
            self.counts[ERROR] += 1
        return resp

    async def _from_store(
        self,
        request: web.Request,
        route: routes.Route,
        target: str,
        *,
        path: str,
        etag: str,
        size: int | None,
        headers: dict[str, str],
    ) -> web.StreamResponse | None:
        """The answer from the stored file (or the shared tier's), or ``None`` to fetch it."""
        fd = await self._stored(path, etag, size)
        state = HIT
        if (
            fd is None
            and path not in self._fills
            and await asyncio.to_thread(fleet.pull_blob, path, size=size)
        ):
            fd = await self._stored(path, etag, size)
            state = "shared"
        if fd is None:
            return None
        refused = await self._vouch(request, route, target, etag)
        if refused is not None:
            os.close(fd)
            return refused
        self.counts["file_hit" if state == HIT else "file_from_shared_tier"] += 1
        headers[STATE_HEADER] = state
        headers["Accept-Ranges"] = "bytes"
        # Served as a fill that found its file stored: the same ranges (206, 416, suffixes) and
        # the same `sendfile` from the descriptor the hub opened and checked.
        stored = fills.Fill(path, size)
        stored.hand_over(fd)
        return await fills.follow(request, stored, headers)

    @staticmethod
    def _grantee(request: web.Request, route: routes.Route) -> tuple[routes.Route, str]:
        """Who a request is, for :mod:`.grants`: its file's route and its credential."""
        return route, credential(authorization(request.headers))

    async def _grant_owner(self, fill: fills.Fill, etag: str) -> None:
        """Mark what came with a credential as such, and grant it to its own URL and
        credential (:mod:`.grants`)."""
        owner = fill.owner
        if isinstance(owner, tuple) and owner[1] != PUBLIC:
            route, cred = owner
            await fills.in_pool(self.grants.mark, etag)
            await fills.in_pool(self.grants.grant, route, etag, cred)

    async def _vouch(
        self,
        request: web.Request,
        route: routes.Route,
        target: str,
        etag: str,
        *,
        always: bool = False,
    ) -> web.StreamResponse | None:
        """``None`` when the bytes named ``etag`` may be sent for ``request`` (see
        :mod:`.grants`): they never came with a credential (unless ``always``), or the upstream
        served this URL to this credential; else the answer that refuses it."""
        if not always and not await fills.in_pool(self.grants.marked, etag):
            return None
        route_, cred = self._grantee(request, route)
        if await fills.in_pool(self.grants.granted, route_, etag, cred):
            return None
        why = (
            "the hub cache has this file only from a download with a credential for another "
            "repository or another credential, and the upstream has not served it to this "
            "request"
        )
        if self.settings.offline:
            self.counts["file_refused"] += 1
            return fills.failure(424, f"{why}; it runs store-only")
        up = self.upstreams[route.hub]
        try:
            answer = await up.meta("GET", target, request.headers, {"Range": "bytes=0-0"})
        except UpstreamError as exc:
            self.counts["file_refused"] += 1
            return fills.failure(424, f"{why}, and cannot be asked now: {exc}")
        if answer.status >= 400:
            self.counts["file_refused"] += 1
            return self._respond(request, answer, ERROR)
        await fills.in_pool(self.grants.grant, route_, etag, cred)
        self.counts["file_granted"] += 1
        return None

    async def _relay(
        self,
        request: web.Request,
        route: routes.Route,
        target: str,
        headers: dict[str, str],
        size: int | None,
    ) -> web.StreamResponse:
        """A file with no digest to check it by: streamed through, never stored."""
        if self.settings.offline:
            what = "no copy of a file without a digest (it keeps none)"
            return self._respond(request, outage.store_only(route, "GET", target, what), ERROR)
        up = self.upstreams[route.hub]
        self.counts["file_passed"] += 1
        self.counts["upstream"] += 1
        headers[STATE_HEADER] = PASSED
        resp, err = await fills.relay(request, up, target, headers, size)
        if err is not None:
            self.counts[ERROR] += 1
            if err.status != 502:
                self._failed(up, err)
        return resp

    async def _stored(self, path: str, etag: str, size: int | None) -> int | None:
        """A descriptor of the stored file ``path``, or ``None`` when there is none to trust.

        The store is on a volume other jobs write: a file that this user's hubs did not check
        themselves (:mod:`.verified`: published by one, or checked on a serve) has its bytes
        checked against the digest it is named by before it is served (as ``CACHEROOT_VERIFY=
        first-use`` does for downloads), and a file that fails is removed and fetched again.
        """
        fd = self.store.open_blob(path, size)
        if fd is None:
            return None
        name = os.path.basename(path)
        if not self._verified.trusted(fd, name):
            self.counts["blob_checked"] += 1
            found = await fills.in_pool(digest_of, fd, etag, os.fstat(fd).st_size)
            if found is not None and found != etag:
                self.counts["blob_corrupt"] += 1
                self._verified.forget(fd)
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                return None
        # Stamp it as used (what `hub prune` goes by) and record it as it is after the stamp.
        await fills.in_pool(self._verified.stamp, fd, name)
        return fd

    async def _hf_file(
        self, request: web.Request, target: str, route: routes.Route
    ) -> tuple[str, int | None, dict[str, str], str] | web.StreamResponse:
        """A Hub file's digest, size, headers and commit, from its ``HEAD`` (kept like any
        metadata); or the answer to send when there is none."""
        head, state = await self.meta("HEAD", target, route, request.headers)
        if head.status != 200:
            return self._respond(request, head, state)
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
        self, request: web.Request, route: routes.Route
    ) -> tuple[str, int | None, dict[str, str], str] | web.StreamResponse:
        """A ModelScope file's sha256, size and revision, from the repository's listing (its
        file answers carry no digest; the listing, kept like any metadata, does)."""
        listing = (
            f"/api/v1/models/{quote(route.repo_id, safe='/')}/repo/files"
            f"?Revision={quote(route.revision, safe='')}&Recursive=True"
        )
        answer, state = await self.meta(
            "GET",
            listing,
            routes.Route(routes.META, hub="ms"),
            {k: v for k, v in request.headers.items() if k.lower() == "authorization"},
        )
        if answer.status != 200:
            return self._respond(request, answer, state)
        for entry in _ms_files(answer.body):
            if entry.get("Path") == route.path and isinstance(entry.get("Sha256"), str):
                size = entry.get("Size")
                commit = str(entry.get("Revision") or route.revision)
                return str(entry["Sha256"]), size if isinstance(size, int) else None, {}, commit
        missing = json.dumps(
            {"Code": 404, "Message": f"{route.path} is not in {route.repo_id}@{route.revision}"}
        ).encode()
        answer = Answer(404, (("Content-Type", "application/json"),), missing)
        return self._respond(request, answer, ERROR)

    def _start_fill(
        self,
        path: str,
        up: Upstream,
        target: str,
        *,
        headers: Mapping[str, str],
        etag: str,
        size: int | None,
    ) -> fills.Fill:
        fill = fills.Fill(path, size)
        self._fills[path] = fill
        task = self._spawn(self._run_fill(fill, up, target, dict(headers), etag))
        self.meter.watch_fill(target, fill, task)
        return fill

    async def _run_fill(
        self, fill: fills.Fill, up: Upstream, target: str, headers: dict[str, str], etag: str
    ) -> None:
        """Fetch ``fill``'s file into the store (see :mod:`.fills`); if another process of the
        store published it while this one waited for the lock, hand that file over instead."""
        lock: Any = None
        sink: fills.Sink | None = None
        try:
            lock, answered = await self._claim(fill, etag)
            if answered:
                return
            try:
                partial, fd = self.store.new_partial(fill.path, private=carries_credential(headers))
            except OSError as exc:
                why = f"the hub cache could not write its store {self.store.root}: {exc.strerror}"
                fill.fail(why, 507)
                return
            fill.write_to(partial, fd)
            sink = fills.Sink(fill, fd, etag)
            self.counts["upstream"] += 1
            receive = sink.receive if sink.off_loop() else None
            await up.download(target, headers, sink.started, sink, receive=receive)
            await sink.finish()
            await self._grant_owner(fill, etag)  # before anyone can find it stored
            self.store.publish_partial(partial, fill.path)
            await fills.in_pool(self._verified.stamp, fd, os.path.basename(fill.path))
            fill.partial = None
            self._spawn(asyncio.to_thread(fleet.push_blob, fill.path, size=fill.size))
            fill.finish()
        except fills.BadBytesError as exc:
            self.counts[exc.counter] += 1
            self._failures.add(fill.path, exc.reason)
            fill.fail(exc.reason)
        except UpstreamError as exc:
            fill.fail(f"the upstream failed: {exc}", fills.error_status(exc))
            if exc.status != 502:
                self._failed(up, exc)
        except OSError as exc:  # the store's disk: the network's errors are UpstreamErrors
            fill.fail(f"the hub cache could not write its store {self.store.root}: {exc}", 507)
        except asyncio.CancelledError:
            fill.fail("the hub cache stopped", 503)
            raise
        finally:
            self._fills.pop(fill.path, None)
            if fill.partial is not None:
                self.store.drop_partial(fill.partial)
            if sink is not None:
                self.counts["bytes_from_upstream"] += sink.received
            fill.leave()
            if lock is not None:
                await asyncio.to_thread(lock.release)

    async def _claim(self, fill: fills.Fill, etag: str) -> tuple[Any, bool]:
        """The store's lock of ``fill``'s file (``None`` if not had in time), and whether
        ``fill`` was answered without a download: the file found stored (handed over), or
        another process's download of it followed (:meth:`_follow_peer`)."""
        name = os.path.basename(fill.path)
        lock = await self._lock(name, timeout=0)
        if lock is None:  # another process of the store downloads it: follow that
            if await self._follow_peer(fill, etag):
                return None, True
            lock = await self._lock(name)
        try:
            theirs = await self._stored(fill.path, etag, fill.size)
        except BaseException:
            if lock is not None:
                await asyncio.to_thread(lock.release)
            raise
        if theirs is not None:
            self.counts["file_handed_over"] += 1
            fill.hand_over(theirs)
            return lock, True
        return lock, False

    async def _follow_peer(self, fill: fills.Fill, etag: str) -> bool:
        """Serve ``fill`` from the download another process of the store is running
        (:mod:`.peers`); whether that answered it. ``False`` (nothing served) for a small
        file, when no partial of it shows within ``--deadline`` seconds, or when the peer
        stopped first: the caller then waits for the lock and downloads the file itself."""
        if fill.size is None or fill.size <= fills.SMALL:
            return False  # the lock's wait is short, and a second download cheap
        fd = await self._peer_partial(fill.path)
        if fd is None:
            return False
        self.counts["file_followed"] += 1
        try:
            checked = await peers.follow(fill, fd, etag)
        except fills.BadBytesError as exc:
            self.counts[exc.counter] += 1
            fill.fail(exc.reason)
            return True
        if checked:
            fill.finish()  # every byte checked and readable; publishing it is the peer's
            return True
        if fill.written == 0:
            fill.let_go()
            return False
        fill.fail("the hub cache's other process stopped downloading the file; ask again", 502)
        return True

    async def _peer_partial(self, path: str) -> int | None:
        """The partial another process writes for ``path``, once it shows (``--deadline``
        seconds at most); ``None`` also as soon as the file is stored."""
        until = time.monotonic() + self.settings.deadline
        while time.monotonic() < until:
            fd: int | None = await fills.in_pool(self.store.peer_partial, path)
            if fd is not None or await fills.in_pool(os.path.exists, path):
                return fd
            await asyncio.sleep(peers.POLL)
        return None

    # -- anything else --------------------------------------------------------------------
    async def _pass(self, request: web.Request, target: str) -> web.StreamResponse:
        """Forward a request the cache does not keep (uploads, other paths), as it is."""
        self.counts[PASSED] += 1
        if self.settings.offline:
            refused = outage.store_only(routes.Route("other"), request.method, target)
            return self._respond(request, refused, ERROR)
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
                    resp.headers.add(name, self._rewrite(request, value))
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
            return self._respond(request, _error_body(502, f"the upstream failed: {exc}"), ERROR)


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
