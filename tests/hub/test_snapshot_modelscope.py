"""ModelScope snapshots through the real modelscope client and a local hub."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.fetch import Model
from cacheroot.fetch._models.snapshot import check_snapshot, offline_snapshot_path

from .conftest import FILES

if TYPE_CHECKING:
    from .conftest import Driver
    from .hubserver import HubRepo, HubServer

ACCEL = ("GET", "/api/v1/repos/internalAccelerationInfo")


def _spec(repo: HubRepo, revision: str | None = None) -> dict[str, Any]:
    return {"repo_id": repo.repo_id, "revision": revision or repo.commit, "hub": "modelscope"}


def _file_gets(hub: HubServer, repo: HubRepo) -> int:
    return hub.counts()[("GET", f"/api/v1/models/{repo.repo_id}/repo")]


def _listings(hub: HubServer, repo: HubRepo) -> int:
    return hub.counts()[("GET", f"/api/v1/models/{repo.repo_id}/repo/files")]


def test_cold_warm_fetches_each_file_once(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    out = driver.run("warm", _spec(tiny_repo))

    assert "error" not in out, out
    # The file endpoint takes the path as a query parameter: one GET per file, three in all.
    assert _file_gets(hub, tiny_repo) == len(FILES)
    assert _listings(hub, tiny_repo) == 1
    assert hub.counts()[ACCEL] == 1
    assert hub.total() == len(FILES) + 2
    assert hub.unhandled == []
    path = offline_snapshot_path(Model(**_spec(tiny_repo)))
    assert path == Path(out["path"])
    for name in FILES:
        assert (path / name).read_bytes() == tiny_repo.files[name]


def test_second_warm_and_offline_runs_make_no_request(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    first = driver.run("warm", _spec(tiny_repo))
    hub.reset()

    second = driver.run("warm", _spec(tiny_repo))
    offline = driver.run("ms-offline", _spec(tiny_repo))

    assert hub.total() == 0, hub.counts()
    assert second["path"] == first["path"]
    # modelscope itself, with local_files_only in a fresh process, finds the same snapshot.
    assert "error" not in offline, offline
    assert offline["snapshot"] == offline["path"] == first["path"]


def test_eight_processes_make_one_download(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    results = driver.run_together(8, "warm", _spec(tiny_repo))

    assert [r.get("error") for r in results] == [None] * 8
    assert len({r["path"] for r in results}) == 1
    assert _file_gets(hub, tiny_repo) == len(FILES)
    assert _listings(hub, tiny_repo) == 1


def test_a_deleted_file_is_reported_and_fetched_alone(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    spec = Model(**_spec(tiny_repo))
    driver.run("warm", _spec(tiny_repo))
    (offline_snapshot_path(spec) / "tokenizer.json").unlink()

    report = check_snapshot(spec)
    assert not report.complete
    assert report.missing == ("tokenizer.json",)

    hub.reset()
    driver.run("warm", _spec(tiny_repo))
    assert _file_gets(hub, tiny_repo) == 1
    assert check_snapshot(spec).complete


def test_a_rate_limited_download_waits_for_retry_after(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    # The ModelScope client retries downloads itself and honours Retry-After.
    hub.fail_next(1, status=429, retry_after="1", match=r"/repo$")

    out = driver.run("warm", _spec(tiny_repo))

    assert "error" not in out, out
    assert out["elapsed"] >= 1.0
    assert _file_gets(hub, tiny_repo) == len(FILES) + 1
    assert check_snapshot(Model(**_spec(tiny_repo))).complete


def test_a_branch_is_cached_under_its_name(
    driver: Driver, hub: HubServer, tiny_repo: HubRepo
) -> None:
    out = driver.run("warm", _spec(tiny_repo, "master"))

    assert "error" not in out, out
    report = check_snapshot(Model(**_spec(tiny_repo, "master")))
    assert report.complete
    assert report.path is not None
    assert report.path.name == "master"
    assert report.commit is None  # ModelScope's cache does not say which commit a branch was
