"""The plugin's options, and the session state they settle into before any test runs."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from cacheroot.envs import (
    BUILDKITE_PARALLEL_JOB,
    BUILDKITE_PARALLEL_JOB_COUNT,
    CACHEROOT_OFFLINE,
    PYTEST_XDIST_WORKER,
    VLLM_TEST_CACHE_ONLY,
)

from .._fetcher import cache_only
from .figures import Figures
from .offline import flush_said, go_offline, manifests, offline_first
from .state import STATE, State, is_worker

__all__ = ["pytest_addoption", "pytest_configure", "pytest_load_initial_conftests"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cacheroot", "cached test data (cacheroot)")
    group.addoption(
        "--cacheroot-offline",
        action="store_true",
        default=False,
        help=f"cache-only run: a miss fails its test (also {CACHEROOT_OFFLINE}=1 or "
        f"{VLLM_TEST_CACHE_ONLY}=1); implies --cacheroot-no-network where pytest-socket is "
        "installed",
    )
    group.addoption(
        "--cacheroot-no-network",
        action="store_true",
        default=False,
        help="fail any test that connects to a host other than loopback (needs pytest-socket)",
    )
    group.addoption(
        "--cacheroot-report",
        metavar="PATH",
        default=None,
        help="write what the cache did (hits, misses, bytes, lock waits) as JSON to PATH",
    )
    group.addoption(
        "--cacheroot-manifest",
        metavar="PATH",
        action="append",
        default=None,
        help="warm manifest of what the tests need (repeatable): checked before the tests, "
        "warmed when incomplete, then the run is offline",
    )
    parser.addini(
        "cacheroot_manifest",
        type="paths",
        default=[],
        help="warm manifest(s) for offline-first runs (--cacheroot-manifest overrides)",
    )
    if importlib.util.find_spec("pytest_shard") is None:  # it owns these names where installed
        group.addoption(
            "--shard-id",
            dest="cacheroot_shard_id",
            type=int,
            default=None,
            help=f"this CI job's shard, from 0 (default: ${BUILDKITE_PARALLEL_JOB})",
        )
        group.addoption(
            "--num-shards",
            dest="cacheroot_num_shards",
            type=int,
            default=None,
            help=f"how many CI jobs share the tests (default: ${BUILDKITE_PARALLEL_JOB_COUNT})",
        )


#: What the manifest step settled before the initial conftests were imported: the account for
#: the report, what it warmed, and whether the run is offline.
_SETTLED = pytest.StashKey[tuple["dict[str, Any] | None", Figures, bool]]()
#: pytest-xdist's own variable, set in a worker before its configuration is parsed.


def _settle(config: pytest.Config) -> tuple[dict[str, Any] | None, Figures, bool]:
    """The manifest step (controller only): check, warm what is missing, go offline."""
    forced = bool(
        getattr(config.known_args_namespace, "cacheroot_offline", False)
        or config.getoption("cacheroot_offline", default=False)
    )
    offline = forced or cache_only()
    manifest: dict[str, Any] | None = None
    warmed = Figures()
    paths = manifests(config)
    if paths:
        manifest, warmed = offline_first(config, paths, forced=offline)
        offline = offline or manifest["offline"]
    if offline:
        # Every fetch of the run, and of the processes it starts, is offline: ours, and vLLM's
        # own test helper, which reads only its own switch. A fixture that deliberately clears
        # the variables (an isolation fixture) keeps that control; the ``cached_file`` fixture
        # is offline either way.
        go_offline()
    return manifest, warmed, offline


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Settle the run (the manifest step, offline) before any conftest is imported.

    A conftest that imports huggingface_hub (``import transformers`` does) makes it read
    ``HF_HUB_OFFLINE`` there, once: the variable must be in place by then. xdist workers
    inherit the environment the controller settled here.
    """
    if os.environ.get(PYTEST_XDIST_WORKER, "").strip():
        return
    early_config.stash[_SETTLED] = _settle(early_config)


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists, to print through it
def pytest_configure(config: pytest.Config) -> None:
    if _SETTLED in config.stash:
        manifest, warmed, offline = config.stash[_SETTLED]
        flush_said(config)
    elif is_worker(config):  # workers inherit the environment the controller settled
        manifest, warmed = None, Figures()
        offline = bool(config.getoption("cacheroot_offline", default=False)) or cache_only()
    else:  # registered after the initial conftests (a plugin loaded late)
        manifest, warmed, offline = _settle(config)
    guard = bool(config.getoption("cacheroot_no_network", default=False))
    has_socket = importlib.util.find_spec("pytest_socket") is not None
    if guard and not has_socket:
        raise pytest.UsageError(
            "--cacheroot-no-network needs pytest-socket: `pip install pytest-socket`"
        )
    no_network = guard or (offline and has_socket)
    report = config.getoption("cacheroot_report", default=None)
    if report is not None:
        report = str(config.invocation_params.dir / report)
    state = State(offline=offline, no_network=no_network, report=report)
    state.manifest, state.warmed = manifest, warmed
    config.stash[STATE] = state
    if offline:
        go_offline()
