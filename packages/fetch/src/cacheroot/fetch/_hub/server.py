"""The hub cache's server: metadata kept and served stale on error, files stored and streamed.

One :class:`Hub` answers every request of the clients that have ``HF_ENDPOINT`` pointed at it:

- **Metadata** (``GET /api/...``, ``HEAD`` of a file; :mod:`.routes`): kept per URL and
  credential. An answer for a commit is fresh for good; for a branch or a tag it is fresh for
  ``ttl`` seconds and then asked again; a "not found" answer for ``negative_ttl``. When the
  upstream answers 429 or 5xx, times out past ``deadline``, refuses or resets, the last good
  answer is served (stale-if-error, RFC 5861), marked ``X-Cacheroot-Hub: stale``. After such a
  failure the upstream is left alone for ``cooloff`` seconds, or for as long as its
  ``Retry-After`` asked (once, for every caller, in every process of the store): what is kept
  is served at once meanwhile, and what is not fails at once with the upstream's status, so
  no client waits behind retries stacked on retries. One upstream request per key at a time.
- **Files** (``GET .../resolve/REV/PATH``): the bytes are fetched once, checked against the
  digest the Hub gave for them (``X-Linked-Etag``: sha256; ``ETag``: git blob sha1) and the
  size, and published into the store in one step. Clients that ask while the first download
  runs are streamed what has arrived, so a large file starts flowing at once. A stored file is
  served with ``Range`` and ``sendfile``.
- **Store-only** (``offline``): nothing is asked upstream; what is kept is served, the rest
  fails at once (504).

``GET /.cacheroot/hub`` answers the counters as JSON; ``POST /.cacheroot/hub/offline`` (body
``1`` or ``0``, from a loopback peer only) switches store-only on or off.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import os
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from . import fleet, routes
from .store import PUBLIC, Answer, Store, credential, digest_of, key_of
from .upstream import CHUNK, Upstream, UpstreamError

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


class _Fill:
    """One file being fetched into the store: readers follow ``written`` while it grows."""

    def __init__(self, path: str, partial: str, fd: int, size: int | None) -> None:
        self.path, self.partial, self.fd, self.size = path, partial, fd, size
        self.written = 0
        self.done = False
        self.error: str | None = None
        self.cond = asyncio.Condition()

    async def changed(self) -> None:
        async with self.cond:
            self.cond.notify_all()


def _ms_files(body: bytes) -> list[dict[str, Any]]:
    """The file entries of a ModelScope listing (``Data.Files``); ``[]`` when it is not one."""
    try:
        files = json.loads(body)["Data"]["Files"]
    except (ValueError, KeyError, TypeError):
        return []
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []


def _readable(fill: _Fill) -> int:
    """How many bytes of a file being fetched readers may have: all once it is verified, all
    but the last before, so that bytes that fail the digest never reach a client whole."""
    return fill.written if fill.done else max(0, fill.written - 1)


def _moved(fill: _Fill, offset: int) -> bool:
    """Whether a reader at ``offset`` has something new: bytes past it, the end, an error."""
    return _readable(fill) > offset or fill.done or fill.error is not None


class _Blob(web.FileResponse):
    """A stored file, with the Hub's ``ETag`` rather than one made from its mtime.

    It is served from a descriptor the hub opened and checked (a regular file, never a link
    another job swapped in): aiohttp opens ``/proc/self/fd/N``, which is that very file.
    """

    def __init__(self, fd: int, etag: str | None, headers: Mapping[str, str]) -> None:
        super().__init__(f"/proc/self/fd/{fd}", chunk_size=CHUNK, headers=headers)
        self._hub_etag = etag
        self._closer = weakref.finalize(self, os.close, fd)  # if never sent

    async def prepare(self, request: web.BaseRequest) -> Any:
        try:
            return await super().prepare(request)
        finally:
            self._closer()

    @property
    def etag(self) -> Any:
        return super().etag

    @etag.setter
    def etag(self, value: Any) -> None:
        if self._hub_etag is None:
            web.FileResponse.etag.fset(self, value)  # type: ignore[attr-defined]


class Hub:
    """The server's state: settings, store, upstream, counters and the requests in flight."""

    def __init__(self, settings: Settings, session: aiohttp.ClientSession) -> None:
        self.settings = settings
        self.store = Store(settings.store)
        self.upstream = Upstream(settings.upstream, session, deadline=settings.deadline)
        ms = settings.modelscope_upstream or settings.upstream
        self.upstreams = {
            "hf": self.upstream,
            "ms": Upstream(ms, session, deadline=settings.deadline),
        }
        self.counts: Counter[str] = Counter()
        self._flights: dict[str, asyncio.Task[Answer | UpstreamError]] = {}
        self._fills: dict[str, _Fill] = {}
        #: Stored files whose bytes this process checked: (device, inode, size, ctime), as
        #: they were after this process last stamped them (another writer moves the ctime).
        self._verified: set[tuple[int, int, int, int]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the application ------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application answering every path."""
        app = web.Application(client_max_size=1 << 20)
        app.router.add_get(CONTROL, self._stats)
        app.router.add_post(CONTROL + "/offline", self._set_offline)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_shutdown.append(self._shutdown)
        return app

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
        if route.kind == routes.FILE:
            return await self._file(request, target, route)
        answer, state = await self.meta(request.method, target, route, request.headers)
        if route.repo_id and route.path and answer.status == 200:
            self._served(route, answer.header("X-Repo-Commit") or "")
        return self._respond(request, answer, state)

    # -- metadata -------------------------------------------------------------------------
    def fresh(self, answer: Answer, route: routes.Route, now: float) -> bool:
        """Whether a kept answer may be served without asking the upstream."""
        age = max(0.0, now - answer.stored)
        if answer.status in _NEGATIVE:
            return age < self.settings.negative_ttl
        if route.immutable:
            return True
        return age < self.settings.ttl

    def _wait(self, up: Upstream, now: float) -> float:
        """Seconds ``up`` is still left alone for (a failure, a ``Retry-After``)."""
        until = max(up.down_until, self.store.blocked_until(up.base))
        return max(0.0, until - now)

    async def meta(  # noqa: PLR0911 - one return for each way an answer is served
        self, method: str, target: str, route: routes.Route, headers: Mapping[str, str]
    ) -> tuple[Answer, str]:
        """The answer to a metadata request, and how it was served (a counter's name)."""
        up = self.upstreams[route.hub]
        cred = credential(headers.get("Authorization"))
        key = key_of(up.base, method, target, cred)
        now = time.time()
        kept = self.store.load(key)
        if kept is not None and self.fresh(kept, route, now):
            return kept, HIT
        fallback = kept
        if fallback is None and cred != PUBLIC:
            # What anyone may read, a credential may read too.
            fallback = self.store.load(key_of(up.base, method, target, PUBLIC))
        if self.settings.offline:
            if fallback is not None:
                return fallback, STALE
            return _error_body(504, self._unseen("the hub cache runs store-only")), ERROR
        wait = self._wait(up, now)
        if wait > 0:
            if fallback is not None:
                return fallback, STALE
            return self._down_answer(up, wait), ERROR
        flight = self._flights.get(key)
        if flight is None:
            flight = self._spawn(self._ask(up, method, target, headers, key=key, kept=kept))
            self._flights[key] = flight
            flight.add_done_callback(lambda _t: self._flights.pop(key, None))
        result = await asyncio.shield(flight)
        if isinstance(result, UpstreamError):
            if fallback is not None:
                return fallback, STALE
            status = result.status or (504 if "no answer" in result.reason else 502)
            answer = _error_body(status, self._unseen(f"the upstream failed ({result.reason})"))
            if result.wait:
                answer = Answer(
                    answer.status,
                    (*answer.headers, ("Retry-After", str(math.ceil(result.wait)))),
                    answer.body,
                )
            return answer, ERROR
        if kept is not None and result.stored <= kept.stored:
            return result, HIT  # another process refreshed it while we waited for the lock
        return result, (REVALIDATED if kept is not None else MISS)

    def _unseen(self, why: str) -> str:
        return f"{why}, and the hub cache has no answer for this request yet"

    def _down_answer(self, up: Upstream, wait: float) -> Answer:
        err = up.down
        # A wait recorded in the store came from a 429 (this process's, or another's).
        asked_to_wait = self.store.blocked_until(up.base) > time.time()
        status = 429 if asked_to_wait or (err is not None and err.status == 429) else 503
        reason = err.reason if err is not None else "HTTP 429 with Retry-After"
        answer = _error_body(
            status,
            self._unseen(f"the upstream is left alone for {wait:.0f} s more after {reason}"),
        )
        return Answer(status, (*answer.headers, ("Retry-After", str(math.ceil(wait)))), answer.body)

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
            if answer.status < 400 or answer.status in _NEGATIVE:
                with contextlib.suppress(OSError):
                    self.store.save(key, answer)
            return answer
        finally:
            if lock is not None:
                await asyncio.to_thread(lock.release)

    async def _lock(self, key: str) -> Any:
        """The store's lock of ``key`` (other processes of the store), or ``None`` in time."""
        import filelock  # noqa: PLC0415

        try:
            lock = filelock.FileLock(self.store.lock_path(key), thread_local=False)
            await asyncio.to_thread(lock.acquire, timeout=self.settings.deadline)
        except (filelock.Timeout, OSError):
            return None  # a slow peer must not hold every caller: ask anyway
        return lock

    def _failed(self, up: Upstream, err: UpstreamError) -> None:
        """Leave ``up`` alone for a while after ``err`` (see the module docstring)."""
        self.counts["upstream_errors"] += 1
        now = time.time()
        if err.status == 429:
            pause = err.wait if err.wait is not None else 1.0
            self.store.block(up.base, now + pause)
        else:
            pause = self.settings.cooloff
        up.down_until = max(up.down_until, now + pause)
        up.down = err

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
        path = self.store.blob_path(etag or target)
        tag = next((v for k, v in headers.items() if k.lower() == "etag"), None)
        fd = await self._stored(path, etag, size)
        if fd is not None:
            self.counts["file_hit"] += 1
            headers[STATE_HEADER] = HIT
            return _Blob(fd, tag, headers)
        if path not in self._fills and await asyncio.to_thread(fleet.pull_blob, path):
            fd = await self._stored(path, etag, size)
            if fd is not None:
                self.counts["file_from_shared_tier"] += 1
                headers[STATE_HEADER] = "shared"
                return _Blob(fd, tag, headers)
        if self.settings.offline:
            why = "the hub cache runs store-only and has no copy of this file"
            return self._respond(request, _error_body(504, why), ERROR)
        fill = self._fills.get(path)
        if fill is None:
            up = self.upstreams[route.hub]
            fill = self._start_fill(path, up, target, headers=request.headers, etag=etag, size=size)
            if fill is None:
                why = f"the hub cache could not write its store {self.store.root}"
                return self._respond(request, _error_body(507, why), ERROR)
            self.counts["file_miss"] += 1
            headers[STATE_HEADER] = MISS
        else:
            self.counts["file_joined"] += 1
            headers[STATE_HEADER] = "joined"
        return await self._follow(request, fill, headers)

    async def _stored(self, path: str, etag: str, size: int | None) -> int | None:
        """A descriptor of the stored file ``path``, or ``None`` when there is none to trust.

        The store is on a volume other jobs write: the first time this process serves a file,
        its bytes are checked against the digest it is named by (as ``CACHEROOT_VERIFY=
        first-use`` does for downloads), and a file that fails is removed and fetched again.
        """
        fd = self.store.open_blob(path, size)
        if fd is None:
            return None
        st = os.fstat(fd)
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)
        if seen not in self._verified:
            found = await asyncio.to_thread(digest_of, fd, etag, st.st_size)
            if found is not None and found != etag:
                self.counts["blob_corrupt"] += 1
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                return None
        # Stamp it as used (what `hub prune` goes by); that moves its ctime, so the stamp
        # after it is what a later serve of the same, unchanged file finds.
        with contextlib.suppress(OSError):
            os.utime(fd)
            st = os.fstat(fd)
        self._verified.discard(seen)
        self._verified.add((st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns))
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
    ) -> _Fill | None:
        try:
            partial, fd = self.store.new_partial(path)
        except OSError:
            return None
        fill = _Fill(path, partial, fd, size)
        self._fills[path] = fill
        self._spawn(self._run_fill(fill, up, target, dict(headers), etag))
        return fill

    async def _run_fill(
        self, fill: _Fill, up: Upstream, target: str, headers: dict[str, str], etag: str
    ) -> None:
        lock = await self._lock(os.path.basename(fill.path))
        hasher: Any = None
        if len(etag) == 64:
            hasher = hashlib.sha256()
        elif len(etag) == 40 and fill.size is not None:
            hasher = hashlib.sha1(b"blob %d\x00" % fill.size, usedforsecurity=False)

        def started(length: int | None) -> None:
            if fill.size is None:
                fill.size = length

        async def sink(chunk: bytes) -> None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fill.fd, view) :]
            if hasher is not None:
                hasher.update(chunk)
            fill.written += len(chunk)
            self.counts["bytes_from_upstream"] += len(chunk)
            await fill.changed()

        try:
            if not await self._copy_stored(fill, etag):
                self.counts["upstream"] += 1
                await up.download(target, headers, started, sink)
                self._check(fill, hasher, etag)
                await asyncio.to_thread(os.fsync, fill.fd)
                os.replace(fill.partial, fill.path)
                self._spawn(asyncio.to_thread(fleet.push_blob, fill.path))
            fill.done = True
        except (UpstreamError, OSError) as exc:
            fill.error = str(exc)
            if isinstance(exc, UpstreamError) and exc.status != 502:
                self._failed(up, exc)
            with contextlib.suppress(OSError):
                os.unlink(fill.partial)
        except asyncio.CancelledError:
            fill.error = "the hub cache stopped"
            with contextlib.suppress(OSError):
                os.unlink(fill.partial)
            raise
        finally:
            self._fills.pop(fill.path, None)
            if lock is not None:
                await asyncio.to_thread(lock.release)
            await fill.changed()
            os.close(fill.fd)  # readers read through descriptors of their own

    async def _copy_stored(self, fill: _Fill, etag: str) -> bool:
        """Whether another process stored the file while we waited for its lock; if so, its
        bytes become the fill's (they are served, not fetched again)."""
        theirs = await self._stored(fill.path, etag, fill.size)
        if theirs is None:
            return False
        try:
            os.sendfile(fill.fd, theirs, 0, os.fstat(theirs).st_size)
        finally:
            os.close(theirs)
        fill.written = os.fstat(fill.fd).st_size
        return True

    def _check(self, fill: _Fill, hasher: Any, etag: str) -> None:
        """Raise unless the bytes fetched are as many as said, with the digest the Hub gave."""
        if fill.size is not None and fill.written != fill.size:
            raise UpstreamError(f"got {fill.written} bytes, expected {fill.size}", 502)
        if hasher is not None and hasher.hexdigest() != etag:
            self.counts["digest_mismatch"] += 1
            raise UpstreamError(
                f"the bytes have digest {hasher.hexdigest()}, the Hub said {etag}", 502
            )

    async def _follow(
        self, request: web.Request, fill: _Fill, headers: dict[str, str]
    ) -> web.StreamResponse:
        """Stream a file that is being fetched, as its bytes arrive (``Range: bytes=N-[M]``)."""
        start, end = 0, None
        status = 200
        spec = request.headers.get("Range", "")
        if spec.startswith("bytes=") and "," not in spec:
            first, _, last = spec[6:].partition("-")
            if first.isdigit():
                start = int(first)
                end = int(last) + 1 if last.isdigit() else None
                status = 206
        fd = os.dup(fill.fd)
        try:
            resp = web.StreamResponse(status=status, headers=headers)
            if fill.size is not None:
                stop = fill.size if end is None else min(end, fill.size)
                if status == 206:
                    resp.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{fill.size}"
                resp.content_length = max(0, stop - start)
                end = stop
            await resp.prepare(request)
            offset = start
            while end is None or offset < end:
                async with fill.cond:
                    await fill.cond.wait_for(functools.partial(_moved, fill, offset))
                ready = _readable(fill)
                if ready > offset:
                    want = ready - offset if end is None else min(ready, end) - offset
                    data = os.pread(fd, min(want, CHUNK), offset)
                    if not data:
                        break
                    await resp.write(data)
                    offset += len(data)
                elif fill.error is not None:
                    # Cut the transfer short: the client sees fewer bytes than announced and
                    # asks again (huggingface_hub resumes with a Range).
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                else:
                    break
            await resp.write_eof()
            return resp
        finally:
            os.close(fd)

    # -- anything else --------------------------------------------------------------------
    async def _pass(self, request: web.Request, target: str) -> web.StreamResponse:
        """Forward a request the cache does not keep (uploads, other paths), as it is."""
        self.counts[PASSED] += 1
        if self.settings.offline:
            return self._respond(request, _error_body(504, "the hub cache runs store-only"), ERROR)
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

    import aiohttp  # noqa: PLC0415

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    connector = aiohttp.TCPConnector(limit=64, limit_per_host=32)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=True) as session:
        hub = Hub(settings, session)
        runner = web.AppRunner(hub.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, sock, shutdown_timeout=5.0)
        await site.start()
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
        ready(f"http://{shown}:{bound[1]}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
