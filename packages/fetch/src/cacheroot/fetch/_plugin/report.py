"""The session's report: one line for all xdist workers, and the JSON of ``--cacheroot-report``.

Each process counts what the cache did while it ran tests, and, phase by phase (setup, call,
teardown), sets apart what a test did while its environment pointed at a cache of its own (the
isolated root a unit test makes under its ``tmp_path``): the line counts the session's volume,
then those roots apart, so a warm volume reads warm whatever the unit tests download. xdist
workers send their figures to the controller (``workeroutput``), which prints the line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import HF_HUB_OFFLINE, truthy

from .figures import Summary
from .state import STATE, current_cache, is_worker

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

__all__ = [
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_testnodedown",
]


@contextlib.contextmanager
def _phase(item: pytest.Item) -> Iterator[None]:
    """Count what happens inside as the tests' own when the phase ran outside the volume.

    The environment is read as the phase starts and as it ends: a setup that points the cache
    elsewhere, and a test body that does, both count as the test's own. What happened since the
    last phase (collection, the reports between phases) is the session's.
    """
    state = item.config.stash[STATE]
    state.settle(own_root=False)
    start = current_cache()
    try:
        yield
    finally:
        own = not (state.on_volume(start) and state.on_volume(current_cache()))
        state.settle(own_root=own)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any) -> None:
    """xdist controller: collect a worker's figures as it shuts down."""
    data = getattr(node, "workeroutput", {}).get("cacheroot")
    if data is not None:
        node.config.stash[STATE].workers.append(Summary.from_dict(data))


def _client_stayed_online() -> bool:
    """Whether this process's huggingface_hub reads online although the run set
    ``HF_HUB_OFFLINE`` (it reads the variable once, when imported: here, before the run)."""
    if not truthy(os.environ.get(HF_HUB_OFFLINE)):
        return False
    constants = sys.modules.get("huggingface_hub.constants")
    return constants is not None and getattr(constants, "HF_HUB_OFFLINE", True) is False


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash[STATE]
    state.settle(own_root=False)
    mine = Summary(
        state.volume,
        state.own_roots,
        offline=state.offline,
        online_clients=int(state.offline and _client_stayed_online()),
    )
    if is_worker(config):
        config.workeroutput["cacheroot"] = mine.as_dict()  # type: ignore[attr-defined]
        return
    summary = Summary(offline=state.offline)
    for part in state.workers or [mine]:
        summary.add(part)
    summary.volume.add(state.warmed)  # what the manifest step downloaded before the tests
    state.summary = summary
    if state.report is not None:
        Path(state.report).parent.mkdir(parents=True, exist_ok=True)
        summary.write(state.report, line=summary.line(), manifest=state.manifest)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash[STATE]
    if state.summary is not None and not config.option.collectonly:
        terminalreporter.write_line(state.summary.line())
