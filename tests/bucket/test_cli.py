"""``cacheroot tier`` and ``cacheroot doctor`` with a bucket as the shared tier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_SHARED_MODE

from .conftest import ASSETS, sha
from .fleet import Host, host_env
from .s3server import closed_port

if TYPE_CHECKING:
    from tests.origin import Server

    from .s3server import S3

CLI = str(Path(sys.executable).with_name("cacheroot"))


def cacheroot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], env=env, capture_output=True, text=True, check=False, timeout=60
    )


def _shared_line(out: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.strip().startswith("shared:"))


def test_doctor_says_what_the_bucket_lets_this_process_do(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    env = host_env(tmp_path / "l1", f"s3://{bucket}/doc", s3)
    done = cacheroot(env, "doctor")
    line = _shared_line(done.stdout)
    assert line == (
        f"shared: s3://{bucket}/doc (bucket: list ok, read ok, write ok, conditional writes "
        "honoured)"
    ), done.stdout
    ro = cacheroot({**env, CACHEROOT_SHARED_MODE: "ro"}, "doctor")
    assert _shared_line(ro.stdout) == (
        f"shared: s3://{bucket}/doc (bucket: list ok, read ok, read only: "
        "CACHEROOT_SHARED_MODE=ro; never written)"
    ), ro.stdout
    assert s3.objects(bucket) == {}  # the write probe leaves nothing
    for out in (done.stdout + done.stderr, ro.stdout + ro.stderr):
        assert s3.secret not in out


def test_doctor_names_an_endpoint_where_nothing_listens(tmp_path: Path) -> None:
    env = host_env(
        tmp_path / "l1",
        "s3://fleet/doc",
        None,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port()}",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="doctor-never-shows-this",  # noqa: S106 - looked for in outputs
        AWS_REGION="us-east-1",
    )
    done = cacheroot(env, "doctor")
    out = done.stdout + done.stderr
    assert "shared: s3://fleet/doc (bucket: not reachable)" in out, out
    assert "nothing answers at the endpoint of s3://fleet/doc" in out
    assert "doctor-never-shows-this" not in out


def test_sync_writes_through_what_an_ro_run_fetched(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/sync"
    urls = [[origin.url(p), None] for p in ASSETS]
    l1 = tmp_path / "l1"
    done = Host(tmp_path, "ro", host_env(l1, shared, s3, mode="ro"), urls=urls).wait()
    assert done.rc == 0, done.stderr
    assert s3.objects(bucket) == {}
    synced = cacheroot(host_env(l1, shared, s3), "tier", "sync")
    assert synced.returncode == 0, synced.stderr
    assert synced.stdout.startswith("synced 3 entries"), synced.stdout
    objects = s3.objects(bucket)
    for data in ASSETS.values():
        assert objects[f"sync/blobs/sha256/{sha(data)}"] == data
    again = cacheroot(host_env(l1, shared, s3), "tier", "sync")
    assert again.stdout.startswith("synced 0 entries (0 B); 3 already there"), again.stdout
    later = Host(tmp_path, "later", host_env(tmp_path / "l1-later", shared, s3), urls=urls).wait()
    assert later.rc == 0, later.stderr
    assert all(origin.count(p, "GET") == 1 for p in ASSETS)
    ro = cacheroot(host_env(l1, shared, s3, mode="ro"), "tier", "sync")
    assert ro.stdout == "nothing synced: the bucket is read-only here (CACHEROOT_SHARED_MODE=ro)\n"


def test_up_seeds_l1_from_the_bucket_and_down_removes_the_link(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/up"
    urls = [[origin.url(p), None] for p in ASSETS]
    first = Host(tmp_path, "first", host_env(tmp_path / "l1-a", shared, s3), urls=urls).wait()
    assert first.rc == 0, first.stderr
    l1 = tmp_path / "l1-b"
    merged = tmp_path / "merged"
    env = host_env(l1, shared, s3)
    up = cacheroot(env, "tier", "up", "--merged", str(merged))
    assert up.returncode == 0, up.stderr
    assert "seeded 3 entries" in up.stdout, up.stdout
    assert os.readlink(merged) == str(l1)
    seeded = sorted(
        str(p.relative_to(l1)) for p in l1.rglob("*") if p.is_file() and not p.name.startswith(".")
    )
    fetched = sorted(
        str(p.relative_to(tmp_path / "l1-a"))
        for p in (tmp_path / "l1-a").rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    assert seeded == fetched
    assert len(seeded) == 3
    # The seeded entries are hits: the host asks neither the origin nor, then, the bucket.
    done = Host(tmp_path, "b", env, urls=urls).wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(d) for d in ASSETS.values()]
    assert all(origin.count(p, "GET") == 1 for p in ASSETS)
    down = cacheroot(env, "tier", "down", "--merged", str(merged))
    assert down.stdout == "link removed\n"
    assert not os.path.lexists(merged)


def test_evict_removes_records_then_their_blobs(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/ev"
    urls = [[origin.url(p), None] for p in ASSETS]
    env = host_env(tmp_path / "l1", shared, s3)
    assert Host(tmp_path, "h", env, urls=urls).wait().rc == 0
    before = s3.objects(bucket)
    dry = cacheroot(env, "tier", "evict", "--l2-max-size", "0", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("L2: would remove 3 entries"), dry.stdout
    assert s3.objects(bucket) == before
    small = len(ASSETS["/c.txt"])
    kept = cacheroot(env, "tier", "evict", "--l2-max-size", str(small))
    assert kept.returncode == 0, kept.stderr
    names = sorted(s3.objects(bucket))
    # Newest first, a record is kept while its blob fits the budget: only c.txt fits.
    assert [n for n in names if n.startswith("ev/blobs/")] == [
        f"ev/blobs/sha256/{sha(ASSETS['/c.txt'])}"
    ]
    assert len([n for n in names if n.startswith("ev/records/")]) == 1
    gone = cacheroot(env, "tier", "evict", "--l2-older-than", "0")
    assert gone.returncode == 0, gone.stderr
    assert s3.objects(bucket) == {}


def test_up_seeds_nothing_through_a_directory_planted_as_a_link(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    """Another job of the host replaced ``vllm`` in L1 with a link to a directory outside it:
    seeding reaches each entry's directory from L1's top without following a link, so nothing
    is made or written behind the link, and the entries are reported as not seeded."""
    shared = f"s3://{bucket}/planted"
    urls = [[origin.url(p), None] for p in ASSETS]
    first = Host(tmp_path, "first", host_env(tmp_path / "l1-a", shared, s3), urls=urls).wait()
    assert first.rc == 0, first.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    l1 = tmp_path / "l1-b"
    l1.mkdir()
    (l1 / "vllm").symlink_to(outside)
    up = cacheroot(host_env(l1, shared, s3), "tier", "up", "--merged", str(tmp_path / "merged"))
    assert "seeded 0 entries (0 B); 0 already there, 0 skipped, 3 failed" in up.stdout, up.stdout
    assert list(outside.iterdir()) == []
    assert (l1 / "vllm").is_symlink()
