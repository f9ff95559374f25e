"""The hub cache as a service: ``GET /healthz`` for probes, ``GET /metrics`` for Prometheus.

A hub run as a Kubernetes Deployment needs two things a test session does not: a probe that
tells a pod that cannot do its job from one that can, and figures a Prometheus server scrapes.

- ``/healthz`` answers 200 with a small JSON object while the hub can serve: it answers, and a
  file can be created in its store (the probe writes and removes a partial file beside the
  blobs, as a fill would). It answers 503 when the store is unusable (not writable, gone, or
  silent for :data:`PROBE_DEADLINE` seconds): a hub that cannot store is a pass-through at best.
  Open breakers are reported but do not fail the probe: during an upstream outage, a hub that
  serves what it keeps is doing exactly its job, and a restart would lose nothing but its
  breakers' memory.
- ``/metrics`` is the Prometheus text exposition format (version 0.0.4), written here by hand:
  the format is a few line shapes, and a client library would be a dependency of every hub for
  one function. Every family has its ``# HELP`` and ``# TYPE`` lines, label values are escaped,
  a histogram's buckets are cumulative and end with ``+Inf``.

Both paths are answered before routing, so a probe or a scrape is never counted as a request of
a client, and never reaches the upstream. They shadow the Hub's own ``/healthz`` and ``/metrics``
pages, which no Hub client asks for.

What the counters of :class:`~.server.Hub` do not hold is kept by a :class:`Meter`: upstream
requests by origin and status class (seen on the client sessions' trace hooks, so every hop of a
redirect counts, the CDN's apart from the API's), the bytes of files answered from the store and
from the upstream (counted as each answer starts), and how long fills took.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import os
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import routes
from .breaker import OPEN, origin_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping

    import aiohttp

    from .fills import Fill
    from .server import Hub

__all__ = [
    "CONTENT_TYPE",
    "FILL_BUCKETS",
    "HEALTH",
    "METRICS",
    "PROBE_DEADLINE",
    "SLOWEST",
    "Meter",
    "exposition",
    "health",
    "install",
]

HEALTH = "/healthz"
METRICS = "/metrics"
#: The media type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Upper bounds (seconds) of the fill-time histogram's buckets; ``+Inf`` follows.
FILL_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0)
#: How many of the slowest fills are kept for the session's report.
SLOWEST = 5
#: Seconds the store may take to take a probe's file before it counts as unusable (a hung
#: network volume must fail the probe, not hold it).
PROBE_DEADLINE = 5.0
#: How an answer was served (``X-Cacheroot-Hub``) -> where its bytes came from.
_SOURCES = {
    "hit": "store",
    "stale": "store",
    "shared": "store",
    "miss": "upstream",
    "joined": "upstream",
    "revalidated": "upstream",
    "pass": "upstream",
}
#: The hub's counters, and the metric each is shown as (the rest: ``cacheroot_hub_events``).
_ANSWER_STATES = ("hit", "miss", "revalidated", "stale", "error", "pass")
_FILE_SOURCES = {
    "file_hit": "store",
    "file_from_shared_tier": "shared_tier",
    "file_miss": "upstream",
    "file_joined": "fill_in_progress",
    "file_passed": "passed_through",
}
_SHOWN_APART = frozenset(
    {"requests", "upstream", "upstream_errors", "bytes_from_upstream", *_ANSWER_STATES}
    | set(_FILE_SOURCES)
)


class Meter:
    """What ``/metrics`` shows beyond the hub's counters (see the module docstring)."""

    def __init__(self) -> None:
        #: Upstream requests by ``(origin, status class)``; ``error``: no answer at all.
        self.upstream: Counter[tuple[str, str]] = Counter()
        #: Bytes of files answered to clients, by where they came from (``store``, ``upstream``).
        self.file_bytes: Counter[str] = Counter()
        #: Fill times by outcome (``ok``, ``failed``): a count per bucket (the last: ``+Inf``),
        #: and their sum.
        self.fill_buckets: dict[str, list[int]] = {}
        self.fill_sums: dict[str, float] = {}
        #: The slowest fills: ``(seconds, target, bytes, outcome)``.
        self._slowest: list[tuple[float, str, int, str]] = []

    # -- what is observed -----------------------------------------------------------------
    def tracing(self) -> aiohttp.TraceConfig:
        """A trace configuration for the hub's client sessions: every request they send (each
        hop of a redirect too) is counted by its origin and its answer's status class."""
        import aiohttp  # noqa: PLC0415 - only where a hub runs

        async def ended(
            _session: aiohttp.ClientSession, _ctx: Any, params: aiohttp.TraceRequestEndParams
        ) -> None:
            self.answered(str(params.url), params.response.status)

        async def broke(
            _session: aiohttp.ClientSession,
            _ctx: Any,
            params: aiohttp.TraceRequestExceptionParams,
        ) -> None:
            self.answered(str(params.url), None)

        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(ended)
        trace.on_request_exception.append(broke)
        return trace

    def answered(self, url: str, status: int | None) -> None:
        """One upstream request to ``url`` got an answer with ``status`` (``None``: none)."""
        self.upstream[(origin_of(url), "error" if status is None else f"{status // 100}xx")] += 1

    def watch_fill(self, target: str, fill: Fill, task: asyncio.Future[Any]) -> None:
        """Time the fill ``task`` runs for ``target``, from now until it ends."""
        began = time.monotonic()

        def ended(_task: asyncio.Future[Any]) -> None:
            size = fill.size if fill.size is not None else fill.written
            self.filled(target, time.monotonic() - began, size, ok=fill.done)

        task.add_done_callback(ended)

    def filled(self, target: str, seconds: float, size: int, *, ok: bool) -> None:
        """One fill ended after ``seconds``: ``size`` bytes, stored (``ok``) or not."""
        outcome = "ok" if ok else "failed"
        buckets = self.fill_buckets.setdefault(outcome, [0] * (len(FILL_BUCKETS) + 1))
        index = next((i for i, b in enumerate(FILL_BUCKETS) if seconds <= b), len(FILL_BUCKETS))
        buckets[index] += 1
        self.fill_sums[outcome] = self.fill_sums.get(outcome, 0.0) + seconds
        entry = (round(seconds, 3), target.partition("?")[0], size, outcome)
        self._slowest = heapq.nlargest(SLOWEST, [*self._slowest, entry])

    def slowest(self) -> list[dict[str, object]]:
        """The slowest fills, slowest first, for ``GET /.cacheroot/hub``."""
        return [
            {"seconds": s, "target": t, "bytes": n, "outcome": o} for s, t, n, o in self._slowest
        ]

    async def _answered(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Count a file's bytes as its answer starts (``on_response_prepare``)."""
        if request.method != "GET" or response.status not in (200, 206):
            return
        source = _SOURCES.get(response.headers.get("X-Cacheroot-Hub", ""))
        length = response.content_length
        if source is None or not length:
            return
        path, _, query = request.raw_path.partition("?")
        if routes.classify("GET", path, query).kind == routes.FILE:
            self.file_bytes[source] += length


def install(app: web.Application, hub: Hub) -> None:
    """Answer ``/healthz`` and ``/metrics`` on ``app`` for ``hub``, and count what it serves."""

    @web.middleware
    async def service(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method in ("GET", "HEAD"):
            if request.path == HEALTH:
                return await health(hub)
            if request.path == METRICS:
                text = exposition(hub, time.time())
                return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})
        return await handler(request)

    app.middlewares.append(service)
    app.on_response_prepare.append(hub.meter._answered)  # noqa: SLF001 - its own hook


# -- /healthz -----------------------------------------------------------------------------
def _probe_store(hub: Hub) -> None:
    """Create, write and remove a file where fills write theirs; raise :class:`OSError` if the
    store cannot take one. A probe killed half-way leaves a partial, which the sweep removes."""
    store = hub.store
    partial, fd = store.new_partial(os.path.join(store.blobs, "healthz"))
    try:
        os.write(fd, b"ok\n")
    finally:
        os.close(fd)
        store.drop_partial(partial)  # through its held directory, which it also closes


async def health(hub: Hub) -> web.Response:
    """The answer to ``GET /healthz`` (see the module docstring)."""
    problem = ""
    try:
        await asyncio.wait_for(asyncio.to_thread(_probe_store, hub), PROBE_DEADLINE)
    except asyncio.TimeoutError:
        problem = f"the store did not take a file within {PROBE_DEADLINE:g} s"
    except OSError as exc:
        problem = f"the store cannot take a file: {exc.strerror or exc}"
    now = time.time()
    payload: dict[str, object] = {
        "serving": not problem,
        "store": {"path": hub.store.root, "writable": not problem},
        "offline": hub.settings.offline,
        "breakers": {o: b["state"] for o, b in hub.breakers.report(now).items()},
    }
    if problem:
        payload["problem"] = problem
    return web.json_response(payload, status=503 if problem else 200)


# -- /metrics -----------------------------------------------------------------------------
def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Text:
    """Lines of the text exposition format, one family at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self,
        name: str,
        kind: str,
        doc: str,
        samples: Iterable[tuple[Mapping[str, str], float]],
    ) -> None:
        self.lines.append(f"# HELP {name} {doc.replace(chr(92), chr(92) * 2)}")
        self.lines.append(f"# TYPE {name} {kind}")
        self.samples(name, samples)

    def samples(self, name: str, samples: Iterable[tuple[Mapping[str, str], float]]) -> None:
        for labels, value in samples:
            shown = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            labelled = f"{name}{{{shown}}}" if shown else name
            self.lines.append(f"{labelled} {_number(value)}")


def exposition(hub: Hub, now: float) -> str:
    """The text of ``GET /metrics`` for ``hub`` at ``now``."""
    counts = hub.counts
    meter = hub.meter
    out = _Text()
    out.family(
        "cacheroot_hub_requests_total",
        "counter",
        "Requests of clients (probes and scrapes not included).",
        [({}, counts["requests"])],
    )
    out.family(
        "cacheroot_hub_answers_total",
        "counter",
        "Answers to metadata requests (and failed file requests), by how they were served: "
        "hit and stale from the store, miss and revalidated from the upstream.",
        [({"state": s}, counts[s]) for s in _ANSWER_STATES],
    )
    out.family(
        "cacheroot_hub_file_answers_total",
        "counter",
        "Answers to file requests, by where the bytes came from.",
        [({"source": src}, counts[key]) for key, src in _FILE_SOURCES.items()],
    )
    out.family(
        "cacheroot_hub_served_file_bytes_total",
        "counter",
        "Bytes of files answered to clients, by where they came from (counted as each answer "
        "starts).",
        [({"source": s}, meter.file_bytes[s]) for s in ("store", "upstream")],
    )
    out.family(
        "cacheroot_hub_upstream_file_bytes_total",
        "counter",
        "Bytes of files downloaded from the upstream.",
        [({}, counts["bytes_from_upstream"])],
    )
    out.family(
        "cacheroot_hub_upstream_requests_total",
        "counter",
        "Requests sent upstream, by origin and status class (error: no answer).",
        [
            ({"origin": origin, "status": status}, n)
            for (origin, status), n in sorted(meter.upstream.items())
        ],
    )
    out.family(
        "cacheroot_hub_upstream_failures_total",
        "counter",
        "Upstream requests that failed (429, 5xx, timeouts, refused or reset connections).",
        [({}, counts["upstream_errors"])],
    )
    _fill_histogram(out, meter)
    out.family(
        "cacheroot_hub_breaker_open",
        "gauge",
        "1 while an origin's breaker is open (nothing is sent to it), else 0.",
        [({"origin": o}, int(b["state"] == OPEN)) for o, b in hub.breakers.report(now).items()],
    )
    out.family(
        "cacheroot_hub_offline",
        "gauge",
        "1 while the hub runs store-only, else 0.",
        [({}, int(hub.settings.offline))],
    )
    rest = sorted(k for k in counts if k not in _SHOWN_APART)
    out.family(
        "cacheroot_hub_events_total",
        "counter",
        "Other events of the hub (bytes that failed their check, partial files removed, ...).",
        [({"event": k}, counts[k]) for k in rest],
    )
    return "\n".join(out.lines) + "\n"


def _fill_histogram(out: _Text, meter: Meter) -> None:
    name = "cacheroot_hub_fill_duration_seconds"
    out.family(name, "histogram", "Seconds from a fill's start to its end, by outcome.", [])
    for outcome, buckets in sorted(meter.fill_buckets.items()):
        running = 0
        rows: list[tuple[Mapping[str, str], float]] = []
        for bound, n in zip((*FILL_BUCKETS, math.inf), buckets, strict=True):
            running += n
            rows.append(({"outcome": outcome, "le": _number(bound)}, running))
        out.samples(f"{name}_bucket", rows)
        out.samples(f"{name}_sum", [({"outcome": outcome}, meter.fill_sums[outcome])])
        out.samples(f"{name}_count", [({"outcome": outcome}, running)])
