"""Code that runs in the worker processes of the concurrency tests (spawned: importable here)."""

from __future__ import annotations

import contextlib
import os
import random
from typing import TYPE_CHECKING, Any, Protocol

from cacheroot.mediacache import MediaCache

from .origin import gen_body


class Gate(Protocol):
    """A start barrier (a manager's proxy or a plain ``threading.Barrier``)."""

    def wait(self, timeout: float | None = None) -> int: ...


if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event


def fetch_one(directory: str, url: str, expected: bytes, start: Gate) -> dict[str, Any]:
    """Wait for every caller, then get ``url`` once; report what came back."""
    cache = MediaCache(directory)
    start.wait(60)
    body = cache.get(url, timeout=30)
    return {"ok": body == expected, **cache.stats()}


def fetch_many(
    *,
    directory: str,
    base: str,
    max_size: int,
    seed: int,
    urls: int,
    pool: int,
    sizes: tuple[int, int],
    start: Gate,
) -> dict[str, Any]:
    """Get ``urls`` URLs drawn from a shared pool (so processes overlap), checking each body."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    cache = MediaCache(directory, max_size_bytes=max_size)
    start.wait(60)
    wrong = 0
    for _ in range(urls):
        n = rng.randrange(pool)
        size = sizes[0] + (n * 7919) % (sizes[1] - sizes[0])
        if cache.get(f"{base}/gen/{n}/{size}", timeout=30) != gen_body(n, size):
            wrong += 1
    return {"wrong": wrong, **cache.stats()}


def tree_size(directory: str) -> int:
    """Bytes of every regular file under ``directory`` (what ``du --apparent-size`` says)."""
    total = 0
    for here, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total


def sample_peak(
    directory: str, stop: Event, peak: Synchronized[int], samples: Synchronized[int]
) -> None:
    """Measure the directory until told to stop, keeping the largest size seen."""
    while not stop.is_set():
        size = tree_size(directory)
        with peak.get_lock():
            peak.value = max(peak.value, size)
        samples.value += 1
