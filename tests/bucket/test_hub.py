"""The hub cache's files through a bucket tier: hub processes on nodes that share no file
system ask the upstream once per file for the fleet (``cacheroot hub serve`` in child processes,
in front of the local test hub, with ``CACHEROOT_SHARED=s3://BUCKET/PREFIX``).

Expected object names and bytes come from hashlib and from boto3, not from the code under test.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.fetch._hub.service import HubProcess

from .fleet import host_env
from .s3server import closed_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.hub.hubserver import HubRepo, HubServer

    from .s3server import S3
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer

#: Over one multipart part (5 MiB): written through as a multipart upload.
WEIGHTS = bytes(range(251)) * 25_000
SMALL_WEIGHTS = b"\x01\x02 small weights " * 100
CONFIG = b'{"model_type": "llama", "hidden_size": 16}'
REPO = HubRepo(
    "acme/bucket-model",
    {"config.json": CONFIG, "model.safetensors": WEIGHTS, "extra.safetensors": SMALL_WEIGHTS},
)
PREFIX = "hubs"
STATE = "X-Cacheroot-Hub"


def _resolve(name: str) -> str:
    return f"/{REPO.repo_id}/resolve/{REPO.commit}/{name}"


def _sha256_object(data: bytes) -> str:
    return f"{PREFIX}/blobs/sha256/{hashlib.sha256(data).hexdigest()}"


def _sha1_object(data: bytes) -> str:
    blob = hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False)
    return f"{PREFIX}/blobs/git-sha1/{blob.hexdigest()}"


@pytest.fixture
def upstream() -> Iterator[HubServer]:
    server = HubServer()
    server.add_hf(REPO)
    with server:
        yield server


class Nodes:
    """Hub processes, one per node, each with a cache root of its own and the same bucket."""

    def __init__(self, s3: S3, bucket: str, upstream: HubServer, tmp_path: Path) -> None:
        self.s3, self.upstream, self.tmp = s3, upstream, tmp_path
        self.shared = f"s3://{bucket}/{PREFIX}"
        self.procs: list[HubProcess] = []
        self.stderr: list[str] = []

    def start(self, name: str, mode: str = "rw") -> HubProcess:
        root = self.tmp / name
        env = host_env(root, self.shared, self.s3, mode=mode)
        proc = HubProcess.start(upstream=self.upstream.url, store=str(root / "hubcache"), env=env)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        """Stop every hub still running; keep what each wrote on stderr."""
        self.stderr += [proc.stop() for proc in self.procs]
        self.procs = []


@pytest.fixture
def nodes(s3: S3, bucket: str, upstream: HubServer, tmp_path: Path) -> Iterator[Nodes]:
    fleet = Nodes(s3, bucket, upstream, tmp_path)
    try:
        yield fleet
    finally:
        fleet.stop()
    for err in fleet.stderr:
        assert s3.secret not in err


def _wait_for(s3: S3, bucket: str, name: str) -> bytes:
    """The object ``name`` once written through (the hub writes in the background)."""
    for _ in range(200):
        if name in s3.objects_names(bucket):
            data: bytes = s3.client().get_object(Bucket=bucket, Key=name)["Body"].read()
            return data
        time.sleep(0.05)
    raise AssertionError(f"{name} was not written through within 10 s")


def _get(node: HubProcess, name: str) -> requests.Response:
    return requests.get(node.url + _resolve(name), timeout=30)


def test_two_hub_nodes_fetch_each_file_once_through_the_bucket(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes
) -> None:
    a, b = nodes.start("node-a"), nodes.start("node-b")
    lfs, small = _sha256_object(WEIGHTS), _sha1_object(CONFIG)

    first = _get(a, "model.safetensors")
    assert (first.status_code, first.content) == (200, WEIGHTS)
    assert _wait_for(s3, bucket, lfs) == WEIGHTS
    second = _get(b, "model.safetensors")
    assert (second.status_code, second.content) == (200, WEIGHTS)
    assert second.headers[STATE] == "shared"

    assert _get(a, "config.json").content == CONFIG
    assert _wait_for(s3, bucket, small) == CONFIG
    again = _get(b, "config.json")
    assert (again.status_code, again.content) == (200, CONFIG)
    assert again.headers[STATE] == "shared"

    # The upstream sent each file once for the fleet; node b asked it for metadata only.
    assert upstream.count_path(_resolve("model.safetensors"), "GET") == 1
    assert upstream.count_path(_resolve("config.json"), "GET") == 1
    counts = b.stats()["counts"]
    assert counts["file_from_shared_tier"] == 2
    assert counts["blob_checked"] >= 1  # the git-sha1 file, copied unverified, checked on serve
    # Only the two files: the probe is gone, and no record names a hub file.
    assert s3.objects(bucket) == {lfs: WEIGHTS, small: CONFIG}
    # Node b's own copy is the upstream's bytes, kept in its store under the file's name.
    store = nodes.tmp / "node-b" / "hubcache" / "blobs"
    assert (store / lfs.rsplit("/", 1)[1]).read_bytes() == WEIGHTS
    assert sorted(p.name for p in store.iterdir() if p.name.endswith(".meta.json")) == []


def test_an_ro_hub_node_reads_through_and_writes_nothing(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes
) -> None:
    writer = nodes.start("node-rw")
    assert _get(writer, "model.safetensors").content == WEIGHTS
    _wait_for(s3, bucket, _sha256_object(WEIGHTS))
    before = s3.objects(bucket)
    assert list(before) == [_sha256_object(WEIGHTS)]

    reader = nodes.start("node-ro", mode="ro")
    shared = _get(reader, "model.safetensors")
    assert (shared.status_code, shared.content, shared.headers[STATE]) == (200, WEIGHTS, "shared")
    fetched = _get(reader, "config.json")
    assert (fetched.status_code, fetched.content) == (200, CONFIG)
    assert fetched.headers[STATE] != "shared"
    time.sleep(1.0)  # what a writer would have written through by now
    assert s3.objects(bucket) == before
    assert upstream.count_path(_resolve("model.safetensors"), "GET") == 1
    assert upstream.count_path(_resolve("config.json"), "GET") == 1


def test_wrong_bytes_under_a_sha256_name_are_not_served_and_are_replaced(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes
) -> None:
    """A planted object is refused: of the announced size, by its hash; of another size,
    before a byte is copied. The hub serves the upstream's bytes and, in ``rw``, writes its
    verified copy over the one whose bytes it found wrong."""
    planted = bytes(len(WEIGHTS))  # the right size, the wrong bytes
    client = s3.client()
    client.put_object(Bucket=bucket, Key=_sha256_object(WEIGHTS), Body=planted)
    client.put_object(Bucket=bucket, Key=_sha256_object(SMALL_WEIGHTS), Body=b"x" * 10_000)

    node = nodes.start("node-a")
    got = _get(node, "model.safetensors")
    assert (got.status_code, got.content) == (200, WEIGHTS)
    assert got.headers[STATE] != "shared"
    other = _get(node, "extra.safetensors")
    assert (other.status_code, other.content) == (200, SMALL_WEIGHTS)
    assert other.headers[STATE] != "shared"
    assert upstream.count_path(_resolve("model.safetensors"), "GET") == 1
    assert upstream.count_path(_resolve("extra.safetensors"), "GET") == 1
    assert node.stats()["counts"].get("file_from_shared_tier", 0) == 0

    for _ in range(200):
        if s3.objects(bucket) == {
            _sha256_object(WEIGHTS): WEIGHTS,
            _sha256_object(SMALL_WEIGHTS): SMALL_WEIGHTS,
        }:
            break
        time.sleep(0.05)
    assert s3.objects(bucket) == {
        _sha256_object(WEIGHTS): WEIGHTS,
        _sha256_object(SMALL_WEIGHTS): SMALL_WEIGHTS,
    }
    nodes.stop()
    assert "does not hold the bytes it is named by" in nodes.stderr[0]
    assert "the upstream announced 1700" in nodes.stderr[0]


def test_a_bucket_where_nothing_listens_costs_the_hub_one_note_and_seconds(
    upstream: HubServer, tmp_path: Path
) -> None:
    env = host_env(
        tmp_path / "node-a",
        f"s3://fleet/{PREFIX}",
        None,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port()}",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="never-shown-secret",  # noqa: S106 - looked for in outputs
        AWS_REGION="us-east-1",
    )
    node = HubProcess.start(
        upstream=upstream.url, store=str(tmp_path / "node-a" / "hubcache"), env=env
    )
    try:
        started = time.monotonic()
        for name, data in (("model.safetensors", WEIGHTS), ("config.json", CONFIG)):
            got = _get(node, name)
            assert (got.status_code, got.content) == (200, data)
        took = time.monotonic() - started
    finally:
        stderr = node.stop()
    assert took < 15, took
    notes = [line for line in stderr.splitlines() if "shared tier" in line]
    assert notes == [
        (
            "shared tier (bucket) not used by this process: nothing answers at the endpoint of "
            "s3://fleet/hubs (connection failed): check AWS_ENDPOINT_URL and that the store is up"
        )
    ]
    assert "never-shown-secret" not in stderr


def test_a_file_fetched_with_a_credential_stays_on_its_node(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes
) -> None:
    node = nodes.start("node-a")
    url = node.url + _resolve("extra.safetensors")
    got = requests.get(url, headers={"Authorization": "Bearer hf_gatedreader"}, timeout=30)
    assert (got.status_code, got.content) == (200, SMALL_WEIGHTS)
    assert _get(node, "config.json").content == CONFIG  # public: written through
    _wait_for(s3, bucket, _sha1_object(CONFIG))
    time.sleep(0.5)
    assert s3.objects_names(bucket) == [_sha1_object(CONFIG)]


def test_eviction_keeps_hub_files_from_the_size_budget_and_ages_them_out(
    s3: S3, bucket: str, nodes: Nodes
) -> None:
    """No record names a hub file: the size budget, which weighs the entries records name,
    leaves them, and ``--l2-older-than`` takes them once they are that old (and an hour)."""
    from cacheroot.fetch._bucket.tier import open_bucket
    from cacheroot.fetch._bucket.upkeep import evict

    a = nodes.start("node-a")
    assert _get(a, "model.safetensors").content == WEIGHTS
    assert _get(a, "config.json").content == CONFIG
    lfs, small = _sha256_object(WEIGHTS), _sha1_object(CONFIG)
    _wait_for(s3, bucket, lfs)
    _wait_for(s3, bucket, small)
    opened, problem = open_bucket(nodes.shared, "rw", s3.env())
    assert opened is not None, problem
    later = time.time() + 2 * 86400
    budget = evict(opened, max_size=0, now=later)
    assert (budget.records, budget.blobs) == ([], [])
    young = evict(opened, older_than=3 * 86400, now=later, dry_run=True)
    assert young.blobs == []
    aged = evict(opened, older_than=86400, now=later)
    # Names within the prefix, as the tier names them.
    assert sorted(name for name, _size in aged.blobs) == sorted(
        n.removeprefix(f"{PREFIX}/") for n in (lfs, small)
    )
    assert s3.objects(bucket) == {}
