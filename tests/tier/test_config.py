"""``CACHEROOT_SHARED``: how it is read, exported, checked by the doctor, and refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED, export, shared_root
from cacheroot.envs._doctor import fs_type, shared_line
from cacheroot.fetch._shared import counterpart

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, None), ("", None), ("   ", None), ("/nfs/l2", "/nfs/l2"), ("  /nfs//l2/ ", "/nfs/l2")],
)
def test_shared_root_unset_blank_custom_padded(raw: str | None, expected: str | None) -> None:
    env = {} if raw is None else {CACHEROOT_SHARED: raw}
    assert shared_root(env) == expected


def test_a_relative_shared_root_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"CACHEROOT_SHARED='nfs' is not an absolute path; set it"):
        shared_root({CACHEROOT_SHARED: "nfs"})


def test_every_export_format_carries_the_shared_tier() -> None:
    env = {CACHEROOT: "/c", CACHEROOT_SHARED: "/nfs/l2"}
    assert export("sh", env).endswith("export CACHEROOT_SHARED=/nfs/l2\n")
    assert export("github", env).endswith("CACHEROOT_SHARED=/nfs/l2\n")
    assert json.loads(export("json", env))["shared"] == "/nfs/l2"
    assert export("docker", env).endswith(
        "--volume=/nfs/l2:/nfs/l2\n--env=CACHEROOT_SHARED=/nfs/l2\n"
    )
    assert "CACHEROOT_SHARED" not in export("sh", {CACHEROOT: "/c"})  # one tier: as before


def test_the_doctor_names_the_shared_tier_and_its_file_system(tmp_path: Path) -> None:
    line, problem = shared_line({CACHEROOT_SHARED: str(tmp_path)})
    expected = subprocess.run(
        ["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert problem == ""
    assert line.startswith(f"shared: {tmp_path} (")
    assert ", writable, " in line
    # stat(1) names ext4 "ext2/ext3" (one magic number); /proc/self/mountinfo has the real name.
    assert fs_type(str(tmp_path)) == {"ext2/ext3": "ext4"}.get(expected, expected)


def test_the_doctor_reports_a_missing_or_unset_shared_tier(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    line, problem = shared_line({CACHEROOT_SHARED: str(gone)})
    assert line == f"shared: {gone} (not usable)"
    assert problem == (
        f"CACHEROOT_SHARED={gone} does not exist: expected the fleet's shared volume, a "
        "directory this host can write (cacheroot never creates it: an unmounted volume or a "
        "typo would fill this host's disk instead); mount it there, or unset CACHEROOT_SHARED "
        "to use one tier"
    )
    assert not gone.exists()
    assert shared_line({}) == ("shared: none (CACHEROOT_SHARED is unset: one tier)", "")


def test_the_doctor_refuses_a_shared_tier_inside_the_root(tmp_path: Path) -> None:
    """The doctor applies the rule the downloads and ``cacheroot tier`` apply."""
    root = tmp_path / "root"
    (root / "l2").mkdir(parents=True)
    line, problem = shared_line({CACHEROOT_SHARED: str(root / "l2")}, root=str(root))
    assert line == f"shared: {root / 'l2'} (overlaps the root)"
    assert problem == (
        f"CACHEROOT_SHARED={root / 'l2'} is inside CACHEROOT={root}: expected another volume "
        "than this host's cache (the fleet's shared one); point CACHEROOT_SHARED there, or unset "
        "it to use one tier"
    )


def test_fs_type_reads_the_longest_mount_point(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "40 22 0:40 / /mnt/nfs\\040share rw - nfs4 srv:/x rw\n"
        "41 40 0:41 / /mnt/nfs\\040share/sub rw - fuse.sshfs u@h:/y rw\n"
    )
    assert fs_type("/mnt/nfs share/a/b", str(info)) == "nfs4"
    assert fs_type("/mnt/nfs share/sub/c", str(info)) == "fuse.sshfs"
    assert fs_type("/home", str(info)) == "ext4"


def test_counterpart_maps_paths_under_the_root_only(tmp_path: Path) -> None:
    local, nfs = tmp_path / "local", tmp_path / "nfs"
    local.mkdir()
    nfs.mkdir()
    env = {CACHEROOT: str(local), CACHEROOT_SHARED: str(nfs)}
    assert counterpart(f"{local}/vllm/test_cache/d/x", env) == f"{nfs}/vllm/test_cache/d/x"
    assert counterpart("/elsewhere/x", env) is None
    assert counterpart(f"{local}/x", {CACHEROOT: str(local)}) is None
    assert counterpart(f"{nfs}/x", {CACHEROOT: str(nfs), CACHEROOT_SHARED: str(nfs)}) is None


def test_tier_without_a_shared_tier_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != CACHEROOT_SHARED}
    done = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "tier", "sync"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "cacheroot tier: CACHEROOT_SHARED is not set: set it to the shared volume's path (one "
        "tier needs no tier command)\n"
    )
