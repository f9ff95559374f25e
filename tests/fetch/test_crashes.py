"""kill -9 at random moments: nothing partial is ever published, nothing stays locked."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from cacheroot.fetch import Fetcher
from cacheroot.fetch.store import PathLock, lock_path, partials, sha256_file

from .origin import Origin, body, sha256
from .procs import spawn, wait_ready

SIZE = 1 << 20
RATE = 4 << 20  # about 0.25 s per transfer: random kill points land all over it


def _check_invariants(dest: Path, digest: str) -> None:
    if dest.exists():
        assert sha256_file(str(dest)) == (digest, SIZE), "a published file is partial or wrong"
    lock = PathLock(lock_path(str(dest)), timeout=5.0)
    lock.acquire()  # never held by a dead process
    lock.release()


def _kill_run(origin: Origin, name: str, rounds: int, seed: int) -> int:
    """``rounds`` URLs, two kills each, then a fetch that must succeed; return resumes seen."""
    rng = random.Random(seed)  # noqa: S311 - kill points, not secrets
    fetcher = Fetcher(read_timeout=10.0, retries=3, backoff=0.01)
    resumed = 0
    for i in range(rounds):
        key = f"/slow/{i}{name}"
        url = origin.url(f"{key}?size={SIZE}&rate={RATE}")
        digest = sha256(body(f"{i}{name}", SIZE))
        dest = fetcher.path(url)
        for _ in range(2):
            proc = spawn([(url, digest)], gate=False)
            wait_ready(proc)
            time.sleep(rng.uniform(0.0, 0.3))  # the random point: no event marks it
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
            assert proc.returncode in (0, -signal.SIGKILL)
            _check_invariants(dest, digest)
        path = fetcher.fetch(url, sha256=digest)
        assert sha256_file(str(path)) == (digest, SIZE)
        assert partials(str(dest)) == []
        _check_invariants(dest, digest)
        resumed += any(r is not None and r != "bytes=0-" for r in origin.ranges[key])
    return resumed


def test_kill_9_twenty_times(origin: Origin, name: str) -> None:
    resumed = _kill_run(origin, name, rounds=10, seed=1)
    # Some later process adopted a dead one's partial and asked only for the rest.
    assert resumed >= 1


@pytest.mark.slow
def test_kill_9_two_hundred_times(origin: Origin, name: str) -> None:
    assert _kill_run(origin, name, rounds=100, seed=2) >= 10
