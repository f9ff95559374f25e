"""The metadata cache: the Hub's answers kept per URL and credential, served stale on error.

An answer for a commit is fresh for good; for a branch or a tag it is fresh for ``ttl``
seconds and then asked again; a "not found" answer for ``negative_ttl``. When the upstream
answers 429 or 5xx, times out past ``deadline``, refuses or resets, the last good answer is
served (stale-if-error, RFC 5861). While a host is left alone (:mod:`.breaker`, or a wait it
asked another hub process of the store for), what is kept is served at once and what is not
fails at once (:mod:`.outage`). One upstream request per key at a time, in this process
(:attr:`MetaCache.flights`) and across the store's processes (its file locks).

A file's ``HEAD`` is metadata too: :mod:`.files` asks this cache for it, so a file's digest
is known, and kept, exactly like any other answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import time
from typing import TYPE_CHECKING, Any

from .._errors import LockTimeout
from .._lock import PathLock
from . import branches, fills, outage, routes, xet
from .outage import unanswered
from .responses import ERROR, HIT, MISS, REVALIDATED, STALE
from .store import PUBLIC, Answer, authorization, carries_credential, credential, key_of
from .upstream import UpstreamError

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Awaitable, Callable, Mapping

    from .settings import Settings
    from .store import Store
    from .upstream import Upstream

__all__ = ["MetaCache"]

#: Statuses kept as "not found" answers (the Hub answers 401 for a repository it does not show).
_NEGATIVE = frozenset({401, 403, 404})


class MetaCache:
    """The answers to metadata requests: kept, asked once at a time, served stale on error."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        upstreams: Mapping[str, Upstream],
        counts: Counter[str],
        spawn: Callable[[Awaitable[Any]], asyncio.Task[Any]],
    ) -> None:
        self.settings = settings
        self.store = store
        self.upstreams = upstreams
        self.counts = counts
        #: Starts a task the server cancels when it shuts down.
        self._spawn = spawn
        #: The upstream requests in flight, per key: joined by whoever asks the same meanwhile.
        self.flights: dict[str, asyncio.Task[Answer | UpstreamError]] = {}
        #: The commits the branches' revision answers name (see :mod:`.branches`).
        self._pins = branches.Pins()

    async def on_commit(
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
        if kept is None and self.store.answer_key is not None:
            # Another node of the fleet may have it (signed, on the tier): read in a thread.
            kept = await fills.in_pool(self.store.load_shared, key)
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
        flight = self.flights.get(key)
        if flight is None:
            flight = self._spawn(self._ask(up, method, target, headers, key=key, kept=kept))
            self.flights[key] = flight
            flight.add_done_callback(lambda _t: self.flights.pop(key, None))
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
        lock = await self.lock(key)
        try:
            again = self.store.load(key)
            if again is not None and (kept is None or again.stored > kept.stored):
                return again
            if self.store.answer_key is not None:
                # Another node of the fleet may have asked it lately (signed, on the tier).
                theirs: Answer | None = await fills.in_pool(self.store.load_shared, key)
                if (
                    theirs is not None
                    and (kept is None or theirs.stored > kept.stored)
                    and time.time() - theirs.stored < self.settings.ttl
                ):
                    self.counts["answer_from_shared_tier"] += 1
                    return theirs
            self.counts["upstream"] += 1
            try:
                answer = await up.meta(method, target, headers)
            except UpstreamError as err:
                self.failed(up, err)
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

    async def lock(self, key: str, timeout: float | None = None) -> Any:
        """The store's lock of ``key`` (other processes of the store), or ``None`` when it is
        not free within ``timeout`` seconds (``--deadline`` unless said)."""
        wait = self.settings.deadline if timeout is None else timeout
        # An flock on the lock's path as given (/proc/self/fd/N/KEY.lock, bound to the store's
        # held directory): filelock would resolve it to the directory's current name first.
        try:
            # Its directory reached (made, the first time) and the lock waited for off the loop.
            lock = await asyncio.to_thread(_locked, self.store, key, wait)
        except (LockTimeout, OSError):
            return None  # a slow peer must not hold every caller: ask anyway
        return lock

    def failed(self, up: Upstream, err: UpstreamError) -> None:
        """Count a failure of an upstream host. A wait the API asked for is also recorded in
        the store, so that every hub process on it obeys; the breakers themselves are told by
        :class:`Upstream`, per host (a request never sent, its breaker open, is no failure)."""
        if not err.contacted:
            return
        self.counts["upstream_errors"] += 1
        if err.wait is not None and err.origin == up.breaker.origin:
            # Written and synced in the fills' threads: this process's breakers already know,
            # and an fsync on the loop would stall every request while the store's disk syncs.
            fills.in_background(self.store.block, up.base, time.time() + err.wait)


def _locked(store: Store, key: str, timeout: float) -> PathLock:
    """The store's lock of ``key``, held (:class:`LockTimeout` after ``timeout`` seconds).
    Blocking."""
    lock = PathLock(store.lock_path(key), timeout=timeout)
    lock.acquire()
    return lock
