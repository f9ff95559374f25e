"""Fixtures for the CI scripts: a clean environment, the real ``cacheroot`` CLI, fake runtimes.

The scripts run for real under bash. Only the container runtime is replaced: no Docker engine runs
here, so ``docker``/``podman`` on the test PATH are small programs that record their arguments and
exit with a chosen status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "ci"

#: The scripts' own knobs, and the pass-through names: none may leak in from the outer shell.
KNOBS = (
    "ALLOW_NO_TESTS",
    "ARTIFACTS_CONTAINER",
    "ARTIFACTS_DIR",
    "BUILDKITE_JOB_ID",
    "BUILDKITE_PARALLEL_JOB",
    "BUILDKITE_PARALLEL_JOB_COUNT",
    "CACHEROOT_CLI",
    "CACHEROOT_CONTAINER",
    "CHECKOUT",
    "CHECKOUT_CONTAINER",
    "CI_CONTAINER_NAME",
    "CONTAINER_EXTRA_ARGS",
    "CONTAINER_RUNTIME",
    "DRY_RUN",
    "GPUS",
    "HF_TOKEN",
    "IMAGE",
    "ISOLATED_HOME",
    "ISOLATED_REPO",
    "ISOLATED_VENV",
    "NOX_SESSION",
    "PASS_ENV",
    "RENDER_DEVICES",
    "SHM_SIZE",
)


@pytest.fixture(scope="session")
def bash() -> str:
    """The bash that runs the scripts (they need bash 4.4+ for ``mapfile`` and empty arrays)."""
    found = shutil.which("bash")
    if found is None:
        pytest.skip("bash is not installed: the CI scripts are bash scripts")
    return found


@pytest.fixture(scope="session")
def cli_dir() -> Path:
    """The directory of the ``cacheroot`` console script of the Python running the tests."""
    here = Path(sys.executable).parent
    if not (here / "cacheroot").exists():
        pytest.skip(f"no cacheroot console script next to {sys.executable}: install cacheroot-envs")
    return here


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """An empty directory that goes first on the scripts' PATH."""
    path = tmp_path / "bin"
    path.mkdir()
    return path


@pytest.fixture
def script_env(fake_bin: Path, cli_dir: Path) -> dict[str, str]:
    """The environment the scripts see: this test's cache root, an image, no knob from outside."""
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env["PATH"] = os.pathsep.join([str(fake_bin), str(cli_dir), "/usr/bin", "/bin"])
    env["IMAGE"] = "registry.example/ci:1"
    return env


@pytest.fixture
def run_script(
    bash: str, script_env: dict[str, str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``ci/NAME ARGS`` under bash with ``script_env`` plus overrides (``None`` unsets)."""

    def run(name: str, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
        merged = dict(script_env)
        for key, value in env.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return subprocess.run(
            [bash, str(CI / name), *args],
            env=merged,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run
