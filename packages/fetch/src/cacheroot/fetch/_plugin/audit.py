"""The pytest plugin of the run-time audit: ``--cacheroot-audit[=warn|fail]``.

One module of the ``cacheroot`` pytest plugin (``-p no:cacheroot`` turns it off with the rest). It
lives in cacheroot-fetch, not beside the audit in cacheroot-envs: pytest marks every module of a
distribution with a ``pytest11`` entry point for assertion rewriting, and the start-up hook has
imported cacheroot-envs' ``_cacheroot_layout`` long before pytest starts (a warning, an error under
``filterwarnings = error``). It does nothing unless ``--cacheroot-audit`` is given or
``CACHEROOT_AUDIT`` is set. Then the controller makes the session in pytest's base temporary
directory (or moves there the one the start-up hook made for ``CACHEROOT_AUDIT``), allows the
cache root and the layout's directories, the base temporary directory (every ``tmp_path``), the
working tree (unless ``--cacheroot-audit-strict``) and the prefixes of
``CACHEROOT_AUDIT_ALLOW``, installs the audit hook (:mod:`_cacheroot_audit`) and sets
``CACHEROOT_AUDIT`` and ``CACHEROOT_AUDIT_DIR`` for every process it starts: xdist workers, and the
processes tests start, join the session through the start-up hook. Each process that runs tests
records when each test ran, so that what the before/after scan finds can be matched to tests.

At the end the controller prints the writes outside those places, grouped by directory, each
with its test and line, and writes the JSON report (``--cacheroot-audit-report PATH``, else
``report.json`` in the session). ``=fail`` makes a session that would have passed exit 1 when
anything was written outside.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

import _cacheroot_audit as audit
import pytest

from cacheroot.envs import CACHEROOT_AUDIT, CACHEROOT_AUDIT_ALLOW, CACHEROOT_AUDIT_DIR
from cacheroot.envs._audit_report import build_report, escapes, summary_lines, write_report

if TYPE_CHECKING:
    from collections.abc import Generator

__all__: list[str] = []


class _Session:
    """What the controller keeps for the report."""

    def __init__(self, mode: str, source: str, report_path: str, places: list[str]) -> None:
        self.mode = mode
        #: What turned the audit on, as the user wrote it (``--cacheroot-audit=fail``).
        self.source = source
        self.report_path = report_path
        self.places = places
        self.report: dict[str, Any] | None = None


_SESSION = pytest.StashKey[_Session]()
_RECORDING = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cacheroot-audit", "writes outside the cache root (cacheroot)")
    group.addoption(
        "--cacheroot-audit",
        nargs="?",
        const=audit.WARN,
        default=None,
        metavar="warn|fail",
        help=f"record every file written outside the cache root and allowed places, by every "
        f"process (also {CACHEROOT_AUDIT}=1 or =fail); =fail makes such writes fail the session. "
        f"Write a value with = (--cacheroot-audit=warn, --cacheroot-audit=fail), or put the bare "
        f"option before another option: a bare value after it is taken as its own",
    )
    group.addoption(
        "--cacheroot-audit-strict",
        action="store_true",
        default=False,
        help="the working tree is not an allowed place",
    )
    group.addoption(
        "--cacheroot-audit-report",
        metavar="PATH",
        default=None,
        help="write the audit's JSON report to PATH (default: report.json in the session)",
    )


def _mode(config: pytest.Config) -> tuple[str, str]:
    """The audit's mode (``""``: off) and what asked for it: the option or the variable."""
    given = config.getoption("cacheroot_audit")
    if given is None:
        mode = audit.mode_of(os.environ.get(CACHEROOT_AUDIT))
        return mode, f"{CACHEROOT_AUDIT}={mode}"
    if given not in (audit.WARN, audit.FAIL):
        raise pytest.UsageError(
            f"--cacheroot-audit takes warn or fail, found {given!r}; write "
            f"--cacheroot-audit=warn (or =fail): a path after a bare --cacheroot-audit is "
            f"taken as its value"
        )
    return str(given), f"--cacheroot-audit={given}"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Start the session (controller) or join it (xdist worker without the start-up hook)."""
    mode, source = _mode(config)
    if not mode:
        return
    config.stash[_RECORDING] = True
    inherited = os.environ.get(CACHEROOT_AUDIT_DIR, "").strip()
    if hasattr(config, "workerinput") or (inherited and not audit.REPORT_AT_EXIT):
        # A worker, or a pytest started by an audited process: the session is its parent's.
        if audit.AUDITOR is None and inherited:
            audit.join(inherited)
        return
    factory = config._tmp_path_factory  # type: ignore[attr-defined]  # noqa: SLF001 - pytest's
    basetemp = str(factory.getbasetemp())
    places = [*audit.layout_places(os.environ), basetemp, *audit.allow_list(os.environ)]
    parent = os.path.dirname(basetemp)
    if os.path.basename(parent).startswith("pytest-of-"):
        places.append(parent)  # pytest keeps its earlier base temporary directories there
    if not config.getoption("cacheroot_audit_strict"):
        places += [str(config.rootpath), str(config.invocation_params.dir)]
    directory = os.path.join(basetemp, "cacheroot-audit")
    if audit.AUDITOR is not None and audit.REPORT_AT_EXIT:
        # CACHEROOT_AUDIT was set before pytest started: the start-up hook made the session in
        # the temporary directory (and took the scan); the plugin moves it into the base
        # temporary directory, as with the option, and reports instead, with pytest's places.
        audit.REPORT_AT_EXIT = False
        audit.move(directory, places)
    else:
        if config.getoption("cacheroot_audit") is None:
            # Without the start-up hook nothing has said so yet.
            sys.stderr.write(audit.unknown_mode(os.environ.get(CACHEROOT_AUDIT)))
        audit.start(directory, places)
    os.environ[CACHEROOT_AUDIT] = mode
    report = config.getoption("cacheroot_audit_report") or os.path.join(directory, "report.json")
    config.stash[_SESSION] = _Session(mode, source, os.path.abspath(report), places)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Record when each test ran (the scan's finds are matched to tests by time)."""
    if not item.config.stash.get(_RECORDING, False) or audit.AUDITOR is None:
        return (yield)
    start = time.time()
    try:
        return (yield)
    finally:
        audit.AUDITOR.note(
            {"kind": "test", "test": item.nodeid, "start": start, "end": time.time()}
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Build and write the report; under ``=fail``, fail a passing session that escaped."""
    state = session.config.stash.get(_SESSION, None)
    if state is None or audit.AUDITOR is None:
        return
    audit.AUDITOR.enabled = False  # the report itself may be written anywhere
    state.report = build_report(
        audit.AUDITOR.directory, places=state.places, mode=state.mode, own=(state.report_path,)
    )
    write_report(state.report, state.report_path)
    if state.mode == audit.FAIL and escapes(state.report) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(_SESSION, None)
    if state is None or state.report is None:
        return
    for line in summary_lines(state.report, state.report_path):
        terminalreporter.write_line(line)
    if state.mode == audit.FAIL and escapes(state.report):
        terminalreporter.write_line(
            f"cacheroot audit: failing the session ({state.source}): move these writes "
            f"under the cache root (the layout's variables, tmp_path), or allow a prefix in "
            f"{CACHEROOT_AUDIT_ALLOW}"
        )
