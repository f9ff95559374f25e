"""Model snapshots through a bucket tier: hosts with their own cache roots that share only a
bucket ask the hub once per file for the fleet (``host.py`` warming a snapshot with the real hub
clients, in front of the local test hub, with ``CACHEROOT_SHARED=s3://BUCKET/PREFIX``).

Expected object names and bytes come from hashlib on the literal files below and from boto3,
never from the code under test.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, HF_HUB_OFFLINE

from .fleet import Host, host_env
from .s3server import closed_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.hub.hubserver import HubRepo, HubServer

    from .s3server import S3
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer

#: An LFS file (the Hub names it by its sha256) and a small one (named by its git blob sha1).
WEIGHTS = bytes(range(7, 251)) * 300
CONFIG = b'{"model_type": "llama", "hidden_size": 8, "vocab_size": 16}\n'
REPO = HubRepo("acme/bucket-snapshot", {"config.json": CONFIG, "model.safetensors": WEIGHTS})
PREFIX = "models"
REPO_DIR = "models--acme--bucket-snapshot"
SHA256 = {name: hashlib.sha256(data).hexdigest() for name, data in REPO.files.items()}
GIT_SHA1 = hashlib.sha1(b"blob %d\x00" % len(CONFIG) + CONFIG, usedforsecurity=False).hexdigest()
#: The objects of each file (Hugging Face names the small file by its git blob sha1).
HF_OBJECTS = {
    "config.json": f"{PREFIX}/blobs/git-sha1/{GIT_SHA1}",
    "model.safetensors": f"{PREFIX}/blobs/sha256/{SHA256['model.safetensors']}",
}
MS_OBJECTS = {name: f"{PREFIX}/blobs/sha256/{digest}" for name, digest in SHA256.items()}
HUB_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer()
    server.add_hf(REPO)
    server.add_modelscope(REPO)
    with server:
        yield server


class Fleet:
    """Hosts warming one snapshot, each with a cache root of its own and the same bucket."""

    def __init__(self, s3: S3, bucket: str, hub: HubServer, tmp: Path) -> None:
        self.s3, self.bucket, self.hub, self.tmp = s3, bucket, hub, tmp

    def start(
        self, name: str, kind: str = "hf", *, mode: str = "rw", gate: Path | None = None, **env: str
    ) -> Host:
        extra = {**HUB_ENV, "HF_ENDPOINT": self.hub.url, "MODELSCOPE_ENDPOINT": self.hub.url}
        environ = host_env(
            self.tmp / name, f"s3://{self.bucket}/{PREFIX}", self.s3, mode=mode, **extra, **env
        )
        spec = {"repo_id": REPO.repo_id, "revision": REPO.commit, "hub": kind}
        return Host(
            self.tmp / "jobs",
            name,
            environ,
            snapshot=spec,
            gate=None if gate is None else str(gate),
        )

    def warm(self, name: str, kind: str = "hf", **kw: Any) -> dict[str, Any]:
        return report(self.start(name, kind, **kw))

    def objects(self) -> dict[str, bytes]:
        return self.s3.objects(self.bucket)


def report(host: Host) -> dict[str, Any]:
    done = host.wait(timeout=60)
    assert done.rc == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    found["stderr"] = done.stderr
    return found


@pytest.fixture
def fleet(s3: S3, bucket: str, hub: HubServer, tmp_path: Path) -> Fleet:
    return Fleet(s3, bucket, hub, tmp_path)


def _file_gets(hub: HubServer, kind: str) -> dict[str, int]:
    """File downloads per file (Hugging Face: GETs on resolve; ModelScope: on its file API)."""
    if kind == "hf":
        return {
            name: hub.count_path(f"/{REPO.repo_id}/resolve/{REPO.commit}/{name}", "GET")
            for name in REPO.files
        }
    return {"*": hub.count_path(f"/api/v1/models/{REPO.repo_id}/repo", "GET")}


def _complete(found: dict[str, Any]) -> None:
    """The warm succeeded and its snapshot holds each file's bytes."""
    assert found["error"] is None, found
    assert found["files"] == SHA256


def _read_back(found: dict[str, Any]) -> None:
    """huggingface_hub itself finds each file in the host's cache, offline."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    snapshot = Path(found["path"])
    hub_cache = snapshot.parents[2]  # <hub cache>/<REPO_DIR>/snapshots/<commit>
    for name, data in REPO.files.items():
        path = try_to_load_from_cache(REPO.repo_id, name, cache_dir=hub_cache, revision=REPO.commit)
        assert isinstance(path, str), (name, path)
        assert Path(path).read_bytes() == data
        blob = Path(path).resolve()
        assert blob.name == (GIT_SHA1 if name == "config.json" else SHA256[name])
    # The whole revision, complete as the client's own cached listing of the commit says.
    assert (hub_cache / REPO_DIR / "trees" / f"{REPO.commit}.json").is_file()
    got = snapshot_download(
        REPO.repo_id, revision=REPO.commit, cache_dir=hub_cache, local_files_only=True
    )
    assert got == found["path"]


def _shared(found: dict[str, Any]) -> bool:
    return any("copied from the shared tier" in line for line in found["log"])


def _warnings(found: dict[str, Any]) -> list[str]:
    return [line for line in found["log"] if line.startswith("WARNING")]


@pytest.mark.parametrize("kind", ["hf", "modelscope"])
def test_two_hosts_warming_one_revision_at_once_ask_the_hub_once_per_file(
    fleet: Fleet, hub: HubServer, kind: str
) -> None:
    gate = fleet.tmp / "gate"
    hosts = [fleet.start(f"host-{i}", kind, gate=gate) for i in range(2)]
    time.sleep(1.0)  # both hosts started and wait at the gate
    gate.write_text("go")
    found = [report(h) for h in hosts]

    for one in found:
        _complete(one)
        assert _warnings(one) == [], one["log"]
        if kind == "hf":  # (modelscope_hub shows its progress on stderr)
            assert one["stderr"] == "", one["stderr"]
            _read_back(one)
    assert sorted(_shared(one) for one in found) == [False, True]
    if kind == "hf":
        assert _file_gets(hub, kind) == {"config.json": 1, "model.safetensors": 1}
    else:
        assert _file_gets(hub, kind) == {"*": 2}
    # The files under their content's names, one record; no lease or probe left behind.
    objects = fleet.objects()
    files = HF_OBJECTS if kind == "hf" else MS_OBJECTS
    assert {name: objects[obj] for name, obj in files.items()} == REPO.files
    records = sorted(n for n in objects if n.startswith(f"{PREFIX}/snapshots/"))
    assert sorted(objects) == sorted([*files.values(), *records])
    assert len(records) == 1
    record = json.loads(objects[records[0]])
    assert (record["hub"], record["repo_id"], record["revision"]) == (
        kind,
        REPO.repo_id,
        REPO.commit,
    )
    assert sorted((f["path"], f["size"], f["sha256"]) for f in record["files"]) == [
        ("config.json", len(CONFIG), SHA256["config.json"]),
        ("model.safetensors", len(WEIGHTS), SHA256["model.safetensors"]),
    ]
    assert all("stat" not in f for f in record["files"])  # this host's inodes stay home
    if kind == "hf":
        assert record["blobs"] == {
            "config.json": GIT_SHA1,
            "model.safetensors": SHA256["model.safetensors"],
        }
        # huggingface_hub's listing of the commit travels too (trees/<commit>.json).
        assert sorted(record["tree"]["files"]) == ["config.json", "model.safetensors"]
    else:
        assert "blobs" not in record


def test_an_ro_host_reads_the_bucket_and_writes_nothing(fleet: Fleet, hub: HubServer) -> None:
    alone = fleet.warm("ro-first", mode="ro")
    _complete(alone)
    assert fleet.objects() == {}  # nothing shared, and nothing written: no probe, lease, blob
    assert _file_gets(hub, "hf") == {"config.json": 1, "model.safetensors": 1}

    _complete(fleet.warm("writer"))
    before = fleet.objects()
    assert sorted(before) == sorted([*HF_OBJECTS.values(), *_records(before)])
    hub.reset()

    reader = fleet.warm("ro-second", mode="ro")
    _complete(reader)
    _read_back(reader)
    assert _shared(reader)
    assert _file_gets(hub, "hf") == {"config.json": 0, "model.safetensors": 0}
    assert hub.total() == 0, hub.counts()
    assert fleet.objects() == before


def test_a_cache_only_host_is_served_from_the_bucket(fleet: Fleet, hub: HubServer) -> None:
    _complete(fleet.warm("writer"))
    before = fleet.objects()
    hub.reset()

    offline = fleet.warm("offline", **{CACHEROOT_OFFLINE: "1", HF_HUB_OFFLINE: "1"})

    _complete(offline)
    _read_back(offline)
    assert hub.total() == 0, hub.counts()
    assert fleet.objects() == before  # a cache-only run takes no lease and writes nothing


def _records(objects: dict[str, bytes]) -> list[str]:
    return [n for n in objects if n.startswith(f"{PREFIX}/snapshots/")]


@pytest.mark.parametrize("damage", ["tampered", "removed"])
def test_a_damaged_blob_in_the_bucket_is_not_used_and_is_replaced(
    fleet: Fleet, hub: HubServer, s3: S3, bucket: str, damage: str
) -> None:
    _complete(fleet.warm("writer"))
    weights = HF_OBJECTS["model.safetensors"]
    if damage == "tampered":
        tampered = bytes(reversed(WEIGHTS))  # the same size, other bytes, under the right name
        assert len(tampered) == len(WEIGHTS)
        assert hashlib.sha256(tampered).hexdigest() != SHA256["model.safetensors"]
        s3.client().put_object(Bucket=bucket, Key=weights, Body=tampered)
    else:  # gone (evicted, say), while the record that names it stays
        s3.client().delete_object(Bucket=bucket, Key=weights)
    hub.reset()

    fresh = fleet.warm("fresh")

    _complete(fresh)
    _read_back(fresh)
    assert not _shared(fresh)
    assert _file_gets(hub, "hf")["model.safetensors"] == 1  # from the hub, not the bucket
    notes = _warnings(fresh)
    assert len(notes) == 1, notes
    short = weights.removeprefix(PREFIX + "/")
    said = f"object {short} does not hold" if damage == "tampered" else f"object {short} is missing"
    assert "is not used" in notes[0]
    assert said in notes[0]
    # The host that may write put its verified copy in place.
    assert fleet.objects()[weights] == WEIGHTS


def test_a_dead_endpoint_costs_one_note_and_the_warm_comes_from_the_hub(
    fleet: Fleet, hub: HubServer
) -> None:
    dead = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"}
    found = fleet.warm("alone", **dead)

    _complete(found)
    _read_back(found)
    assert _file_gets(hub, "hf") == {"config.json": 1, "model.safetensors": 1}
    notes = _warnings(found)
    assert len(notes) == 1, notes
    assert "nothing answers at the endpoint" in notes[0]
    assert fleet.s3.secret not in json.dumps(found)


def test_evict_keeps_a_shared_snapshot_by_size_and_removes_it_by_age(
    fleet: Fleet, tmp_path: Path
) -> None:
    _complete(fleet.warm("writer"))
    before = fleet.objects()
    assert sorted(before) == sorted([*HF_OBJECTS.values(), *_records(before)])
    env = host_env(tmp_path / "writer", f"s3://{fleet.bucket}/{PREFIX}", fleet.s3)
    cli = [str(Path(sys.executable).with_name("cacheroot")), "tier", "evict"]

    def evict(*args: str) -> str:
        done = subprocess.run(
            [*cli, *args], env=env, capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # The size budget weighs the entries records name: a snapshot's files are not among them,
    # and the git-sha1 object its record names is not an unnamed hub file either.
    evict("--l2-max-size", "0")
    assert fleet.objects() == before
    aged = evict("--l2-older-than", "0")
    assert aged.startswith("L2: removed 1 entry"), aged
    assert fleet.objects() == {}
