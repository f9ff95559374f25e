"""The pytest plugin: cached test data as fixtures, an offline mode, and one report line.

Enabled by the ``pytest11`` entry point of ``cacheroot-fetch`` (or ``-p cacheroot.fetch._plugin``).

Fixtures: ``cached_file(url, sha256=..., namespace=..., filename=...) -> Path`` (:func:`fetch`
bound to the test cache), ``test_cache_dir`` (``VLLM_TEST_CACHE`` as a ``Path``), ``build_once``
and ``media_cache`` (skip, with the reason, where the installed cacheroot lacks them).

Options: ``--cacheroot-offline`` (or ``CACHEROOT_OFFLINE=1``): every cache miss fails its test,
naming the URL and the command that warms it, and (where pytest-socket is installed) only
loopback connections are allowed; ``--cacheroot-no-network`` asks for that guard alone.
``--cacheroot-report PATH`` writes the session's figures as JSON. ``--shard-id`` and
``--num-shards`` (or Buildkite's parallel-job variables) pick this CI job's share of the tests
through pytest-split, balanced by recorded durations.

Each process measures what the cache did while it ran tests; xdist workers send their figures
to the controller (``workeroutput``), which prints one line for the whole session.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import (
    BUILDKITE_PARALLEL_JOB,
    BUILDKITE_PARALLEL_JOB_COUNT,
    CACHEROOT_OFFLINE,
    truthy,
)

from ._errors import CacheMissError
from ._fetcher import cache_dir, fetch
from ._report import Figures, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Generator


#: Hosts an offline run may still connect to (local test servers).
LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: The command that fills a volume before an offline run.
WARM_HINT = "`cacheroot warm MANIFEST` (the test suite's manifest: `nox -s warm`)"


class _State:
    """What the plugin knows for this session, kept in ``config.stash``."""

    def __init__(self, *, offline: bool, no_network: bool, report: str | None) -> None:
        self.offline = offline
        self.no_network = no_network
        self.report = report
        self.before = snapshot()
        self.offline_misses = 0
        self.builds = 0
        self.build_hits = 0
        self.totals: Figures | None = None
        self.workers: list[Figures] = []
        self.saved_connect: Any = None


_STATE = pytest.StashKey[_State]()


# -- options -------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cacheroot", "cached test data (cacheroot)")
    group.addoption(
        "--cacheroot-offline",
        action="store_true",
        default=False,
        help=f"cache-only run: a miss fails its test (also {CACHEROOT_OFFLINE}=1); implies "
        "--cacheroot-no-network where pytest-socket is installed",
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


def _shard(config: pytest.Config) -> tuple[int, int] | None:
    """``(shard_id, num_shards)`` from the options or Buildkite's variables, or None."""
    shard = config.getoption("cacheroot_shard_id", default=None)
    count = config.getoption("cacheroot_num_shards", default=None)
    source = "--shard-id/--num-shards"
    if shard is None and count is None:
        raw_shard = os.environ.get(BUILDKITE_PARALLEL_JOB, "").strip()
        raw_count = os.environ.get(BUILDKITE_PARALLEL_JOB_COUNT, "").strip()
        if not raw_shard and not raw_count:
            return None
        source = f"{BUILDKITE_PARALLEL_JOB}/{BUILDKITE_PARALLEL_JOB_COUNT}"
        try:
            shard, count = int(raw_shard), int(raw_count)
        except ValueError:
            raise pytest.UsageError(
                f"{source} must both be integers: found {raw_shard!r} and {raw_count!r}"
            ) from None
    if shard is None or count is None:
        raise pytest.UsageError(f"{source}: give both, found shard {shard} of {count}")
    if count < 1 or not 0 <= shard < count:
        raise pytest.UsageError(
            f"{source}: expected 0 <= shard < count, found shard {shard} of {count}"
        )
    return shard, count


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, object, object]:
    """Map the shard to pytest-split's ``--splits``/``--group`` before anything reads them."""
    shard = _shard(config)
    if shard is not None:
        shard_id, count = shard
        if not config.pluginmanager.has_plugin("pytest_split.plugin") and not hasattr(
            config.option, "splits"
        ):
            raise pytest.UsageError("sharding needs pytest-split: `pip install pytest-split`")
        splits, group = config.option.splits, config.option.group
        if (splits, group) not in ((None, None), (count, shard_id + 1)):
            raise pytest.UsageError(
                f"shard {shard_id} of {count} disagrees with --splits {splits} --group {group}; "
                "give one or the other"
            )
        config.option.splits, config.option.group = count, shard_id + 1
    return (yield)


def pytest_configure(config: pytest.Config) -> None:
    offline = bool(config.getoption("cacheroot_offline", default=False)) or truthy(
        os.environ.get(CACHEROOT_OFFLINE)
    )
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
    config.stash[_STATE] = _State(offline=offline, no_network=no_network, report=report)
    if offline:
        # Every fetch of the run, and of the processes it starts, is offline. A fixture that
        # deliberately clears the variable (an isolation fixture) keeps that control; the
        # ``cached_file`` fixture is offline either way.
        os.environ[CACHEROOT_OFFLINE] = "1"


# -- the network guard and the miss report ----------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash[_STATE]
    if state.no_network:
        from pytest_socket import socket_allow_hosts  # noqa: PLC0415 - only when guarding

        state.saved_connect = socket.socket.connect
        socket_allow_hosts(list(LOOPBACK), allow_unix_socket=True)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    state = item.config.stash[_STATE]
    if state.saved_connect is not None:
        socket.socket.connect = state.saved_connect  # type: ignore[method-assign]
        state.saved_connect = None


def _miss(excinfo: pytest.ExceptionInfo[BaseException]) -> CacheMissError | None:
    seen: set[int] = set()
    exc: BaseException | None = excinfo.value
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CacheMissError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is None:
        return report
    state = item.config.stash[_STATE]
    miss = _miss(call.excinfo)
    if miss is not None:
        state.offline_misses += 1
        report.sections.append(
            (
                "cacheroot",
                (
                    f"cache miss on an offline run: {miss.url}\nexpected at {miss.path}\n"
                    f"warm it with `cacheroot fetch {miss.url}` or {WARM_HINT}"
                ),
            )
        )
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


# -- fixtures ------------------------------------------------------------------------------
class CachedFile:
    """``cached_file(url, sha256=..., namespace=..., filename=...)``: the entry's local path."""

    def __init__(self, *, offline: bool) -> None:
        self.offline = offline

    def __call__(
        self,
        url: str,
        *,
        sha256: str | None = None,
        namespace: str = "downloads",
        filename: str | None = None,
    ) -> Path:
        try:
            return fetch(
                url,
                sha256=sha256,
                namespace=namespace,
                filename=filename,
                offline=True if self.offline else None,
            )
        except CacheMissError as exc:
            if not self.offline:
                raise
            extra = f" --namespace {namespace}" if namespace != "downloads" else ""
            extra += f" --filename {filename}" if filename is not None else ""
            msg = (
                f"cacheroot offline run: {url} is not in the cache (expected at {exc.path}); "
                f"warm it with `cacheroot fetch {url}{extra}` or {WARM_HINT}"
            )
            raise pytest.fail.Exception(msg, pytrace=False) from exc


@pytest.fixture
def test_cache_dir() -> Path:
    """``VLLM_TEST_CACHE`` as the layout resolves it for this test."""
    return Path(cache_dir())


@pytest.fixture
def cached_file(pytestconfig: pytest.Config) -> CachedFile:
    """:func:`cacheroot.fetch.fetch` bound to the test cache (and to the run's offline mode)."""
    return CachedFile(offline=pytestconfig.stash[_STATE].offline)


def _optional(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


class BuildOnce:
    """``build_once(key, builder, ...)`` that also counts, for the report, what it found built."""

    def __init__(
        self, build: Callable[..., Path], where: Callable[..., Path], state: _State
    ) -> None:
        self._build = build
        self._where = where
        self._state = state

    def __call__(self, key: str, builder: Callable[[Path], object], **kwargs: Any) -> Path:
        known = {k: v for k, v in kwargs.items() if k in ("namespace", "inputs")}
        existed = self._where(key, builder, **known).is_dir()
        path = self._build(key, builder, **kwargs)
        if existed:
            self._state.build_hits += 1
        else:
            self._state.builds += 1
        return path


@pytest.fixture
def build_once(pytestconfig: pytest.Config) -> BuildOnce:
    """``build_once(key, builder, namespace=..., inputs=...)``: artifacts built once per volume."""
    build = _optional("cacheroot.fetch._build", "build_once")
    where = _optional("cacheroot.fetch._build", "built_path")
    if build is None or where is None:
        pytest.skip("this cacheroot-fetch has no build_once (cacheroot.fetch._build)")
    return BuildOnce(build, where, pytestconfig.stash[_STATE])


@pytest.fixture
def media_cache() -> Generator[Any, None, None]:
    """The layout's media cache (``VLLM_MEDIA_CACHE``); skips where it is off or not installed."""
    cls = _optional("cacheroot.mediacache", "MediaCache")
    if cls is None:
        pytest.skip("cacheroot-mediacache is not installed (or has no MediaCache)")
    cache = cls.from_env()
    if cache is None:
        pytest.skip("VLLM_MEDIA_CACHE is off: opt in with CACHEROOT_OPT_IN=VLLM_MEDIA_CACHE")
    yield cache
    close = getattr(cache, "close", None)
    if callable(close):
        close()


# -- the report ----------------------------------------------------------------------------
def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any) -> None:
    """xdist controller: collect a worker's figures as it shuts down."""
    data = getattr(node, "workeroutput", {}).get("cacheroot")
    if data is not None:
        node.config.stash[_STATE].workers.append(Figures.from_dict(data))


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash[_STATE]
    own = Figures.since(
        state.before,
        offline_misses=state.offline_misses,
        builds=state.builds,
        build_hits=state.build_hits,
    )
    if _is_worker(config):
        config.workeroutput["cacheroot"] = own.as_dict()  # type: ignore[attr-defined]
        return
    totals = Figures()
    if state.workers:
        for figures in state.workers:
            totals.add(figures)
    else:
        totals.add(own)
    state.totals = totals
    if state.report is not None:
        Path(state.report).parent.mkdir(parents=True, exist_ok=True)
        totals.write(state.report, offline=state.offline, line=totals.line())


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash[_STATE]
    if state.totals is not None and not config.option.collectonly:
        terminalreporter.write_line(state.totals.line())
