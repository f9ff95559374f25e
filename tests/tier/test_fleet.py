"""Several hosts at once on one shared tier: real namespaces, tmpfs L1s, an L2 on another disk.

Every host is its own mount, pid and uts namespace with a private tmpfs as ``CACHEROOT``; the
shared tier is a directory of the test on the machine's disk. The origin counts requests.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import TYPE_CHECKING

import pytest

from .fleet import Host, hidden_partials, need_namespaces, visible_files, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.origin import Server, gated, paced, static
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, gated, paced, static

SIZE = 256 * 1024
ASSETS = [f"asset-{i}.bin" for i in range(6)]


def data(name: str, size: int = SIZE) -> bytes:
    """Deterministic bytes of an asset (any process can rebuild them)."""
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def origin() -> Iterator[Server]:
    """Each asset paced (16 KiB every 10 ms) so that the hosts' misses overlap."""
    server = Server()
    for name in ASSETS:
        server.route(f"/{name}", paced(static(data(name)), chunk=16384, every=0.01))
    with server:
        yield server


@pytest.fixture(autouse=True)
def _hosts_possible() -> None:
    need_namespaces()


def _fleet(tmp_path: Path, l2: str, urls: list[str], n: int = 4, **job: object) -> list[Host]:
    gate = tmp_path / "gate"
    hosts = [
        Host(f"host{i}", tmp_path, l2, urls=urls[i:] + urls[:i], gate=str(gate), **job)
        for i in range(n)
    ]
    gate.write_text("go")
    return hosts


def test_four_hosts_ask_the_origin_once_per_asset(origin: Server, tmp_path: Path) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    urls = [origin.url(f"/{name}") for name in ASSETS]
    reports = [h.report() for h in _fleet(tmp_path, str(l2), urls)]
    assert {f"/{name}": origin.count(f"/{name}") for name in ASSETS} == {
        f"/{name}": 1 for name in ASSETS
    }
    for report in reports:
        assert report["fs"]["l1"] == "tmpfs"
        assert report["files"] == {origin.url(f"/{n}"): sha(data(n)) for n in ASSETS}
    shared = visible_files(str(l2))
    assert sorted(sha(b) for b in shared.values()) == sorted(sha(data(n)) for n in ASSETS)
    assert hidden_partials(str(l2)) == []
    assert [p for p in _all(l2) if p.endswith(".lease")] == []


def _all(top: Path) -> list[str]:
    return [os.path.join(h, n) for h, _d, names in os.walk(top) for n in names]


def test_without_a_shared_tier_every_host_downloads(origin: Server, tmp_path: Path) -> None:
    urls = [origin.url(f"/{name}") for name in ASSETS[:2]]
    reports = [h.report() for h in _fleet(tmp_path, "", urls, n=3)]
    assert [origin.count(f"/{name}") for name in ASSETS[:2]] == [3, 3]
    assert all(r["files"][urls[0]] == sha(data(ASSETS[0])) for r in reports)


def test_a_stale_lease_of_a_killed_host_is_taken_over(tmp_path: Path) -> None:
    gate_origin = __import__("threading").Event()
    body = data("held.bin")
    with Server() as origin:
        origin.route("/held.bin", gated(static(body), gate_origin))
        url = origin.url("/held.bin")
        l2 = tmp_path / "l2"
        l2.mkdir()
        a = Host("hostA", tmp_path, str(l2), urls=[url], stale_after=1.0, beat=0.2)
        leases: list[str] = []

        def leased() -> bool:
            leases[:] = [p for p in _all(l2) if p.endswith(".lease")]
            return bool(leases) and origin.count("/held.bin") == 1

        wait_for(leased, what="host A to take the lease and start downloading")
        a.kill()  # kill -9 mid-download: its lease stays behind, no longer beating
        gate_origin.set()
        started = time.monotonic()
        b = Host("hostB", tmp_path, str(l2), urls=[url], stale_after=1.0, beat=0.2).report()
    assert b["files"] == {url: sha(body)}
    assert any("took over the lease" in line for line in b["log"]), b["log"]
    assert time.monotonic() - started >= 1.0  # it waited for the lease to go stale
    assert origin.count("/held.bin") == 2  # A's request, cut by its death, and B's
    assert list(visible_files(str(l2)).values()) == [body]


def test_a_built_directory_is_built_by_one_host(tmp_path: Path) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    builds = tmp_path / "builds.log"
    builds.touch()
    fleet = _fleet(tmp_path, str(l2), [], n=3, build=True, builds=str(builds))
    reports = [h.report() for h in fleet]
    assert len(builds.read_text().splitlines()) == 1
    weights = sha(bytes(range(256)) * 256)
    config = sha(b'{"hidden_size": 8}')
    for r in reports:
        assert r["built"] == {"config.json": config, "weights.bin": weights}


def test_eviction_of_the_shared_tier_while_another_host_reads(tmp_path: Path) -> None:
    body = data("big.bin", 8 << 20)
    with Server(static(body)) as origin:
        url = origin.url("/big.bin")
        l2 = tmp_path / "l2"
        l2.mkdir()
        Host("writer", tmp_path, str(l2), urls=[url]).report()
        # Old enough for the budget (it keeps what changed in the last 30 s).
        hour_ago = time.time() - 3600
        for path in _all(l2):
            os.utime(path, (hour_ago, hour_ago))
        paused, resume = tmp_path / "paused", tmp_path / "resume"
        reader = Host("reader", tmp_path, str(l2), urls=[url], pause=[str(paused), str(resume)])
        wait_for(paused.exists, what="the reader to be copying from the shared tier")
        evictor = Host("evictor", tmp_path, str(l2), cli=["tier", "evict", "--l2-max-size", "0"])
        assert evictor.report()["cli"] == 0
        assert visible_files(str(l2)) == {}  # gone from L2 while the reader was mid-copy
        resume.write_text("1")
        got = reader.report()
    assert got["files"] == {url: sha(body)}  # the unlinked file read to its end, verified
    assert origin.count("/big.bin") == 1
    assert hidden_partials(str(l2)) == []
