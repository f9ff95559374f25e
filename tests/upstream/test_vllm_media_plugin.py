"""The vLLM plugin against the real vLLM 0.33 ``MediaConnector`` and a real origin on 127.0.0.1.

The connector, its HTTP connection, its media IO and its errors are vLLM's own code, from the
pinned wheel. Importing them as vLLM ships them needs torch: ``vllm/__init__.py`` imports it
(``vllm.env_override``) and ``vllm/multimodal/__init__.py`` reaches ``vllm.config`` and
``vllm.distributed``, which register compiled ops at import. Where torch is installed, that is
what happens here. Where it is not (the ``upstream`` session leaves its 900 MB out), the
``vllm`` and ``vllm.multimodal`` packages are registered without running their
``__init__.py`` and ``torch`` is a stand-in that answers the few dozen names the connector's
modules touch at import (dtypes, ``torch.library.Library``, type hints); it records every use
after the import, and the module's teardown fails if a test made one: the media fetch path
never calls torch. Both ways are cleaned out of ``sys.modules`` afterwards when the stand-in
was used.

The plugin's ``register()`` runs once for the module with ``CACHEROOT_MEDIA_CACHE`` set, as
vLLM's plugin loader would run it, and is undone at the end, so other tests in the process see
vLLM as it ships.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import os
import sys
import threading
import time
import types
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE
from cacheroot.mediacache import MediaCache, entry_name, vllm_plugin

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

    from tests.mediacache.origin import Origin
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from mediacache.origin import Origin

Image = pytest.importorskip("PIL.Image")  # vLLM's image IO needs Pillow
N_THREADS = 12
#: Concurrent asyncio requests: each waits in a thread of the loop's default executor, which
#: has at least 5 threads (``min(32, cpus + 4)``); more would queue behind the download.
N_TASKS = 4
#: The torch release vLLM 0.33 pins: version checks at import take the branches they take there.
TORCH_VERSION = "2.14.0"


class _Inert:
    """A torch attribute in the stand-in: callable, subscriptable, a base class, falsy."""

    def __init__(self, name: str, used: set[str]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_used", used)

    def _note(self, name: str) -> _Inert:
        used: set[str] = object.__getattribute__(self, "_used")
        if "armed" in used:
            used.add(name)
        return _Inert(name, used)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return self._note(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            self._note(f"{self._name}(...)")
            return args[0]  # used as a decorator: the function itself
        return self._note(f"{self._name}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return ()  # used as a base class: no base

    def __or__(self, other: object) -> _Inert:
        return self  # ``torch.Tensor | None`` in annotations evaluated at import

    __ror__ = __or__

    def __getitem__(self, key: object) -> _Inert:
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<torch stand-in {self._name}>"


class _TorchModule(types.ModuleType):
    """``torch`` or one of its submodules in the stand-in."""

    used: set[str]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Inert(self.__name__, self.used)._note(f"{self.__name__}.{attr}")


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Answers ``import torch`` and ``import torch.<anything>`` with stand-in modules."""

    def __init__(self, used: set[str]) -> None:
        self.used = used

    def find_spec(
        self,
        fullname: str,
        _path: Sequence[str] | None = None,
        _target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _TorchLoader(self.used), is_package=True)


class _TorchLoader(importlib.abc.Loader):
    def __init__(self, used: set[str]) -> None:
        self.used = used

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _TorchModule(spec.name)
        module.used = self.used
        module.__path__ = []
        if spec.name == "torch":
            module.__version__ = TORCH_VERSION  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if "armed" in self.used:
            self.used.add(f"import {module.__name__}")


def _package_without_init(name: str, where: str) -> None:
    """Register package ``name`` (directory ``where``) without running its ``__init__.py``."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [where]
    package = types.ModuleType(name)
    package.__path__ = [where]
    package.__spec__ = spec
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)


@pytest.fixture(scope="module")
def vllm() -> Iterator[types.SimpleNamespace]:
    """vLLM's connector module and the pieces of vLLM the tests use (see the module docstring)."""
    stand_in = importlib.util.find_spec("torch") is None
    before = set(sys.modules)
    used: set[str] = set()
    finder = _TorchFinder(used)
    if stand_in:
        sys.meta_path.insert(0, finder)
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("needs vLLM (the upstream nox session)")
        (root,) = spec.submodule_search_locations
        _package_without_init("vllm", root)
        sys.modules["vllm"].__version__ = importlib.metadata.version("vllm")  # type: ignore[attr-defined]
        _package_without_init("vllm.multimodal", os.path.join(root, "multimodal"))
    try:
        connector = importlib.import_module("vllm.multimodal.media.connector")
        found = types.SimpleNamespace(
            MediaConnector=connector.MediaConnector,
            connections=importlib.import_module("vllm.connections"),
            exceptions=importlib.import_module("vllm.exceptions"),
            ImageMediaIO=importlib.import_module("vllm.multimodal.media.image").ImageMediaIO,
            stand_in=stand_in,
        )
    except ImportError as exc:
        pytest.skip(f"vLLM's MediaConnector did not import: {exc}")
    used.add("armed")
    yield found
    used.discard("armed")
    if stand_in:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            if name.partition(".")[0] in {"vllm", "torch"}:
                del sys.modules[name]
    assert not used, f"the media fetch path touched torch: {sorted(used)}"


def png(size: tuple[int, int] = (6, 4), colour: tuple[int, int, int] = (200, 30, 10)) -> bytes:
    """A small real PNG, encoded by Pillow."""
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def noise_png(side: int) -> bytes:
    """A PNG of random pixels (does not compress): about ``3 * side**2`` bytes."""
    buf = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(3 * side * side)).save(buf, format="PNG")
    return buf.getvalue()


def entries(directory: str) -> list[str]:
    """Non-dot files of a directory: the entries of either cache (empty if it does not exist)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


@pytest.fixture(scope="module")
def cache(
    vllm: types.SimpleNamespace, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MediaCache]:
    """The cache ``register()`` installs, as in a vLLM process started with it on."""
    directory = tmp_path_factory.mktemp("cacheroot-media")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHEROOT_MEDIA_CACHE, str(directory))
        vllm_plugin.register()
        vllm_plugin.register()  # vLLM may load general plugins more than once
    installed = vllm_plugin.installed_cache()
    assert installed is not None, "register() did not install the cache"
    yield installed
    vllm_plugin.unregister()


@pytest.fixture
def origin() -> Iterator[Origin]:
    server = Origin().start()
    yield server
    server.close()


@pytest.fixture
def theirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """vLLM's own cache turned on too, in a directory of its own."""
    directory = str(tmp_path / "vllm-media")
    monkeypatch.setenv(VLLM_MEDIA_CACHE, directory)
    return directory


def test_second_fetch_is_a_hit_in_our_directory(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, theirs: str
) -> None:
    body = png()
    url = origin.route("/cat.png", body)
    connector = vllm.MediaConnector()
    assert isinstance(connector.connection, vllm_plugin.CachedConnection)
    first = connector.fetch_image(url)
    second = vllm.MediaConnector().fetch_image(url)  # vLLM builds a connector per request
    assert origin.gets["/cat.png"] == 1
    want = vllm.ImageMediaIO(image_mode="RGB").load_bytes(body)  # vLLM, no cache
    for image in (first, second):
        assert type(image) is type(want)
        assert (image.size, image.mode, image.tobytes()) == (want.size, want.mode, want.tobytes())
    assert entry_name(url) in entries(cache.directory)
    assert entries(theirs) == []  # vLLM's own cache stored nothing: no body kept twice
    assert origin.seen[0]["user-agent"].startswith("vLLM/")  # vLLM's own request headers


def test_async_fetch_is_a_hit(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, theirs: str
) -> None:
    url = origin.route("/async.png", png(colour=(1, 2, 3)))

    async def twice() -> list[Any]:
        return [await vllm.MediaConnector().fetch_image_async(url) for _ in range(2)]

    images = asyncio.run(twice())
    assert [i.size for i in images] == [(6, 4), (6, 4)]
    assert origin.gets["/async.png"] == 1
    assert entry_name(url) in entries(cache.directory)
    assert entries(theirs) == []


def _wait_for_waiters(cache: MediaCache, url: str, count: int, deadline: float) -> None:
    """Until ``count`` callers are inside the single flight for ``url`` (or the deadline)."""
    name = entry_name(url)
    while time.monotonic() < deadline:
        slot = cache._key_locks.get(name)
        if slot is not None and slot[1] >= count:
            return
        time.sleep(0.005)


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_concurrent_requests_make_one_get(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, mode: str
) -> None:
    gate = threading.Event()
    body = png((16, 16))
    url = origin.route(f"/busy-{mode}.png", body, gate=gate)
    results: list[Any] = []

    count = N_THREADS if mode == "threads" else N_TASKS

    def opener() -> None:
        # Open the origin only once every request is inside the cache's single flight.
        origin.first_get.wait(30)
        _wait_for_waiters(cache, url, count, time.monotonic() + 30)
        gate.set()

    threading.Thread(target=opener, daemon=True).start()
    if mode == "threads":
        start = threading.Barrier(N_THREADS)

        def one() -> None:
            connector = vllm.MediaConnector()
            start.wait(30)
            results.append(connector.fetch_image(url))

        threads = [threading.Thread(target=one) for _ in range(N_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    else:

        async def many() -> list[Any]:
            return list(
                await asyncio.gather(
                    *(vllm.MediaConnector().fetch_image_async(url) for _ in range(N_TASKS))
                )
            )

        results = asyncio.run(many())
    assert gate.is_set()
    assert len(results) == count
    assert {r.size for r in results} == {(16, 16)}
    assert origin.gets[f"/busy-{mode}.png"] == 1


@pytest.mark.parametrize(
    "cache_control", ["no-store", "private, max-age=600"], ids=["no-store", "private"]
)
def test_responses_the_rules_refuse_are_served_not_stored(
    vllm: types.SimpleNamespace,
    cache: MediaCache,
    origin: Origin,
    theirs: str,
    cache_control: str,
) -> None:
    path = f"/{cache_control.partition(',')[0]}.png"
    url = origin.route(path, png(), headers={"Cache-Control": cache_control})
    connector = vllm.MediaConnector()
    images = [connector.fetch_image(url) for _ in range(2)]
    assert [i.size for i in images] == [(6, 4), (6, 4)]
    assert origin.gets[path] == 2
    assert entry_name(url) not in entries(cache.directory)
    assert entries(theirs) == []


def test_requests_with_credentials_are_not_cached(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, theirs: str
) -> None:
    origin.route("/secret.png", png())
    url = origin.url("/secret.png").replace("http://", "http://user:pass@")
    connector = vllm.MediaConnector()
    before = cache.stats()["bypassed"]
    images = [connector.fetch_image(url) for _ in range(2)]
    assert [i.size for i in images] == [(6, 4), (6, 4)]
    assert origin.gets["/secret.png"] == 2
    assert origin.seen[-1]["authorization"].startswith("Basic ")
    assert cache.stats()["bypassed"] - before == 2
    assert entry_name(url) not in entries(cache.directory)
    assert entries(theirs) == []


def test_client_errors_keep_vllms_422(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin
) -> None:
    url = origin.route("/gone.png", b"gone", status=404)
    with pytest.raises(vllm.exceptions.VLLMUnprocessableEntityError, match="HTTP 404"):
        vllm.MediaConnector().fetch_image(url)
    assert entry_name(url) not in entries(cache.directory)


def test_allowed_media_domains_are_checked_before_the_cache(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin
) -> None:
    url = origin.route("/elsewhere.png", png())
    connector = vllm.MediaConnector(allowed_media_domains=["media.example"])
    with pytest.raises(ValueError, match="allowed domains"):
        connector.fetch_image(url)
    assert origin.gets["/elsewhere.png"] == 0


def test_vllms_size_limit_holds_on_misses_and_hits(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = noise_png(700)  # about 1.4 MiB
    assert len(body) > 1024 * 1024
    big = origin.route("/big.png", body)
    stored = origin.route("/big-stored.png", body)
    vllm.MediaConnector().fetch_image(stored)  # stored under the default 256 MiB limit
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    for url in (big, stored):
        with pytest.raises(
            vllm.exceptions.VLLMUnprocessableEntityError, match="VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"
        ):
            vllm.MediaConnector().fetch_image(url)
    assert entry_name(big) not in entries(cache.directory)
    assert origin.gets["/big-stored.png"] == 1  # the second answer came from disk, refused


def test_the_request_download_budget_is_charged(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "1")
    body = noise_png(400)  # about 480 KiB: two fit in 1 MiB, three do not
    urls = [origin.route(f"/budget-{i}.png", body) for i in range(3)]
    vllm.MediaConnector().fetch_image(urls[0])  # warm: the budget counts hits too
    connector = vllm.MediaConnector(download_budget=vllm.connections.MediaRequestDownloadBudget())
    connector.fetch_image(urls[0])
    connector.fetch_image(urls[1])
    with pytest.raises(
        vllm.exceptions.VLLMUnprocessableEntityError, match="REQUEST_DOWNLOAD_SIZE_MB"
    ):
        connector.fetch_image(urls[2])


def test_redirects_follow_vllms_switch(
    vllm: types.SimpleNamespace, cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = origin.route("/target.png", png())
    hop = origin.route("/hop.png", status=302, location=target)
    assert vllm.MediaConnector().fetch_image(hop).size == (6, 4)
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    other = origin.route("/hop2.png", status=302, location=origin.url("/target2.png"))
    with pytest.raises(ValueError, match="cannot identify image"):
        vllm.MediaConnector().fetch_image(other)
    assert origin.gets["/target2.png"] == 0


def test_data_urls_stay_vllms(vllm: types.SimpleNamespace, cache: MediaCache) -> None:
    import base64

    before = cache.stats()
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert vllm.MediaConnector().fetch_image(url).size == (6, 4)
    assert cache.stats() == before


def test_vllms_plugin_loader_finds_register(
    vllm: types.SimpleNamespace, cache: MediaCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's own discovery (``vllm.plugins.load_plugins_by_group``) yields our ``register``."""
    try:
        importlib.metadata.distribution("cacheroot-mediacache")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("cacheroot-mediacache is not installed here (sources on the path only)")
    plugins = importlib.import_module("vllm.plugins")
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)  # vLLM's allow-list: unset loads all
    found = plugins.load_plugins_by_group(plugins.DEFAULT_PLUGINS_GROUP)
    assert found.get("cacheroot-mediacache") is vllm_plugin.register
    found["cacheroot-mediacache"]()  # as load_general_plugins calls it: again, a no-op
    assert vllm_plugin.installed_cache() is cache
