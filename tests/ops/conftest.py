"""Fixtures of the cache-operation tests: a live origin and helpers to run the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
