"""Many processes, one origin: single flight, and every file verified."""

from __future__ import annotations

import random
from pathlib import Path

from cacheroot.fetch import Fetcher
from cacheroot.fetch.store import sha256_file

from .origin import Origin, body, sha256
from .procs import open_gate, result, spawn, wait_ready


def test_sixteen_processes_one_get(origin: Origin, name: str) -> None:
    size = 1 << 20
    # Slow enough (about 0.5 s) that all sixteen are waiting while the first downloads.
    url = origin.url(f"/slow/{name}?size={size}&rate={2 << 20}")
    digest = sha256(body(name, size))
    procs = [spawn([(url, digest)]) for _ in range(16)]
    for proc in procs:
        wait_ready(proc)
    open_gate(procs)
    reports = [result(proc) for proc in procs]
    paths = {p for r in reports for p in r["paths"]}  # type: ignore[attr-defined]
    assert len(paths) == 1
    assert origin.gets[f"/slow/{name}"] == 1
    assert sha256_file(paths.pop()) == (digest, size)
    downloads = sum(r["stats"]["downloads"] for r in reports)  # type: ignore[index]
    assert downloads == 1
    waited = [r["stats"]["lock_wait_seconds"] for r in reports]  # type: ignore[index]
    assert max(waited) > 0.1  # the others really waited on the lock


def test_eight_processes_fifty_urls_mixed(origin: Origin, name: str) -> None:
    urls = [
        (origin.url(f"/ok/{i}{name}?size=20000"), sha256(body(f"{i}{name}", 20000)))
        for i in range(50)
    ]
    warm = Fetcher()
    for url, digest in urls[:20]:  # hits for everyone
        warm.fetch(url, sha256=digest)
    procs = []
    for seed in range(8):
        order = urls[:]
        random.Random(seed).shuffle(order)  # noqa: S311 - test order, not secrets
        procs.append(spawn(order))
    for proc in procs:
        wait_ready(proc)
    open_gate(procs)
    reports = [result(proc) for proc in procs]
    gets = [origin.gets[f"/ok/{i}{name}"] for i in range(50)]
    assert gets == [1] * 50
    for url, digest in urls:
        assert sha256_file(str(warm.path(url)))[0] == digest
    for report in reports:
        for path in report["paths"]:  # type: ignore[attr-defined]
            assert Path(path).exists()
    assert sum(r["stats"]["downloads"] for r in reports) == 30  # type: ignore[index]
