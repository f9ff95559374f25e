"""Counters per cache and for the whole process, so a test harness can report what was saved.

Plain numbers behind one lock each: cheap enough for the hit path, and a snapshot is a ``dict``
that crosses process boundaries (xdist workers) as it is.
"""

from __future__ import annotations

import threading

#: The counters, in the order the snapshots report them.
FIELDS = (
    "hits",
    "misses",
    "revalidations",
    "evictions",
    "bytes_saved",
    "stored",
    "not_stored",
    "stale_served",
    "bypassed",
)

_lock = threading.Lock()
_totals: dict[str, int] = dict.fromkeys(FIELDS, 0)


class Counters:
    """One cache's counters; every increment also goes to the process-wide totals.

    ``hits``: answered from disk without asking the origin; ``misses``: the origin sent a whole
    body (first fetch, expired entry without validators, or revalidation answered 200);
    ``revalidations``: conditional requests answered 304 (no body downloaded); ``evictions``:
    entries removed to respect the size bound; ``bytes_saved``: body bytes served from disk
    (hits and 304s); ``stored``/``not_stored``: origin bodies written or refused by the rules;
    ``stale_served``: stale entries served because the origin failed; ``bypassed``: requests
    the cache stepped aside for (credentials, ranges, the caller's own validators, a directory
    it cannot write).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(FIELDS, 0)

    def add(self, **amounts: int) -> None:
        """Increase counters by the given amounts (``add(hits=1, bytes_saved=n)``)."""
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount
        with _lock:
            for name, amount in amounts.items():
                _totals[name] += amount

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters."""
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Set this cache's counters back to zero (the process totals are kept)."""
        with self._lock:
            for name in FIELDS:
                self._counts[name] = 0


def stats() -> dict[str, int]:
    """The counters of every ``MediaCache`` of this process, summed (see :class:`Counters`)."""
    with _lock:
        return dict(_totals)


def reset_stats() -> None:
    """Set the process totals back to zero (harnesses that report per phase)."""
    with _lock:
        for name in FIELDS:
            _totals[name] = 0
