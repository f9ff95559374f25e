"""``cacheroot fetch``: the path as last line, documented exit statuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY
from cacheroot.fetch import Fetcher
from cacheroot.fetch._cli import CHECKSUM, FAILED, LOCKED, MISS, OK, USAGE

from .origin import Origin, body, sha256


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_fetch_prints_the_path(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    out = cli(url, "--sha256", sha256(body(name)), "--namespace", "ns")
    assert out.returncode == OK, out.stderr
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path == Fetcher().path(url, namespace="ns")
    assert path.read_bytes() == body(name)
    again = cli(url, "--namespace", "ns", "--offline")
    assert again.returncode == OK
    assert again.stdout.strip().splitlines()[-1] == str(path)


def test_exit_statuses(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    miss = cli(url, "--offline")
    assert miss.returncode == MISS
    assert "cacheroot fetch" in miss.stderr
    assert cli(url, env={CACHEROOT_OFFLINE: "1"}).returncode == MISS
    assert cli(url, env={VLLM_TEST_CACHE_ONLY: "1"}).returncode == MISS
    assert cli(url, "--sha256", "0" * 64).returncode == CHECKSUM
    assert cli(url, "--namespace", "../x").returncode == USAGE
    assert cli(url, "--sha256", "xyz").returncode == USAGE
    assert cli(origin.url(f"/missing/{name}")).returncode == FAILED
    assert cli("ftp://127.0.0.1/x").returncode == USAGE
    assert origin.gets[f"/ok/{name}"] == 1


def test_help_documents_exit_statuses() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for status in (OK, FAILED, USAGE, CHECKSUM, MISS, LOCKED):
        assert f"  {status}  " in out.stdout


HOLDER = """
import sys
from cacheroot.fetch.store import PathLock
with PathLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_exit_status_5_when_another_process_holds_the_entry(origin: Origin, name: str) -> None:
    from cacheroot.fetch.store import lock_path

    url = origin.url(f"/ok/{name}")
    dest = Fetcher().path(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_path(str(dest))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        done = cli(url, "--lock-timeout", "0.5")
    finally:
        holder.communicate("done\n", timeout=30)
    assert done.returncode == LOCKED, done.stderr
    assert f"pid {holder.pid}" in done.stderr  # the holder is named
    assert "waited 0.5 s for the lock" in done.stderr
    assert origin.gets[f"/ok/{name}"] == 0
    assert cli(url, "--lock-timeout", "0.5").returncode == OK  # free again
