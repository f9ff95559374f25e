"""Hub-proof runs: a warm suite of ordinary hub calls stays green whatever the Hub does.

A pytest project of 30 tests (``suite.py``: downloads by branch and by commit, snapshots,
``model_info``, ``list_repo_files``, ``file_exists``) runs with xdist and ``--cacheroot-hub``
against the local test hub, first healthy (which warms the volume and the hub's store), then
under each fault: 30 % and 100 % of API calls answered 429, 30 % of every request 429, a 503
outage, a hub that hangs, and a refused connection. The fault runs start their hub with
``--ttl=0``, so every branch answer is asked of the failing upstream again: what keeps them green
is stale-if-error, not a fresh answer that never needed the upstream.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from .suite import TESTS, write_suite

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .hubserver import HubRepo, HubServer

import importlib

_RUNNER: Any = importlib.import_module("harness.runner")

#: What each fault run must end with.
GREEN = {"passed": TESTS, "failed": 0, "errors": 0}


def _outcome(output: str) -> dict[str, int]:
    """The counts of pytest's closing line (``30 passed``, ``2 failed, 28 passed in ...``)."""
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    last = lines[-1] if lines else ""
    found = dict.fromkeys(("passed", "failed", "errors"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed|errors?)", last):
        found["errors" if word.startswith("error") else word] = int(number)
    return found


def _run(project: Path, env: dict[str, str], *options: str) -> tuple[dict[str, int], float, str]:
    args = ["-n", "2", "-p", "no:randomly", "--cacheroot-hub", *options, str(project)]
    start = time.monotonic()
    proc = _RUNNER.run_pytest([*_RUNNER.plugin_args(), *args], env=env, cwd=project, timeout=400)
    took = time.monotonic() - start
    return _outcome(proc.stdout), took, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_a_warm_suite_stays_green_through_every_fault(
    tmp_path: Path, hub: HubServer, tiny_repo: HubRepo
) -> None:
    project = tmp_path / "project"
    write_suite(
        project,
        repo=tiny_repo.repo_id,
        commit=tiny_repo.commit,
        files=["config.json", "model.safetensors", "tokenizer.json"],
        kind="llama",
    )
    env = _RUNNER.layout_env(
        tmp_path / "root",
        HF_ENDPOINT=hub.url,
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    warm, _, log = _run(project, env)
    assert warm == GREEN, log

    # A warm re-run on a healthy hub, within the hub's TTL: the upstream is not asked at all
    # (a plain warm cache asks it 9 times per process).
    hub.reset()
    again, healthy, log = _run(project, env)
    assert (again, hub.total()) == (GREEN, 0), log

    # Every branch answer asked of the upstream again, on a healthy hub: the yardstick for the
    # hang's bound.
    _, healthy, _ = _run(project, env, "--cacheroot-hub-option=--ttl=0")

    faults: dict[str, Callable[[], object]] = {
        "30% of API calls 429": lambda: hub.fail_rate(0.3, status=429, match="^/api/"),
        "every API call 429": lambda: hub.fail_rate(1.0, status=429, match="^/api/"),
        "30% of all requests 429": lambda: hub.fail_rate(0.3, status=429),
        "503 outage": lambda: hub.fail_rate(1.0, status=503),
        "a hanging hub": hub.hang_all,
    }
    results: dict[str, dict[str, int]] = {}
    took: dict[str, float] = {}
    logs: dict[str, str] = {}
    for name, inject in faults.items():
        hub.reset()
        inject()
        results[name], took[name], logs[name] = _run(project, env, "--cacheroot-hub-option=--ttl=0")
    hub.close()  # nothing listens on its port any more: connections are refused
    name = "refused connection"
    results[name], took[name], logs[name] = _run(project, env, "--cacheroot-hub-option=--ttl=0")

    assert results == dict.fromkeys(results, GREEN), logs
    # The hang costs the hub's deadline (5 s) once, then the upstream is left alone.
    assert took["a hanging hub"] < 3 * healthy + 15, (took, healthy)
