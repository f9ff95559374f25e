"""What the end-to-end tests of ``ci/isolated-run.sh`` share: starting runs, gating, reading them.

Each test starts "containers" (isolated runs: fresh HOME and /tmp, loopback only, the cache
volume at /cacheroot) whose command prints one JSON line. Two runs are made to start at the same
moment through FIFOs: each writes ``ready`` once its origin listens, then blocks reading ``go``
until the test closes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "isolated-run.sh"


def isolated_run(bash: str, script_env: dict[str, str], cli_dir: Path) -> list[str]:
    """``[bash, isolated-run.sh]``, with ``script_env`` set up for it; skips where it cannot run."""
    if not (Path(sys.prefix) / "pyvenv.cfg").is_file():
        pytest.skip(f"{sys.executable} is not in a virtual environment: nothing to bind inside")
    check = subprocess.run(
        [bash, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    if check.returncode == 77:
        pytest.skip(check.stderr.strip())
    assert check.returncode == 0, check.stderr
    script_env["ISOLATED_VENV"] = sys.prefix
    script_env["CACHEROOT_CLI"] = str(cli_dir / "cacheroot")
    return [bash, str(SCRIPT)]


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A running isolated run, killed on the way out if the test failed before it finished."""
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def finish(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """Wait for a run that must succeed; the JSON it printed."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def make_gates(directory: Path) -> tuple[tuple[str, str], tuple[str, str]]:
    """FIFOs for two runs under ``directory`` (bound at /gates): each run's (ready, go) inside."""
    directory.mkdir()
    for name in ("ready-a", "go-a", "ready-b", "go-b"):
        os.mkfifo(directory / name)
    return ("/gates/ready-a", "/gates/go-a"), ("/gates/ready-b", "/gates/go-b")


def release_together(directory: Path) -> None:
    """Wait until both runs are ready, then let both go at once."""
    for ready in ("ready-a", "ready-b"):  # both origins listen
        with (directory / ready).open() as fifo:
            assert fifo.readline() == "ready\n"
    with (directory / "go-a").open("w"), (directory / "go-b").open("w"):
        pass  # both runs are blocked reading "go": closing releases them together
