"""The hub cache's files through a bucket tier: hub processes on nodes that share no file
system ask the upstream once per file for the fleet (``cacheroot hub serve`` in child processes,
in front of the local test hub, with ``CACHEROOT_SHARED=s3://BUCKET/PREFIX``).

Expected object names and bytes come from hashlib and from boto3, not from the code under test.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.fetch._hub.service import HubProcess

from .fleet import host_env
from .s3server import closed_port

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
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
    assert counts["blob_checked"] >= 1  # the git-sha1 file, hashed when pulled and on serve
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

    # Read by name until replaced: a listing may name an object the server is replacing.
    assert _replaced(s3, bucket, _sha256_object(WEIGHTS), WEIGHTS) == WEIGHTS
    assert _replaced(s3, bucket, _sha256_object(SMALL_WEIGHTS), SMALL_WEIGHTS) == SMALL_WEIGHTS
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


# -- signed answers through the bucket ------------------------------------------------------

#: The secret every node's hub signs its answers with (``CACHEROOT_HUB_KEY_FILE``).
ANSWER_KEY = b"0123456789abcdef0123456789abcdef"
API = f"/api/models/{REPO.repo_id}/revision/main"
#: Another request: the revision answer at the commit.
API_AT_COMMIT = f"/api/models/{REPO.repo_id}/revision/{REPO.commit}"
ANSWERS = f"{PREFIX}/answers/"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    key = tmp_path / "hub.key"
    key.write_bytes(ANSWER_KEY)
    key.chmod(0o600)
    return key


def _start_signed(
    nodes: Nodes, name: str, key: Path, *, mode: str = "rw", options: Sequence[str] = ()
) -> HubProcess:
    """A hub node of ``nodes`` that signs its answers with the key in ``key``."""
    root = nodes.tmp / name
    env = host_env(root, nodes.shared, nodes.s3, mode=mode, CACHEROOT_HUB_KEY_FILE=str(key))
    proc = HubProcess.start(
        upstream=nodes.upstream.url, store=str(root / "hubcache"), env=env, options=options
    )
    nodes.procs.append(proc)
    return proc


def _answer_object(node: HubProcess, target: str, cred: str = "public") -> tuple[str, str]:
    """``(store key, object name)`` of the answer to ``GET target`` through ``node``: the key
    is the sha256 of upstream, method, target and credential, one a line; the object is named
    by the sha256 of the answer's path below the cache root (``hubcache/meta/ab/<key>``)."""
    upstream = str(node.stats()["upstream"])
    key = hashlib.sha256("\n".join((upstream, "GET", target, cred)).encode()).hexdigest()
    rel = f"hubcache/meta/{key[:2]}/{key}"
    return key, f"{ANSWERS}{hashlib.sha256(rel.encode()).hexdigest()}"


def _signed_with(data: bytes, secret: bytes, key: str) -> bool:
    """Whether ``data`` is an answer signed with ``secret`` for the store key ``key``."""
    head, _, rest = data.partition(b"\n")
    if not head.startswith(b"hmac-sha256 "):
        return False
    mac = hmac.new(secret, key.encode() + b"\n" + rest, hashlib.sha256).hexdigest().encode()
    return hmac.compare_digest(head.removeprefix(b"hmac-sha256 "), mac)


def _answer_names(s3: S3, bucket: str) -> list[str]:
    return sorted(n for n in s3.objects_names(bucket) if n.startswith(ANSWERS))


def test_two_signed_hub_nodes_ask_the_upstream_once_per_answer_through_the_bucket(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes, key_file: Path
) -> None:
    """Node b answers what node a asked from the bucket; once both copies are stale, node a
    asks again and replaces the object, and node b takes that fresh one instead of asking."""
    a = _start_signed(nodes, "node-a", key_file, options=["--ttl=1"])
    b = _start_signed(nodes, "node-b", key_file, options=["--ttl=1"])
    key, name = _answer_object(a, API)

    first = requests.get(a.url + API, timeout=30)
    assert first.status_code == 200
    assert first.json()["id"] == "acme/bucket-model"
    assert _answer_names(s3, bucket) == [name]
    written = s3.client().get_object(Bucket=bucket, Key=name)["Body"].read()
    assert _signed_with(written, ANSWER_KEY, key)
    _signature, _, kept = written.partition(b"\n")
    assert json.loads(kept.partition(b"\n")[2]) == first.json()

    second = requests.get(b.url + API, timeout=30)
    assert (second.status_code, second.json()) == (200, first.json())
    assert upstream.count_path(API, "GET") == 1

    time.sleep(1.2)
    assert requests.get(a.url + API, timeout=30).status_code == 200
    assert upstream.count_path(API, "GET") == 2
    replaced = s3.client().get_object(Bucket=bucket, Key=name)["Body"].read()
    assert replaced != written
    assert _signed_with(replaced, ANSWER_KEY, key)
    assert requests.get(b.url + API, timeout=30).status_code == 200
    assert upstream.count_path(API, "GET") == 2
    assert b.stats()["counts"]["answer_from_shared_tier"] == 1
    assert _answer_names(s3, bucket) == [name]


def test_an_ro_signed_hub_node_reads_answers_and_writes_none(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes, key_file: Path
) -> None:
    reader = _start_signed(nodes, "node-ro", key_file, mode="ro")
    other = API_AT_COMMIT
    assert requests.get(reader.url + other, timeout=30).status_code == 200
    assert upstream.count_path(other, "GET") == 1
    assert s3.objects_names(bucket) == []

    writer = _start_signed(nodes, "node-rw", key_file)
    _key, name = _answer_object(writer, API)
    assert requests.get(writer.url + API, timeout=30).status_code == 200
    assert _answer_names(s3, bucket) == [name]
    late = _start_signed(nodes, "node-ro-2", key_file, mode="ro")
    got = requests.get(late.url + API, timeout=30)
    assert (got.status_code, got.json()["id"]) == (200, "acme/bucket-model")
    assert upstream.count_path(API, "GET") == 1
    assert _answer_names(s3, bucket) == [name]


def test_a_forged_answer_in_the_bucket_is_not_served(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes, key_file: Path
) -> None:
    """Signed with another key, or not signed, for a time far ahead: the node asks the
    upstream, and (``rw``) replaces the object with its own signed answer."""
    node = _start_signed(nodes, "node-a", key_file)
    key, name = _answer_object(node, API)
    body = b'{"status":200,"headers":[],"stored":1e12}\n{"planted": true}'
    wrong = hmac.new(b"k" * 32, key.encode() + b"\n" + body, hashlib.sha256).hexdigest()
    client = s3.client()
    client.put_object(Bucket=bucket, Key=name, Body=b"hmac-sha256 " + wrong.encode() + b"\n" + body)
    other = API_AT_COMMIT
    other_key, other_name = _answer_object(node, other)
    client.put_object(Bucket=bucket, Key=other_name, Body=body)

    got = requests.get(node.url + API, timeout=30)
    assert got.status_code == 200
    assert "planted" not in got.text
    assert upstream.count_path(API, "GET") == 1
    unsigned = requests.get(node.url + other, timeout=30)
    assert unsigned.status_code == 200
    assert "planted" not in unsigned.text
    assert upstream.count_path(other, "GET") == 1
    assert node.stats()["counts"].get("answer_from_shared_tier", 0) == 0
    for object_name, store_key in ((name, key), (other_name, other_key)):
        mine = client.get_object(Bucket=bucket, Key=object_name)["Body"].read()
        assert _signed_with(mine, ANSWER_KEY, store_key)
        assert b"planted" not in mine


def test_an_answer_asked_with_a_credential_never_reaches_the_bucket(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes, key_file: Path
) -> None:
    node = _start_signed(nodes, "node-a", key_file)
    token = "Bearer hf_gatedreader"  # noqa: S105 - a made-up credential
    got = requests.get(node.url + API, headers={"Authorization": token}, timeout=30)
    assert got.status_code == 200
    assert upstream.count_path(API, "GET") == 1
    assert s3.objects_names(bucket) == []
    # The same request without it is public: written through, under the public key's name.
    _key, public = _answer_object(node, API)
    assert requests.get(node.url + API, timeout=30).status_code == 200
    assert _answer_names(s3, bucket) == [public]


def test_eviction_ages_the_hub_answers_out_with_the_hub_files(
    s3: S3, bucket: str, nodes: Nodes, key_file: Path
) -> None:
    """Answers go by age only (``--l2-older-than``, and an hour), as the hub's files."""
    from cacheroot.fetch._bucket.tier import open_bucket
    from cacheroot.fetch._bucket.upkeep import evict

    node = _start_signed(nodes, "node-a", key_file)
    _key, name = _answer_object(node, API)
    assert requests.get(node.url + API, timeout=30).status_code == 200
    size = len(s3.objects(bucket)[name])
    opened, problem = open_bucket(nodes.shared, "rw", s3.env())
    assert opened is not None, problem
    later = time.time() + 2 * 86400
    assert evict(opened, max_size=0, now=later).answers == []
    assert evict(opened, now=later + 86400).answers == []
    assert evict(opened, older_than=3 * 86400, now=later, dry_run=True).answers == []
    assert _answer_names(s3, bucket) == [name]
    aged = evict(opened, older_than=86400, now=later)
    assert aged.answers == [(name.removeprefix(f"{PREFIX}/"), size)]
    assert _answer_names(s3, bucket) == []


def test_an_answer_object_is_read_within_the_limit_only_and_never_written_ro(
    s3: S3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cacheroot.fetch._bucket.hub import load_answer, save_answer

    root = tmp_path / "node-a"
    for name, value in host_env(root, f"s3://{bucket}/{PREFIX}", s3, mode="ro").items():
        monkeypatch.setenv(name, value)
    key = "ab" + "0" * 62
    path = str(root / "hubcache" / "meta" / "ab" / key)
    rel = f"hubcache/meta/ab/{key}"
    name = f"{ANSWERS}{hashlib.sha256(rel.encode()).hexdigest()}"
    s3.client().put_object(Bucket=bucket, Key=name, Body=b"x" * 100)

    assert load_answer(path, limit=99) is None
    assert load_answer(path, limit=100) == b"x" * 100
    assert load_answer(str(tmp_path / "elsewhere" / key), limit=100) is None  # not below root
    assert save_answer(path, b"y" * 10) is False  # ro
    assert s3.objects(bucket) == {name: b"x" * 100}


# -- a git-sha1 object found bad is replaced -------------------------------------------------


def _replaced(s3: S3, bucket: str, name: str, data: bytes) -> bytes | None:
    """The bytes of the object ``name`` once they are ``data`` (the hub writes in the
    background), or as they are after 10 s."""
    client = s3.client()
    found: bytes | None = None
    for _ in range(200):
        try:
            found = client.get_object(Bucket=bucket, Key=name)["Body"].read()
        except client.exceptions.NoSuchKey:
            found = None  # the server may drop the name while it completes an upload over it
        if found == data:
            break
        time.sleep(0.05)
    return found


def test_wrong_bytes_under_a_git_sha1_name_are_not_served_and_are_replaced(
    s3: S3, bucket: str, upstream: HubServer, nodes: Nodes
) -> None:
    """Of the announced size, the wrong bytes: refused by their hash as they are copied; the
    node serves the upstream's bytes and writes them over the object in the bucket."""
    small = _sha1_object(CONFIG)
    planted = b"{" + b" " * (len(CONFIG) - 2) + b"}"
    s3.client().put_object(Bucket=bucket, Key=small, Body=planted)

    node = nodes.start("node-a")
    got = _get(node, "config.json")
    assert (got.status_code, got.content) == (200, CONFIG)
    assert got.headers[STATE] != "shared"
    assert upstream.count_path(_resolve("config.json"), "GET") == 1
    assert node.stats()["counts"].get("file_from_shared_tier", 0) == 0
    assert _replaced(s3, bucket, small, CONFIG) == CONFIG
    assert s3.objects(bucket) == {small: CONFIG}

    # Another node now takes the right bytes from the bucket.
    other = nodes.start("node-b")
    again = _get(other, "config.json")
    assert (again.status_code, again.content, again.headers[STATE]) == (200, CONFIG, "shared")
    assert upstream.count_path(_resolve("config.json"), "GET") == 1
    nodes.stop()
    assert "does not hold the bytes it is named by (git blob sha1" in nodes.stderr[0]
