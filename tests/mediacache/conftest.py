"""Fixtures of the media cache tests: a live origin, a clock the test moves, a cache on both."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from cacheroot.mediacache import MediaCache

from .origin import Origin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class Clock:
    """Seconds since the epoch that only move when the test says so."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def origin() -> Iterator[Origin]:
    """A fresh origin per test, so counts and routes never leak between tests."""
    server = Origin().start()
    yield server
    server.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> MediaCache:
    """A 1 MiB cache with a one-hour TTL on the test's clock."""
    return MediaCache(tmp_path / "media", max_size_bytes=1 << 20, ttl=3600.0, clock=clock)
