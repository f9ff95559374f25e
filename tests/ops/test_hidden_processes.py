"""The note on processes ``/proc`` hides from a prune run as a normal user.

Another user's processes cannot be inspected, so files they hold open are protected only by
locks and the settle time: a prune says so, but only for a root other users may reach. A root
below a private directory is its owner's alone; there the note would be printed by every prune
on a developer's machine (the system's own processes are another user's) and say nothing.

Run as root, with a real second uid (``setpriv``): the root's processes are hidden from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, TABLE

if TYPE_CHECKING:
    from collections.abc import Iterator

NOBODY = 65534
NOTE = "processes could not be inspected (another user's): files they hold open are protected"


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory under the system's temporary directory (mode 0755, reachable by any user),
    owned by the second uid; pytest's own ``tmp_path`` lies below a private directory."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("acting as a second uid (setpriv) needs root")
    where = Path(tempfile.mkdtemp(prefix="cacheroot-hidden-"))
    try:
        where.chmod(0o755)
        os.chown(where, NOBODY, NOBODY)
        yield where
    finally:
        shutil.rmtree(where)


def prune_as_nobody(root: Path) -> subprocess.CompletedProcess[str]:
    """``cacheroot cache prune --dry-run`` on ``root``, run as uid 65534 with a clean layout."""
    layout = {v.name for v in TABLE}
    env = {k: v for k, v in os.environ.items() if k not in layout and not k.startswith("PYTEST")}
    env.update({CACHEROOT: str(root), "HOME": str(root)})
    argv = [sys.executable, "-m", "cacheroot.envs._cli", "cache", "prune", "--older-than", "14d"]
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run([*setpriv, sys.executable, "-c", "pass"], check=False, env=env)
    if probe.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot run {sys.executable} (a private checkout)")
    return subprocess.run(
        [*setpriv, *argv, "--dry-run"], env=env, capture_output=True, text=True, check=False
    )


def test_a_root_others_may_reach_gets_the_note(outside: Path) -> None:
    root = outside / "cache"
    root.mkdir(mode=0o755)
    os.chown(root, NOBODY, NOBODY)
    out = prune_as_nobody(root)
    assert out.returncode == 0, out.stderr
    assert NOTE in out.stdout + out.stderr  # this test's own process is root's, hidden


def test_a_root_below_a_private_directory_gets_none(outside: Path) -> None:
    private = outside / "home"
    private.mkdir(mode=0o700)
    os.chown(private, NOBODY, NOBODY)
    root = private / ".cache"
    out = prune_as_nobody(root)
    assert out.returncode == 0, out.stderr
    assert NOTE not in out.stdout + out.stderr
    assert out.stdout.startswith("would remove 0 entries and 0 stray files, 0 B")
