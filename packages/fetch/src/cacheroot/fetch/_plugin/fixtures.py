"""The plugin's fixtures: cached test data, hub snapshots, artifacts built once, the media cache.

``cached_file(url, sha256=..., namespace=..., filename=...) -> Path`` (:func:`fetch` bound to the
test cache and the run's offline mode), ``model_snapshot(repo_id, revision, hub="hf", ...) ->
Path`` (a hub snapshot's local directory), ``test_cache_dir`` (``_VLLM_TEST_CACHE`` as a
``Path``), ``build_once`` and ``media_cache`` (skip, with the reason, where the installed
cacheroot lacks them).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, CACHEROOT_OPT_IN, HF_HUB_OFFLINE, truthy

from .._cachedir import cache_dir
from .._errors import CacheMissError
from .._fetcher import cache_only, fetch
from .._models.model import Model
from .._models.snapshot import offline_snapshot_path
from .._redact import redact_url
from .offline import FAILURE_HOLD, PLUGIN_ATTEMPTS, manifests, miss_hint
from .state import STATE, State

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

__all__ = [
    "BuildOnce",
    "CachedFile",
    "ModelSnapshot",
    "build_once",
    "cached_file",
    "media_cache",
    "model_snapshot",
    "test_cache_dir",
]


class CachedFile:
    """``cached_file(url, sha256=..., namespace=..., filename=...)``: the entry's local path."""

    def __init__(
        self, *, offline: bool, manifests: list[str] | None = None, state: State | None = None
    ) -> None:
        self.offline = offline
        #: The run's manifests (``--cacheroot-manifest``), named in the message of a miss.
        self.manifests = manifests or []
        #: The session's state: whether a miss is on the run's volume or in a test's own root.
        self.state = state

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
            hint = miss_hint(
                url,
                sha256=sha256,
                namespace=namespace,
                filename=filename,
                paths=self.manifests,
                own_root=self.state is not None and not self.state.on_volume(exc.path),
            )
            msg = (
                f"cacheroot offline run: {redact_url(url)} is not in the cache "
                f"(expected at {exc.path}); {hint}"
            )
            # The miss's own message says the same: shown once (the guard still finds the miss
            # as the context, and counts it).
            raise pytest.fail.Exception(msg, pytrace=False) from None


@pytest.fixture
def test_cache_dir() -> Path:
    """``_VLLM_TEST_CACHE`` as the layout resolves it for this test."""
    return Path(cache_dir())


@pytest.fixture
def cached_file(pytestconfig: pytest.Config) -> CachedFile:
    """:func:`cacheroot.fetch.fetch` bound to the test cache (and to the run's offline mode)."""
    state = pytestconfig.stash[STATE]
    return CachedFile(offline=state.offline, manifests=manifests(pytestconfig), state=state)


class ModelSnapshot:
    """``model_snapshot(repo_id, revision, hub="hf", ...)``: a hub snapshot's local directory.

    The directory is the one the hub's client resolves (``HF_HOME`` / ``MODELSCOPE_CACHE`` of
    the layout), so a test may pass it to any loader, or let the library find it itself. Keyword
    arguments are those of a ``[[model]]`` entry: ``repo_type``, ``allow_patterns``,
    ``ignore_patterns``. A snapshot complete in the cache costs no request. On a miss, an online
    run warms it (one download across every process of the volume) and an offline one fails the
    test, printing the ``[[model]]`` entry to add to the manifest.
    """

    def __init__(self, state: State) -> None:
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
        spec = Model(
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

    def _offline(self, spec: Model) -> bool:
        if self._state.offline or cache_only():
            return True
        return spec.hub == "hf" and truthy(os.environ.get(HF_HUB_OFFLINE))


#: Run in a fresh interpreter by :func:`_warm_snapshot`: argv[1] is the ``[[model]]`` entry,
#: argv[2] the failure hold and argv[3] the attempts (see :data:`offline.PLUGIN_WARM`). A failure
#: is one line on stderr (its type and message) and the status 1.
_WARM_ONE = (
    "import json, sys\n"
    "from cacheroot.fetch._models.model import Model\n"
    "from cacheroot.fetch._models.snapshot import warm_snapshot\n"
    "spec = Model.from_mapping(json.loads(sys.argv[1]))\n"
    "try:\n"
    "    path = warm_snapshot(spec, failure_hold=float(sys.argv[2]), attempts=int(sys.argv[3]))\n"
    "except Exception as error:\n"
    "    sys.exit(f'{type(error).__name__}: {error}')\n"
    "print(path)\n"
)


def _warm_snapshot(spec: Model) -> Path:
    """:func:`warm_snapshot` of ``spec`` in a fresh interpreter with this test's environment.

    The hub clients read their cache location and offline switch once, at import; a test process
    may have imported one before its layout was applied (a fixture that re-points the cache),
    and a fresh interpreter sees the environment as the test has it now. The lock inside
    ``warm_snapshot`` keeps it one download across processes.

    One bounded attempt per run: the warm runs the hub's client once (it retries each request
    itself), and a failure recorded on the volume in the last :data:`FAILURE_HOLD` seconds (by
    the manifest step, another session, another worker) fails the test at once with its reason.
    """
    entry = {k: v for k, v in spec.as_dict().items() if v is not None}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _WARM_ONE,
            json.dumps(entry),
            str(FAILURE_HOLD),
            str(PLUGIN_ATTEMPTS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        msg = f"cacheroot: warming {spec.uri} failed: {tail}"
        raise pytest.fail.Exception(msg, pytrace=False)
    return Path(lines[-1])


@pytest.fixture
def model_snapshot(pytestconfig: pytest.Config) -> ModelSnapshot:
    """A hub snapshot's local directory: from the cache, warmed on a miss unless offline."""
    return ModelSnapshot(pytestconfig.stash[STATE])


def _optional(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


class BuildOnce:
    """``build_once(key, builder, ...)`` that also counts, for the report, what it found built."""

    def __init__(
        self, build: Callable[..., Path], where: Callable[..., Path], state: State
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
    return BuildOnce(build, where, pytestconfig.stash[STATE])


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
