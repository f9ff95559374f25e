"""Per-process counters, so a test harness can report what the cache saved.

Plain numbers behind one lock: cheap enough for the hit path, and a snapshot is a ``dict`` that
crosses process boundaries (xdist workers) as it is.
"""

from __future__ import annotations

import threading

#: The counters, in the order :func:`stats` reports them.
FIELDS = (
    "hits",
    "misses",
    "downloads",
    "bytes_downloaded",
    "bytes_from_cache",
    "lock_wait_seconds",
)

_lock = threading.Lock()
_counts: dict[str, float] = dict.fromkeys(FIELDS, 0)


def add(**amounts: float) -> None:
    """Increase counters by the given amounts (``add(hits=1, bytes_from_cache=n)``)."""
    with _lock:
        for name, amount in amounts.items():
            _counts[name] += amount


def stats() -> dict[str, float]:
    """A snapshot of this process's counters.

    ``hits``/``misses``: calls answered from the cache / that needed the origin (a miss that
    waited for another process's download and then found the file counts as a hit);
    ``downloads``: transfers that published a file; ``bytes_downloaded``: bytes received from
    origins (retries included); ``bytes_from_cache``: sizes of the entries returned on hits;
    ``lock_wait_seconds``: time spent waiting for other processes' downloads.
    """
    with _lock:
        return dict(_counts)


def reset_stats() -> None:
    """Set every counter back to zero (tests and harnesses that report per phase)."""
    with _lock:
        for name in FIELDS:
            _counts[name] = 0
