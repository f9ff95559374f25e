"""Xet-backed repositories through the hub cache: every client stays on the cache.

The local test hub answers as the Hub does for a Xet-backed repository (``HubServer.xet``):
``xetHash`` in its listings, ``X-Xet-*`` headers on its files, a ``xet-read-token`` endpoint
whose token names a Xet storage (``/xet-cas`` on the test hub, where nothing is implemented).
The clients are the real huggingface_hub with hf_xet installed, in processes of their own.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
import requests

from cacheroot.fetch._hub.service import HubProcess

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .hubserver import HubRepo, HubServer

_RUNNER: Any = importlib.import_module("harness.runner")

pytest.importorskip("hf_xet")

#: A client's work, in a process of its own (argv: the repository, a second cache directory).
CLIENT = """\
import hashlib, json, os, sys

import huggingface_hub as hh

repo, other = sys.argv[1], sys.argv[2]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


api = hh.HfApi()
snapshot = hh.snapshot_download(repo)
fs = hh.HfFileSystem()
fs.get_file(f"{repo}/model.safetensors", os.path.join(other, "fs.safetensors"))
print(json.dumps({
    "snapshot": {n: sha(os.path.join(snapshot, n)) for n in sorted(os.listdir(snapshot))},
    "download": sha(hh.hf_hub_download(repo, "model.safetensors", cache_dir=other)),
    "fs": sha(os.path.join(other, "fs.safetensors")),
    "tree": [(f.path, f.xet_hash) for f in api.list_repo_tree(repo, recursive=True)],
    "paths_info": [(f.path, f.xet_hash) for f in api.get_paths_info(repo, ["model.safetensors"])],
}))
"""


def _xet_requests(hub: HubServer) -> list[str]:
    """The requests that reached the test hub on the way to Xet: tokens, Xet storage."""
    return sorted(f"{method} {path}" for method, path in hub.counts() if "xet" in path)


@pytest.fixture
def proxy(hub: HubServer, tmp_path: Path) -> Iterator[HubProcess]:
    """A hub cache in front of the test hub, which answers as for a Xet-backed repository."""
    hub.xet = True
    started = HubProcess.start(upstream=hub.url, store=str(tmp_path / "store"))
    yield started
    started.stop()


def _client_env(hub_env: dict[str, str], endpoint: str, home: Path) -> dict[str, str]:
    return dict(hub_env, HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"))


def test_a_xet_backed_repository_is_downloaded_through_the_cache_over_plain_http(
    proxy: HubProcess, hub: HubServer, tiny_repo: HubRepo, hub_env: dict[str, str], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, tiny_repo.repo_id, str(other)],
        env=_client_env(hub_env, proxy.url, tmp_path / "hf"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    weights = tiny_repo.sha256("model.safetensors")
    assert got["snapshot"] == {name: tiny_repo.sha256(name) for name in tiny_repo.files}
    assert (got["download"], got["fs"]) == (weights, weights)
    assert got["tree"] == [
        ["config.json", None],
        ["model.safetensors", None],
        ["tokenizer.json", None],
    ]
    assert got["paths_info"] == [["model.safetensors", None]]
    assert _xet_requests(hub) == []
    # The listing huggingface_hub saved next to the snapshot has no Xet hash to go back to.
    (saved,) = (tmp_path / "hf" / "hub" / "models--acme--tiny-model" / "trees").iterdir()
    assert "xet" not in saved.read_text(encoding="utf-8")


def test_listings_with_file_metadata_lose_their_xet_fields_and_keep_the_rest(
    proxy: HubProcess, hub: HubServer, tiny_repo: HubRepo
) -> None:
    api = f"{proxy.url}/api/models/{tiny_repo.repo_id}"
    info = requests.get(f"{api}/revision/main?blobs=true", timeout=10)
    tree = requests.get(f"{api}/tree/main?recursive=true", timeout=10)
    direct = requests.get(f"{hub.url}/api/models/{tiny_repo.repo_id}/tree/main", timeout=10)
    assert "xetHash" in direct.text  # the upstream lists them
    for answer in (info, tree):
        assert answer.status_code == 200
        assert "xet" not in answer.text.lower()
    (weights,) = (s for s in info.json()["siblings"] if s["rfilename"] == "model.safetensors")
    assert weights["lfs"]["sha256"] == tiny_repo.sha256("model.safetensors")
    assert [e["path"] for e in tree.json()] == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    file = f"{proxy.url}/{tiny_repo.repo_id}/resolve/main/model.safetensors"
    head = requests.head(file, timeout=10)
    assert [h for h in head.headers if "xet" in h.lower() or h.lower() == "link"] == []


def test_xet_tokens_are_passed_through_never_stored_nor_served_stale(
    proxy: HubProcess, hub: HubServer, tiny_repo: HubRepo
) -> None:
    url = f"{proxy.url}/api/models/{tiny_repo.repo_id}/xet-read-token/main"
    for _ in range(2):
        got = requests.get(url, timeout=10)
        assert got.status_code == 200
        assert got.headers["X-Xet-Access-Token"] == "xet-test-token"
        assert got.headers["X-Xet-Cas-Url"].endswith("/xet-cas")
    assert hub.count_path(f"/api/models/{tiny_repo.repo_id}/xet-read-token/main") == 2
    hub.fail_next(1, status=503, retry_after=None, match="xet-read-token")
    failed = requests.get(url, timeout=10)
    assert failed.status_code == 503
    assert "X-Xet-Access-Token" not in failed.headers
    assert proxy.stats()["counts"].get("stale", 0) == 0


#: A snapshot of the config only, which saves the repository's listing.
SAVE_LISTING = (
    "import huggingface_hub as hh, sys; "
    "hh.snapshot_download(sys.argv[1], allow_patterns=['config.json'])"
)

SESSION_TEST = """\
import hashlib, os

import huggingface_hub as hh


def test_the_snapshot_comes_through_the_hub_cache():
    snapshot = hh.snapshot_download({repo!r})
    with open(os.path.join(snapshot, "model.safetensors"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == {weights!r}
"""


def test_a_session_with_the_hub_cache_never_goes_to_xet_for_listings_saved_before(
    tmp_path: Path, hub: HubServer, tiny_repo: HubRepo
) -> None:
    hub.xet = True
    env = _RUNNER.layout_env(
        tmp_path / "root", HF_ENDPOINT=hub.url, HF_HUB_DISABLE_PROGRESS_BARS="1"
    )
    # Before the hub cache was in front: a snapshot of the config only, straight from the Hub,
    # leaves the repository's listing saved, Xet hashes and all (here over plain HTTP).
    saved = subprocess.run(
        [
            sys.executable,
            "-c",
            SAVE_LISTING,
            tiny_repo.repo_id,
        ],
        env=dict(env, HF_HUB_DISABLE_XET="1"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert saved.returncode == 0, saved.stderr[-3000:]
    trees = os.path.join(env["HF_HOME"], "hub", "models--acme--tiny-model", "trees")
    (listing,) = os.listdir(trees)
    with open(os.path.join(trees, listing), encoding="utf-8") as f:
        assert "xet_hash" in f.read()
    hub.reset()

    project = tmp_path / "project"
    project.mkdir()
    text = SESSION_TEST.format(
        repo=tiny_repo.repo_id, weights=tiny_repo.sha256("model.safetensors")
    )
    (project / "test_xet.py").write_text(textwrap.dedent(text), encoding="utf-8")
    args = [*_RUNNER.plugin_args(), "-p", "no:randomly", "--cacheroot-hub", "-q"]
    run = _RUNNER.run_pytest(args, env=env, cwd=project, timeout=200)
    assert re.search(r"\b1 passed\b", run.stdout), run.stdout[-3000:] + run.stderr[-3000:]
    assert _xet_requests(hub) == []
    assert hub.count_path(f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors")
