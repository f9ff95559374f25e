"""Helpers for the start-up hook's tests: real interpreters, started with a controlled environment.

Every test here runs ``sys.executable``, whose environment has the hook installed (the dev
venv through an editable install, the nox sessions through built wheels), so what a child
process sees is what the hook did at its start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    TABLE,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

#: Every variable of the layout table: what a child reports back.
NAMES = tuple(v.name for v in TABLE)
#: Variables removed from a child's environment so that nothing leaks in from the outer shell.
CONTROLS = (CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_OFFLINE, CACHEROOT_OPT_IN, CACHEROOT_TAG)

#: Prints the child's whole environment as JSON (undecodable values come back surrogate-escaped).
DUMP_ENVIRON = "import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)))"


def _drop(name: str) -> bool:
    upper = name.upper()
    return (
        name in NAMES
        or name in CONTROLS
        or upper.startswith("PYTEST_")
        or upper in {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "PYTHONPATH"}
    )


@pytest.fixture
def child_env(isolated_cache: Path) -> dict[str, str]:
    """This process's environment without any layout variable, switch, proxy or pytest marker.

    ``HOME`` stays the per-test home the shared fixture created, so the default root
    (``~/.cache``) of a child is a fresh directory, never the real home.
    """
    del isolated_cache  # requested for ordering: HOME must already point at the tmp home
    return {k: v for k, v in os.environ.items() if not _drop(k)}


class Interpreter:
    """Starts fresh interpreters of this environment (``sys.executable``) with a given environment.

    ``prefix`` runs the interpreter under a wrapper (``unshare`` for a read-only root);
    ``python`` replaces ``sys.executable`` (the base interpreter, which has no hook).
    """

    @staticmethod
    def run(
        argv: Sequence[str], env: Mapping[str, str] | Mapping[bytes, bytes], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with exactly ``env``; output decoded as Python does (surrogate escapes)."""
        return subprocess.run(
            list(argv),
            env=env,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout,
            check=False,
        )

    def environ(
        self,
        env: Mapping[str, str] | Mapping[bytes, bytes],
        *flags: str,
        prefix: Sequence[str] = (),
        python: str = sys.executable,
    ) -> dict[str, str]:
        """The whole environment of a fresh interpreter started with ``env`` and ``flags``."""
        proc = self.run([*prefix, python, *flags, "-c", DUMP_ENVIRON], env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        environ: dict[str, str] = json.loads(proc.stdout)
        return environ

    def layout(
        self,
        env: Mapping[str, str] | Mapping[bytes, bytes],
        *flags: str,
        prefix: Sequence[str] = (),
        python: str = sys.executable,
    ) -> dict[str, str | None]:
        """Each variable of the layout table as a fresh interpreter sees it (``None``: unset)."""
        environ = self.environ(env, *flags, prefix=prefix, python=python)
        return {name: environ.get(name) for name in NAMES}

    @staticmethod
    def tree(*tops: Path) -> set[str]:
        """Every path under ``tops``: compared before and after a start-up to catch a mkdir."""
        found: set[str] = set()
        for top in tops:
            for dirpath, dirnames, filenames in os.walk(top):
                found.update(os.path.join(dirpath, n) for n in dirnames + filenames)
        return found


@pytest.fixture
def interp() -> Interpreter:
    """Start fresh interpreters of the environment under test."""
    return Interpreter()
