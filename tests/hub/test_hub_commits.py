"""One snapshot names one commit: a branch's answers through the hub cache follow one commit.

The local test hub's ``main`` moves (the repository is added again with other files) between
two downloads made through ``cacheroot hub serve``. Within the TTL, everything asked for by
branch comes from the commit the branch named first; after it, from the new one. The clients
are the real huggingface_hub, in processes of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.fetch._hub.service import HubProcess
from cacheroot.fetch._hub.store import PUBLIC, Answer, Store, key_of

from .hubserver import HubRepo

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .hubserver import HubServer

#: How long a branch answer is fresh in these tests: long enough for three client processes on
#: a loaded machine, short enough to wait out.
TTL = 10.0

#: Downloads by branch in a process of its own (argv: the repository), printed as JSON: for
#: each file the snapshot (commit) it was filed under and its bytes; the commit ``model_info``
#: and the tree name for the branch.
CLIENT = """\
import json, os, sys

import huggingface_hub as hh

repo = sys.argv[1]
out = {}
for name in ("tokenizer.json", "config.json"):
    path = hh.hf_hub_download(repo, name)
    with open(path, encoding="utf-8") as f:
        out[name] = [os.path.basename(os.path.dirname(path)), f.read()]
api = hh.HfApi()
out["model_info"] = api.model_info(repo, revision="main", files_metadata=True).sha
out["tree"] = sorted(f.blob_id for f in api.list_repo_tree(repo, revision="main"))
print(json.dumps(out))
"""

NEW_CONFIG = '{"model_type": "llama", "hidden_size": 32}'
NEW_TOKENIZER = '{"version": "2.0"}'


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def proxy(hub: HubServer, store: str) -> Iterator[HubProcess]:
    started = HubProcess.start(upstream=hub.url, store=store, options=[f"--ttl={TTL:g}"])
    yield started
    started.stop()


def _client(hub_env: dict[str, str], endpoint: str, home: Path) -> dict[str, object]:
    env = dict(hub_env, HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"))
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, "acme/tiny-model"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return out


def _moved(repo: HubRepo) -> HubRepo:
    """``repo`` after a commit that changed its config and its tokenizer."""
    files = dict(repo.files, **{"config.json": NEW_CONFIG.encode()})
    files["tokenizer.json"] = NEW_TOKENIZER.encode()
    return HubRepo(repo.repo_id, files)


def test_a_branch_names_one_commit_for_the_ttl_then_the_new_one(
    proxy: HubProcess,
    hub: HubServer,
    tiny_repo: HubRepo,
    hub_env: dict[str, str],
    tmp_path: Path,
) -> None:
    old = tiny_repo.commit
    old_config = tiny_repo.files["config.json"].decode()
    old_tokenizer = tiny_repo.files["tokenizer.json"].decode()
    began = time.monotonic()
    # A first process reads the config by branch, then main moves.
    head = requests.head(f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/config.json", timeout=10)
    assert head.headers["X-Repo-Commit"] == old
    moved = _moved(tiny_repo)
    hub.add_hf(moved)
    assert moved.commit != old

    # Within the TTL, every answer for main (even the tokenizer, never asked before) is old's.
    during = _client(hub_env, proxy.url, tmp_path / "during")
    assert time.monotonic() - began < TTL, "too slow to tell: the TTL ran out"
    assert during["tokenizer.json"] == [old, old_tokenizer]
    assert during["config.json"] == [old, old_config]
    assert during["model_info"] == old
    assert during["tree"] == sorted(e["oid"] for e in _tree(hub, old))

    # A credential resolves the branch on its own: its first answer names the new commit.
    token = {"Authorization": "Bearer hf_" + "t" * 34}
    url = f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/tokenizer.json"
    assert requests.head(url, headers=token, timeout=10).headers["X-Repo-Commit"] == moved.commit
    # The branch was resolved once for each credential, whatever was asked of it.
    assert hub.count_path(f"/api/models/{tiny_repo.repo_id}/revision/main") == 2

    # After the TTL, the new commit, for every answer.
    time.sleep(max(0.0, began + TTL + 0.5 - time.monotonic()))
    after = _client(hub_env, proxy.url, tmp_path / "after")
    assert after["tokenizer.json"] == [moved.commit, NEW_TOKENIZER]
    assert after["config.json"] == [moved.commit, NEW_CONFIG]
    assert after["model_info"] == moved.commit
    assert after["tree"] == sorted(e["oid"] for e in _tree(hub, moved.commit))
    snapshots = tmp_path / "after" / "hub" / "models--acme--tiny-model" / "snapshots"
    assert [p.name for p in snapshots.iterdir()] == [moved.commit]


def _tree(hub: HubServer, commit: str) -> list[dict[str, str]]:
    """The test hub's own listing of ``commit``."""
    got = requests.get(f"{hub.url}/api/models/acme/tiny-model/tree/{commit}", timeout=10)
    listing: list[dict[str, str]] = got.json()
    return listing


def test_a_store_with_branch_answers_only_still_serves_them_without_the_upstream(
    hub: HubServer, tiny_repo: HubRepo, store: str
) -> None:
    """A store an earlier hub filled has the branch's answers, none of the commit's."""
    base = hub.url
    config = f"/{tiny_repo.repo_id}/resolve/main/config.json"
    revision = f"/api/models/{tiny_repo.repo_id}/revision/main"
    kept = Store(store)
    for method, target in (("HEAD", config), ("GET", revision)):
        answer = requests.request(method, base + target, timeout=10)
        headers = tuple((k, v) for k, v in answer.headers.items() if k in ("X-Repo-Commit", "ETag"))
        kept.save(key_of(base, method, target, PUBLIC), Answer(200, headers, answer.content))
    proxy = HubProcess.start(upstream=hub.url, store=store, offline=True)
    try:
        head = requests.head(proxy.url + config, timeout=10)
        assert (head.status_code, head.headers["X-Cacheroot-Hub"]) == (200, "hit")
        assert head.headers["X-Repo-Commit"] == tiny_repo.commit
    finally:
        proxy.stop()
