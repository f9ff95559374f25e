"""Fixtures of the cache-operation tests: a live origin and helpers to run the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .origin import Origin

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def origin() -> Iterator[Origin]:
    """A fresh origin per test, so request counts are the test's own."""
    server = Origin().start()
    yield server
    server.close()


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run the real ``cacheroot`` command in a fresh interpreter (the test's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ) if env is None else env,
        check=False,
    )


def cli_json(*args: str, status: int = 0, env: dict[str, str] | None = None) -> Any:
    """Run ``cacheroot ... --json``, check its exit status, return the parsed output."""
    done = cli(*args, "--json", env=env)
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


#: The user another member of a CI fleet runs as, when the tests run as root.
OTHER_UID = 65534
#: Runs the command line as :data:`OTHER_UID`: every module the command may import is imported
#: first, while this process may still read them all (the interpreter may live where that user
#: cannot read, such as under ``/root``), then it drops to that user for good.
_AS_OTHER = f"""
import os, sys
from cacheroot.envs import _cli
_cli.parser()
import cacheroot.fetch._upkeep.cache, cacheroot.fetch._fetcher, cacheroot.fetch._lock
import cacheroot.fetch._archive, cacheroot.fetch._warm.manifest, cacheroot.fetch._warm.warm
import filelock, json, hashlib, shutil, datetime, uuid, socket, contextlib
os.setgroups([])
os.setgid({OTHER_UID})
os.setuid({OTHER_UID})
sys.exit(_cli.main(sys.argv[1:]))
"""


def _readable_by_others(path: str) -> bool:
    """Whether a user other than the owner can read ``path`` and reach it."""
    real = os.path.realpath(path)
    if not os.stat(real).st_mode & stat.S_IROTH:
        return False
    parent = os.path.dirname(real)
    while parent != os.path.dirname(parent):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(parent)
    return True


class OtherUser:
    """Another user of a shared cache: how to shut it out of files, and how to run as it.

    As root, the files stay root's (mode ``0o600`` for an entry, ``0o644`` for a lock) and the
    command runs as :data:`OTHER_UID` (root bypasses permission bits, so a real second uid is
    needed). As anyone else, the files are made ``0o000`` and the command runs as this user.
    """

    def __init__(self) -> None:
        self.root = os.geteuid() == 0

    def shut_out(self, path: Path, *, readable_by_owner: bool = True) -> None:
        """Make ``path`` (a file of the cache) one the other user cannot open."""
        if self.root:
            path.chmod(0o600 if readable_by_owner else 0o644)
        else:
            path.chmod(0o000)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``cacheroot ARGS`` as the other user."""
        if not self.root:
            return cli(*args)
        if _readable_by_others(sys.executable):
            return subprocess.run(
                [sys.executable, "-m", "cacheroot.envs._cli", *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                user=OTHER_UID,
                group=OTHER_UID,
                extra_groups=[],
            )
        return subprocess.run(
            [sys.executable, "-c", _AS_OTHER, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def other_user(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtherUser]:
    """:class:`OtherUser`, with the test cache moved where that user can reach it."""
    shared = tempfile.mkdtemp(prefix="cacheroot-shared-", dir="/tmp")
    os.chmod(shared, 0o755)  # noqa: S103 - the other user must reach the cache
    monkeypatch.setenv("_VLLM_TEST_CACHE", os.path.join(shared, "test_cache"))
    yield OtherUser()
    for here, dirs, _files in os.walk(shared):
        for name in dirs:
            os.chmod(os.path.join(here, name), 0o700)  # the test may have shut itself out
    shutil.rmtree(shared, ignore_errors=True)
