"""``build_once`` with a bucket as the shared tier: one host of a fleet builds, the others
unpack its verified tree; a tree the bucket holds wrongly is never placed.

Each host is a process with its own cache root; the builder counts its runs in a file outside
every root, so the test sees how many hosts built.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .fleet import host_env

if TYPE_CHECKING:
    from .s3server import S3

#: One host: wait for the gate, build (or find) the artifact, print what its directory holds.
HOST = r"""
import hashlib, json, os, sys, time
from pathlib import Path
from cacheroot.fetch import build_once

counter, gate = sys.argv[1], sys.argv[2]

def tiny_model(out):
    with open(counter, "a") as f:
        f.write("built\n")
    time.sleep(1.0)  # long enough that every host asks while the first one builds
    (out / "config.json").write_bytes(b'{"hidden_size": 8}')
    (out / "sub").mkdir()
    (out / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 1000)
    (out / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    (out / "run.sh").chmod(0o755)
    (out / "latest").symlink_to("sub/weights.bin")

while not os.path.exists(gate):
    time.sleep(0.01)
top = build_once("tiny-model", tiny_model, inputs={"version": 1})
seen = {}
for here, dirs, names in os.walk(top):
    for name in names + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
        p = Path(here, name)
        rel = str(p.relative_to(top))
        if p.is_symlink():
            seen[rel] = "-> " + os.readlink(p)
        else:
            mode = "x" if os.access(p, os.X_OK) else "-"
            seen[rel] = mode + " " + hashlib.sha256(p.read_bytes()).hexdigest()
print(json.dumps(seen, sort_keys=True))
"""

WEIGHTS = bytes(range(256)) * 1000
CONFIG = b'{"hidden_size": 8}'
RUN = b"#!/bin/sh\necho run\n"
#: What every host must end with, whoever built it.
TREE = {
    "config.json": "- " + hashlib.sha256(CONFIG).hexdigest(),
    "latest": "-> sub/weights.bin",
    "run.sh": "x " + hashlib.sha256(RUN).hexdigest(),
    "sub/weights.bin": "- " + hashlib.sha256(WEIGHTS).hexdigest(),
}


#: Before a host unpacks the tree it pulled, the namespace it reached is swapped for a link to
#: the directory ``OUTSIDE`` names (as a writer of the volume could, between the walk and the
#: unpacking).
SWAP = r"""
import os
from cacheroot.fetch._bucket import trees

_unpack = trees._unpack

def swapped(store, found, dest, pfd):
    namespace = os.path.dirname(dest)
    os.rename(namespace, namespace + ".real")
    os.symlink(os.environ["OUTSIDE"], namespace)
    return _unpack(store, found, dest, pfd)

trees._unpack = swapped
"""


def _hosts(
    tmp_path: Path,
    s3: S3 | None,
    shared: str,
    names: list[str],
    *,
    mode: str = "rw",
    before: str = "",
    **extra: str,
) -> list[subprocess.CompletedProcess[str]]:
    script = tmp_path / "host.py"
    script.write_text(before + HOST)
    gate = tmp_path / f"gate-{'-'.join(names)}"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "counter"), str(gate)],
            env=host_env(tmp_path / name, shared, s3, mode=mode, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    time.sleep(0.3)
    gate.write_text("go")
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def _builds(tmp_path: Path) -> int:
    counter = tmp_path / "counter"
    return counter.read_text().count("built\n") if counter.exists() else 0


def _trees(s3: S3, bucket: str, prefix: str) -> dict[str, bytes]:
    return {k: v for k, v in s3.objects(bucket).items() if k.startswith(f"{prefix}/trees/")}


def test_two_hosts_build_once_and_both_hold_the_tree(s3: S3, bucket: str, tmp_path: Path) -> None:
    done = _hosts(tmp_path, s3, f"s3://{bucket}/fleet", ["a", "b"])
    for d in done:
        assert d.returncode == 0, d.stderr
        assert json.loads(d.stdout) == TREE
    assert _builds(tmp_path) == 1
    (record,) = _trees(s3, bucket, "fleet").values()
    shared = json.loads(record)
    archive = s3.objects(bucket)[f"fleet/blobs/sha256/{shared['archive_sha256']}"]
    assert len(archive) == shared["archive_size"]
    assert shared["meta"]["key"] == "tiny-model"
    assert "stat" not in shared["meta"]
    # A third host, later, unpacks it too.
    (later,) = _hosts(tmp_path, s3, f"s3://{bucket}/fleet", ["c"])
    assert json.loads(later.stdout) == TREE
    assert _builds(tmp_path) == 1


def test_an_ro_host_builds_for_itself_and_writes_nothing(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    (done,) = _hosts(tmp_path, s3, f"s3://{bucket}/ro", ["a"], mode="ro")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == TREE
    assert s3.objects(bucket) == {}


def test_an_archive_that_does_not_verify_is_rebuilt_and_replaced(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/heal"
    (first,) = _hosts(tmp_path, s3, shared, ["a"])
    assert first.returncode == 0, first.stderr
    ((name, record),) = _trees(s3, bucket, "heal").items()
    key = f"heal/blobs/sha256/{json.loads(record)['archive_sha256']}"
    size = len(s3.objects(bucket)[key])
    s3.client().put_object(Bucket=bucket, Key=key, Body=b"\0" * size)  # same size, other bytes
    (second,) = _hosts(tmp_path, s3, shared, ["b"])
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == TREE
    assert _builds(tmp_path) == 2
    assert "does not match its record" in second.stderr
    assert second.stderr.count("does not match its record") == 1
    healed = json.loads(_trees(s3, bucket, "heal")[name])
    assert f"heal/blobs/sha256/{healed['archive_sha256']}" in s3.objects(bucket)
    (third,) = _hosts(tmp_path, s3, shared, ["c"])
    assert json.loads(third.stdout) == TREE
    assert _builds(tmp_path) == 2  # the healed tree is used


def test_an_archive_whose_members_leave_the_tree_is_never_unpacked(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/evil"
    (first,) = _hosts(tmp_path, s3, shared, ["a"])
    assert first.returncode == 0, first.stderr
    ((name, record),) = _trees(s3, bucket, "evil").items()
    outside = tmp_path / "outside"
    outside.mkdir()
    # A writer of the bucket replaces the archive with one that climbs out, and records it.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for member, data in (
            ("../" * 40 + f"{outside}/planted".lstrip("/"), b"x"),
            ("config.json", b"{}"),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
    evil = buf.getvalue()
    digest = hashlib.sha256(evil).hexdigest()
    s3.client().put_object(Bucket=bucket, Key=f"evil/blobs/sha256/{digest}", Body=evil)
    forged = {**json.loads(record), "archive_sha256": digest, "archive_size": len(evil)}
    s3.client().put_object(Bucket=bucket, Key=name, Body=json.dumps(forged).encode())
    (second,) = _hosts(tmp_path, s3, shared, ["b"])
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == TREE
    assert _builds(tmp_path) == 2
    assert list(outside.iterdir()) == []
    assert "does not unpack here" in second.stderr


def test_evict_keeps_a_built_tree_by_size_and_removes_it_by_age(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/ev"
    (done,) = _hosts(tmp_path, s3, shared, ["a"])
    assert done.returncode == 0, done.stderr
    before = s3.objects(bucket)
    assert len(before) == 2  # the archive, then its record
    cli = [str(Path(sys.executable).with_name("cacheroot")), "tier", "evict"]
    env = host_env(tmp_path / "a", shared, s3)

    def evict(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )

    sized = evict("--l2-max-size", "0")
    assert sized.returncode == 0, sized.stderr
    assert s3.objects(bucket) == before
    aged = evict("--l2-older-than", "0")
    assert aged.returncode == 0, aged.stderr
    assert s3.objects(bucket) == {}


def test_a_namespace_swapped_for_a_link_before_the_unpacking_is_never_written_through(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/swap"
    (first,) = _hosts(tmp_path, s3, shared, ["a"])
    assert first.returncode == 0, first.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    (second,) = _hosts(tmp_path, s3, shared, ["b"], before=SWAP, OUTSIDE=str(outside))
    assert list(outside.iterdir()) == []  # no partial, record or tree made through the link
    # The tree was unpacked where the namespace was reached: in the directory now renamed.
    (real,) = (tmp_path / "b").rglob("built.real")
    (tree,) = (p for p in real.iterdir() if not p.name.startswith("."))
    assert tree.name.startswith("tiny-model-")
    assert (tree / "config.json").read_bytes() == CONFIG
    assert second.returncode == 0, second.stderr
