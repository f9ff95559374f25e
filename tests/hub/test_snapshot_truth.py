"""What ``cacheroot warm`` and ``model_snapshot`` say about a snapshot is true: complete means
every file of the revision, a pinned entry resolves by its branch offline, a failed attempt is
not repeated within the run, and the summary counts what was downloaded.

The real huggingface_hub client runs in fresh processes (``cacheroot warm`` on the command line)
against the local hub, which injects the faults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Model
from cacheroot.fetch._errors import CacheMissError
from cacheroot.fetch._models.snapshot import check_snapshot, offline_snapshot_path

from .conftest import FILES

if TYPE_CHECKING:
    from .hubserver import HubRepo, HubServer

CLI = (sys.executable, "-m", "cacheroot.envs._cli")
#: The tiny repository's file sizes, as the hub serves them (conftest's ``tiny_repo``).
CONFIG_SIZE = 60


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _warm_json(manifest: Path, env: dict[str, str], *extra: str) -> tuple[int, dict[str, Any]]:
    done = _cli("warm", str(manifest), "--json", *extra, env=env)
    assert done.stdout, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, summary


def _manifest(tmp_path: Path, repo: HubRepo, revision: str, *extra: str) -> Path:
    path = tmp_path / "manifest.toml"
    lines = ["[[model]]", 'hub = "hf"', f'repo_id = "{repo.repo_id}"', f'revision = "{revision}"']
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


def _download_one(env: dict[str, str], repo: HubRepo, name: str) -> None:
    """Cache one file of ``repo`` the way a test would, with a plain ``hf_hub_download``."""
    code = (
        "import sys, huggingface_hub\n"
        "huggingface_hub.hf_hub_download(sys.argv[1], sys.argv[2], revision=sys.argv[3])\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, repo.repo_id, name, repo.commit],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )


@pytest.mark.parametrize(
    ("status", "says"),
    [
        # huggingface_hub does not retry a 403: the warm fails at once.
        pytest.param(403, "the hub did not list the revision (no error was reported)", id="403"),
        # It retries a 429 five times (Retry-After + 1 s each), then falls back to the cache.
        pytest.param(
            429,
            "the hub kept failing after 1 attempt (last: HTTP 429",
            id="429",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_failed_listing_never_records_a_partial_snapshot_complete(
    *,
    hub: HubServer,
    hub_env: dict[str, str],
    tiny_repo: HubRepo,
    tmp_path: Path,
    status: int,
    says: str,
) -> None:
    _download_one(hub_env, tiny_repo, "config.json")
    hub.reset()
    hub.fail_next(10_000, status=status, retry_after="0", match="^/api/")
    manifest = _manifest(tmp_path, tiny_repo, tiny_repo.commit)

    exit_status, summary = _warm_json(manifest, hub_env, "--attempts", "1")

    assert exit_status == 1, summary
    [row] = summary["entries"]
    assert row["status"] == "failed"
    assert says in row["reason"], row["reason"]
    assert "the 1 file(s) cached cannot be known to be all of it" in row["reason"]
    report = check_snapshot(Model(tiny_repo.repo_id, tiny_repo.commit))
    assert not report.complete
    check_status, check = _warm_json(manifest, hub_env, "--check")
    assert check_status == 1
    assert check["entries"][0]["status"] == "missing"
    assert hub.unhandled == []


def test_warm_completes_the_snapshot_once_the_hub_answers(
    hub: HubServer, hub_env: dict[str, str], tiny_repo: HubRepo, tmp_path: Path
) -> None:
    _download_one(hub_env, tiny_repo, "config.json")
    manifest = _manifest(tmp_path, tiny_repo, tiny_repo.commit)

    status, summary = _warm_json(manifest, hub_env)

    assert status == 0, summary
    report = check_snapshot(Model(tiny_repo.repo_id, tiny_repo.commit))
    assert report.complete, report.problems
    assert sorted(p.name for p in report.path.iterdir()) == sorted(FILES)  # type: ignore[union-attr]


def test_warm_counts_the_bytes_it_downloaded(
    hub: HubServer, hub_env: dict[str, str], tiny_repo: HubRepo, tmp_path: Path
) -> None:
    _download_one(hub_env, tiny_repo, "config.json")
    manifest = _manifest(tmp_path, tiny_repo, tiny_repo.commit)
    total = sum(len(data) for data in tiny_repo.files.values())

    status, cold = _warm_json(manifest, hub_env)
    again_status, again = _warm_json(manifest, hub_env)

    assert (status, again_status) == (0, 0), (cold, again)
    # config.json was there already: the other two files are what this warm downloaded.
    assert cold["bytes"] == total - CONFIG_SIZE == cold["entries"][0]["downloaded"]
    assert again["bytes"] == 0
    text = _cli("warm", str(manifest), env=hub_env)
    assert "(0 B downloaded)" in text.stdout, text.stdout
    assert os.path.getsize(Path(cold["entries"][0]["path"]) / "config.json") == CONFIG_SIZE


def _hf_offline(
    env: dict[str, str], repo: HubRepo, revision: str
) -> subprocess.CompletedProcess[str]:
    """huggingface_hub itself, offline in a fresh process, resolving ``revision``."""
    code = (
        "import sys, huggingface_hub\n"
        "print(huggingface_hub.snapshot_download(sys.argv[1], revision=sys.argv[2]))\n"
        "print(huggingface_hub.hf_hub_download(sys.argv[1], 'config.json', revision=sys.argv[2]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, repo.repo_id, revision],
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_pinned_entry_with_its_branch_resolves_main_offline(
    hub: HubServer, hub_env: dict[str, str], tiny_repo: HubRepo, tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path, tiny_repo, tiny_repo.commit, 'branch = "main"')
    status, summary = _warm_json(manifest, hub_env)
    assert status == 0, summary
    snapshot = Path(summary["entries"][0]["path"])
    ref = snapshot.parent.parent / "refs" / "main"

    assert ref.read_text(encoding="utf-8") == tiny_repo.commit  # as the client writes it
    offline = _hf_offline(hub_env, tiny_repo, "main")
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.split() == [str(snapshot), str(snapshot / "config.json")]
    # The fixture's lookup: the branch resolves through refs/main to the pinned record.
    assert check_snapshot(Model(tiny_repo.repo_id, "main")).path == snapshot

    ref.unlink()
    check_status, check = _warm_json(manifest, hub_env, "--check")
    assert check_status == 1
    assert check["entries"][0]["reason"] == (
        "refs/main is missing, so offline clients cannot resolve the branch"
    )
    hub.reset()
    again_status, again = _warm_json(manifest, hub_env)
    assert again_status == 0, again
    assert ref.read_text(encoding="utf-8") == tiny_repo.commit
    assert hub.total() == 0, hub.counts()  # the files were complete: only the ref was written


def test_without_the_branch_field_main_does_not_resolve_offline(
    hub: HubServer, hub_env: dict[str, str], tiny_repo: HubRepo, tmp_path: Path
) -> None:
    # What the field is for: a volume warmed by commit alone has no refs/main.
    manifest = _manifest(tmp_path, tiny_repo, tiny_repo.commit)
    status, summary = _warm_json(manifest, hub_env)
    assert status == 0, summary

    offline = _hf_offline(hub_env, tiny_repo, "main")

    assert offline.returncode == 1
    assert "LocalEntryNotFoundError" in offline.stderr


def test_a_branch_entry_serves_a_call_by_its_commit(
    hub: HubServer, hub_env: dict[str, str], tiny_repo: HubRepo, tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path, tiny_repo, "main")
    status, summary = _warm_json(manifest, hub_env)
    assert status == 0, summary

    by_commit = offline_snapshot_path(Model(tiny_repo.repo_id, tiny_repo.commit))
    by_branch = offline_snapshot_path(Model(tiny_repo.repo_id, "main"))

    assert by_commit == by_branch == Path(summary["entries"][0]["path"])
    assert by_commit.name == tiny_repo.commit
    # Another selection of files is another snapshot: not served by this record.
    with pytest.raises(CacheMissError):
        offline_snapshot_path(Model(tiny_repo.repo_id, tiny_repo.commit, allow_patterns="*.json"))
