"""The closing line counts the session's volume apart from the tests' own roots, and says offline.

One tiny project runs twice on one volume, cold (two xdist workers) then warm and offline, as
real pytest processes against a local origin. Two tests fetch into the volume; two fetch into a
root of their own, as the root conftest's isolation makes one for every unit test (one in a
fixture, one in the test body, after resetting the process's counters), so every run starts
those empty and downloads again. A warm offline run must read as warm: no miss on the volume,
the own roots' figures apart.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from .runner import layout_env, media_cache_available, plugin_args, report_lines, run_pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.origin import Server, static
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, static

#: Served bytes by path: 5 KiB for the volume's tests, 1.5 KiB for the own roots'.
BODIES = {"/a.bin": 2048, "/b.bin": 3072, "/c.bin": 1024, "/d.bin": 512}

PROJECT = """
import os

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_OFFLINE, TABLE, VLLM_TEST_CACHE_ONLY, resolve
from cacheroot.fetch import fetch, reset_stats, stats


def own_root(monkeypatch, root):
    # What tests/conftest.py's isolated_cache does: a fresh root, its layout, online.
    for name in (CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY, *(v.name for v in TABLE)):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CACHEROOT, str(root))
    for name, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    own_root(monkeypatch, tmp_path / "root")


def test_volume_a(cached_file):
    assert cached_file(ORIGIN + "/a.bin").stat().st_size == 2048


def test_volume_b(cached_file):
    assert cached_file(ORIGIN + "/b.bin").stat().st_size == 3072


def test_own_root_from_a_fixture(isolated):
    assert fetch(ORIGIN + "/c.bin").stat().st_size == 1024


def test_own_root_in_the_body(tmp_path, monkeypatch):
    own_root(monkeypatch, tmp_path / "root")
    reset_stats()  # as unit tests that read the counters do: the report keeps its own books
    assert fetch(ORIGIN + "/d.bin").stat().st_size == 512
    assert stats()["misses"] == 1
"""


@pytest.fixture
def origin() -> Iterator[Server]:
    server = Server()
    for path, size in BODIES.items():
        server.route(path, static(bytes(range(256)) * (size // 256)))
    with server:
        yield server


def _run(project: Path, env: dict[str, str], report: Path, *extra: str) -> tuple[str, Any]:
    out = run_pytest(
        [*plugin_args(), "--cacheroot-report", str(report), *extra],
        env=env,
        cwd=project,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 passed" in out.stdout
    lines = report_lines(out.stdout)
    assert len(lines) == 1, out.stdout
    figures = json.loads(report.read_text())
    assert figures["line"] == lines[0]
    return lines[0], figures


def _lock_wait_aside(line: str) -> str:
    """The line with its seconds of lock waiting written as ``S``.

    On a loaded machine even a lock that no one else holds can take hundredths of a second.
    """
    return re.sub(r"\b\d+\.\d\d s waiting on locks", "S s waiting on locks", line, count=1)


def test_a_warm_offline_run_reads_warm_apart_from_the_tests_own_roots(
    tmp_path: Path, origin: Server
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    header = f"from __future__ import annotations\n\nORIGIN = {origin.base!r}\n"
    (project / "test_tiny.py").write_text(header + textwrap.dedent(PROJECT))
    env = layout_env(tmp_path / "volume")
    media = "; media: 0 hits, 0 misses, 0 revalidated, 0 B saved" if media_cache_available() else ""
    own = "; tests' own roots: 0 hits, 2 misses, 1.5 KiB downloaded"

    # Cold, on two xdist workers: each sends both parts to the controller.
    cold_line, cold = _run(project, env, tmp_path / "cold.json", "-n", "2")
    assert _lock_wait_aside(cold_line) == (
        "cacheroot: 0 hits, 2 misses, 5.0 KiB downloaded, 0 B served from cache, "
        f"S s waiting on locks{media}{own} (2 processes)"
    )
    assert (cold["offline"], cold["misses"], cold["bytes_downloaded"]) == (False, 2, 5120)
    assert cold["tests_own_roots"]["misses"] == 2
    assert cold["tests_own_roots"]["bytes_downloaded"] == 1536
    assert sorted(r.path for r in origin.requests()) == sorted(BODIES)

    # Warm and offline, in one process.
    warm_line, warm = _run(project, env, tmp_path / "warm.json", "--cacheroot-offline")
    assert _lock_wait_aside(warm_line) == (
        "cacheroot: offline run; 2 hits, 0 misses, 0 B downloaded, 5.0 KiB served from cache, "
        f"S s waiting on locks{media}{own} (1 process)"
    )
    assert (warm["offline"], warm["hits"], warm["misses"]) == (True, 2, 0)
    assert (warm["bytes_downloaded"], warm["bytes_from_cache"]) == (0, 5120)
    assert (warm["tests_own_roots"]["hits"], warm["tests_own_roots"]["misses"]) == (0, 2)
    # The volume asked nothing the second time; the own roots, empty again, asked once more.
    assert sorted(r.path for r in origin.requests()) == sorted([*BODIES, "/c.bin", "/d.bin"])
