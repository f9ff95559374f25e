"""Cache-only runs: ``CACHEROOT_OFFLINE`` or upstream vLLM's ``_VLLM_TEST_CACHE_ONLY``.

Either switch makes every download of cacheroot.fetch (and a model snapshot's warm) a miss that
raises instead of asking the network; a blank or ``0`` value is off; ``offline=False`` wins.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_OFFLINE,
    CACHEROOT_SHARED,
    TABLE,
    VLLM_CACHE_ROOT,
    VLLM_TEST_CACHE,
    VLLM_TEST_CACHE_LEGACY,
    VLLM_TEST_CACHE_ONLY,
    resolve,
)
from cacheroot.fetch import CacheMissError, Fetcher, Model, cache_dir, warm_snapshot
from cacheroot.fetch._fetcher import cache_only
from cacheroot.fetch._models import snapshot as snapshot_module

from .origin import Origin, body

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.fetch import FetchEvent

SWITCHES = [CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY]
ON = ["1", "true", "yes", "ON", " 1 ", "\tyes\n"]
OFF = ["", " ", "0", "false", "no", "off", "2"]
PINNED = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(params=SWITCHES)
def switch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each cache-only variable in turn, with every switch unset to start with."""
    for each in SWITCHES:
        monkeypatch.delenv(each, raising=False)
    chosen: str = request.param
    return chosen


@pytest.mark.parametrize("value", ON)
def test_on_values(switch: str, value: str) -> None:
    assert cache_only({switch: value})
    other = next(s for s in SWITCHES if s != switch)
    assert cache_only({switch: value, other: "0"})


@pytest.mark.parametrize("value", OFF)
def test_off_values(switch: str, value: str) -> None:
    assert not cache_only({switch: value})


def test_unset_is_off_and_the_environment_is_read_at_each_call(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not cache_only({})
    assert not cache_only()
    monkeypatch.setenv(switch, "1")
    assert cache_only()
    monkeypatch.setenv(switch, "0")
    assert not cache_only()


def test_a_miss_asks_nothing_and_offline_false_wins(
    switch: str, origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = origin.url(f"/ok/{name}")
    monkeypatch.setenv(switch, "1")
    with pytest.raises(CacheMissError) as info:
        fetcher.fetch(url, namespace="gsm8k")
    assert isinstance(info.value, FileNotFoundError)
    assert origin.gets[f"/ok/{name}"] == 0
    path = fetcher.fetch(url, namespace="gsm8k", offline=False)
    assert origin.gets[f"/ok/{name}"] == 1
    assert fetcher.fetch(url, namespace="gsm8k") == path  # a hit needs no network
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


@pytest.mark.parametrize("value", OFF)
def test_an_off_value_downloads(
    switch: str,
    value: str,
    *,
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(switch, value)
    assert fetcher.fetch(origin.url(f"/ok/{name}")).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


def test_a_snapshot_warm_is_cache_only_too(switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cache-only warm asked the hub")

    monkeypatch.setattr(snapshot_module, "_download_with_retries", no_network)
    monkeypatch.setenv(switch, "1")
    spec = Model("org/model", PINNED, hub="modelscope")  # HF_HUB_OFFLINE cannot be why
    with pytest.raises(CacheMissError, match="org/model"):
        warm_snapshot(spec)


def test_cache_dir_follows_a_legacy_name_set_between_calls(tmp_path: Path) -> None:
    # Memoised on what it depends on: the legacy name must be part of that.
    env = {CACHEROOT: str(tmp_path), VLLM_TEST_CACHE_LEGACY: str(tmp_path / "a")}
    assert cache_dir(env) == str(tmp_path / "a")
    env[VLLM_TEST_CACHE_LEGACY] = str(tmp_path / "b")
    assert cache_dir(env) == str(tmp_path / "b")
    env[VLLM_TEST_CACHE] = str(tmp_path / "c")  # the current name wins
    assert cache_dir(env) == str(tmp_path / "c")
    del env[VLLM_TEST_CACHE], env[VLLM_TEST_CACHE_LEGACY]
    env[VLLM_CACHE_ROOT] = str(tmp_path / "v")
    assert cache_dir(env) == str(tmp_path / "v" / "test_cache")


def test_cache_dir_follows_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process environment is read through the mapping behind os.environ (a hit's fast
    # path): every change made through os.environ must show.
    for each in (CACHEROOT, CACHEROOT_APPLIED, VLLM_TEST_CACHE_LEGACY, *(v.name for v in TABLE)):
        monkeypatch.setitem(os.environ, each, "")  # the layout as the user left it: unset
        del os.environ[each]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "vllm" / "test_cache")
    os.environ[CACHEROOT] = str(tmp_path / "root")
    assert cache_dir() == str(tmp_path / "root" / "vllm" / "test_cache")
    os.environ[VLLM_TEST_CACHE_LEGACY] = str(tmp_path / "legacy")
    assert cache_dir() == str(tmp_path / "legacy")
    os.environ[VLLM_TEST_CACHE] = str(tmp_path / "current")  # the current name wins
    assert cache_dir() == str(tmp_path / "current")
    del os.environ[VLLM_TEST_CACHE], os.environ[VLLM_TEST_CACHE_LEGACY]
    assert cache_dir() == str(tmp_path / "root" / "vllm" / "test_cache")
    os.environ.pop(CACHEROOT)
    assert cache_dir() == str(tmp_path / "home" / ".cache" / "vllm" / "test_cache")


# -- the shared tier (CACHEROOT_SHARED) is local infrastructure, not the network ------------------


def _become_host(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process another host of the fleet: its own root, the same shared tier."""
    for each in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        monkeypatch.delenv(each, raising=False)
    monkeypatch.setenv(CACHEROOT, str(root))
    for each, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(each, value)


@pytest.fixture
def l2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared tier for this test's hosts."""
    shared = tmp_path / "l2"
    shared.mkdir()
    monkeypatch.setenv(CACHEROOT_SHARED, str(shared))
    return shared


def test_a_cache_only_miss_is_served_by_the_shared_tier(
    switch: str,
    l2: Path,
    *,
    origin: Origin,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = origin.url(f"/ok/{name}")
    Fetcher().fetch(url, namespace="gsm8k")  # downloads, and writes through to L2
    assert origin.gets[f"/ok/{name}"] == 1
    _become_host(tmp_path / "fresh-host", monkeypatch)
    monkeypatch.setenv(switch, "1")
    events: list[FetchEvent] = []

    path = Fetcher(reporter=events.append).fetch(url, namespace="gsm8k")

    assert str(path).startswith(str(tmp_path / "fresh-host") + os.sep)
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1  # the origin was not asked again
    assert [(e.kind, e.source) for e in events] == [("miss", "shared tier")]
    events.clear()
    assert Fetcher(reporter=events.append).fetch(url, namespace="gsm8k") == path
    assert [(e.kind, e.source) for e in events] == [("hit", "")]  # this host's own copy now


def test_a_cache_only_run_never_uses_a_damaged_shared_copy(
    switch: str,
    l2: Path,
    *,
    origin: Origin,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = origin.url(f"/ok/{name}")
    local = Fetcher().fetch(url, namespace="gsm8k").relative_to(os.environ[CACHEROOT])
    shared = l2 / local
    damaged = bytearray(shared.read_bytes())
    damaged[0] ^= 0xFF
    shared.write_bytes(bytes(damaged))  # its record still names the original sha256
    _become_host(tmp_path / "fresh-host", monkeypatch)
    monkeypatch.setenv(switch, "1")

    with pytest.raises(CacheMissError):
        Fetcher().fetch(url, namespace="gsm8k")

    assert not (tmp_path / "fresh-host" / local).exists()
    assert origin.gets[f"/ok/{name}"] == 1


def test_a_cache_only_run_with_another_digest_does_not_take_the_shared_copy(
    switch: str,
    l2: Path,
    *,
    origin: Origin,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = origin.url(f"/ok/{name}")
    Fetcher().fetch(url, namespace="gsm8k")
    _become_host(tmp_path / "fresh-host", monkeypatch)
    monkeypatch.setenv(switch, "1")

    with pytest.raises(CacheMissError):
        Fetcher().fetch(url, namespace="gsm8k", sha256="0" * 64)
    assert Fetcher().fetch(url, namespace="gsm8k").read_bytes() == body(name)  # its own digest
    assert origin.gets[f"/ok/{name}"] == 1
