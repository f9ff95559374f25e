"""The scenario suite shares one cache root and one origin, so a second run can prove it is warm.

Unlike the rest of the tests, which get a fresh root each (the root conftest's
``isolated_cache``), every scenario test of a run uses the same root: ``CACHEROOT_SCENARIO_ROOT``
when set (the CI volume, or the cold/warm harness's fixed directory), else one directory that
all xdist workers of the run share. The origin is started once per run (the pytest-xdist
recipe: a file lock in the run's shared temporary directory) on a port derived from the root, so
one volume sees the same URLs in every run, as it would with real hosts.

Offline runs: on a given root (a volume warmed by ``python -m scenarios.warm``) the scenarios keep
the run's offline switches, which is what proves the volume warm. On the run's own root, which
nothing before the run could warm, they fetch from the run's own origin on loopback: a
``pytest --cacheroot-offline --cacheroot-manifest tests/manifest.toml tests`` (the shipped CI
examples) needs neither the network nor a manifest entry for them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    HF_HUB_OFFLINE,
    TABLE,
    VLLM_TEST_CACHE_ONLY,
    resolve,
)
from cacheroot.fetch._plugin.fixtures import CachedFile
from cacheroot.fetch._plugin.offline import manifests
from cacheroot.fetch._plugin.state import STATE

from .assets import Asset, catalog
from .origin import SCENARIO_ORIGIN, SCENARIO_ROOT, ensure_origin, port_for

if TYPE_CHECKING:
    from collections.abc import Callable

#: The plugin's module, loaded here when no entry point did (see ``pytest_addoption``).
PLUGIN = "cacheroot.fetch._plugin"
#: Opt-in layout rows the scenarios turn on.
OPT_IN = "CACHEROOT_MEDIA_CACHE"


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Make sure the plugin is active, even where its ``pytest11`` entry point is not installed.

    An adopting project gets it from the entry point (named ``cacheroot``) or ``-p``; loading it
    here keeps ``pytest tests/`` working in a checkout that was not reinstalled.
    """
    if not (pluginmanager.has_plugin("cacheroot") or pluginmanager.has_plugin(PLUGIN)):
        pluginmanager.import_plugin(PLUGIN)


def _run_dir(factory: pytest.TempPathFactory) -> Path:
    """A directory shared by every process of this pytest run (workers share the parent)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


#: The offline switches a scenario on the run's own root leaves off (see the module's docstring).
OFFLINE_SWITCHES = (CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY, HF_HUB_OFFLINE)


def root_given() -> bool:
    """Whether the scenarios' root is given (``CACHEROOT_SCENARIO_ROOT``), not the run's own."""
    return bool(os.environ.get(SCENARIO_ROOT, "").strip())


@pytest.fixture(scope="session")
def scenario_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache root every scenario test of this run uses."""
    fixed = os.environ.get(SCENARIO_ROOT, "").strip()
    root = Path(fixed).expanduser() if fixed else _run_dir(tmp_path_factory) / "scenario-root"
    if not root.is_absolute():
        raise pytest.UsageError(f"{SCENARIO_ROOT} must be an absolute path, found {fixed!r}")
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(scope="session")
def origin_url(tmp_path_factory: pytest.TempPathFactory, scenario_root: Path) -> str:
    """The origin's URL: the harness's, or this run's (started by the first worker to ask)."""
    given = os.environ.get(SCENARIO_ORIGIN, "").strip()
    if given:
        return given.rstrip("/")
    owner = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
    return ensure_origin(_run_dir(tmp_path_factory), owner=owner, port=port_for(str(scenario_root)))


@pytest.fixture(autouse=True)
def isolated_cache(
    scenario_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """Overrides the root conftest's fixture: the shared root instead of a fresh one.

    The layout's variables are cleared and derived again from ``CACHEROOT`` (with the media
    cache opted in), as the start-up hook does. ``CACHEROOT_TAG`` is kept, and so are the
    offline switches on a given root, because they are what the run is about; on the run's own
    root the offline switches are cleared (its data come from the run's own origin).
    """
    for name in (CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_OPT_IN, *(v.name for v in TABLE)):
        monkeypatch.delenv(name, raising=False)
    if not root_given():
        for name in OFFLINE_SWITCHES:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CACHEROOT, str(scenario_root))
    monkeypatch.setenv(CACHEROOT_OPT_IN, OPT_IN)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    for name, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(name, value)
    return scenario_root


@pytest.fixture
def cached_file(pytestconfig: pytest.Config) -> CachedFile:
    """The plugin's ``cached_file``, cache-only on an offline run only where the root is given."""
    offline = pytestconfig.stash[STATE].offline and root_given()
    return CachedFile(offline=offline, manifests=manifests(pytestconfig))


@pytest.fixture
def asset_url(origin_url: str) -> Callable[[str], str]:
    """``asset_url("/datasets/gsm8k/test.jsonl")``: the origin's URL for an asset path."""

    def url(path: str) -> str:
        return origin_url + path

    return url


@pytest.fixture
def scenario_file(
    cached_file: Callable[..., Path], asset_url: Callable[[str], str], isolated_cache: Path
) -> Callable[[str, str], tuple[Path, Asset]]:
    """``scenario_file(PATH, namespace)``: the catalog's asset at PATH, as a test fetches it.

    It goes through the plugin's ``cached_file`` into ``$VLLM_TEST_CACHE/<namespace>/`` under
    the asset's file name, and is checked to lie under the root with the catalog's sha256.
    Returns the cached path and the asset.
    """

    def fetch(path: str, namespace: str) -> tuple[Path, Asset]:
        expected = catalog()[path]
        got: Path = cached_file(
            asset_url(path),
            sha256=expected.sha256,
            namespace=namespace,
            filename=expected.filename,
        )
        assert under(got, isolated_cache)
        assert hashlib.sha256(got.read_bytes()).hexdigest() == expected.sha256
        return got, expected

    return fetch


def under(path: Path, root: Path) -> bool:
    """Whether ``path`` (resolved) lies inside ``root`` (resolved)."""
    return path.resolve().is_relative_to(root.resolve())
