"""``cacheroot env`` refuses a root that exists and is not a directory, in every format: the text
it prints is appended to ``$GITHUB_ENV`` or sourced, and a layout below a file fails in every
tool that later writes there, far from the cause."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, TABLE

if TYPE_CHECKING:
    from pathlib import Path


def _env(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    derived = {CACHEROOT_APPLIED, *(v.name for v in TABLE)}
    env = {k: v for k, v in os.environ.items() if k not in derived}
    env[CACHEROOT] = str(root)
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "env", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("fmt", ["sh", "github", "json", "docker"])
def test_a_root_that_is_a_file_is_refused(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "root"
    root.write_bytes(b"not a directory")
    done = _env(root, "--format", fmt)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"cacheroot env: cannot export the layout: CACHEROOT={root} exists and is not a "
        "directory; move it away or point CACHEROOT at a directory\n"
    )
    assert root.read_bytes() == b"not a directory"


def test_a_root_that_is_a_socket_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root))
        done = _env(root)
    finally:
        sock.close()
    assert done.returncode == 1
    assert "exists and is not a directory" in done.stderr


def test_a_root_not_there_yet_is_exported(tmp_path: Path) -> None:
    root = tmp_path / "later"
    done = _env(root)
    assert done.returncode == 0, done.stderr
    assert f"export CACHEROOT={root}\n" in done.stdout
    assert not root.exists()
