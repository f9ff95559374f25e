"""Model snapshots on a shared tier that other jobs write: planted links, and ``ro`` jobs.

The real hub clients warm a snapshot with ``CACHEROOT_SHARED`` set; the shared tier was
prepared beforehand the way an attacker with write access to it could.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import Driver
    from .hubserver import HubRepo

REPO_DIR = "models--acme--tiny-model"


def _spec(repo: HubRepo) -> dict[str, Any]:
    return {"repo_id": repo.repo_id, "revision": repo.commit, "hub": "hf"}


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_shared_directory_swapped_for_a_link_is_never_written_through(
    driver: Driver, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine", encoding="utf-8")
    hub_dir = l2 / "huggingface" / "hub" / REPO_DIR
    hub_dir.mkdir(parents=True)
    (hub_dir / "blobs").symlink_to(outside)  # planted: blobs pushed here would land outside
    env = dict(driver.env, CACHEROOT_SHARED=str(l2))

    out = driver.run("warm", _spec(tiny_repo), env=env)

    assert "error" not in out, out
    assert _tree(outside) == ["keep"]
    assert (outside / "keep").read_text(encoding="utf-8") == "mine"
    assert not any(p.name.endswith(".json") for p in l2.rglob("snapshots/*"))


def test_a_read_only_job_never_writes_the_shared_tier(
    driver: Driver, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    env = dict(driver.env, CACHEROOT_SHARED=str(l2), CACHEROOT_SHARED_MODE="ro")

    out = driver.run("warm", _spec(tiny_repo), env=env)

    assert "error" not in out, out
    assert _tree(l2) == []
    assert os.path.isdir(out["path"])
