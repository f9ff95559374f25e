"""The network guard of offline runs, and what a failed test is told about the cache.

With pytest-socket installed, an offline run (or ``--cacheroot-no-network``) lets each test
connect to loopback only; a refused connection, and a cache miss on an offline run, add a
``cacheroot`` section to the failure that says why and what to run. URL credentials that pytest
would print with a fetch's frames are redacted.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from .._errors import WARM_HINT, CacheMissError, FetchError, loopback_address
from .._redact import redact_url
from .offline import manifests, miss_hint
from .state import STATE

if TYPE_CHECKING:
    from collections.abc import Generator

__all__ = [
    "LOOPBACK",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
]

#: Hosts an offline run may still connect to (local test servers).
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[STATE]
    if state.no_network:
        from pytest_socket import socket_allow_hosts  # noqa: PLC0415 - only when guarding

        state.saved_connect = socket.socket.connect
        socket_allow_hosts(list(LOOPBACK), allow_unix_socket=True)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    state = item.config.stash[STATE]
    if state.saved_connect is not None:
        socket.socket.connect = state.saved_connect  # type: ignore[method-assign]
        state.saved_connect = None


def _chain(excinfo: pytest.ExceptionInfo[BaseException]) -> list[BaseException]:
    """The exception and those it was raised from (or during), outermost first."""
    seen: list[BaseException] = []
    exc: BaseException | None = excinfo.value
    while exc is not None and all(exc is not s for s in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _miss(excinfo: pytest.ExceptionInfo[BaseException]) -> CacheMissError | None:
    return next((e for e in _chain(excinfo) if isinstance(e, CacheMissError)), None)


def _redact_report(report: pytest.TestReport) -> None:
    """Redact URL credentials from a failure's text.

    pytest shows the arguments of the frames it prints, and a fetch's frames have the URL as
    given, password included; our own messages are redacted already.
    """
    if report.longrepr is None:
        return
    text = str(report.longrepr)
    shown = redact_url(text)
    if shown != text:
        report.longrepr = shown


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is None:
        return report
    state = item.config.stash[STATE]
    if any(isinstance(e, FetchError) for e in _chain(call.excinfo)):
        _redact_report(report)
    miss = _miss(call.excinfo)
    if miss is not None:
        if state.on_volume(miss.path):
            state.offline_misses += 1  # read with the other counters
        else:  # a test's own root: set apart at once (this runs between test phases)
            state.own_roots.offline_misses += 1
        # The failure shows the miss's URL, path and hint already: the section adds only what
        # it cannot know (the run's manifest, a test's own root, the entry for a server that
        # ran here for the tests), or how to warm at all where the failure does not say so.
        paths = manifests(item.config)
        own_root = not state.on_volume(miss.path)
        hint = miss_hint(
            miss.url,
            sha256=miss.sha256,
            namespace=miss.namespace,
            filename=miss.filename,
            paths=paths,
            own_root=own_root,
        )
        shown = str(report.longrepr)
        said = WARM_HINT in shown and not (paths or own_root or loopback_address(miss.url))
        if hint not in shown and "[[asset]]" not in shown and not said:  # (an entry: given)
            report.sections.append(("cacheroot", f"cache miss on an offline run: {hint}"))
    elif state.no_network and "socket.socket.connect()" in str(call.excinfo.value):
        report.sections.append(
            (
                "cacheroot",
                (
                    "this run allows loopback connections only "
                    f"({', '.join(LOOPBACK)}): the test tried to reach another host"
                ),
            )
        )
    return report
