"""The pytest plugin: cached test data as fixtures, an offline mode, and one report line.

Enabled by the ``pytest11`` entry point of ``cacheroot-fetch`` (or ``-p cacheroot.fetch._plugin``).

Fixtures: ``cached_file(url, sha256=..., namespace=..., filename=...) -> Path`` (:func:`fetch`
bound to the test cache), ``model_snapshot(repo_id, revision, hub="hf", ...) -> Path`` (a hub
snapshot's local directory), ``test_cache_dir`` (``_VLLM_TEST_CACHE`` as a ``Path``),
``build_once`` and ``media_cache`` (skip, with the reason, where the installed cacheroot lacks
them).

Options: ``--cacheroot-offline`` (or ``CACHEROOT_OFFLINE=1``, or upstream vLLM's
``_VLLM_TEST_CACHE_ONLY=1``): every cache miss fails its test, naming the URL and the command
that warms it, and (where pytest-socket is installed) only loopback connections are allowed;
``--cacheroot-no-network`` asks for that guard alone. An offline run sets both variables for
every process it starts, so unchanged vLLM tests using upstream's helper are cache-only too.
``--cacheroot-report PATH`` writes the session's figures as JSON. ``--shard-id`` and
``--num-shards`` (or Buildkite's parallel-job variables) pick this CI job's share of the tests
through pytest-split, balanced by recorded durations.

Offline-first: ``--cacheroot-manifest PATH`` (or the ``cacheroot_manifest`` ini option) names
the warm manifest(s) the tests need. Before any test runs, the controller checks them without
the network; when every entry is complete, the run is offline (``CACHEROOT_OFFLINE=1``,
``_VLLM_TEST_CACHE_ONLY=1`` and ``HF_HUB_OFFLINE=1`` in the environment every test process
inherits), so the hubs' rate limits
and outages cannot fail it. When something is missing it says what, warms it (``cacheroot
warm``) and then goes offline; when offline is forced, it stops the session with the list.

Each process measures what the cache did while it ran tests; xdist workers send their figures
to the controller (``workeroutput``), which prints one line for the whole session.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import (
    BUILDKITE_PARALLEL_JOB,
    BUILDKITE_PARALLEL_JOB_COUNT,
    CACHEROOT_MEDIA_CACHE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    HF_HUB_OFFLINE,
    VLLM_TEST_CACHE_ONLY,
    truthy,
)

from ._errors import CacheMissError, FetchError
from ._fetcher import cache_dir, cache_only, fetch
from ._redact import redact_url
from ._report import Figures, snapshot
from ._snapshot import ModelSpec, offline_snapshot_path
from ._warm import HIT, warm_manifest

if TYPE_CHECKING:
    from collections.abc import Callable, Generator


#: Hosts an offline run may still connect to (local test servers).
LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: The command that fills a volume before an offline run.
WARM_HINT = "`cacheroot warm MANIFEST` (the test suite's manifest: `nox -s warm`)"
#: The exit status of a forced-offline session whose manifest is incomplete: like a usage error,
#: the run was started in a state in which its tests cannot work (nothing ran).
INCOMPLETE_MANIFEST = pytest.ExitCode.USAGE_ERROR
#: ``cacheroot warm`` in a fresh interpreter (see :func:`_warm_manifests`).
_CLI = ("-m", "cacheroot.envs._cli")


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
        self.model_hits = 0
        self.model_misses = 0
        #: What the manifest step before the session did (the controller's, added to totals).
        self.warmed = Figures()
        self.manifest: dict[str, Any] | None = None
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


@pytest.hookimpl(trylast=True)  # after the terminal reporter exists, to print through it
def pytest_configure(config: pytest.Config) -> None:
    offline = bool(config.getoption("cacheroot_offline", default=False)) or cache_only()
    manifest: dict[str, Any] | None = None
    warmed = Figures()
    if not _is_worker(config):  # workers inherit the environment the controller settles here
        manifests = _manifests(config)
        if manifests:
            manifest, warmed = _offline_first(config, manifests, forced=offline)
            offline = offline or manifest["offline"]
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
    state = _State(offline=offline, no_network=no_network, report=report)
    state.manifest, state.warmed = manifest, warmed
    config.stash[_STATE] = state
    if offline:
        # Every fetch of the run, and of the processes it starts, is offline: ours, and vLLM's
        # own test helper, which reads only its own switch. A fixture that deliberately clears
        # the variables (an isolation fixture) keeps that control; the ``cached_file`` fixture
        # is offline either way.
        _go_offline()


def _go_offline() -> None:
    """Make this process and every process it starts cache-only (ours and upstream's switch)."""
    os.environ[CACHEROOT_OFFLINE] = "1"
    os.environ[VLLM_TEST_CACHE_ONLY] = "1"


# -- offline-first: the manifest step ----------------------------------------------------------
def _manifests(config: pytest.Config) -> list[str]:
    given = config.getoption("cacheroot_manifest", default=None)
    if given:
        return [os.path.abspath(config.invocation_params.dir / p) for p in given]
    return [os.path.abspath(p) for p in config.getini("cacheroot_manifest")]


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)
    else:
        sys.stderr.write(text + "\n")


def _check(paths: list[str]) -> list[dict[str, Any]]:
    """Every entry of ``paths`` that is not complete (``cacheroot warm --check``), no network."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            summary = warm_manifest(path, check=True)
        except FetchError as exc:  # unreadable or invalid: the message names file and field
            raise pytest.UsageError(f"--cacheroot-manifest: {exc}") from None
        rows += [dict(row, manifest=path) for row in summary["entries"] if row["status"] != HIT]
    return rows


def _warm_manifests(paths: list[str]) -> tuple[Figures, dict[tuple[str, str], str]]:
    """``cacheroot warm`` on each manifest, in a fresh interpreter.

    Returns what it downloaded, and why each entry that failed did (by manifest and entry).

    A fresh interpreter, because the hub clients read their environment once, at import: warming
    here would import them into the controller before the run is offline, and a test run in the
    controller would then see them online.
    """
    warmed = Figures()
    reasons: dict[tuple[str, str], str] = {}
    for path in paths:
        done = subprocess.run(
            [sys.executable, *_CLI, "warm", path, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            summary = json.loads(done.stdout)
        except ValueError:
            sys.stderr.write(done.stdout + done.stderr)
            continue
        for row in summary["entries"]:
            if row["status"] != "miss":
                if row["reason"]:  # one line per entry, whatever the client's message
                    reasons[path, row["entry"]] = " ".join(row["reason"].split())
                continue
            if row["kind"] == "model":
                warmed.model_misses += 1
            else:
                warmed.fetch["misses"] += 1
                warmed.fetch["downloads"] += 1
        warmed.fetch["bytes_downloaded"] += summary["bytes"]
    return warmed, reasons


def _listing(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {row['status']}: {row['entry']} ({row['manifest']}): {row['reason']}" for row in rows
    ]


def _offline_first(
    config: pytest.Config, paths: list[str], *, forced: bool
) -> tuple[dict[str, Any], Figures]:
    """Check the manifests; warm what is missing (unless offline is forced); go offline.

    Returns the JSON-ready account for the report and the figures of what was warmed.
    """
    missing = _check(paths)
    warmed = Figures()
    account: dict[str, Any] = {"paths": paths, "missing": [r["entry"] for r in missing]}
    if missing and forced:
        warm = " && ".join(f"cacheroot warm {p}" for p in sorted({r["manifest"] for r in missing}))
        head = (
            f"cacheroot: offline run, but {len(missing)} manifest entries are not complete "
            "in the cache:"
        )
        hint = (
            f"warm them with network access first: `{warm}` (or run without "
            f"--cacheroot-offline / {CACHEROOT_OFFLINE}=1 / {VLLM_TEST_CACHE_ONLY}=1, which "
            "warms them)"
        )
        pytest.exit("\n".join([head, *_listing(missing), hint]), returncode=INCOMPLETE_MANIFEST)
    if missing:
        _say(config, f"cacheroot manifest: {len(missing)} entries missing; warming them:")
        for line in _listing(missing):
            _say(config, line)
        warmed, reasons = _warm_manifests(sorted({r["manifest"] for r in missing}))
        still = _check(paths)
        for row in still:
            reason = reasons.get((row["manifest"], row["entry"]))
            if reason is not None:
                row.update(status="failed", reason=reason)
        if still:
            _say(
                config,
                f"cacheroot manifest: {len(still)} entries could not be warmed; running online:",
            )
            for line in _listing(still):
                _say(config, line)
            return account | {"offline": False, "failed": [r["entry"] for r in still]}, warmed
    _go_offline()
    os.environ[HF_HUB_OFFLINE] = "1"
    if missing:
        _say(config, "cacheroot manifest: complete; running offline")
    return account | {"offline": True, "failed": []}, warmed


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
    state = item.config.stash[_STATE]
    if any(isinstance(e, FetchError) for e in _chain(call.excinfo)):
        _redact_report(report)
    miss = _miss(call.excinfo)
    if miss is not None:
        state.offline_misses += 1
        report.sections.append(
            (
                "cacheroot",
                (
                    f"cache miss on an offline run: {miss.url}\nexpected at {miss.path}\n"
                    f"{miss.hint}; the suite's manifest: {WARM_HINT}"
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
            shown = redact_url(url)
            msg = (
                f"cacheroot offline run: {shown} is not in the cache (expected at {exc.path}); "
                f"warm it with `cacheroot fetch {shown}{extra}` or {WARM_HINT}"
            )
            raise pytest.fail.Exception(msg, pytrace=False) from exc


@pytest.fixture
def test_cache_dir() -> Path:
    """``_VLLM_TEST_CACHE`` as the layout resolves it for this test."""
    return Path(cache_dir())


@pytest.fixture
def cached_file(pytestconfig: pytest.Config) -> CachedFile:
    """:func:`cacheroot.fetch.fetch` bound to the test cache (and to the run's offline mode)."""
    return CachedFile(offline=pytestconfig.stash[_STATE].offline)


class ModelSnapshot:
    """``model_snapshot(repo_id, revision, hub="hf", ...)``: a hub snapshot's local directory.

    The directory is the one the hub's client resolves (``HF_HOME`` / ``MODELSCOPE_CACHE`` of
    the layout), so a test may pass it to any loader, or let the library find it itself. Keyword
    arguments are those of a ``[[model]]`` entry: ``repo_type``, ``allow_patterns``,
    ``ignore_patterns``. A snapshot complete in the cache costs no request. On a miss, an online
    run warms it (one download across every process of the volume) and an offline one fails the
    test, printing the ``[[model]]`` entry to add to the manifest.
    """

    def __init__(self, state: _State) -> None:
        self._state = state

    def __call__(
        self,
        repo_id: str,
        revision: str,
        hub: str = "hf",
        *,
        repo_type: str = "model",
        allow_patterns: list[str] | str | None = None,
        ignore_patterns: list[str] | str | None = None,
    ) -> Path:
        spec = ModelSpec(
            repo_id,
            revision,
            hub=hub,
            repo_type=repo_type,
            allow_patterns=allow_patterns,
            ignore_patterns=ignore_patterns,
        )
        try:
            path = offline_snapshot_path(spec)
        except CacheMissError as exc:
            miss = str(exc)
        else:
            self._state.model_hits += 1
            return path
        if self._offline(spec):
            # Raised outside the handler: the miss report of the plugin (which would suggest
            # `cacheroot fetch URL`) is for URLs; this message names the manifest entry.
            self._state.offline_misses += 1
            msg = f"cacheroot offline run: model snapshot {spec.uri} is not usable: {miss}"
            raise pytest.fail.Exception(msg, pytrace=False)
        path = _warm_snapshot(spec)
        self._state.model_misses += 1
        return path

    def _offline(self, spec: ModelSpec) -> bool:
        if self._state.offline or cache_only():
            return True
        return spec.hub == "hf" and truthy(os.environ.get(HF_HUB_OFFLINE))


#: Run in a fresh interpreter by :func:`_warm_snapshot`: argv[1] is the ``[[model]]`` entry.
_WARM_ONE = (
    "import json, sys\n"
    "from cacheroot.fetch._snapshot import ModelSpec, warm_snapshot\n"
    "print(warm_snapshot(ModelSpec.from_mapping(json.loads(sys.argv[1]))))\n"
)


def _warm_snapshot(spec: ModelSpec) -> Path:
    """:func:`warm_snapshot` of ``spec`` in a fresh interpreter with this test's environment.

    The hub clients read their cache location and offline switch once, at import; a test process
    may have imported one before its layout was applied (a fixture that re-points the cache),
    and a fresh interpreter sees the environment as the test has it now. The lock inside
    ``warm_snapshot`` keeps it one download across processes.
    """
    entry: dict[str, Any] = {
        "hub": spec.hub,
        "repo_id": spec.repo_id,
        "revision": spec.revision,
        "repo_type": spec.repo_type,
    }
    for key in ("allow_patterns", "ignore_patterns"):
        value = getattr(spec, key)
        if value is not None:
            entry[key] = list(value)
    done = subprocess.run(
        [sys.executable, "-c", _WARM_ONE, json.dumps(entry)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        msg = f"cacheroot: warming {spec.uri} failed (exit status {done.returncode}):\n{tail}"
        raise pytest.fail.Exception(msg, pytrace=False)
    return Path(lines[-1])


@pytest.fixture
def model_snapshot(pytestconfig: pytest.Config) -> ModelSnapshot:
    """A hub snapshot's local directory: from the cache, warmed on a miss unless offline."""
    return ModelSnapshot(pytestconfig.stash[_STATE])


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
    """The layout's media cache (``CACHEROOT_MEDIA_CACHE``); skips where it is off or missing."""
    cls = _optional("cacheroot.mediacache", "MediaCache")
    if cls is None:
        pytest.skip("cacheroot-mediacache is not installed (or has no MediaCache)")
    cache = cls.from_env()
    if cache is None:
        pytest.skip(
            f"{CACHEROOT_MEDIA_CACHE} is off: opt in with "
            f"{CACHEROOT_OPT_IN}={CACHEROOT_MEDIA_CACHE}"
        )
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
        model_hits=state.model_hits,
        model_misses=state.model_misses,
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
    totals.add(state.warmed)  # what the manifest step downloaded before the tests
    state.totals = totals
    if state.report is not None:
        Path(state.report).parent.mkdir(parents=True, exist_ok=True)
        totals.write(
            state.report, offline=state.offline, line=totals.line(), manifest=state.manifest
        )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash[_STATE]
    if state.totals is not None and not config.option.collectonly:
        terminalreporter.write_line(state.totals.line())
