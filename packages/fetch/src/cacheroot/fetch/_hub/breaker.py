"""A circuit breaker per upstream host: when the hub cache stops asking it, and for how long.

A hub cache talks to more than one host: the Hub's API (metadata, and the first hop of every
file's bytes) and the hosts that files are redirected to (the Hub's CDN). Each gets a breaker of
its own, keyed by origin (scheme, host and port), so a CDN that fails leaves metadata alone, and
a refused ``file://`` redirect or a CDN outage never passes for an outage of the API.

While a breaker is open, what the store keeps is served at once and the rest fails at once;
nothing is sent to that host. That costs every request the store cannot answer, so one failure is
not enough to open it: a single timeout is weak evidence (a slow moment, a busy connection pool).
It opens after :data:`FAILURES_TO_OPEN` failures in a row (no answer from that host between them,
each within the cool-off of the one before) and stays open for the cool-off. After that, one
request goes through as a probe (half-open): an answer closes the breaker, a failure opens it for
another cool-off. A probe that never reports back (its caller went away) lets another one through
after ``probe`` seconds.

A host that says how long to wait is believed at once, whatever the count: a 429, or a failure
with ``Retry-After``, or with a rate limit spent. The Hugging Face Hub sends the IETF draft's
``RateLimit: "api";r=0;t=55`` (with ``RateLimit-Policy: "fixed window";"api";q=500;w=300``);
earlier drafts, and other servers, send ``RateLimit-Remaining: 0`` and ``RateLimit-Reset: 55``.
Each opens the breaker for the longest wait any of them asks for.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._httpvalues import decimal, retry_after

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CLOSED",
    "FAILURES_TO_OPEN",
    "HALF_OPEN",
    "OPEN",
    "RATE_LIMIT_PAUSE",
    "Breaker",
    "Breakers",
    "asked_wait",
    "origin_of",
]

#: Failures in a row that open a breaker (one timeout is not an outage).
FAILURES_TO_OPEN = 3
#: Seconds a 429 that names no wait keeps its host alone.
RATE_LIMIT_PAUSE = 1.0
#: A breaker's states, as ``GET /.cacheroot/hub`` reports them.
CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"

#: ``w=300`` in a ``RateLimit-Policy`` (the window, in seconds).
_WINDOW = re.compile(r"(?:^|;)\s*w\s*=\s*([0-9]+)\s*(?:;|$)")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased: what a breaker is kept for."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def _params(item: str) -> dict[str, int]:
    """The numeric parameters of one list member (``"api";r=0;t=55`` gives ``r`` and ``t``)."""
    found: dict[str, int] = {}
    for part in item.split(";"):
        name, eq, value = part.partition("=")
        number = decimal(value) if eq else None
        if number is not None:
            found[name.strip().lower()] = number
    return found


def _rate_limit_wait(fields: Mapping[str, str]) -> int | None:
    """Seconds until a spent rate limit resets, from any of the header styles above."""
    policy = _WINDOW.search(fields.get("ratelimit-policy", ""))
    window = int(policy[1]) if policy else None
    waits: list[int] = []
    legacy: dict[str, int] = {}
    for item in fields.get("ratelimit", "").split(","):
        params = _params(item)
        if params.get("r") == 0:  # draft 08 and later: one member per policy
            reset = params.get("t", window)
            if reset is not None:
                waits.append(reset)
        for name in ("remaining", "reset"):  # draft 07: `limit=100, remaining=0, reset=55`
            if name in params:
                legacy[name] = params[name]
    for name in ("remaining", "reset"):  # drafts 00 to 06: one field each
        number = decimal(fields.get(f"ratelimit-{name}"))
        if number is not None:
            legacy.setdefault(name, number)
    if legacy.get("remaining") == 0 and "reset" in legacy:
        waits.append(legacy["reset"])
    return max(waits) if waits else None


def asked_wait(status: int, headers: Mapping[str, str]) -> float | None:
    """Seconds a failed answer (429, 5xx) asked every caller to wait; ``None`` if it did not.

    The longest of ``Retry-After`` and a spent rate limit; a 429 that names neither asks for
    :data:`RATE_LIMIT_PAUSE`.
    """
    fields: dict[str, str] = {}
    for name, value in headers.items():
        lower = str(name).lower()
        if lower in fields and lower == "ratelimit":
            fields[lower] += f", {value}"  # several field lines are one list
        else:
            fields.setdefault(lower, str(value))
    waits = [
        float(w)
        for w in (retry_after(fields.get("retry-after")), _rate_limit_wait(fields))
        if w is not None
    ]
    if waits:
        return max(waits)
    return RATE_LIMIT_PAUSE if status == 429 else None


class Breaker:
    """One origin's breaker (see the module docstring); times are ``time.time()`` values."""

    def __init__(self, origin: str, *, cooloff: float, probe: float) -> None:
        self.origin = origin
        self.cooloff = cooloff
        self.probe = probe
        #: Failures in a row, and when the last one was.
        self.failures = 0
        self.last_failure = 0.0
        #: Whether it opened (open, then half-open once ``open_until`` passed).
        self.tripped = False
        self.open_until = 0.0
        #: Until when the probe let through in half-open state is waited for.
        self.probe_until = 0.0
        #: The last failure, for messages; whether the wait in force is one the host asked for.
        self.reason = ""
        self.asked = False

    def state(self, now: float) -> str:
        """:data:`CLOSED`, :data:`OPEN` or :data:`HALF_OPEN`."""
        if not self.tripped:
            return CLOSED
        return OPEN if now < self.open_until else HALF_OPEN

    def wait(self, now: float) -> float:
        """Seconds before a request may be sent to this origin (0: now); claims nothing."""
        if not self.tripped:
            return 0.0
        if now < self.open_until:
            return self.open_until - now
        return max(0.0, self.probe_until - now)

    def admit(self, now: float) -> float:
        """Like :meth:`wait`, but a request let through while half-open becomes the probe."""
        wait = self.wait(now)
        if wait == 0.0 and self.tripped:
            self.probe_until = now + self.probe
        return wait

    def succeeded(self) -> None:
        """The origin answered (any status that is not a failure): close the breaker."""
        self.failures = 0
        self.tripped = self.asked = False
        self.probe_until = 0.0

    def failed(self, now: float, reason: str, asked: float | None = None) -> None:
        """The origin failed (429, 5xx, a timeout, a refused or reset connection).

        ``asked``: the seconds it asked every caller to wait (:func:`asked_wait`), if it did.
        """
        if now - self.last_failure > self.cooloff:
            self.failures = 0  # failures far apart are not an outage
        self.failures += 1
        self.last_failure = now
        self.reason = reason
        self.probe_until = 0.0
        if asked is not None:
            self._open(now, asked, asked=True)
        elif self.tripped or self.failures >= FAILURES_TO_OPEN:
            self._open(now, self.cooloff, asked=False)

    def _open(self, now: float, pause: float, *, asked: bool) -> None:
        if pause <= 0:
            return  # a cool-off of 0 means never left alone
        if now + pause >= self.open_until or not self.tripped:
            self.asked = asked
        self.tripped = True
        self.open_until = max(self.open_until, now + pause)

    def report(self, now: float) -> dict[str, object]:
        """Its state, failures in a row, seconds still open and last failure, for the stats."""
        return {
            "state": self.state(now),
            "failures": self.failures,
            "open_for": round(max(0.0, self.open_until - now) if self.tripped else 0.0, 1),
            "last_failure": self.reason,
        }


class Breakers:
    """The breakers of every origin a hub cache has contacted, made on first use."""

    def __init__(self, *, cooloff: float, probe: float) -> None:
        self.cooloff = cooloff
        self.probe = probe
        self._by_origin: dict[str, Breaker] = {}

    def get(self, url: str) -> Breaker:
        """The breaker of ``url``'s origin."""
        origin = origin_of(url)
        found = self._by_origin.get(origin)
        if found is None:
            found = Breaker(origin, cooloff=self.cooloff, probe=self.probe)
            self._by_origin[origin] = found
        return found

    def report(self, now: float) -> dict[str, dict[str, object]]:
        """Every breaker's :meth:`Breaker.report`, by origin."""
        return {origin: b.report(now) for origin, b in sorted(self._by_origin.items())}
