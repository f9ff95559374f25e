"""The vLLM plugin without vLLM: off means untouched, idempotence, packaging, the routing rules.

The real vLLM needs torch, which the default run does not have; these tests use a stand-in of
the modules the plugin touches (``fake_vllm``). ``tests/upstream/test_vllm_media_plugin.py``
runs the same plugin against the real vLLM 0.33 connector.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE
from cacheroot.mediacache import entry_name, vllm_plugin

from . import fake_vllm

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .origin import Origin

DISTRIBUTION = Path(__file__).resolve().parents[2] / "packages" / "mediacache"
SOURCES = [
    str(Path(__file__).resolve().parents[2] / "packages" / p / "src")
    for p in ("envs", "fetch", "mediacache")
]
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture(autouse=True)
def fresh_plugin() -> Iterator[None]:
    """Every test starts with nothing registered and leaves nothing registered."""
    vllm_plugin.unregister()
    yield
    vllm_plugin.unregister()


@pytest.fixture
def on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Our cache on, in a directory of its own."""
    directory = tmp_path / "ours"
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, str(directory))
    return directory


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "cacheroot.mediacache" and r.levelno == logging.WARNING
    ]


# -- off, idempotence, refusals ----------------------------------------------------------------


def test_off_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    connector = fake_vllm.install(monkeypatch)
    before = vars(connector.MediaConnector)["__init__"]
    vllm_plugin.register()
    assert vars(connector.MediaConnector)["__init__"] is before
    assert vllm_plugin.installed_cache() is None
    assert isinstance(connector.MediaConnector().connection, fake_vllm.HTTPConnection)


def test_off_does_not_import_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    vllm_plugin.register()
    assert "vllm" not in sys.modules


def test_register_is_idempotent(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    connector = fake_vllm.install(monkeypatch)
    original = vars(connector.MediaConnector)["__init__"]
    for _ in range(3):
        vllm_plugin.register()
    wrapped = vars(connector.MediaConnector)["__init__"]
    assert wrapped is not original
    assert wrapped.__wrapped__ is original  # wrapped once, not three times
    media = connector.MediaConnector()
    assert isinstance(media.connection, vllm_plugin.CachedConnection)
    assert media.connection._inner is fake_vllm.global_http_connection
    vllm_plugin.unregister()
    assert vars(connector.MediaConnector)["__init__"] is original


def test_a_second_copy_of_the_plugin_does_not_wrap_again(
    on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connector = fake_vllm.install(monkeypatch)
    vllm_plugin.register()
    wrapped = vars(connector.MediaConnector)["__init__"]
    vllm_plugin._state.reset()  # as if the module had been loaded a second time
    vllm_plugin.register()
    assert vars(connector.MediaConnector)["__init__"] is wrapped
    setattr(connector.MediaConnector, "__init__", wrapped.__wrapped__)  # noqa: B010


def test_shared_directory_is_one_warning_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    connector = fake_vllm.install(monkeypatch)
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, str(tmp_path / "media"))
    monkeypatch.setenv(VLLM_MEDIA_CACHE, str(tmp_path / "media"))
    before = vars(connector.MediaConnector)["__init__"]
    vllm_plugin.register()
    vllm_plugin.register()
    (message,) = warnings_of(caplog)
    assert CACHEROOT_MEDIA_CACHE in message
    assert VLLM_MEDIA_CACHE in message
    assert "separate directories" in message
    assert vars(connector.MediaConnector)["__init__"] is before


def test_vllm_missing_is_one_warning(
    on: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "vllm.envs", None)  # importing it raises ImportError
    vllm_plugin.register()
    vllm_plugin.register()
    (message,) = warnings_of(caplog)
    assert "cannot be imported" in message
    assert vllm_plugin.installed_cache() is None


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"connector_class": fake_vllm.OtherConnector}, "MediaConnector._get_cached_bytes"),
        ({"connector_class": fake_vllm.OtherConnector}, "__init__(connection=...)"),
        ({"without": ("HTTPConnection",)}, "HTTPConnection.get_bytes"),
        (
            {"without": ("MediaDownloadSizeExceededError",)},
            "vllm.connections.MediaDownloadSizeExceededError",
        ),
    ],
)
def test_another_shape_is_one_warning_naming_what_is_missing(
    on: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    kwargs: dict[str, Any],
    named: str,
) -> None:
    connector = fake_vllm.install(monkeypatch, **kwargs)
    before = vars(connector.MediaConnector)["__init__"]
    vllm_plugin.register()
    vllm_plugin.register()
    (message,) = warnings_of(caplog)
    assert named in message
    assert "0.33" in message
    assert vars(connector.MediaConnector)["__init__"] is before


# -- what a connector does with the cache on ---------------------------------------------------


@pytest.fixture
def connector(on: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The stand-in's connector module with the plugin registered."""
    module = fake_vllm.install(monkeypatch)
    monkeypatch.setenv(VLLM_MEDIA_CACHE, str(on.parent / "theirs"))
    vllm_plugin.register()
    return module


def test_downloads_go_through_our_cache_only(connector: Any, on: Path, origin: Origin) -> None:
    url = origin.route("/a.png", PNG)
    first = connector.MediaConnector()
    second = connector.MediaConnector()
    assert first.load_from_url(url) == PNG
    assert second.load_from_url(url) == PNG
    assert asyncio.run(second.load_from_url_async(url)) == PNG
    assert origin.gets["/a.png"] == 1
    assert entry_name(url) in os.listdir(on)
    assert (first._media_cache_dir, first.own_cache, second.own_cache) == (None, {}, {})
    assert origin.seen[0]["user-agent"] == "vLLM/0.33.0"  # the connection's own headers
    assert fake_vllm.global_http_connection.calls == []


def test_other_urls_and_calls_stay_the_connections(connector: Any) -> None:
    media = connector.MediaConnector()
    inner = fake_vllm.global_http_connection
    inner.calls.clear()
    assert media.connection.get_bytes("data:image/png;base64,AAAA", timeout=5) == b"data"
    assert inner.calls == [("data:image/png;base64,AAAA", {"timeout": 5})]
    assert media.connection.get_json("http://h/x") == "json of http://h/x"
    assert media.connection.reuse is inner.reuse


def test_unknown_keywords_go_to_vllms_own_download(connector: Any, origin: Origin) -> None:
    url = origin.route("/k.png", PNG)
    media = connector.MediaConnector()
    inner = fake_vllm.global_http_connection
    inner.calls.clear()
    assert media.connection.get_bytes(url, timeout=5, chunk_size=7) == PNG
    assert inner.calls == [(url, {"timeout": 5, "chunk_size": 7})]


@pytest.mark.parametrize(
    "case",
    [
        ("1", None, fake_vllm.MediaDownloadSizeExceededError),
        ("1", 2 * fake_vllm.MIB, fake_vllm.MediaDownloadSizeExceededError),
        ("1", 1000, fake_vllm.HTTPResponseSizeExceededError),
        ("0", 1000, fake_vllm.HTTPResponseSizeExceededError),
    ],
)
def test_vllms_size_limits_raise_vllms_errors(
    connector: Any,
    origin: Origin,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[str, int | None, type[Exception]],
) -> None:
    """The smaller of max_bytes and VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB wins, with vLLM's error."""
    limit_mb, max_bytes, error = case
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", limit_mb)
    url = origin.route("/big.bin", b"x" * (fake_vllm.MIB + 1))
    with pytest.raises(error):
        connector.MediaConnector().load_from_url(url, max_bytes=max_bytes)


def test_no_limit_in_vllm_means_none_here(
    connector: Any, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "0")
    cache = vllm_plugin.installed_cache()
    assert cache is not None
    body = b"y" * (cache.max_download_bytes // 4096)
    url = origin.route("/free.bin", body)
    assert connector.MediaConnector().load_from_url(url) == body


def test_size_limit_holds_on_a_hit(
    connector: Any, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = origin.route("/hit.bin", b"z" * 5000)
    connector.MediaConnector().load_from_url(url)
    with pytest.raises(fake_vllm.HTTPResponseSizeExceededError):
        connector.MediaConnector().load_from_url(url, max_bytes=4999)
    assert origin.gets["/hit.bin"] == 1


def test_the_budget_is_charged_for_hits_and_misses(connector: Any, origin: Origin) -> None:
    url = origin.route("/b.png", PNG)
    budget = fake_vllm.Budget(limit=2 * len(PNG))
    media = connector.MediaConnector(download_budget=budget)
    media.load_from_url(url)
    media.load_from_url(url)
    assert budget.used == 2 * len(PNG)
    with pytest.raises(fake_vllm.BudgetExceededError):
        media.load_from_url(url)
    assert origin.gets["/b.png"] == 1


def test_refused_responses_are_returned(connector: Any, on: Path, origin: Origin) -> None:
    url = origin.route("/n.png", PNG, headers={"Cache-Control": "no-store"})
    media = connector.MediaConnector()
    assert [media.load_from_url(url) for _ in range(2)] == [PNG, PNG]
    assert origin.gets["/n.png"] == 2
    assert entry_name(url) not in os.listdir(on)


# -- packaging and imports ---------------------------------------------------------------------


def test_the_wheel_declares_the_entry_point(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv on PATH to build the wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--quiet", str(DISTRIBUTION), "-o", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = tmp_path.glob("cacheroot_mediacache-*.whl")
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        assert "cacheroot/mediacache/vllm_plugin.py" in names
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = wheel.read(entry_points).decode()
    assert (
        "[vllm.general_plugins]\ncacheroot-mediacache = cacheroot.mediacache.vllm_plugin:register"
        in text
    )


def test_importing_the_package_never_imports_vllm(tmp_path: Path) -> None:
    """With an importable ``vllm`` on the path, importing ours (and registering off) skips it."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise SystemExit('vllm was imported')\n")
    script = textwrap.dedent(
        """
        import sys
        import cacheroot.mediacache
        from cacheroot.mediacache import vllm_plugin
        vllm_plugin.register()
        assert "vllm" not in sys.modules, sorted(sys.modules)
        print("clean")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != CACHEROOT_MEDIA_CACHE}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *SOURCES])
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"
