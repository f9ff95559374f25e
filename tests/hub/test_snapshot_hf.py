"""Hugging Face snapshots through the real huggingface_hub client and a local hub."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Model
from cacheroot.fetch._errors import CacheMissError
from cacheroot.fetch._models.snapshot import (
    UnpinnedRevisionWarning,
    check_snapshot,
    offline_snapshot_path,
    warm_snapshot,
)

from .conftest import FILES

if TYPE_CHECKING:
    from .conftest import Driver
    from .hubserver import HubRepo, HubServer


def _spec(repo: HubRepo, revision: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"repo_id": repo.repo_id, "revision": revision or repo.commit, **extra}


def _file_requests(hub: HubServer, repo: HubRepo, method: str) -> dict[str, int]:
    """Requests per file of ``repo`` made with ``method`` on the resolve endpoint."""
    counts = hub.counts()
    prefix = f"/{repo.repo_id}/resolve/{repo.commit}/"
    return {
        path[len(prefix) :]: n
        for (m, path), n in counts.items()
        if m == method and path.startswith(prefix)
    }


def _tree_requests(hub: HubServer, repo: HubRepo) -> int:
    return sum(
        n for (_, p), n in hub.counts().items() if p.startswith(f"/api/models/{repo.repo_id}/tree/")
    )


def test_cold_warm_fetches_each_file_once(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    out = driver.run("warm", _spec(tiny_repo))

    assert "error" not in out, out
    assert _file_requests(hub, tiny_repo, "GET") == dict.fromkeys(FILES, 1)
    assert _file_requests(hub, tiny_repo, "HEAD") == dict.fromkeys(FILES, 1)
    assert _tree_requests(hub, tiny_repo) == 1
    assert hub.total() == 7, hub.counts()  # the docs' figure: 1 listing, a HEAD and a GET each
    assert hub.unhandled == []
    report = check_snapshot(Model(**_spec(tiny_repo)))
    assert report.complete, report.problems
    assert report.path == Path(out["path"])
    for name in FILES:
        assert (report.path / name).read_bytes() == tiny_repo.files[name]


def test_second_warm_and_offline_runs_make_no_request(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    spec = _spec(tiny_repo)
    first = driver.run("warm", spec)
    hub.reset()

    second = driver.run("warm", spec)
    offline = driver.run("hf-offline", spec, env=dict(driver.env, HF_HUB_OFFLINE="1"))

    assert hub.total() == 0, hub.counts()
    assert second["path"] == first["path"]
    # huggingface_hub itself, offline in a fresh process, resolves the cached snapshot.
    assert "error" not in offline, offline
    assert offline["snapshot"] == offline["path"] == first["path"]
    assert Path(offline["config"]).read_bytes() == tiny_repo.files["config.json"]


def test_eight_processes_make_one_download(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    results = driver.run_together(8, "warm", _spec(tiny_repo))

    assert [r.get("error") for r in results] == [None] * 8
    assert len({r["path"] for r in results}) == 1
    assert _file_requests(hub, tiny_repo, "GET") == dict.fromkeys(FILES, 1)
    assert _file_requests(hub, tiny_repo, "HEAD") == dict.fromkeys(FILES, 1)
    assert _tree_requests(hub, tiny_repo) == 1
    assert hub.total() == 7, hub.counts()  # the same as one process (the docs' table)
    assert check_snapshot(Model(**_spec(tiny_repo))).complete


def test_a_deleted_file_makes_the_snapshot_incomplete(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    spec = Model(**_spec(tiny_repo))
    driver.run("warm", _spec(tiny_repo))
    path = offline_snapshot_path(spec)
    (path / "model.safetensors").unlink()

    report = check_snapshot(spec)
    assert not report.complete
    assert report.missing == ("model.safetensors",)
    with pytest.raises(CacheMissError) as caught:
        offline_snapshot_path(spec)
    message = str(caught.value)
    assert "model.safetensors: missing" in message
    assert f'repo_id = "{tiny_repo.repo_id}"' in message
    assert f'revision = "{tiny_repo.commit}"' in message
    assert "[[model]]" in message

    # Warming again restores the link from the blob still cached: no byte is downloaded.
    hub.reset()
    driver.run("warm", _spec(tiny_repo))
    assert _file_requests(hub, tiny_repo, "GET") == {}
    assert check_snapshot(spec).complete


def test_a_damaged_blob_is_found_and_downloaded_again(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    spec = Model(**_spec(tiny_repo))
    driver.run("warm", _spec(tiny_repo))
    blob = Path(os.path.realpath(offline_snapshot_path(spec) / "model.safetensors"))
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))  # same size: only the hash can tell

    report = check_snapshot(spec)
    assert report.wrong == ("model.safetensors",)
    assert "sha256" in report.problems[0]

    hub.reset()
    driver.run("warm", _spec(tiny_repo))
    assert _file_requests(hub, tiny_repo, "GET") == {"model.safetensors": 1}
    assert check_snapshot(spec, deep=True).complete


def test_a_rate_limited_listing_is_retried(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    # huggingface_hub retries its listing itself, honouring Retry-After (plus one second).
    hub.fail_next(1, status=429, retry_after="0", match="/tree/")

    out = driver.run("warm", _spec(tiny_repo))

    assert "error" not in out, out
    assert _tree_requests(hub, tiny_repo) == 2
    assert _file_requests(hub, tiny_repo, "GET") == dict.fromkeys(FILES, 1)


def test_a_rate_limited_branch_lookup_waits_for_retry_after(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    # huggingface_hub does not retry the revision lookup: warm_snapshot does, after Retry-After.
    hub.fail_next(1, status=429, retry_after="1", match="/revision/")

    out = driver.run("warm", _spec(tiny_repo, "main"), backoff=0.01)

    assert "error" not in out, out
    assert out["elapsed"] >= 1.0
    assert hub.counts()[("GET", f"/api/models/{tiny_repo.repo_id}/revision/main")] == 2
    assert _file_requests(hub, tiny_repo, "GET") == dict.fromkeys(FILES, 1)
    assert "UnpinnedRevisionWarning" in out["stderr"]


def test_a_failing_download_is_retried_with_backoff(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    # huggingface_hub does not retry a 503 on the file body; warm_snapshot backs off and retries.
    hub.fail_next(
        2, status=503, retry_after=None, match=r"/resolve/.*/model\.safetensors$", method="GET"
    )

    out = driver.run("warm", _spec(tiny_repo), backoff=0.01)

    assert "error" not in out, out
    assert check_snapshot(Model(**_spec(tiny_repo))).complete


def test_retries_give_up_with_the_last_status(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    hub.fail_next(
        100, status=503, retry_after=None, match=r"/resolve/.*/config\.json$", method="GET"
    )

    out = driver.run("warm", _spec(tiny_repo), attempts=2, backoff=0.01)

    assert out["error"] == "DownloadError"
    assert out["status"] == 503
    assert "after 2 attempts" in out["message"]
    assert not check_snapshot(Model(**_spec(tiny_repo))).complete


def test_a_missing_repository_is_not_retried(driver: Driver, hub: HubServer) -> None:
    out = driver.run("warm", {"repo_id": "acme/absent", "revision": "a" * 40}, backoff=5.0)

    assert out["error"] == "RepositoryNotFoundError"
    assert out["elapsed"] < 5.0


def test_offline_warm_of_a_branch_uses_the_recorded_commit(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    driver.run("warm", _spec(tiny_repo, "main"))
    spec = Model(**_spec(tiny_repo, "main"))
    hub.reset()

    with pytest.warns(UnpinnedRevisionWarning, match="pin"):
        path = warm_snapshot(spec, offline=True)

    assert path.name == tiny_repo.commit
    assert check_snapshot(spec).commit == tiny_repo.commit
    assert hub.total() == 0


def test_patterns_select_what_is_downloaded_and_checked(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    spec = _spec(tiny_repo, allow_patterns=["*.json"])

    driver.run("warm", spec)

    assert _file_requests(hub, tiny_repo, "GET") == {"config.json": 1, "tokenizer.json": 1}
    assert check_snapshot(Model(**spec)).complete
    # The full snapshot is another entry: never warmed, so not complete.
    assert not check_snapshot(Model(**_spec(tiny_repo))).complete


def test_a_warmer_killed_mid_download_blocks_nobody(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    reached, release = hub.stall_next(match=r"/model\.safetensors$", method="GET")
    victim = driver.start("warm", _spec(tiny_repo))
    try:
        assert reached.wait(60), "the first warmer never asked for the weights"
        victim.kill()  # SIGKILL while it holds the snapshot lock and a partial file
        victim.wait(60)
    finally:
        release.set()

    out = driver.run("warm", _spec(tiny_repo), lock_timeout=30)

    assert "error" not in out, out
    assert out["elapsed"] < 30
    assert _file_requests(hub, tiny_repo, "GET")["model.safetensors"] == 2
    assert check_snapshot(Model(**_spec(tiny_repo)), deep=True).complete
