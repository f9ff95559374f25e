"""Trust tiers: ``CACHEROOT_SHARED_MODE=rw|ro|off``. A job that runs untrusted code (a pull request
from a fork) reads through the shared tier and never writes, leases, syncs or evicts there; a
volume mounted read-only is used the same way, said once; ``off`` ignores the shared tier."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, CACHEROOT_SHARED, CACHEROOT_SHARED_MODE
from cacheroot.envs._shared_tier import shared_mode

from .hostile import cli, put, snapshot

RO_NOTE = "the shared tier is read-only here (CACHEROOT_SHARED_MODE=ro or a read-only mount)"


@pytest.fixture(autouse=True)
def _no_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHEROOT_SHARED_MODE, raising=False)


@pytest.mark.parametrize(
    ("value", "mode"),
    [(None, "rw"), ("", "rw"), ("  ", "rw"), ("ro", "ro"), (" RO ", "ro"), ("off", "off")],
)
def test_the_mode_is_read_at_call_time_blank_is_unset(value: str | None, mode: str) -> None:
    env = {} if value is None else {CACHEROOT_SHARED_MODE: value}
    assert shared_mode(env) == mode


def test_a_bad_mode_names_the_accepted_ones(tmp_path: Path) -> None:
    (tmp_path / "l2").mkdir()
    done = cli(tmp_path / "l1", tmp_path / "l2", "tier", "sync", **{CACHEROOT_SHARED_MODE: "yes"})
    assert done.returncode == 2
    assert done.stderr == (
        "cacheroot tier: CACHEROOT_SHARED_MODE='yes' is not a mode: expected one of rw, ro, off "
        "(rw: read and write the shared tier, the default; ro: read it only, for untrusted "
        "builds; off: ignore it)\n"
    )


def _shared_entry(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    """A file fetched once by a trusted job: ``(l2, its source, a fresh l1, its URL)``."""
    l2 = tmp_path / "l2"
    l2.mkdir()
    src = put(tmp_path, "origin/a.bin", b"alpha")
    done = cli(tmp_path / "trusted", l2, "fetch", "--allow-file", "-q", src.as_uri())
    assert done.returncode == 0, done.stderr
    return l2, src, tmp_path / "untrusted", src.as_uri()


def test_ro_reads_through_and_never_writes(tmp_path: Path) -> None:
    l2, src, l1, url = _shared_entry(tmp_path)
    src.write_bytes(b"changed at the origin")  # a hit on L2 must not ask the origin
    before = snapshot(l2)
    done = cli(l1, l2, "fetch", "--allow-file", url, **{CACHEROOT_SHARED_MODE: "ro"})
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).read_bytes() == b"alpha"
    assert snapshot(l2) == before
    other = put(tmp_path, "origin/b.bin", b"beta")  # a miss: fetched here, never written through
    ro = {CACHEROOT_SHARED_MODE: "ro"}
    done = cli(l1, l2, "fetch", "--allow-file", "-q", other.as_uri(), **ro)
    assert done.returncode == 0, done.stderr
    assert snapshot(l2) == before


def test_ro_cache_only_runs_read_the_shared_tier(tmp_path: Path) -> None:
    l2, _src, l1, url = _shared_entry(tmp_path)
    ro = {CACHEROOT_OFFLINE: "1", CACHEROOT_SHARED_MODE: "ro"}
    done = cli(l1, l2, "fetch", "--allow-file", "-q", url, **ro)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(Path(done.stdout.strip()).read_bytes()).hexdigest() == (
        "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8"
    )


def test_jit_caches_of_an_ro_job_never_reach_the_shared_tier(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    put(l2, "triton/K0/kernel.so", b"trusted kernel")
    ro = {CACHEROOT_SHARED_MODE: "ro"}
    merged = tmp_path / "merged"
    done = cli(l1, l2, "tier", "up", "--mode", "seed", "--merged", str(merged), **ro)
    assert done.returncode == 0, done.stderr
    assert (merged / "triton" / "K0" / "kernel.so").read_bytes() == b"trusted kernel"
    put(l1, "triton/K1/kernel.so", b"a fork's kernel")  # what the untrusted tests compiled
    before = snapshot(l2)
    done = cli(l1, l2, "tier", "sync", **ro)
    assert (done.returncode, done.stdout) == (0, f"nothing synced: {RO_NOTE}\n")
    done = cli(l1, l2, "tier", "evict", "--l2-older-than", "1s", "--l1-max-size", "1T", **ro)
    assert done.returncode == 0, done.stderr
    assert f"L2: nothing removed: {RO_NOTE}\n" in done.stdout
    assert snapshot(l2) == before


def test_off_ignores_the_shared_tier(tmp_path: Path) -> None:
    l2, _src, l1, url = _shared_entry(tmp_path)
    off = {CACHEROOT_SHARED_MODE: "off"}
    done = cli(l1, l2, "fetch", "--allow-file", "-q", url, **{CACHEROOT_OFFLINE: "1"}, **off)
    assert done.returncode != 0  # not on L1, and L2 is not looked at
    merged = tmp_path / "merged"
    done = cli(l1, l2, "tier", "up", "--merged", str(merged), **off)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"link: {merged} shows {l1} alone (CACHEROOT_SHARED_MODE=off: the shared tier is ignored)\n"
    )
    assert os.readlink(merged) == str(l1)


def _read_only_mount_missing() -> str:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "needs root and unshare(1) for a read-only bind mount in a private namespace"
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        return "private mount namespaces are refused here"
    return ""


def test_a_read_only_bind_mount_is_used_as_ro(tmp_path: Path) -> None:
    why = _read_only_mount_missing()
    if why:
        pytest.skip(why)
    l2, src, l1, url = _shared_entry(tmp_path)
    src.unlink()  # only the shared tier has it now
    put(l1, "triton/K1/kernel.so", b"kernel")
    cmd = f'"{sys.executable}" -m cacheroot.envs._cli'
    script = (
        f'mount --bind -o ro "{l2}" "{l2}" && mount -o remount,bind,ro "{l2}" && '
        f"{cmd} fetch --allow-file -q {url} && {cmd} tier sync"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script],
        env={**cli_env(l1), CACHEROOT_SHARED: str(l2)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f"nothing synced: {RO_NOTE}\n")
    note = f"CACHEROOT_SHARED={l2} is mounted read-only: read through, never written"
    assert done.stderr.count(note) == 2, done.stderr  # once by fetch, once by tier sync
    assert not (l2 / "triton").exists()


def cli_env(l1: Path) -> dict[str, str]:
    """The environment :func:`.hostile.cli` gives its commands, for one run in a shell."""
    from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, TABLE

    derived = {CACHEROOT_APPLIED, *(v.name for v in TABLE)}
    return {**{k: v for k, v in os.environ.items() if k not in derived}, CACHEROOT: str(l1)}
