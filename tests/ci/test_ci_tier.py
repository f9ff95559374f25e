"""The runners with a shared tier (``CACHEROOT_SHARED``): what a dry run says they would do."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

    Run = Callable[..., subprocess.CompletedProcess[str]]

RUNNERS = {"rocm": "run-amd-test.sh", "cuda": "run-cuda-test.sh"}
#: The tier knobs, unset unless a test sets them.
UNSET: dict[str, str | None] = {"CACHEROOT_MERGED": None, "TIER_SYNC_EVERY": None}


def _dry(run_script: Run, tag: str, **env: str | None) -> list[list[str]]:
    out = run_script(RUNNERS[tag], DRY_RUN="1", **{**UNSET, **env})
    assert out.returncode == 0, out.stderr
    return [shlex.split(line.removesuffix(" &")) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_the_run_is_wrapped_in_tier_up_sync_and_down(
    run_script: Run, cli_dir: Path, tmp_path: Path, tag: str
) -> None:
    l1, l2 = tmp_path / "nvme", tmp_path / "nfs"
    out = run_script(
        RUNNERS[tag], DRY_RUN="1", **{**UNSET, CACHEROOT: str(l1), CACHEROOT_SHARED: str(l2)}
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    cli = str(cli_dir / "cacheroot")
    merged = f"{l1}.merged"
    assert [shlex.split(line) for line in lines[:2]] == [
        [cli, "tier", "up", "--merged", merged],
        [cli, "tier", "sync", "--watch", "300", "&"],
    ]
    assert [shlex.split(line) for line in lines[3:]] == [
        [cli, "tier", "sync"],
        [cli, "tier", "down", "--merged", merged],
    ]
    run = shlex.split(lines[2])
    assert run[:2] == ["docker", "run"]
    assert f"--volume={merged}:/cacheroot" in run  # the container's root is the merged view
    assert f"--env={CACHEROOT}=/cacheroot" in run
    assert f"--volume={l2}:{l2}" in run  # and it writes through to the shared tier
    assert f"--env={CACHEROOT_SHARED}={l2}" in run
    assert not any(w.startswith(f"--volume={l1}:") for w in run)


def test_the_merged_path_and_the_watchdog_interval_can_be_chosen(
    run_script: Run, tmp_path: Path
) -> None:
    merged = tmp_path / "view"
    lines = _dry(
        run_script,
        "cuda",
        **{
            CACHEROOT: str(tmp_path / "l1"),
            CACHEROOT_SHARED: str(tmp_path / "l2"),
            "CACHEROOT_MERGED": str(merged),
            "TIER_SYNC_EVERY": "10",
        },
    )
    assert lines[0][1:] == ["tier", "up", "--merged", str(merged)]
    assert lines[1][1:] == ["tier", "sync", "--watch", "10"]
    assert f"--volume={merged}:/cacheroot" in lines[2]


def test_a_relative_merged_path_is_refused(run_script: Run, tmp_path: Path) -> None:
    out = run_script(
        RUNNERS["rocm"],
        DRY_RUN="1",
        **{CACHEROOT: str(tmp_path / "l1"), CACHEROOT_SHARED: str(tmp_path / "l2")},
        CACHEROOT_MERGED="view",
        TIER_SYNC_EVERY=None,
    )
    assert out.returncode == 2
    assert out.stderr.endswith("run-amd-test.sh: CACHEROOT_MERGED=view is not an absolute path\n")


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_one_tier_runs_as_before(run_script: Run, tmp_path: Path, tag: str) -> None:
    lines = _dry(run_script, tag, **{CACHEROOT: str(tmp_path / "l1")})
    assert len(lines) == 1
    assert f"--volume={tmp_path / 'l1'}:/cacheroot" in lines[0]
    assert "tier" not in lines[0]
    assert not any(CACHEROOT_SHARED in w for w in lines[0])
