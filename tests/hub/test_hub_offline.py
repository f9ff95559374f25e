"""Offline-first runs with the session's hub cache: metadata calls keep working.

A complete ``--cacheroot-manifest`` makes a run offline. Without a hub cache that means
``HF_HUB_OFFLINE=1``, and every metadata call (``model_info``, ``list_repo_files``) fails with
``OfflineModeIsEnabled`` however warm the volume is. With ``--cacheroot-hub`` the hub cache is
switched to store-only instead: the clients stay online against it, and it answers what it has
seen, with no network at all (the upstream here is stopped before the offline run).
"""

from __future__ import annotations

import importlib
import re
import textwrap
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from .hubserver import HubRepo, HubServer

_RUNNER: Any = importlib.import_module("harness.runner")

TESTS = """\
import os

import huggingface_hub as hh

REPO = {repo!r}
COMMIT = {commit!r}


def test_hf_hub_offline_is_not_the_mechanism():
    assert os.environ.get("HF_HUB_OFFLINE") in (None, "")


def test_metadata_and_files_of_a_seen_repository():
    assert hh.model_info(REPO).sha == COMMIT
    assert sorted(hh.list_repo_files(REPO)) == {files!r}
    with open(hh.hf_hub_download(REPO, "config.json")) as f:
        assert '"model_type": "llama"' in f.read()
"""


def _counts(output: str) -> tuple[int, int]:
    last = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    found = dict.fromkeys(("passed", "failed"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed)", last[-1] if last else ""):
        found[word] = int(number)
    return found["passed"], found["failed"]


def test_an_offline_run_through_the_hub_keeps_metadata_calls_working(
    tmp_path: Path, hub: HubServer, tiny_repo: HubRepo
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    files = sorted(tiny_repo.files)
    text = TESTS.format(repo=tiny_repo.repo_id, commit=tiny_repo.commit, files=files)
    (project / "test_hub.py").write_text(textwrap.dedent(text), encoding="utf-8")
    (project / "manifest.toml").write_text(
        textwrap.dedent(
            f"""\
            [[model]]
            hub = "hf"
            repo_id = "{tiny_repo.repo_id}"
            revision = "{tiny_repo.commit}"
            branch = "main"
            """
        ),
        encoding="utf-8",
    )
    env = _RUNNER.layout_env(
        tmp_path / "root", HF_ENDPOINT=hub.url, HF_HUB_DISABLE_PROGRESS_BARS="1"
    )
    common = [*_RUNNER.plugin_args(), "-p", "no:randomly"]
    base = [*common, "--cacheroot-manifest", "manifest.toml"]

    # Online, through the hub: the tests fill the hub's store; then the manifest is warmed
    # (through the hub too) and the run goes offline, the hub store-only.
    first = _RUNNER.run_pytest([*common, "--cacheroot-hub"], env=env, cwd=project)
    assert _counts(first.stdout) == (2, 0), first.stdout[-3000:] + first.stderr[-3000:]
    second = _RUNNER.run_pytest([*base, "--cacheroot-hub"], env=env, cwd=project)
    assert _counts(second.stdout) == (2, 0), second.stdout[-3000:] + second.stderr[-3000:]

    hub.close()  # from here on, nothing answers at the upstream's address
    offline = _RUNNER.run_pytest([*base, "--cacheroot-hub", "-n", "2"], env=env, cwd=project)
    assert _counts(offline.stdout) == (2, 0), offline.stdout[-3000:] + offline.stderr[-3000:]
    assert any(line.startswith("cacheroot: offline run") for line in offline.stdout.splitlines())

    # The same run without the hub cache: HF_HUB_OFFLINE fails the metadata call.
    plain = _RUNNER.run_pytest(base, env=env, cwd=project)
    assert _counts(plain.stdout) == (0, 2), plain.stdout[-3000:]
    assert "OfflineModeIsEnabled" in plain.stdout
