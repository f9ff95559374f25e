"""The vLLM plugin against the real vLLM 0.33 ``MediaConnector`` and a real origin on 127.0.0.1.

Needs the pinned vLLM wheel and what importing its connector needs: torch (imported and used
at import time by ``vllm/__init__`` and ``vllm.config``; a CPU build is enough) and about forty
small wheels. Where they are missing the module is skipped, with the import error as the
reason. The plugin's ``register()`` runs once for the module with ``CACHEROOT_MEDIA_CACHE``
set, as vLLM's plugin loader would run it, and is undone at the end, so other tests in the
process see vLLM as it ships.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE
from cacheroot.mediacache import MediaCache, entry_name, vllm_plugin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.mediacache.origin import Origin
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from mediacache.origin import Origin

try:
    connector_module = importlib.import_module("vllm.multimodal.media.connector")
except ImportError as exc:  # vLLM absent, or present without what its connector imports
    pytest.skip(
        f"needs vLLM's MediaConnector, which did not import ({exc}); importing it needs torch "
        "(a CPU build is enough) and the wheels listed for the upstream session",
        allow_module_level=True,
    )
# Looked up, not imported by name, so that type checks pass where vLLM is not installed.
vllm_connections = importlib.import_module("vllm.connections")
vllm_exceptions = importlib.import_module("vllm.exceptions")
ImageMediaIO = importlib.import_module("vllm.multimodal.media.image").ImageMediaIO
Image = pytest.importorskip("PIL.Image")  # vLLM needs Pillow: here whenever vLLM is
MediaConnector = connector_module.MediaConnector
N_THREADS = 12
#: Concurrent asyncio requests: each waits in a thread of the loop's default executor, which
#: has at least 5 threads (``min(32, cpus + 4)``); more would queue behind the download.
N_TASKS = 4


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
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MediaCache]:
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


def expected_image(body: bytes) -> Any:
    """What vLLM's image IO decodes from ``body`` without any cache."""
    return ImageMediaIO(image_mode="RGB").load_bytes(body)


def test_second_fetch_is_a_hit_in_our_directory(
    cache: MediaCache, origin: Origin, theirs: str
) -> None:
    body = png()
    url = origin.route("/cat.png", body)
    connector = MediaConnector()
    assert isinstance(connector.connection, vllm_plugin.CachedConnection)
    first = connector.fetch_image(url)
    second = MediaConnector().fetch_image(url)  # vLLM builds a connector per request
    assert origin.gets["/cat.png"] == 1
    want = expected_image(body)
    for image in (first, second):
        assert type(image) is type(want)
        assert (image.size, image.mode, image.tobytes()) == (want.size, want.mode, want.tobytes())
    assert entry_name(url) in entries(cache.directory)
    assert entries(theirs) == []  # vLLM's own cache stored nothing: no body kept twice
    assert origin.seen[0]["user-agent"].startswith("vLLM/")  # vLLM's own request headers


def test_async_fetch_is_a_hit(cache: MediaCache, origin: Origin, theirs: str) -> None:
    url = origin.route("/async.png", png(colour=(1, 2, 3)))

    async def twice() -> list[Any]:
        return [await MediaConnector().fetch_image_async(url) for _ in range(2)]

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
def test_concurrent_requests_make_one_get(cache: MediaCache, origin: Origin, mode: str) -> None:
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
            connector = MediaConnector()
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
                    *(MediaConnector().fetch_image_async(url) for _ in range(N_TASKS))
                )
            )

        results = asyncio.run(many())
    assert gate.is_set()
    assert len(results) == count
    assert {r.size for r in results} == {(16, 16)}
    assert origin.gets[f"/busy-{mode}.png"] == 1


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/no-store.png", {"Cache-Control": "no-store"}),
        ("/private.png", {"Cache-Control": "private, max-age=600"}),
    ],
)
def test_responses_the_rules_refuse_are_served_not_stored(
    cache: MediaCache, origin: Origin, theirs: str, path: str, headers: dict[str, str]
) -> None:
    url = origin.route(path, png(), headers=headers)
    connector = MediaConnector()
    images = [connector.fetch_image(url) for _ in range(2)]
    assert [i.size for i in images] == [(6, 4), (6, 4)]
    assert origin.gets[path] == 2
    assert entry_name(url) not in entries(cache.directory)
    assert entries(theirs) == []


def test_requests_with_credentials_are_not_cached(
    cache: MediaCache, origin: Origin, theirs: str
) -> None:
    origin.route("/secret.png", png())
    url = origin.url("/secret.png").replace("http://", "http://user:pass@")
    connector = MediaConnector()
    before = cache.stats()["bypassed"]
    images = [connector.fetch_image(url) for _ in range(2)]
    assert [i.size for i in images] == [(6, 4), (6, 4)]
    assert origin.gets["/secret.png"] == 2
    assert origin.seen[-1]["authorization"].startswith("Basic ")
    assert cache.stats()["bypassed"] - before == 2
    assert entry_name(url) not in entries(cache.directory)
    assert entries(theirs) == []


def test_client_errors_keep_vllms_422(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/gone.png", b"gone", status=404)
    with pytest.raises(vllm_exceptions.VLLMUnprocessableEntityError, match="HTTP 404"):
        MediaConnector().fetch_image(url)
    assert entry_name(url) not in entries(cache.directory)


def test_allowed_media_domains_are_checked_before_the_cache(
    cache: MediaCache, origin: Origin
) -> None:
    url = origin.route("/elsewhere.png", png())
    connector = MediaConnector(allowed_media_domains=["media.example"])
    with pytest.raises(ValueError, match="allowed domains"):
        connector.fetch_image(url)
    assert origin.gets["/elsewhere.png"] == 0


def test_vllms_size_limit_holds_on_misses_and_hits(
    cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = noise_png(700)  # about 1.4 MiB
    assert len(body) > 1024 * 1024
    big = origin.route("/big.png", body)
    stored = origin.route("/big-stored.png", body)
    MediaConnector().fetch_image(stored)  # stored under the default 256 MiB limit
    monkeypatch.setenv("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "1")
    for url in (big, stored):
        with pytest.raises(
            vllm_exceptions.VLLMUnprocessableEntityError, match="VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"
        ):
            MediaConnector().fetch_image(url)
    assert entry_name(big) not in entries(cache.directory)
    assert origin.gets["/big-stored.png"] == 1  # the second answer came from disk, refused


def test_the_request_download_budget_is_charged(
    cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB", "1")
    body = noise_png(400)  # about 480 KiB: two fit in 1 MiB, three do not
    urls = [origin.route(f"/budget-{i}.png", body) for i in range(3)]
    MediaConnector().fetch_image(urls[0])  # warm: the budget counts hits too
    connector = MediaConnector(download_budget=vllm_connections.MediaRequestDownloadBudget())
    connector.fetch_image(urls[0])
    connector.fetch_image(urls[1])
    with pytest.raises(
        vllm_exceptions.VLLMUnprocessableEntityError, match="REQUEST_DOWNLOAD_SIZE_MB"
    ):
        connector.fetch_image(urls[2])


def test_redirects_follow_vllms_switch(
    cache: MediaCache, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = origin.route("/target.png", png())
    hop = origin.route("/hop.png", status=302, location=target)
    assert MediaConnector().fetch_image(hop).size == (6, 4)
    monkeypatch.setenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    other = origin.route("/hop2.png", status=302, location=origin.url("/target2.png"))
    with pytest.raises(ValueError, match="cannot identify image"):
        MediaConnector().fetch_image(other)
    assert origin.gets["/target2.png"] == 0


def test_data_urls_stay_vllms(cache: MediaCache) -> None:
    import base64

    before = cache.stats()
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert MediaConnector().fetch_image(url).size == (6, 4)
    assert cache.stats() == before
