"""Fixtures of the fetch tests: a live origin server and a Fetcher with test-sized timeouts."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import Fetcher, reset_stats

from .origin import Origin

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def origin() -> Iterator[Origin]:
    """One fault-injecting origin per test process (xdist worker)."""
    server = Origin().start()
    yield server
    server.close()


@pytest.fixture
def name() -> str:
    """A file name no other test uses (first-GET faults and counters are per path)."""
    return f"f{uuid.uuid4().hex[:12]}.bin"


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    """Short timeouts and backoffs, so fault tests take milliseconds, not minutes."""
    reset_stats()
    f = Fetcher(
        connect_timeout=2.0,
        read_timeout=0.5,
        retries=3,
        backoff=0.01,
        backoff_max=0.05,
        retry_after_max=2.0,
        lock_timeout=30.0,
    )
    yield f
    f.close()
