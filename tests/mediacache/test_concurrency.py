"""Threads, asyncio tasks and processes sharing one cache directory, against a real origin."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

from . import workers

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin

#: Spawned, not forked: the test process runs the origin's threads.
CTX = multiprocessing.get_context("spawn")


def test_single_flight_threads_and_processes(tmp_path: Path, origin: Origin) -> None:
    """N threads here plus M processes ask for one URL at once: the origin sees one GET.

    The origin holds its answer until every caller has passed the start barrier and then a
    little longer, so that all of them are really waiting on the in-flight download.
    """
    threads, processes = 6, 4
    body = os.urandom(200_000)
    gate = threading.Event()
    url = origin.route("/one.jpg", body, gate=gate)
    directory = str(tmp_path / "media")
    start = CTX.Manager().Barrier(threads + processes + 1)
    with (
        ProcessPoolExecutor(processes, mp_context=CTX) as procs,
        ThreadPoolExecutor(threads) as pool,
    ):
        futures = [
            procs.submit(workers.fetch_one, directory, url, body, start) for _ in range(processes)
        ] + [pool.submit(workers.fetch_one, directory, url, body, start) for _ in range(threads)]
        start.wait(60)
        assert origin.first_get.wait(30)
        threading.Event().wait(0.5)  # let the late callers reach the lock
        gate.set()
        results = [f.result(60) for f in futures]
    assert all(r["ok"] for r in results)
    assert origin.gets["/one.jpg"] == 1
    assert sum(r["misses"] for r in results) == 1
    assert sum(r["hits"] for r in results) == threads + processes - 1


def _run_bounded(
    tmp_path: Path, origin: Origin, *, procs: int, urls: int, pool: int
) -> dict[str, Any]:
    sizes = (2_000, 12_000)
    max_size = 150_000
    directory = str(tmp_path / "media")
    os.makedirs(directory)
    start = CTX.Manager().Barrier(procs + 1)
    stop = CTX.Event()
    peak = CTX.Value("q", 0)
    samples = CTX.Value("q", 0)
    # The sampler is a process of its own: in this one it would starve the origin's threads.
    sampler = CTX.Process(target=workers.sample_peak, args=(directory, stop, peak, samples))
    with ProcessPoolExecutor(procs, mp_context=CTX) as ex:
        futures = [
            ex.submit(
                workers.fetch_many,
                directory=directory,
                base=origin.base,
                max_size=max_size,
                seed=i,
                urls=urls,
                pool=pool,
                sizes=sizes,
                start=start,
            )
            for i in range(procs)
        ]
        start.wait(60)
        sampler.start()
        results = [f.result(600) for f in futures]
    stop.set()
    sampler.join(30)
    largest_entry = sizes[1] + 1500  # body + sidecar
    assert sum(r["wrong"] for r in results) == 0
    assert peak.value <= max_size + largest_entry, (peak.value, max_size)
    assert workers.tree_size(directory) <= max_size
    assert samples.value > 10
    totals = {k: sum(r[k] for r in results) for k in ("hits", "misses", "evictions", "stored")}
    assert totals["hits"] + totals["misses"] == procs * urls
    assert totals["evictions"] > 0
    assert totals["hits"] > 0
    assert sum(origin.gets.values()) == totals["misses"]
    report = {"peak": peak.value, "bound": max_size, "samples": samples.value, **totals}
    print(report)  # noqa: T201 - shown with -s: the figures behind the assertions
    return report


def test_size_bound_under_concurrent_writers(tmp_path: Path, origin: Origin) -> None:
    """8 processes x 200 URLs; a sampler watches the directory never exceed the bound."""
    _run_bounded(tmp_path, origin, procs=8, urls=200, pool=300)


@pytest.mark.slow
def test_size_bound_heavy(tmp_path: Path, origin: Origin) -> None:
    """The same with 8 processes x 1000 URLs over a wider pool."""
    _run_bounded(tmp_path, origin, procs=8, urls=1000, pool=1500)
