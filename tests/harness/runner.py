"""Run pytest the way CI does: in a fresh interpreter, with a controlled environment.

The harness tests start real pytest processes (with xdist workers) and a real origin process, so
what they check is what a CI job would print and write, not an in-process imitation.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    BUILDKITE,
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    GITHUB_STEP_SUMMARY,
    HF_HUB_OFFLINE,
    TABLE,
    VLLM_TEST_CACHE_ONLY,
    resolve,
)

if TYPE_CHECKING:
    from types import TracebackType

#: The repository root and its tests directory.
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: The plugin's module (and what ``-p`` takes when no entry point registers it).
PLUGIN = "cacheroot.fetch._plugin"
#: Variables of the outer run that would change what a child run does (xdist's and
#: pytest-split's, Buildkite's shard, the scenario suite's root and origin; and the CI's
#: report targets, which a child run must not write to).
DROP_PREFIXES = ("PYTEST_", "BUILDKITE_PARALLEL_", "CACHEROOT_SCENARIO_")
#: The scenario suite's controls, spelled in ``tests/scenarios/origin.py`` (imported by name: it
#: is another top-level test package, which mypy does not follow from here).
_SCENARIOS: Any = importlib.import_module("scenarios.origin")
SCENARIO_ROOT: str = _SCENARIOS.SCENARIO_ROOT
SCENARIO_ORIGIN: str = _SCENARIOS.SCENARIO_ORIGIN
DROP = (
    CACHEROOT_OFFLINE,
    HF_HUB_OFFLINE,
    VLLM_TEST_CACHE_ONLY,
    "PYTHONPATH",
    GITHUB_STEP_SUMMARY,
    BUILDKITE,
)


def plugin_args() -> list[str]:
    """``["-p", PLUGIN]``, unless an installed ``pytest11`` entry point already loads it.

    Naming a plugin module with ``-p`` that an entry point also loads (under another name) makes
    pytest register it twice, which it refuses.
    """
    for ep in importlib.metadata.entry_points(group="pytest11"):
        if ep.value.strip() == PLUGIN:
            return []
    return ["-p", PLUGIN]


def media_cache_available() -> bool:
    """Whether the installed cacheroot has the media cache (the scenarios skip media without)."""
    try:
        module = importlib.import_module("cacheroot.mediacache")
    except ImportError:
        return False
    return hasattr(module, "MediaCache")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the outer run's pytest, shard and offline settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(DROP_PREFIXES) and k not in DROP
    }
    env.update(extra)
    return env


def layout_env(root: Path, **extra: str) -> dict[str, str]:
    """:func:`clean_env` with the layout derived from ``root`` (as the start-up hook does)."""
    drop = {CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_OPT_IN, *(v.name for v in TABLE)}
    env = {k: v for k, v in clean_env().items() if k not in drop}
    env[CACHEROOT] = str(root)
    env.update(resolve(env).applied())
    env.update(extra)
    return env


def run_pytest(
    args: list[str], *, env: dict[str, str], cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``cwd``; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def report_lines(output: str) -> list[str]:
    """The plugin's summary lines in a run's output."""
    return [line for line in output.splitlines() if line.startswith("cacheroot: ")]


class ServedOrigin:
    """The scenario origin as a child process of this test (``python -m scenarios.origin``)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "scenarios.origin", "--owner", str(os.getpid())],
            cwd=TESTS,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self.url = self._proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.close()
            raise RuntimeError(f"the origin printed {self.url!r}, expected its URL")

    def stats(self) -> dict[str, Any]:
        """The origin's request counts so far (``GET /__stats``)."""
        with urllib.request.urlopen(f"{self.url}/__stats", timeout=30) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result

    def close(self) -> None:
        """Stop the origin and reap it."""
        self._proc.terminate()
        self._proc.wait(timeout=30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> ServedOrigin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
