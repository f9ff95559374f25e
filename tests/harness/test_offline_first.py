"""Offline-first runs and the ``model_snapshot`` fixture, as an adopting project sees them.

Each test writes a small project into ``tmp_path`` and runs it with a real pytest process (xdist
where the environment must reach the workers) against a local Hugging Face hub (``tests/hub``)
and the scenario origin, both counting every request. The nested tests use the real
``huggingface_hub``, pointed at the local hub by ``HF_ENDPOINT``.
"""

from __future__ import annotations

import importlib
import json
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, HF_HUB_OFFLINE, VLLM_TEST_CACHE_ONLY

from .runner import ServedOrigin, layout_env, plugin_args, report_lines, run_pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Other top-level test packages, imported by name (mypy does not follow them from here).
_HUB: Any = importlib.import_module("hub.hubserver")
_ASSETS: Any = importlib.import_module("scenarios.assets")

REPO_ID = "acme/offline-first"
GSM8K = "/datasets/gsm8k/test.jsonl"
#: The forced-offline stop: pytest's usage-error status.
INCOMPLETE = 4


def _weights() -> bytes:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(1)
    return save({"embed.weight": rng.standard_normal((8, 4)).astype(np.float32)})


@pytest.fixture(scope="module")
def repo() -> Any:
    """A tiny model: a config, a tokenizer and a safetensors file (served as LFS)."""
    return _HUB.HubRepo(
        REPO_ID,
        {
            "config.json": json.dumps({"model_type": "llama", "hidden_size": 4}).encode(),
            "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}).encode(),
            "model.safetensors": _weights(),
        },
    )


@pytest.fixture
def hub(repo: Any) -> Iterator[Any]:
    server = _HUB.HubServer()
    server.add_hf(repo)
    with server:
        yield server


@pytest.fixture(scope="module")
def origin() -> Iterator[ServedOrigin]:
    with ServedOrigin() as served:
        yield served


def _env(tmp_path: Path, hub: Any, **extra: str) -> dict[str, str]:
    """A job's environment: the layout of one volume, the hub client pointed at the local hub."""
    return layout_env(
        tmp_path / "volume",
        HF_ENDPOINT=hub.url,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        **extra,
    )


def _project(tmp_path: Path, body: str, ini: str = "", **constants: str) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "pytest.ini").write_text(f"[pytest]\nfilterwarnings = error\n{ini}")
    header = "from __future__ import annotations\n\n"
    header += "".join(f"{k} = {v!r}\n" for k, v in constants.items())
    (project / "test_adopter.py").write_text(header + textwrap.dedent(body))
    return project


def _manifest(tmp_path: Path, repo: Any, origin: ServedOrigin | None) -> Path:
    text = f'[[model]]\nhub = "hf"\nrepo_id = "{repo.repo_id}"\nrevision = "{repo.commit}"\n'
    if origin is not None:
        sha = _ASSETS.catalog()[GSM8K].sha256
        text += (
            f'\n[[asset]]\nurl = "{origin.url}{GSM8K}"\nsha256 = "{sha}"\n'
            'namespace = "gsm8k"\nfilename = "test.jsonl"\n'
        )
    path = tmp_path / "manifest.toml"
    path.write_text(text)
    return path


#: Tests of the adopting project: offline from the first test on, the model resolved by the hub's
#: own client offline, the asset from the cache.
OFFLINE_TESTS = """
import os

import huggingface_hub
from huggingface_hub import constants


def test_offline_in_every_worker():
    assert os.environ.get("PYTEST_XDIST_WORKER")  # a worker, not the controller
    assert os.environ[OFFLINE_VAR] == "1"
    assert os.environ[UPSTREAM_OFFLINE_VAR] == "1"  # vLLM's own test helper reads this one
    assert os.environ[HF_OFFLINE_VAR] == "1"
    assert constants.HF_HUB_OFFLINE  # what the client read at import


def test_model_snapshot_is_what_the_client_resolves(model_snapshot):
    path = model_snapshot(REPO_ID, COMMIT)
    assert str(path) == huggingface_hub.snapshot_download(REPO_ID, revision=COMMIT)
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json"
    ]


def test_asset_from_the_cache(cached_file):
    path = cached_file(URL, sha256=SHA, namespace="gsm8k", filename="test.jsonl")
    assert path.read_bytes().startswith(b"{")
"""


def test_first_run_warms_then_runs_offline_second_run_asks_nothing(
    tmp_path: Path, hub: Any, repo: Any, origin: ServedOrigin
) -> None:
    manifest = _manifest(tmp_path, repo, origin)
    sha = _ASSETS.catalog()[GSM8K].sha256
    project = _project(
        tmp_path,
        OFFLINE_TESTS,
        REPO_ID=repo.repo_id,
        COMMIT=repo.commit,
        URL=origin.url + GSM8K,
        SHA=sha,
        OFFLINE_VAR=CACHEROOT_OFFLINE,
        UPSTREAM_OFFLINE_VAR=VLLM_TEST_CACHE_ONLY,
        HF_OFFLINE_VAR=HF_HUB_OFFLINE,
    )
    env = _env(tmp_path, hub)
    args = ["-n", "2", *plugin_args(), "--cacheroot-manifest", str(manifest)]
    served = origin.stats()["total"]

    report = tmp_path / "first.json"
    first = run_pytest([*args, "--cacheroot-report", str(report)], env=env, cwd=project)
    text = first.stdout + first.stderr
    assert first.returncode == 0, text
    assert "cacheroot manifest: 2 entries missing; warming them:" in text
    assert f"[[model]] #1 hf:{REPO_ID}@{repo.commit}" in text  # one line per entry
    assert f"[[asset]] #1 {origin.url}{GSM8K}" in text
    assert "cacheroot manifest: complete; running offline" in text
    # The docs' figure: 1 listing, then a HEAD and a GET for each of the 3 files.
    assert hub.total() == 7, hub.counts()
    assert origin.stats()["total"] - served == 1
    assert hub.unhandled == []
    assert len(report_lines(first.stdout)) == 1  # the manifest's lines are not report lines
    figures = json.loads(report.read_text())
    assert figures["offline"] is True
    assert figures["manifest"]["missing"] == [
        f"[[asset]] #1 {origin.url}{GSM8K}",
        f"[[model]] #1 hf:{REPO_ID}@{repo.commit}",
    ]
    assert (figures["misses"], figures["model_misses"]) == (1, 1)  # the warm, before the tests
    assert (figures["hits"], figures["model_hits"]) == (1, 1)  # the tests, offline
    assert figures["processes"] == 2

    hub.reset()
    served = origin.stats()["total"]
    report = tmp_path / "second.json"
    second = run_pytest([*args, "--cacheroot-report", str(report)], env=env, cwd=project)
    text = second.stdout + second.stderr
    assert second.returncode == 0, text
    assert "missing" not in text
    assert hub.total() == 0
    assert origin.stats()["total"] == served
    figures = json.loads(report.read_text())
    assert (figures["misses"], figures["model_misses"], figures["bytes_downloaded"]) == (0, 0, 0)
    assert (figures["hits"], figures["model_hits"]) == (1, 1)
    lines = report_lines(second.stdout)
    assert lines == [figures["line"]]
    assert "models: 1 hit, 0 misses" in lines[0]


def test_forced_offline_with_a_missing_entry_stops_with_the_list(
    tmp_path: Path, hub: Any, repo: Any
) -> None:
    manifest = _manifest(tmp_path, repo, None)
    # The ini option this time, relative to the ini file.
    ini = "cacheroot_manifest = ../manifest.toml\n"
    project = _project(tmp_path, "def test_never_runs():\n    raise AssertionError\n", ini)
    out = run_pytest(
        plugin_args(), env=_env(tmp_path, hub, **{CACHEROOT_OFFLINE: "1"}), cwd=project
    )
    text = out.stdout + out.stderr
    assert out.returncode == INCOMPLETE, text
    assert "offline run, but 1 manifest entry is not complete" in text
    # Once: a usage error, not an Exit that the session's summary prints again.
    assert text.count(f"missing: [[model]] #1 hf:{REPO_ID}@{repo.commit} ({manifest})") == 1
    assert f"cacheroot warm {manifest}" in text
    assert "test_never_runs" not in text
    assert hub.total() == 0


def test_model_snapshot_warms_online_and_names_the_entry_offline(
    tmp_path: Path, hub: Any, repo: Any
) -> None:
    body = """
    def test_model(model_snapshot):
        path = model_snapshot(REPO_ID, COMMIT, allow_patterns=["*.json"])
        assert sorted(p.name for p in path.iterdir()) == ["config.json", "tokenizer.json"]
    """
    project = _project(tmp_path, body, REPO_ID=repo.repo_id, COMMIT=repo.commit)
    report = tmp_path / "report.json"
    args = [*plugin_args(), "--cacheroot-report", str(report)]

    # Forced offline, nothing cached: the test fails naming the manifest entry, no request.
    offline = _env(tmp_path, hub, **{CACHEROOT_OFFLINE: "1"})
    out = run_pytest(args, env=offline, cwd=project)
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, text
    assert f"model snapshot hf://{REPO_ID}@{repo.commit} is not usable" in text
    entry = f'[[model]]\nhub = "hf"\nrepo_id = "{REPO_ID}"\nrevision = "{repo.commit}"\n'
    assert entry + 'allow_patterns = ["*.json"]' in text
    assert "cacheroot warm MANIFEST" in text
    assert hub.total() == 0
    assert json.loads(report.read_text())["offline_misses"] == 1

    # Online: the fixture warms it (the files it selects, once).
    out = run_pytest(args, env=_env(tmp_path, hub), cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    got = {path for (method, path), _ in hub.counts().items() if method == "GET"}
    assert f"/{REPO_ID}/resolve/{repo.commit}/config.json" in got
    assert f"/{REPO_ID}/resolve/{repo.commit}/model.safetensors" not in got
    assert json.loads(report.read_text())["model_misses"] == 1

    # Offline again: a hit, without a request.
    hub.reset()
    out = run_pytest(args, env=offline, cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    assert hub.total() == 0
    figures = json.loads(report.read_text())
    assert (figures["model_hits"], figures["model_misses"], figures["misses"]) == (1, 0, 0)


def test_an_entry_that_cannot_be_warmed_leaves_the_run_online(
    tmp_path: Path, hub: Any, repo: Any
) -> None:
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        f'[[model]]\nhub = "hf"\nrepo_id = "acme/absent"\nrevision = "{repo.commit}"\n'
    )
    body = """
    import os

    def test_online():
        assert OFFLINE_VAR not in os.environ
        assert HF_OFFLINE_VAR not in os.environ
    """
    names = {"OFFLINE_VAR": CACHEROOT_OFFLINE, "HF_OFFLINE_VAR": HF_HUB_OFFLINE}
    project = _project(tmp_path, body, **names)
    out = run_pytest(
        [*plugin_args(), "--cacheroot-manifest", str(manifest)],
        env=_env(tmp_path, hub),
        cwd=project,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "1 entry could not be warmed; running online" in text
    assert f"failed: [[model]] #1 hf:acme/absent@{repo.commit} ({manifest}): Repository" in text
