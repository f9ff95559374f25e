"""The fill registry: a file's bytes stored once, checked, and served to everyone who asks.

A file (``GET .../resolve/REV/PATH``) is named by the digest its metadata gives for it
(``X-Linked-Etag``: sha256; ``ETag``: git blob sha1; ModelScope's listing: sha256), asked of
the :class:`~.metacache.MetaCache` like any metadata. Its bytes then come from one of three
places, in this order:

- **stored**: the store's file (or the shared tier's, :mod:`.fleet`), its bytes checked first
  when this user's hubs did not check them (:mod:`.verified`), served with ``Range`` and
  ``sendfile``;
- **followed**: the download another process of the store runs (:mod:`.peers`), or the one
  this process runs (a :class:`~.fills.Fill`), streamed as it arrives;
- **fetched**: a new fill, checked against the digest and the size and published into the
  store in one step; bytes that fail their check are answered so for a while, not fetched again.

A file with no digest to check it by is relayed, never stored. What came with a credential is
sent to another URL or credential only once the upstream vouched for it (:mod:`.grants`).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import filemeta, fills, fleet, outage, peers
from .responses import ERROR, HIT, MISS, PASSED, STATE_HEADER, record_served
from .store import PUBLIC, authorization, carries_credential, credential, digest_of
from .upstream import UpstreamError
from .verified import Verified

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Awaitable, Callable, Mapping

    from . import metrics, routes
    from .grants import Grants
    from .metacache import MetaCache
    from .responses import Responder
    from .settings import Settings
    from .upstream import Upstream

__all__ = ["FileCache"]


class FileCache:
    """The files of the store, and the fills that fetch them: who follows which, what failed."""

    def __init__(
        self,
        metacache: MetaCache,
        responder: Responder,
        grants: Grants,
        meter: metrics.Meter,
        spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
    ) -> None:
        self.metacache = metacache
        self.responder = responder
        self.grants = grants
        self.meter = meter
        #: Starts a task the server cancels when it shuts down.
        self._spawn = spawn
        self.settings: Settings = metacache.settings
        self.store = metacache.store
        self.upstreams: Mapping[str, Upstream] = metacache.upstreams
        self.counts: Counter[str] = metacache.counts
        #: The fills running in this process, per file: joined by whoever asks meanwhile.
        self._fills: dict[str, fills.Fill] = {}
        #: Files whose bytes failed their check lately: answered that, not fetched again.
        self._failures = fills.Failures()
        #: Stored files whose bytes this user's hubs checked (see :mod:`.verified`).
        self._verified = Verified(self.settings.store)

    async def answer(
        self, request: web.Request, target: str, route: routes.Route
    ) -> web.StreamResponse:
        """The answer to a file's request (see the module docstring)."""
        found = await filemeta.lookup(self.metacache, self.responder, request, target, route)
        if isinstance(found, web.StreamResponse):
            return found
        etag, size, headers, commit = found
        headers["Content-Type"] = "application/octet-stream"
        record_served(self.store, route, commit)
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
            return self.responder.respond(request, answer, ERROR)
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
            return self.responder.respond(request, answer, ERROR)
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
            return self.responder.respond(
                request, outage.store_only(route, "GET", target, what), ERROR
            )
        up = self.upstreams[route.hub]
        self.counts["file_passed"] += 1
        self.counts["upstream"] += 1
        headers[STATE_HEADER] = PASSED
        resp, err = await fills.relay(request, up, target, headers, size)
        if err is not None:
            self.counts[ERROR] += 1
            if err.status != 502:
                self.metacache.failed(up, err)
        return resp

    def _open_judged(self, path: str, size: int | None, name: str) -> tuple[int | None, bool]:
        """The stored file's descriptor (``None``: none), and whether this user's hubs checked
        it as it is (:mod:`.verified`). Blocking."""
        fd = self.store.open_blob(path, size)
        return fd, fd is not None and self._verified.trusted(fd, name)

    async def _stored(self, path: str, etag: str, size: int | None) -> int | None:
        """A descriptor of the stored file ``path``, or ``None`` when there is none to trust.

        The store is on a volume other jobs write: a file that this user's hubs did not check
        themselves (:mod:`.verified`: published by one, or checked on a serve) has its bytes
        checked against the digest it is named by before it is served (as ``CACHEROOT_VERIFY=
        first-use`` does for downloads), and a file that fails is removed and fetched again.
        """
        name = os.path.basename(path)
        # Opened and judged in the fills' threads: on a network volume either can block.
        opened: tuple[int | None, bool] = await fills.in_pool(self._open_judged, path, size, name)
        fd, trusted = opened
        if fd is None:
            return None
        if not trusted:
            self.counts["blob_checked"] += 1
            found = await fills.in_pool(digest_of, fd, etag, os.fstat(fd).st_size)
            if found is not None and found != etag:
                self.counts["blob_corrupt"] += 1
                self._verified.forget(fd)
                os.close(fd)
                await fills.in_pool(self.store.remove_blob, path)
                return None
        # Stamp it as used (what `hub prune` goes by) and record it as it is after the stamp.
        await fills.in_pool(self._verified.stamp, fd, name)
        return fd

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
                self.metacache.failed(up, exc)
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
        lock = await self.metacache.lock(name, timeout=0)
        if lock is None:  # another process of the store downloads it: follow that
            if await self._follow_peer(fill, etag):
                return None, True
            lock = await self.metacache.lock(name)
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
