"""``tier up`` and ``tier down``: a real OverlayFS mount, and seeding where mounting is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED
from cacheroot.fetch._tier.layers import seed
from cacheroot.fetch._tier.view import overlay_supported
from cacheroot.fetch._used import used_path

from .fleet import visible_files

if TYPE_CHECKING:
    from pathlib import Path

#: The command line as a shell function of every script.
CLI = 'cli() { "$PY" -m cacheroot.envs._cli "$@"; }\n'


def _in_mount_namespace(script: str, l1: Path, l2: Path, *prefix: str) -> str:
    """Run ``script`` (sh) in a private mount namespace; its mounts vanish with it."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    env = {**os.environ, CACHEROOT: str(l1), CACHEROOT_SHARED: str(l2), "PY": sys.executable}
    argv = ["unshare", "--mount", "--propagation", "private", *prefix, "sh", "-ec", CLI + script]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if "unshare failed" in done.stderr:
        pytest.skip(f"private mount namespaces are refused here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_overlay_shows_l2_under_l1_and_sync_skips_whiteouts(tmp_path: Path) -> None:
    if not overlay_supported():
        pytest.skip("this kernel has no OverlayFS (/proc/filesystems)")
    l1, l2, merged = tmp_path / "l1", tmp_path / "l2", tmp_path / "merged"
    (l2 / "triton" / "K1").mkdir(parents=True)
    (l2 / "triton" / "K1" / "kernel.so").write_bytes(b"from the fleet")
    (l2 / "triton" / "K1" / "stale.json").write_bytes(b"old")
    out = _in_mount_namespace(
        f"""
        cli tier up --merged {merged}
        cat {merged}/triton/K1/kernel.so; echo
        mkdir -p {merged}/triton/K2 && printf 'compiled here' > {merged}/triton/K2/kernel.so
        rm {merged}/triton/K1/stale.json
        cli tier sync --settle 0
        cli tier down --merged {merged}
        """,
        l1,
        l2,
    )
    lines = out.splitlines()
    assert lines[0] == f"overlay: {merged} shows {l2} under {l1}"
    assert lines[1] == "from the fleet"
    assert lines[2].startswith("copied 1 file (13 bytes)")
    assert lines[3] == "overlay unmounted"
    assert visible_files(str(l2)) == {
        "triton/K1/kernel.so": b"from the fleet",
        "triton/K1/stale.json": b"old",  # the whiteout stays on this host
        "triton/K2/kernel.so": b"compiled here",
    }
    whiteout = os.lstat(l1 / "triton" / "K1" / "stale.json")
    assert (os.major(whiteout.st_rdev), os.minor(whiteout.st_rdev)) == (0, 0)
    assert not merged.exists()


def test_where_mounting_is_refused_l1_is_seeded_and_linked(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv(1) is not installed: cannot drop CAP_SYS_ADMIN")
    l1, l2, merged = tmp_path / "l1", tmp_path / "l2", tmp_path / "merged"
    (l2 / "hub").mkdir(parents=True)
    (l2 / "hub" / "model.bin").write_bytes(b"weights")
    # As a container without CAP_SYS_ADMIN: root, but mount(2) is refused.
    out = _in_mount_namespace(
        f"cli tier up --merged {merged}", l1, l2, "setpriv", "--bounding-set", "-sys_admin"
    )
    assert out.startswith(f"seed: {merged} shows {l2} under {l1} (mount: ")
    assert "permission denied" in out
    assert os.readlink(merged) == str(l1)
    assert visible_files(str(merged)) == {"hub/model.bin": b"weights"}
    down = _in_mount_namespace(f"cli tier down --merged {merged}", l1, l2)
    assert down == "link removed\n"
    assert not os.path.lexists(merged)


def test_seeding_takes_the_most_recently_used_within_the_budget(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    now = time.time()
    for name, age in (("a.bin", 3600), ("b.bin", 60), ("c.bin", 7200)):
        path = l2 / "hub" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 10000)  # 50 000 bytes each
        os.utime(path, (now - age, now - age))
    # cacheroot's own record of use counts: c was used a second ago.
    used = used_path(str(l2 / "hub" / "c.bin"))
    open(used, "w").close()
    (l2 / "hub" / "to-a").symlink_to("a.bin")
    (l2 / "hub" / "to-b").symlink_to("b.bin")
    report = seed(str(l2), str(l1), max_size=120_000)
    assert sorted(visible_files(str(l1))) == ["hub/b.bin", "hub/c.bin", "hub/to-b"]
    assert not os.path.lexists(l1 / "hub" / "to-a")  # its target stayed on L2
    assert (report.copied, report.copied_bytes, report.left, report.left_bytes) == (
        2,
        100_000,
        1,
        50_000,
    )
