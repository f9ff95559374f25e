"""``cacheroot cache ls`` and ``du`` show everything on the root, not the test cache alone.

Someone used to ``hf cache ls`` expects every model and dataset of the root in
``cacheroot cache ls``; ``du`` has to count the hub cache's store and, on a root that is the
user's own ``~/.cache``, name other tools' directories apart rather than count them as the
layout's. The caches are filled by the real clients: huggingface_hub and modelscope download
from the local test hub (``tests/hub/hubserver.py``) in processes of their own, and the hub
cache's store is written through its own ``Store``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_PIN_FILE, TABLE
from cacheroot.envs._cli import main
from cacheroot.fetch._hub.cli import STORE_DIR, default_store
from cacheroot.fetch._hub.store import Answer, Store
from cacheroot.fetch._upkeep.inventory import HUB_STORE

from .conftest import cli, cli_json

if TYPE_CHECKING:
    from tests.hub.hubserver import HubRepo, HubServer
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer

#: 2024-01-02 03:04:00 UTC and 2024-01-03 04:05:00 UTC, as ``ls`` prints them (minutes).
ACCESSED, MODIFIED = 1704164640, 1704254700
ACCESSED_TEXT, MODIFIED_TEXT = "2024-01-02 03:04", "2024-01-03 04:05"

MODEL = HubRepo("acme/tiny", {"config.json": b'{"a": 1}', "model.safetensors": bytes(3000)})
DATASET = HubRepo("acme/set", {"data.jsonl": b'{"q": 1}\n' * 100})
#: The commits the test hub gives them (a digest of their files).
MODEL_COMMIT = "ba5fee8f279fc4f03c666d92da4eabb6a1aae1e1"
DATASET_COMMIT = "e98f450914bc862adf2dfd2fd9eaa5dc0c27e908"

TEST_CACHE_EMPTY = "ENTRY\tSIZE\tLAST USED (UTC)\tSOURCE\n(empty)\n"


def download(hub: HubServer, code: str) -> None:
    """Run a hub client's download in a process of its own: the clients read their endpoint
    and cache directory once, at import, from the environment a job gives them."""
    env = dict(os.environ)
    env.update(
        HF_ENDPOINT=hub.url,
        MODELSCOPE_ENDPOINT=hub.url,
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert hub.unhandled == []


def stamp(tree: Path) -> None:
    """Every file under ``tree`` last accessed at :data:`ACCESSED` and modified at
    :data:`MODIFIED` (links are left alone: their targets are files of the tree too)."""
    for path in tree.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (ACCESSED, MODIFIED))


def run_here(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cacheroot ARGV`` in this process: (exit status, stdout, stderr)."""
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture
def hf_root(isolated_cache: Path) -> Path:
    """The root with a model and a dataset that huggingface_hub downloaded into its hub cache."""
    with HubServer() as hub:
        hub.add_hf(MODEL)
        hub.add_hf(DATASET, "dataset")
        download(
            hub,
            "import huggingface_hub as h\n"
            "h.snapshot_download('acme/tiny')\n"
            "h.snapshot_download('acme/set', repo_type='dataset')\n",
        )
    assert (MODEL.commit, DATASET.commit) == (MODEL_COMMIT, DATASET_COMMIT)
    stamp(isolated_cache / "huggingface" / "hub")
    return isolated_cache


def test_ls_lists_what_huggingface_hub_downloaded(hf_root: Path) -> None:
    hub = hf_root / "huggingface" / "hub"
    done = cli("cache", "ls")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"test cache (_VLLM_TEST_CACHE): {hf_root}/vllm/test_cache\n"
        f"{TEST_CACHE_EMPTY}"
        "\n"
        f"Hugging Face hub (HF_HOME): {hub}\n"
        "REPO\tREVISIONS (REFS)\tFILES\tSIZE\tLAST ACCESSED (UTC)\tLAST MODIFIED (UTC)\n"
        f"dataset/acme/set\t{DATASET_COMMIT} (main)\t1\t900 B\t{ACCESSED_TEXT}\t{MODIFIED_TEXT}\n"
        f"model/acme/tiny\t{MODEL_COMMIT} (main)\t2\t2.9 KiB\t{ACCESSED_TEXT}\t{MODIFIED_TEXT}\n"
    )
    listed = cli_json("cache", "ls")
    assert listed["root"] == str(hf_root)
    assert listed["test_cache"] == {
        "variable": "_VLLM_TEST_CACHE",
        "path": f"{hf_root}/vllm/test_cache",
        "exists": False,
        "entries": [],
    }
    found = listed["huggingface"]
    assert (found["variable"], found["path"], found["exists"], found["scanned"]) == (
        "HF_HOME",
        str(hub),
        True,
        True,
    )
    assert (found["size"], found["notes"], found["directories"]) == (3908, [], [])
    assert found["repos"][1] == {
        "repo_type": "model",
        "repo_id": "acme/tiny",
        "path": f"{hub}/models--acme--tiny",
        "size": 3008,
        "nb_files": 2,
        "last_accessed": ACCESSED,
        "last_modified": MODIFIED,
        "refs": ["main"],
        "revisions": [
            {
                "commit": MODEL_COMMIT,
                "refs": ["main"],
                "path": f"{hub}/models--acme--tiny/snapshots/{MODEL_COMMIT}",
                "size": 3008,
                "nb_files": 2,
                "last_modified": MODIFIED,
            }
        ],
    }
    assert [(r["repo_type"], r["repo_id"], r["size"]) for r in found["repos"]] == [
        ("dataset", "acme/set", 900),
        ("model", "acme/tiny", 3008),
    ]
    # Nothing else is there: no ModelScope cache, no hub store.
    assert listed["modelscope"]["exists"] is False
    assert listed["hub_store"]["exists"] is False


def test_a_namespace_filter_lists_the_test_cache_alone(hf_root: Path) -> None:
    (hf_root / "vllm" / "test_cache" / "ns").mkdir(parents=True)
    done = cli("cache", "ls", "--namespace", "ns")
    assert (done.returncode, done.stderr) == (0, "")
    title = f"test cache (_VLLM_TEST_CACHE): {hf_root}/vllm/test_cache\n"
    assert done.stdout == title + TEST_CACHE_EMPTY
    assert set(cli_json("cache", "ls", "--namespace", "ns")) == {"test_cache"}


def test_without_huggingface_hub_ls_says_so_and_gives_sizes(
    hf_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = hf_root / "huggingface" / "hub"
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails: not installed
    status, out, err = run_here(capsys, "cache", "ls")
    assert (status, err) == (0, "")
    # A directory's size is every file in it: its blobs (900 and 3008 bytes), and its refs,
    # snapshot links and the listing huggingface_hub keeps of each revision.
    assert out.split("\n\n")[1] == (
        f"Hugging Face hub (HF_HOME): {hub}\n"
        "DIRECTORY\tSIZE\n"
        "datasets--acme--set\t1.1 KiB\n"
        "models--acme--tiny\t3.4 KiB\n"
        f"note: Hugging Face cache at {hub}: huggingface_hub is not installed here, sizes only\n"
    )
    status, out, err = run_here(capsys, "cache", "ls", "--json")
    found = json.loads(out)["huggingface"]
    assert (found["scanned"], found["repos"]) == (False, [])
    assert [(d["name"], d["path"]) for d in found["directories"]] == [
        ("datasets--acme--set", f"{hub}/datasets--acme--set"),
        ("models--acme--tiny", f"{hub}/models--acme--tiny"),
    ]
    assert found["notes"] == [
        f"Hugging Face cache at {hub}: huggingface_hub is not installed here, sizes only"
    ]


def test_ls_lists_modelscope_repositories_in_the_layouts_its_clients_read(
    isolated_cache: Path,
) -> None:
    ms = isolated_cache / "modelscope"
    with HubServer() as hub:
        hub.add_modelscope(MODEL)
        download(
            hub,
            "from modelscope.hub.snapshot_download import snapshot_download\n"
            "snapshot_download('acme/tiny')\n",
        )
    # What modelscope up to 1.37 left: the default cache's hub/ tree, a dot in the name as ___.
    legacy = ms / "hub" / "models" / "acme" / "old___v2"
    legacy.mkdir(parents=True)
    (legacy / "config.json").write_bytes(b"{}" * 50)
    # A dataset's raw downloads are nobody's repository.
    (ms / "datasets" / "downloads" / "abc").mkdir(parents=True)
    stamp(ms)
    done = cli("cache", "ls")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n\n")[1] == (
        f"ModelScope (MODELSCOPE_CACHE): {ms}\n"
        "REPO\tREVISIONS\tFILES\tSIZE\tLAST MODIFIED (UTC)\n"
        f"model/acme/old.v2\t-\t1\t100 B\t{MODIFIED_TEXT}\n"
        f"model/acme/tiny\tmaster\t2\t2.9 KiB\t{MODIFIED_TEXT}\n"
    )
    repos = cli_json("cache", "ls")["modelscope"]["repos"]
    assert [(r["repo_id"], r["layout"], r["revisions"], r["path"], r["size"]) for r in repos] == [
        ("acme/old.v2", "legacy", [], str(legacy), 100),
        ("acme/tiny", "current", ["master"], f"{ms}/models/acme--tiny", 3008),
    ]


def test_ls_follows_no_link_that_others_planted_in_the_root(
    isolated_cache: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "models" / "acme--far" / "snapshots" / "master").mkdir(parents=True)
    (elsewhere / "models" / "acme--far" / "snapshots" / "master" / "w.bin").write_bytes(b"w" * 10)
    ms = isolated_cache / "modelscope"
    (ms / "models").mkdir(parents=True)
    (ms / "models" / "acme--linked").symlink_to(elsewhere / "models" / "acme--far")
    (ms / "hub").symlink_to(elsewhere)
    (isolated_cache / "huggingface").mkdir()
    (isolated_cache / "huggingface" / "hub").symlink_to(elsewhere)
    listed = cli_json("cache", "ls")
    assert listed["modelscope"]["repos"] == []
    hub = listed["huggingface"]
    skipped = (
        f"skipped HF_HOME ({isolated_cache}/huggingface/hub): {isolated_cache}/huggingface/hub "
        "is a symbolic link; never followed (remove it, or point the variable at the directory "
        "itself)"
    )
    assert (hub["exists"], hub["repos"], hub["notes"]) == (False, [], [skipped])
    done = cli("cache", "ls")
    assert done.stdout.split("\n\n")[1:] == [
        f"note: {skipped}",
        (
            f"ModelScope (MODELSCOPE_CACHE): {ms}\n"
            "REPO\tREVISIONS\tFILES\tSIZE\tLAST MODIFIED (UTC)\n"
            "(empty)\n"
        ),
    ]


def test_ls_and_du_show_the_hub_cache_store(isolated_cache: Path) -> None:
    # This wing may not import the hub's, so it names the store's directory itself.
    assert HUB_STORE == STORE_DIR
    store = Store(default_store() or "")
    assert store.root == f"{isolated_cache}/hubcache"
    store.save("ab" + "0" * 62, Answer(200, (("ETag", "x"),), b"{}", stored=ACCESSED))
    store.save("cd" + "1" * 62, Answer(404, (), b"", stored=ACCESSED))
    store.publish(store.blob_path("1" * 40), b"weights" * 100)
    stamp(isolated_cache / "hubcache")
    done = cli("cache", "ls")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n\n")[1] == (
        f"hub cache store (cacheroot hub serve): {isolated_cache}/hubcache\n"
        "ANSWERS\tFILES\tSIZE\tLAST MODIFIED (UTC)\n"
        f"2\t1\t810 B\t{MODIFIED_TEXT}\n"
    )
    listed = cli_json("cache", "ls")["hub_store"]
    assert (listed["answers"], listed["files"], listed["size"]) == (2, 1, 810)

    usage = cli_json("cache", "du")
    row = next(c for c in usage["caches"] if c["variable"] == "CACHEROOT/hubcache")
    assert row == {
        "variable": "CACHEROOT/hubcache",
        "path": f"{isolated_cache}/hubcache",
        "size": 810,
        "exists": True,
    }
    assert usage["other_tools"] == []
    text = cli("cache", "du").stdout
    assert f"810 B\tCACHEROOT/hubcache\t{isolated_cache}/hubcache\n" in text
    assert "other tools" not in text


def test_du_of_a_home_cache_names_other_tools_apart(tmp_path: Path) -> None:
    """With no root set, the root is ``~/.cache``: a browser's cache there is not the layout's."""
    home = tmp_path / "home"
    cache = home / ".cache"
    for path, size in (
        (cache / "google-chrome" / "Default" / "Cache" / "data_0", 5000),
        (cache / "mesa_shader_cache" / "index", 700),
        (cache / "huggingface" / "hub" / "models--a--b" / "blobs" / "x", 300),
        (cache / "vllm" / "test_cache" / "ns" / "e.bin", 200),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    (cache / "motd.legal-displayed").write_bytes(b"")
    layout = {v.name for v in TABLE} | {CACHEROOT, CACHEROOT_APPLIED}
    env = {k: v for k, v in os.environ.items() if k not in layout}
    env.update(HOME=str(home), **{CACHEROOT_PIN_FILE: ""})

    usage = cli_json("cache", "du", env=env)
    assert usage["root"] == str(cache)
    assert usage["other_tools"] == [
        {"path": f"{cache}/google-chrome", "size": 5000},
        {"path": f"{cache}/mesa_shader_cache", "size": 700},
        {"path": f"{cache}/motd.legal-displayed", "size": 0},
    ]
    assert usage["other_tools_total"] == 5700
    by_var = {c["variable"]: c for c in usage["caches"]}
    # The XDG cache home is the root: its figure is the layout's caches, not the browser's.
    assert by_var["XDG_CACHE_HOME"] == {
        "variable": "XDG_CACHE_HOME",
        "path": str(cache),
        "size": 500,
        "exists": True,
        "other_tools_left_out": True,
    }
    assert by_var["HF_HOME"]["size"] == 300
    assert by_var["_VLLM_TEST_CACHE"]["size"] == 200

    done = cli("cache", "du", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n\n")[2] == (
        "other tools: 3 entries of the root that no cache of the layout owns, left out above\n"
        f"4.9 KiB\tother tools\t{cache}/google-chrome\n"
        f"700 B\tother tools\t{cache}/mesa_shader_cache\n"
        f"0 B\tother tools\t{cache}/motd.legal-displayed\n"
        "5.6 KiB\ttotal of other tools\n"
    )
    assert f"500 B\tXDG_CACHE_HOME\t{cache}\t(other tools left out)\n" in done.stdout
