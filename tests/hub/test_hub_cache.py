"""The hub cache's rules, one at a time, over real HTTP: ``cacheroot hub serve`` in a child
process in front of the local test hub (or an origin that misbehaves in one exact way).

Expected values are the upstream's own (the test hub's files, its commit) or written out.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest
import requests

from cacheroot.fetch import parse_manifest
from cacheroot.fetch._hub.service import HubProcess
from cacheroot.fetch._hub.store import key_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Exchange, Server

    from .hubserver import HubRepo, HubServer
else:
    from origin import Server


class Start(Protocol):
    """The ``start`` fixture: a running hub cache in front of ``upstream``."""

    def __call__(self, upstream: str, *options: str, offline: bool = False) -> HubProcess: ...


TOKEN_A = "hf_" + "a" * 34  # a made-up token, looked for in the store
TOKEN_B = "hf_" + "b" * 34


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start hub caches (``start(upstream, *options)``) with a store in ``tmp_path``; stop them."""
    started: list[HubProcess] = []

    def go(upstream: str, *options: str, offline: bool = False) -> HubProcess:
        proc = HubProcess.start(
            upstream=upstream, store=str(tmp_path / "store"), options=options, offline=offline
        )
        started.append(proc)
        return proc

    yield go
    for proc in started:
        proc.stop()


def _api(repo: HubRepo, rev: str = "main") -> str:
    return f"/api/models/{repo.repo_id}/revision/{rev}"


def test_a_branch_answer_is_kept_for_the_ttl_and_a_commit_answer_for_good(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url)
    for _ in range(3):
        got = requests.get(proxy.url + _api(tiny_repo), timeout=10)
        assert got.json()["sha"] == tiny_repo.commit
    assert hub.count_path(_api(tiny_repo)) == 1
    assert got.headers["X-Cacheroot-Hub"] == "hit"
    proxy.stop()

    proxy = start(hub.url, "--ttl=0")
    hub.reset()
    for _ in range(2):
        requests.get(proxy.url + _api(tiny_repo), timeout=10).raise_for_status()
        requests.get(proxy.url + _api(tiny_repo, tiny_repo.commit), timeout=10).raise_for_status()
    # The branch is asked again every time; the commit once (it was never asked before).
    assert hub.count_path(_api(tiny_repo)) == 2
    assert hub.count_path(_api(tiny_repo, tiny_repo.commit)) == 1


def test_the_last_good_answer_is_served_when_the_hub_fails_and_marked_stale(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url, "--ttl=0", "--cooloff=0")
    url = proxy.url + _api(tiny_repo)
    assert requests.get(url, timeout=10).json()["sha"] == tiny_repo.commit
    for status in (429, 500, 502, 503, 504):
        hub.fail_next(1, status=status, retry_after=None)
        got = requests.get(url, timeout=10)
        assert (got.status_code, got.json()["sha"]) == (200, tiny_repo.commit), status
        assert got.headers["X-Cacheroot-Hub"] == "stale"
    assert proxy.stats()["counts"]["stale"] == 5


def test_an_unseen_request_during_an_outage_fails_at_once_with_the_upstreams_status(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url)
    hub.fail_next(1, status=503, retry_after=None)
    got = requests.get(proxy.url + _api(tiny_repo), timeout=10)
    assert got.status_code == 503
    assert "no answer for the model acme/tiny-model at main yet" in got.json()["error"]
    # One failure is no outage (test_hub_breaker.py): the next unseen request is sent.
    again = requests.get(proxy.url + _api(tiny_repo, "v1"), timeout=10)
    assert (again.status_code, hub.total()) == (404, 2)


def test_retry_after_is_obeyed_once_for_every_caller(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url, "--ttl=0")
    url = proxy.url + _api(tiny_repo)
    requests.get(url, timeout=10).raise_for_status()
    hub.reset()
    hub.fail_next(1, status=429, retry_after="30")
    for _ in range(5):
        assert requests.get(url, timeout=10).headers["X-Cacheroot-Hub"] == "stale"
    unseen = requests.get(proxy.url + "/api/models/acme/other", timeout=10)
    # Failed at once: a Retry-After of 30 s would put the client to sleep for nothing.
    assert (unseen.status_code, "Retry-After" in unseen.headers) == (424, False)
    assert hub.total() == 1  # the one that was answered 429
    # A second hub on the same store (another process) obeys it too.
    other = start(hub.url, "--ttl=0")
    assert (
        requests.get(other.url + _api(tiny_repo), timeout=10).headers["X-Cacheroot-Hub"] == "stale"
    )
    assert requests.get(other.url + "/api/models/acme/third", timeout=10).status_code == 424
    assert hub.total() == 1


def test_a_hanging_hub_is_cut_off_by_the_deadline_and_the_stale_answer_served(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url, "--ttl=0", "--deadline=1")
    url = proxy.url + _api(tiny_repo)
    requests.get(url, timeout=10).raise_for_status()
    hub.hang_all()
    got = requests.get(url, timeout=8)  # huggingface_hub's own deadline is 10 s
    assert (got.status_code, got.headers["X-Cacheroot-Hub"]) == (200, "stale")
    assert got.elapsed.total_seconds() < 5
    # One timeout is no outage: asked again until three in a row, then left alone.
    for _ in range(2):
        assert requests.get(url, timeout=8).elapsed.total_seconds() >= 0.9
    assert requests.get(url, timeout=8).elapsed.total_seconds() < 0.5


def test_one_upstream_request_per_key_however_many_callers(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url, "--deadline=1")
    reached = hub.hang_all(match="/revision/")
    with ThreadPoolExecutor(16) as pool:
        answers = list(
            pool.map(lambda _: requests.get(proxy.url + _api(tiny_repo), timeout=20), range(16))
        )
    assert reached.is_set()
    # The one request in flight was cut off at the deadline: every caller shared it, so all
    # got its outcome (no answer in time, and no retry worth waiting for: 424), and the
    # upstream was asked once.
    assert [a.status_code for a in answers] == [424] * 16
    assert hub.count_path(_api(tiny_repo)) == 1


def test_answers_are_kept_per_credential_and_tokens_never_stored(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    proxy = start(hub.url, "--cooloff=0")
    url = proxy.url + _api(tiny_repo)
    for token in (TOKEN_A, TOKEN_B, None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        requests.get(url, headers=headers, timeout=10).raise_for_status()
    sent = [r.header("Authorization") for r in hub.requests_for(_api(tiny_repo))]
    assert sent == [f"Bearer {TOKEN_A}", f"Bearer {TOKEN_B}", None]
    for here, _dirs, names in os.walk(tmp_path / "store"):
        for name in names:
            data = (tmp_path / here / name).read_bytes()
            assert TOKEN_A.encode() not in data
            assert TOKEN_B.encode() not in data
    # A credential with no answer of its own gets the public one when the hub fails.
    hub.fail_rate(1.0, status=503)
    got = requests.get(url, headers={"Authorization": "Bearer hf_" + "c" * 34}, timeout=10)
    assert (got.status_code, got.headers["X-Cacheroot-Hub"]) == (200, "stale")


def test_files_are_fetched_once_verified_and_served_with_ranges(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url)
    data = tiny_repo.files["model.safetensors"]
    url = f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/model.safetensors"
    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda _: requests.get(url, timeout=20).content, range(4)))
    assert bodies == [data] * 4
    # Asked as the commit main names (one snapshot, one commit), once.
    pinned = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors"
    assert hub.count_path(pinned, "GET") == 1
    part = requests.get(url, headers={"Range": "bytes=100-199"}, timeout=10)
    assert (part.status_code, part.content) == (206, data[100:200])
    assert part.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    head = requests.head(url, timeout=10)
    assert head.headers["X-Linked-Size"] == str(len(data))
    assert head.headers["X-Repo-Commit"] == tiny_repo.commit


def _lying_hub(good: bytes, sent: bytes) -> tuple[Server, Server]:
    """An upstream whose file's bytes are not those its metadata names (``sent``, not ``good``),
    and whose metadata carries Xet headers and redirects the file to another host."""
    cdn = Server(lambda ex: ex.respond(200, sent, {"Content-Type": "application/octet-stream"}))
    cdn.start()
    sha = hashlib.sha256(good).hexdigest()

    def answer(ex: Exchange) -> None:
        if ex.info.path.endswith("/resolve/main/w.bin"):
            ex.respond(
                302,
                b"",
                {
                    "Location": cdn.base + "/blob",
                    "X-Repo-Commit": "c" * 40,
                    "ETag": f'"{sha}"',
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(good)),
                    "X-Xet-Hash": "0" * 64,
                    "Link": '<https://cas.example/auth>; rel="xet-auth"',
                },
            )
        else:
            ex.respond(404, b"{}")

    return Server(answer).start(), cdn


def test_bytes_that_do_not_match_the_hubs_digest_are_never_published(
    start: Start, tmp_path: Path
) -> None:
    good = b"the real weights" * 100
    origin, cdn = _lying_hub(good, b"X" + good[1:])
    try:
        proxy = start(origin.base)
        url = f"{proxy.url}/acme/m/resolve/main/w.bin"
        head = requests.head(url, timeout=10)
        # The CDN redirect became the metadata answer; the Xet headers are gone.
        assert head.status_code == 200
        assert "Location" not in head.headers
        assert "X-Xet-Hash" not in head.headers
        assert "Link" not in head.headers
        got = requests.get(url, timeout=10)
        # A small file is answered once checked: its failure is a status that says why.
        assert got.status_code == 502
        assert "do not match the file's digest" in got.headers["X-Error-Message"]
        assert proxy.stats()["counts"]["digest_mismatch"] == 1
        blobs = tmp_path / "store" / "blobs"
        assert [p.name for p in blobs.iterdir()] == []
        assert "Traceback" not in proxy.stop()
    finally:
        cdn.close()
        origin.close()


def test_store_only_serves_what_it_has_and_fails_the_rest_at_once(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url)
    requests.get(proxy.url + _api(tiny_repo), timeout=10).raise_for_status()
    proxy.set_offline(True)
    hub.reset()
    assert requests.get(proxy.url + _api(tiny_repo), timeout=10).status_code == 200
    unseen = requests.get(proxy.url + _api(tiny_repo, "v2"), timeout=10)
    # 424: huggingface_hub does not retry it (a 504 cost a client about 23 s of retries).
    assert unseen.status_code == 424
    message = unseen.json()["error"]
    assert "runs store-only (--offline) and has no answer for the model " in message
    assert "cacheroot warm" in message
    assert hub.total() == 0


def test_a_planted_link_in_the_store_is_not_followed(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    proxy = start(hub.url, "--ttl=0", "--cooloff=0")
    requests.get(proxy.url + _api(tiny_repo), timeout=10).raise_for_status()
    (kept,) = [
        p for p in (tmp_path / "store" / "meta").rglob("*") if p.is_file() and "." not in p.name
    ]
    secret = tmp_path / "secret"
    secret.write_text('{"status":200,"headers":[],"stored":1e12}\nplanted', encoding="utf-8")
    kept.unlink()
    kept.symlink_to(secret)
    hub.fail_rate(1.0, status=503)
    got = requests.get(proxy.url + _api(tiny_repo), timeout=10)
    assert (got.status_code, got.content.endswith(b"planted")) == (503, False)


def test_export_manifest_lists_the_files_served_by_commit_and_branch(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    proxy = start(hub.url)
    for name in ("config.json", "tokenizer.json"):
        requests.get(f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/{name}", timeout=10)
    requests.head(f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/config.json", timeout=10)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cacheroot.fetch._hub",
            "export-manifest",
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[2:] == [
        "",
        "# The suite runs through the hub cache: warming this also keeps the answers of",
        "# its metadata calls (model_info, list_repo_files, file_exists) in the hub store.",
        "hub_cache = true",
        "",
        "[[model]]",
        'hub = "hf"',
        'repo_id = "acme/tiny-model"',
        f'revision = "{tiny_repo.commit}"',
        'branch = "main"',
        'allow_patterns = ["config.json", "tokenizer.json"]',
    ]
    (model,) = parse_manifest(out, path="exported.toml").models
    assert (model.repo_id, model.revision) == (tiny_repo.repo_id, tiny_repo.commit)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "nowhere"], "expected HOST:PORT"),
        (["--upstream", "ftp://x"], "must be an http:// or https:// URL"),
        (["--ttl", "soon"], "expected a number of"),
    ],
)
def test_bad_flags_are_usage_errors_that_say_what_was_expected(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cacheroot.fetch._hub", "serve", "--store", str(tmp_path), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert json.dumps(proc.stdout) == '""'


def test_doctor_names_the_hub_cache_hf_endpoint_points_at(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    proxy = start(hub.url)
    requests.get(proxy.url + _api(tiny_repo), timeout=10).raise_for_status()
    env = dict(os.environ, HF_ENDPOINT=proxy.url, CACHEROOT=str(tmp_path / "root"))
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "doctor"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    hub_lines = [line for line in out.stdout.splitlines() if line.startswith("hub:")]
    expected = (
        f"hub:  {proxy.url} (a cacheroot hub cache in front of {hub.url}: 1 request, "
        "0 served stale, 1 sent upstream)"
    )
    assert hub_lines == [expected]


def test_modelscope_files_are_verified_against_the_listing_and_kept_through_an_outage(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    """The real modelscope client, pointed at the hub cache by MODELSCOPE_ENDPOINT."""
    proxy = start(hub.url, "--modelscope-upstream", hub.url, "--ttl=0", "--cooloff=0")
    code = (
        "import sys\n"
        "from modelscope.hub.snapshot_download import snapshot_download\n"
        "print(snapshot_download(repo_id=sys.argv[1], revision='master'))\n"
    )
    env = dict(
        os.environ,
        MODELSCOPE_ENDPOINT=proxy.url,
        MODELSCOPE_CACHE=str(tmp_path / "ms"),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )

    def snapshot(cache: str) -> Path:
        out = subprocess.run(
            [sys.executable, "-c", code, tiny_repo.repo_id],
            capture_output=True,
            text=True,
            check=False,
            env={**env, "MODELSCOPE_CACHE": str(tmp_path / cache)},
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return Path(out.stdout.strip().splitlines()[-1])

    first = snapshot("ms-1")
    for name, data in tiny_repo.files.items():
        assert (first / name).read_bytes() == data
    assert hub.count_path(f"/api/v1/models/{tiny_repo.repo_id}/repo", "GET") == 3
    blobs = sorted(p.name for p in (tmp_path / "store" / "blobs").iterdir())
    assert blobs == sorted(hashlib.sha256(d).hexdigest() for d in tiny_repo.files.values())

    # ModelScope down: a second job with an empty cache of its own still gets every file.
    hub.fail_rate(1.0, status=503)
    second = snapshot("ms-2")
    for name, data in tiny_repo.files.items():
        assert (second / name).read_bytes() == data
    assert proxy.stats()["counts"]["stale"] >= 1


def _store_with(tmp_path: Path, files: dict[str, tuple[int, int]]) -> Path:
    """A store whose ``rel -> (size, days since last use)`` files exist, stamped accordingly."""
    store = tmp_path / "pruned"
    now = 1_800_000_000
    for rel, (size, days) in files.items():
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - days * 86400, now - days * 86400))
    return store


def test_prune_removes_what_was_not_used_then_the_least_recently_used(tmp_path: Path) -> None:
    from cacheroot.fetch._hub.prune import prune

    store = _store_with(
        tmp_path,
        {
            "blobs/" + "a" * 64: (1000, 30),
            "blobs/" + "b" * 64: (1000, 3),
            "blobs/" + "c" * 64: (1000, 1),
            "blobs/." + "d" * 64 + ".1.ab.partial": (500, 40),
            "meta/ab/" + "e" * 64: (100, 20),
        },
    )
    done = prune(str(store), older_than=14 * 86400, max_size=1500, now=1_800_000_000)
    left = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    # The partial was not written to for 40 days: its writer is gone (see test_hub_fills.py).
    assert left == ["blobs/" + "c" * 64]
    assert (done.removed, done.removed_bytes, done.kept, done.kept_bytes) == (3, 2100, 1, 1000)
    assert (done.partials, done.partial_bytes) == (1, 500)


def test_prune_never_follows_a_planted_link(tmp_path: Path) -> None:
    from cacheroot.fetch._hub.prune import prune

    outside = tmp_path / "outside"
    (outside / "ab").mkdir(parents=True)
    (outside / "ab" / "keep").write_bytes(b"k" * 10)
    (outside / "keep").write_bytes(b"k" * 10)
    store = tmp_path / "store"
    store.mkdir()
    (store / "blobs").symlink_to(outside)
    (store / "meta").mkdir()
    (store / "meta" / "ab").symlink_to(outside / "ab")
    done = prune(str(store), older_than=0, now=4_000_000_000)
    assert (done.removed, done.kept) == (0, 0)
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == [
        "ab",
        "ab/keep",
        "keep",
    ]


def test_hub_prune_asks_for_a_criterion(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.fetch._hub", "prune", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--older-than AGE (e.g. 14d), --max-size SIZE (e.g. 200G), or both" in out.stderr


def test_hub_caches_on_two_nodes_fetch_a_file_once_through_the_shared_tier(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    nodes = []
    try:
        for name in ("node-a", "node-b"):
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("CACHEROOT", "HF_", "_VLLM", "XDG_"))
            }
            env.update(CACHEROOT=str(tmp_path / name), CACHEROOT_SHARED=str(l2))
            store = str(tmp_path / name / "hubcache")
            nodes.append(HubProcess.start(upstream=hub.url, store=store, env=env))
        data = tiny_repo.files["model.safetensors"]
        path = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors"
        first = requests.get(nodes[0].url + path, timeout=20)
        assert (first.status_code, first.content) == (200, data)
        shared = l2 / "hubcache" / "blobs" / hashlib.sha256(data).hexdigest()
        for _ in range(100):  # written through in the background
            if shared.exists():
                break
            time.sleep(0.05)
        assert shared.read_bytes() == data
        second = requests.get(nodes[1].url + path, timeout=20)
        assert (second.status_code, second.content) == (200, data)
        assert second.headers["X-Cacheroot-Hub"] == "shared"
        assert hub.count_path(path, "GET") == 1  # node b asked the hub for its metadata only

        # A small file named by its git blob sha1 travels too (checked by node b's first serve).
        small = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/config.json"
        config = tiny_repo.files["config.json"]
        assert requests.get(nodes[0].url + small, timeout=20).content == config
        blob = hashlib.sha1(b"blob %d\x00" % len(config) + config, usedforsecurity=False)
        shared = l2 / "hubcache" / "blobs" / blob.hexdigest()
        for _ in range(100):
            if shared.exists():
                break
            time.sleep(0.05)
        again = requests.get(nodes[1].url + small, timeout=20)
        assert (again.status_code, again.content) == (200, config)
        assert again.headers["X-Cacheroot-Hub"] == "shared"
        assert hub.count_path(small, "GET") == 1
        assert nodes[1].stats()["counts"]["blob_checked"] >= 1
    finally:
        for node in nodes:
            node.stop()


def test_signed_answers_travel_through_the_shared_tier_to_another_node(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    """With a key, node b answers what node a asked, from the shared tier: the Hub is asked
    once per request for the fleet. An answer planted on the tier unsigned is none."""
    l2 = tmp_path / "l2"
    l2.mkdir()
    key = tmp_path / "hub.key"
    key.write_bytes(b"0123456789abcdef0123456789abcdef")
    key.chmod(0o600)
    nodes = []
    try:
        for name in ("node-a", "node-b"):
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("CACHEROOT", "HF_", "_VLLM", "XDG_"))
            }
            env.update(
                CACHEROOT=str(tmp_path / name),
                CACHEROOT_SHARED=str(l2),
                CACHEROOT_HUB_KEY_FILE=str(key),
            )
            store = str(tmp_path / name / "hubcache")
            nodes.append(
                HubProcess.start(upstream=hub.url, store=store, env=env, options=["--ttl=1"])
            )
        api = _api(tiny_repo)
        first = requests.get(nodes[0].url + api, timeout=20)
        assert first.status_code == 200
        second = requests.get(nodes[1].url + api, timeout=20)
        assert (second.status_code, second.json()) == (200, first.json())
        assert hub.count_path(api, "GET") == 1
        # Both copies stale: node a asks the Hub again and writes it through; node b, whose own
        # copy is stale, takes that fresh one from the tier instead of asking the Hub.
        time.sleep(1.2)
        assert requests.get(nodes[0].url + api, timeout=20).status_code == 200
        assert hub.count_path(api, "GET") == 2
        assert requests.get(nodes[1].url + api, timeout=20).status_code == 200
        assert hub.count_path(api, "GET") == 2
        assert nodes[1].stats()["counts"]["answer_from_shared_tier"] == 1
        (written,) = [p for p in (l2 / "hubcache" / "meta").rglob("*") if p.is_file()]
        assert written.read_bytes().startswith(b"hmac-sha256 ")

        # Planted on the tier for another request, unsigned: node b asks the Hub instead.
        other = _api(tiny_repo, "v2")
        for node_key in _keys_of(nodes[0], other):
            (l2 / "hubcache" / "meta" / node_key[:2]).mkdir(exist_ok=True)
            (l2 / "hubcache" / "meta" / node_key[:2] / node_key).write_bytes(
                b'{"status":200,"headers":[],"stored":1e12}\n{"planted": true}'
            )
        got = requests.get(nodes[1].url + other, timeout=20)
        assert "planted" not in got.text
        assert hub.count_path(other, "GET") == 1
    finally:
        for node in nodes:
            node.stop()


def _keys_of(node: HubProcess, target: str) -> list[str]:
    """The store keys a public ``GET target`` of ``node``'s upstream is kept under."""
    upstream = str(node.stats()["upstream"])
    return [key_of(upstream, "GET", target, "public")]


def test_a_poisoned_or_planted_blob_is_never_served(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    data = tiny_repo.files["model.safetensors"]
    path = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors"
    blob = tmp_path / "store" / "blobs" / hashlib.sha256(data).hexdigest()
    proxy = start(hub.url)
    assert requests.get(proxy.url + path, timeout=20).content == data
    proxy.stop()

    # Another job with write access to the volume swaps the bytes (same name, same size).
    blob.write_bytes(b"\0" * len(data))
    proxy = start(hub.url)
    assert requests.get(proxy.url + path, timeout=20).content == data
    assert proxy.stats()["counts"]["blob_corrupt"] == 1
    assert blob.read_bytes() == data  # fetched again and published in its place
    proxy.stop()

    # ... or plants a link to a file only the hub's user may read.
    secret = tmp_path / "secret"
    secret.write_bytes(b"S" * len(data))
    secret.chmod(0o600)
    blob.unlink()
    blob.symlink_to(secret)
    proxy = start(hub.url)
    got = requests.get(proxy.url + path, timeout=20).content
    assert got == data
    assert not blob.is_symlink()
    assert hub.count_path(path, "GET") == 3


def test_a_file_the_hub_checked_itself_is_not_hashed_again_but_a_planted_one_is(
    start: Start, hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    """Hashing a multi-gigabyte file again on its first serve after a restart only makes the
    client wait: a file the hub published (checked as it arrived) is trusted as long as it is
    unchanged, while a file that appeared in the store some other way is still checked."""
    weights = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors"
    config = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/config.json"
    proxy = start(hub.url)
    assert (
        requests.get(proxy.url + weights, timeout=20).content
        == (tiny_repo.files["model.safetensors"])
    )
    assert requests.get(proxy.url + weights, timeout=20).headers["X-Cacheroot-Hub"] == "hit"
    assert proxy.stats()["counts"].get("blob_checked", 0) == 0
    proxy.stop()

    # Another job plants a file with the right bytes under its digest's name.
    planted = tmp_path / "store" / "blobs" / tiny_repo.etag("config.json")
    planted.write_bytes(tiny_repo.files["config.json"])
    proxy = start(hub.url)
    for _ in range(2):
        resp = requests.get(proxy.url + weights, timeout=20)
        assert (resp.content, resp.headers["X-Cacheroot-Hub"]) == (
            tiny_repo.files["model.safetensors"],
            "hit",
        )
    assert proxy.stats()["counts"].get("blob_checked", 0) == 0  # published: trusted
    for _ in range(2):
        resp = requests.get(proxy.url + config, timeout=20)
        assert (resp.content, resp.headers["X-Cacheroot-Hub"]) == (
            tiny_repo.files["config.json"],
            "hit",
        )
    assert proxy.stats()["counts"]["blob_checked"] == 1  # planted: checked once, then trusted
    assert hub.count_path(config, "GET") == 0
