"""The hit path pays nothing for a bucket: no client loaded without one, no request with one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_SHARED
from cacheroot.fetch import Fetcher

from .fleet import host_env

if TYPE_CHECKING:
    from tests.origin import Server

    from .s3server import S3

CHECK = textwrap.dedent(
    """
    import sys
    from cacheroot.fetch import Fetcher
    f = Fetcher()
    f.fetch(sys.argv[1])  # a miss
    f.fetch(sys.argv[1])  # a hit
    names = ("obstore", "cacheroot.fetch._bucket")
    dotted = tuple(n + "." for n in names)
    print(sorted(m for m in sys.modules if m in names or m.startswith(dotted)))
    """
)


@pytest.mark.parametrize("tier", ["none", "file"])
def test_without_a_bucket_neither_a_miss_nor_a_hit_loads_the_client(
    origin: Server, tmp_path: Path, tier: str
) -> None:
    shared = tmp_path / "l2"
    shared.mkdir()
    env = host_env(tmp_path / "l1", str(shared) if tier == "file" else "", None)
    done = subprocess.run(
        [sys.executable, "-c", CHECK, origin.url("/a.bin")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert origin.count("/a.bin", "GET") == 1


def test_a_hit_sends_no_request_to_the_bucket(
    s3: S3, bucket: str, origin: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    if s3.log is None:
        pytest.skip("counts the requests in moto's log")
    monkeypatch.setenv(CACHEROOT_SHARED, f"s3://{bucket}/hit")
    fetcher = Fetcher()
    url = origin.url("/c.txt")
    first = fetcher.fetch(url)
    assert len(s3.objects(bucket)) == 2  # written through: blob and record
    before = s3.requests()
    for _ in range(20):
        assert fetcher.fetch(url) == first
        assert Fetcher().fetch(url) == first
    assert s3.requests() == before
    assert before > 0


def test_the_start_up_hook_does_not_load_the_client_for_a_bucket(tmp_path: Path) -> None:
    env = host_env(tmp_path / "l1", "s3://fleet/p", None)
    check = (
        "import sys, cacheroot.fetch; names = ('obstore', 'cacheroot.fetch._bucket'); "
        "print(sorted(m for m in sys.modules if m.startswith(names)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert done.stderr == ""
