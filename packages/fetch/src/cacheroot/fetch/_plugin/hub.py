"""``--cacheroot-hub``: a hub cache for the session, in front of the Hugging Face Hub.

The controller starts ``cacheroot hub serve`` (:mod:`cacheroot.fetch._hub`) before any conftest
is imported, and points ``HF_ENDPOINT`` and ``MODELSCOPE_ENDPOINT`` at it, so every client of
every process of the session (xdist workers, the processes tests start) goes through it:
huggingface_hub reads ``HF_ENDPOINT`` once, when it is imported, which is why this happens in
``pytest_load_initial_conftests`` and not later. The hub's upstreams are the endpoints the
session started with (default: the public hubs); its store is under the cache root. It stops
when the session ends. xdist workers inherit the environment and start nothing.

The session also sets ``HF_HUB_DISABLE_XET=1``: the hub serves listings without their Xet
hashes (:mod:`cacheroot.fetch._hub.xet`), but huggingface_hub keeps the listings it saved
before the hub was in front (``trees/<commit>.json`` next to a snapshot) and, with hf_xet
installed, would go to Xet's storage for any file whose saved entry has a hash, around the hub
and with no way to fall back during an outage. With Xet off, it asks the hub for every file.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT_HUB_OWNER,
    HF_ENDPOINT,
    HF_HUB_DISABLE_XET,
    MODELSCOPE_ENDPOINT,
    PYTEST_XDIST_WORKER,
)

if TYPE_CHECKING:
    from .._hub.service import HubProcess

__all__ = [
    "HUB",
    "pytest_addoption",
    "pytest_load_initial_conftests",
    "pytest_terminal_summary",
    "session_hub",
]

#: The session's hub cache (controller only).
HUB = pytest.StashKey["HubProcess"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cacheroot", "cached test data (cacheroot)")
    group.addoption(
        "--cacheroot-hub",
        action="store_true",
        default=False,
        help=f"start a hub cache for the session and point {HF_ENDPOINT} at it: metadata "
        "and files of the Hugging Face Hub served from the cache root when the Hub errs "
        "(`cacheroot hub --help`)",
    )
    group.addoption(
        "--cacheroot-hub-option",
        metavar="OPTION",
        action="append",
        default=[],
        help="an option for the session's `cacheroot hub serve` (repeatable), e.g. "
        "--cacheroot-hub-option=--ttl=10m",
    )


def _inherited() -> bool:
    """Whether this process is a worker of a session that already runs a hub."""
    owner, _, url = os.environ.get(CACHEROOT_HUB_OWNER, "").partition(" ")
    if not os.environ.get(PYTEST_XDIST_WORKER, "").strip():
        return False  # a pytest a test started may run a hub of its own
    return owner.isdigit() and int(owner) == os.getppid() and os.environ.get(HF_ENDPOINT) == url


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if not getattr(early_config.known_args_namespace, "cacheroot_hub", False) or _inherited():
        return
    from .._hub.cli import DEFAULT_UPSTREAM, default_store, modelscope_upstream  # noqa: PLC0415
    from .._hub.service import HubProcess, HubStartError  # noqa: PLC0415

    store = default_store()
    if store is None:
        raise pytest.UsageError(
            "--cacheroot-hub: no cache root to keep the hub's store in; set CACHEROOT "
            "(`cacheroot doctor` explains)"
        )
    upstream = os.environ.get(HF_ENDPOINT, "").strip() or DEFAULT_UPSTREAM
    try:
        options = getattr(early_config.known_args_namespace, "cacheroot_hub_option", None) or []
        hub = HubProcess.start(
            upstream=upstream, store=store, modelscope=modelscope_upstream(), options=options
        )
    except (HubStartError, OSError) as exc:
        raise pytest.UsageError(f"--cacheroot-hub: {exc}") from exc
    early_config.stash[HUB] = hub
    early_config.add_cleanup(lambda: _stop(hub))
    os.environ[HF_ENDPOINT] = hub.url
    os.environ[MODELSCOPE_ENDPOINT] = hub.url
    os.environ[HF_HUB_DISABLE_XET] = "1"
    # Its xdist workers (its children) use this hub; a pytest that a test starts may run one.
    os.environ[CACHEROOT_HUB_OWNER] = f"{os.getpid()} {hub.url}"
    if "huggingface_hub.constants" in sys.modules:
        sys.stderr.write(
            "cacheroot: --cacheroot-hub: huggingface_hub was imported before the session's hub "
            f"started, so this process still uses {upstream} (its workers and children use "
            "the hub); load the plugin earlier, or import huggingface_hub later\n"
        )


def _stop(hub: HubProcess) -> None:
    err = hub.stop()
    if "Traceback" in err:  # a crash the session should hear of; its normal output is quiet
        sys.stderr.write(f"cacheroot: the session's hub cache wrote:\n{err}")


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """One line for the hub: how its answers were served, and how often the Hub was asked; the
    same figures, with the slowest fills, where CI shows them (:mod:`.hub_report`)."""
    hub = session_hub(config)
    if hub is None:
        return
    try:
        stats = hub.stats()
        counts = stats["counts"]
    except (OSError, ValueError, KeyError):
        terminalreporter.write_line("cacheroot hub: no figures (the hub cache did not answer)")
        return
    meta = ", ".join(
        f"{counts.get(k, 0)} {k}" for k in ("hit", "miss", "revalidated", "stale", "error")
    )
    files = f"{counts.get('file_hit', 0)} from the store, {counts.get('file_miss', 0)} fetched"
    terminalreporter.write_line(
        f"cacheroot hub: {counts.get('requests', 0)} requests ({meta}); files: {files}; "
        f"{counts.get('upstream', 0)} upstream requests, {counts.get('upstream_errors', 0)} failed"
    )
    from . import hub_report  # noqa: PLC0415 - only when a hub ran

    problems = hub_report.publish(hub_report.markdown(stats), os.environ)
    if problems:
        terminalreporter.write_line(hub_report.report_problems(problems))


def session_hub(config: pytest.Config) -> HubProcess | None:
    """The hub cache this session started, if any (in the controller)."""
    return config.stash.get(HUB, None)
