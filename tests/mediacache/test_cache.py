"""MediaCache against a real origin on 127.0.0.1, with the clock moved by the test."""

from __future__ import annotations

import asyncio
import gzip
import os
import threading
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.envs import CACHEROOT_MEDIA_CACHE as MEDIA_CACHE_ROW
from cacheroot.envs import (
    CACHEROOT_OPT_IN,
    VLLM_MEDIA_CACHE_MAX_SIZE_MB,
    VLLM_MEDIA_CACHE_TTL_HOURS,
)
from cacheroot.mediacache import (
    MediaCache,
    ResponseTooLarge,
    URLRefused,
    acached_or,
    cached_or,
    entry_name,
    reset_stats,
    stats,
)

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import Clock
    from .origin import Origin

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"


def stored(cache: MediaCache, url: str) -> bool:
    return os.path.exists(os.path.join(cache.directory, entry_name(url)))


# -- hits, TTL and freshness ---------------------------------------------------------------------


def test_second_get_is_a_hit(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/a.png", PNG)
    assert cache.get(url) == PNG
    assert cache.get(url) == PNG
    assert origin.gets["/a.png"] == 1
    s = cache.stats()
    assert (s["hits"], s["misses"], s["stored"], s["bytes_saved"]) == (1, 1, 1, len(PNG))


def test_equivalent_url_is_a_hit(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/a.png", PNG)
    cache.get(url)
    assert cache.get(url.replace("http://", "HTTP://") + "#fragment") == PNG
    assert origin.gets["/a.png"] == 1


def test_ttl_expiry(cache: MediaCache, origin: Origin, clock: Clock) -> None:
    url = origin.route("/ttl.png", PNG)
    cache.get(url)
    clock.advance(3599)
    cache.get(url)
    assert origin.gets["/ttl.png"] == 1
    clock.advance(2)
    assert cache.get(url) == PNG
    assert origin.gets["/ttl.png"] == 2
    assert cache.stats()["misses"] == 2


def test_max_age_shorter_than_ttl(cache: MediaCache, origin: Origin, clock: Clock) -> None:
    url = origin.route("/m.png", PNG, headers={"Cache-Control": "max-age=10"})
    cache.get(url)
    clock.advance(9)
    cache.get(url)
    assert origin.gets["/m.png"] == 1
    clock.advance(2)
    cache.get(url)
    assert origin.gets["/m.png"] == 2


def test_revalidation_answered_304(cache: MediaCache, origin: Origin, clock: Clock) -> None:
    url = origin.route("/e.png", PNG, etag='"v1"', headers={"Cache-Control": "max-age=10"})
    cache.get(url)
    clock.advance(11)
    assert cache.get(url) == PNG
    assert origin.seen[-1]["if-none-match"] == '"v1"'
    assert origin.answers[("/e.png", 304)] == 1
    assert origin.answers[("/e.png", 200)] == 1  # the body was downloaded once
    s = cache.stats()
    assert (s["revalidations"], s["misses"], s["bytes_saved"]) == (1, 1, len(PNG))
    clock.advance(5)  # the 304 made it fresh for another max-age
    cache.get(url)
    assert origin.gets["/e.png"] == 2


def test_revalidation_with_last_modified(cache: MediaCache, origin: Origin, clock: Clock) -> None:
    url = origin.route("/l.png", PNG, last_modified=LAST_MODIFIED, headers={"Expires": "0"})
    cache.get(url)
    assert cache.get(url) == PNG
    assert origin.seen[-1]["if-modified-since"] == LAST_MODIFIED
    assert origin.answers[("/l.png", 304)] == 1
    assert cache.stats()["revalidations"] == 1


def test_revalidation_answered_200(cache: MediaCache, origin: Origin, clock: Clock) -> None:
    url = origin.route("/r.png", PNG, etag='"v1"', headers={"Cache-Control": "max-age=10"})
    cache.get(url)
    new = PNG[::-1]
    origin.route("/r.png", new, etag='"v2"', headers={"Cache-Control": "max-age=10"})
    clock.advance(11)
    assert cache.get(url) == new
    assert origin.seen[-1]["if-none-match"] == '"v1"'
    assert cache.get(url) == new  # the new body replaced the old entry
    assert origin.gets["/r.png"] == 2
    s = cache.stats()
    assert (s["revalidations"], s["misses"], s["hits"]) == (0, 2, 1)


# -- what is not stored ------------------------------------------------------------------------


@pytest.mark.parametrize("cc", ["no-store", "private, max-age=60"])
def test_no_store_and_private(cache: MediaCache, origin: Origin, cc: str) -> None:
    url = origin.route("/n.png", PNG, headers={"Cache-Control": cc})
    assert cache.get(url) == PNG
    assert cache.get(url) == PNG
    assert origin.gets["/n.png"] == 2
    assert not stored(cache, url)
    assert cache.stats()["not_stored"] == 2


@pytest.mark.parametrize("header", ["Authorization", "Cookie"])
def test_credentials_bypass_the_cache(cache: MediaCache, origin: Origin, header: str) -> None:
    url = origin.route("/c.png", PNG)
    cache.get(url)  # stored for anonymous callers...
    assert cache.get(url, headers={header: "secret"}) == PNG  # ...but not served to this one
    assert cache.get(url, headers={header: "secret"}) == PNG
    assert origin.gets["/c.png"] == 3
    assert origin.seen[-1][header.lower()] == "secret"
    assert cache.stats()["bypassed"] == 2


def test_credentials_cached_when_allowed(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    cache = MediaCache(tmp_path, clock=clock, allow_credentials=True)
    url = origin.route("/c.png", PNG)
    cache.get(url, headers={"Authorization": "Bearer t"})
    cache.get(url, headers={"Authorization": "Bearer t"})
    assert origin.gets["/c.png"] == 1


def test_empty_body_not_stored(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/empty.png", b"")
    assert cache.get(url) == b""
    assert cache.get(url) == b""
    assert origin.gets["/empty.png"] == 2
    assert not stored(cache, url)


def test_error_status_raises_and_is_not_stored(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/gone.png", b"not here", status=404)
    with pytest.raises(requests.HTTPError):
        cache.get(url)
    assert not stored(cache, url)


def test_non_200_success_is_served_not_stored(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/203.png", PNG, status=203)
    assert cache.get(url) == PNG
    assert not stored(cache, url)


def test_short_body_is_an_error_and_not_stored(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/short.png", PNG, short_by=100)
    with pytest.raises(requests.RequestException):
        cache.get(url)
    assert not stored(cache, url)
    assert os.listdir(cache.directory) == [".locks"]  # no partial, no sidecar left


def test_gzip_encoded_body_is_stored_decoded(cache: MediaCache, origin: Origin) -> None:
    """Content-Length counts the encoded bytes: the check uses the bytes on the wire."""
    url = origin.route("/z.bmp", gzip.compress(PNG), headers={"Content-Encoding": "gzip"})
    assert cache.get(url) == PNG
    assert stored(cache, url)
    assert cache.get(url) == PNG
    assert origin.gets["/z.bmp"] == 1


def test_a_failing_cache_disk_does_not_fail_the_caller(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/blocked.png", PNG)
    os.makedirs(os.path.join(cache.directory, entry_name(url)))  # os.replace onto it fails
    assert cache.get(url) == PNG
    assert cache.stats()["not_stored"] == 1
    assert not [n for n in os.listdir(cache.directory) if n.endswith(".partial")]


def test_undecodable_body_not_stored(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/bad.png", b"<html>rate limited</html>")

    def decode(data: bytes) -> None:
        if not data.startswith(b"\x89PNG"):
            raise ValueError("not a PNG")

    with pytest.raises(ValueError, match="not a PNG"):
        cache.get(url, validate=decode)
    assert not stored(cache, url)
    good = origin.route("/good.png", PNG)
    cache.get(good, validate=decode)
    assert stored(cache, good)


def test_vary_keeps_variants_apart(cache: MediaCache, origin: Origin) -> None:
    url = origin.route("/v.png", PNG, headers={"Vary": "Accept"})
    cache.get(url, headers={"Accept": "image/webp"})
    cache.get(url, headers={"Accept": "image/webp"})
    assert origin.gets["/v.png"] == 1
    cache.get(url, headers={"Accept": "image/png"})
    assert origin.gets["/v.png"] == 2


# -- stale on error --------------------------------------------------------------------------


@pytest.mark.parametrize("serve_stale", [True, False])
def test_stale_on_error_is_opt_in(
    tmp_path: Path, origin: Origin, clock: Clock, serve_stale: bool
) -> None:
    cache = MediaCache(tmp_path, clock=clock, ttl=60, serve_stale_on_error=serve_stale)
    url = origin.route("/s.png", PNG)
    cache.get(url)
    origin.route("/s.png", b"overloaded", status=503)
    clock.advance(61)
    if serve_stale:
        assert cache.get(url) == PNG
        assert cache.stats()["stale_served"] == 1
    else:
        with pytest.raises(requests.HTTPError):
            cache.get(url)


def test_stale_on_unreachable_origin(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    cache = MediaCache(tmp_path, clock=clock, ttl=60, serve_stale_on_error=True)
    url = origin.route("/s.png", PNG)
    cache.get(url)
    origin.close()
    clock.advance(61)
    assert cache.get(url, timeout=2) == PNG


def test_must_revalidate_forbids_stale(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    cache = MediaCache(tmp_path, clock=clock, ttl=60, serve_stale_on_error=True)
    url = origin.route("/s.png", PNG, headers={"Cache-Control": "must-revalidate"})
    cache.get(url)
    origin.route("/s.png", b"overloaded", status=503)
    clock.advance(61)
    with pytest.raises(requests.HTTPError):
        cache.get(url)


# -- the size bound --------------------------------------------------------------------------


def _bounded(tmp_path: Path, clock: Clock, entries: int, size: int) -> MediaCache:
    """A cache that holds ``entries`` bodies of ``size`` bytes (with their sidecars and locks)."""
    return MediaCache(
        tmp_path / "bounded",
        max_size_bytes=entries * (size + 1100) + 600,
        clock=clock,
        low_water=1.0,
    )


def test_lru_eviction_order(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    size = 4000
    cache = _bounded(tmp_path, clock, 4, size)
    urls = [origin.url(f"/gen/{i}/{size}") for i in range(6)]
    for url in urls[:4]:
        cache.get(url)
        clock.advance(1)
    assert all(stored(cache, u) for u in urls[:4])
    cache.get(urls[0])  # 0 is now the most recently used
    clock.advance(1)
    cache.get(urls[4])  # evicts 1, the least recently used
    assert [stored(cache, u) for u in urls[:5]] == [True, False, True, True, True]
    clock.advance(1)
    cache.get(urls[5])  # then 2
    assert [stored(cache, u) for u in urls] == [True, False, False, True, True, True]
    assert cache.stats()["evictions"] == 2
    assert cache.usage() <= cache.max_size_bytes


def test_expired_entries_go_first(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    size = 4000
    cache = _bounded(tmp_path, clock, 3, size)
    short = origin.route("/short-lived.bin", b"s" * size, headers={"Cache-Control": "max-age=5"})
    cache.get(short)
    urls = [origin.url(f"/gen/{i}/{size}") for i in range(3)]
    cache.get(urls[0])
    cache.get(urls[1])
    clock.advance(10)
    cache.get(short.replace("http://", "HTTP://"))  # re-fetched: expired, yet the most recent use
    origin.route("/short-lived.bin", b"s" * size, headers={"Cache-Control": "max-age=5"})
    clock.advance(10)  # now expired again, and still more recently used than urls[0]
    cache.get(urls[2])
    assert not stored(cache, short)
    assert stored(cache, urls[0])
    assert stored(cache, urls[1])


@pytest.mark.parametrize("ledger", ["missing", "garbage", "negative"])
def test_the_ledger_is_only_a_shortcut(
    tmp_path: Path, origin: Origin, clock: Clock, ledger: str
) -> None:
    """Stores trust the ``.usage`` ledger until it says "full"; a wrong one costs a scan."""
    size = 4000
    cache = _bounded(tmp_path, clock, 4, size)
    for i in range(4):
        cache.get(origin.url(f"/gen/{i}/{size}"))
        clock.advance(1)
    path = os.path.join(cache.directory, ".usage")
    if ledger == "missing":
        os.unlink(path)
    else:
        with open(path, "w") as f:
            f.write("junk" if ledger == "garbage" else "-5 0")
    cache.get(origin.url(f"/gen/9/{size}"))
    assert cache.usage() <= cache.max_size_bytes
    assert cache.stats()["evictions"] == 1
    assert not stored(cache, origin.url(f"/gen/0/{size}"))


def test_body_larger_than_the_bound_is_served_not_stored(
    tmp_path: Path, origin: Origin, clock: Clock
) -> None:
    cache = MediaCache(tmp_path, max_size_bytes=10_000, clock=clock)
    small = origin.url("/gen/1/1000")
    cache.get(small)
    big = origin.url("/gen/2/20000")
    assert len(cache.get(big)) == 20000
    assert not stored(cache, big)
    assert stored(cache, small)  # nothing was evicted for it
    assert cache.stats()["not_stored"] == 1


def test_reader_survives_eviction(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    """Readers race a writer that keeps evicting: each read is a miss or the exact body."""
    from .origin import gen_body

    size = 50_000
    cache = MediaCache(tmp_path, max_size_bytes=3 * size, clock=clock)
    stop = threading.Event()
    bad: list[int] = []

    def churn() -> None:
        i = 100
        while not stop.is_set():
            cache.get(origin.url(f"/gen/{i}/{size}"))
            i += 1

    def read() -> None:
        while not stop.is_set():
            for n in range(100, 104):
                body = cache.get(origin.url(f"/gen/{n}/{size}"))
                if body != gen_body(n, size):
                    bad.append(n)

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    origin.first_get.wait(10)
    while cache.stats()["evictions"] < 40:
        if not threads[0].is_alive():
            break
        threading.Event().wait(0.01)
    stop.set()
    for t in threads:
        t.join(30)
    assert not bad
    assert cache.stats()["evictions"] >= 40


# -- safety ----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://h/x.png", "file:///etc/passwd", "data:,x", "http:///x"])
def test_only_http_and_https(cache: MediaCache, url: str) -> None:
    with pytest.raises(URLRefused):
        cache.get(url)


def test_allowed_domains(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path, allowed_domains=["example.com"])
    with pytest.raises(URLRefused, match="allowed_domains"):
        cache.get(origin.url("/a.png"))
    assert origin.gets["/a.png"] == 0
    ok = MediaCache(tmp_path, allowed_domains=["127.0.0.1"])
    origin.route("/a.png", PNG)
    assert ok.get(origin.url("/a.png")) == PNG


def test_redirects_are_followed_and_checked(cache: MediaCache, origin: Origin) -> None:
    origin.route("/final.png", PNG)
    url = origin.route("/hop.png", status=302, location="/final.png")
    assert cache.get(url) == PNG
    assert stored(cache, url)
    assert cache.get(url) == PNG
    assert origin.gets["/hop.png"] == 1
    evil = origin.route("/evil.png", status=301, location="ftp://elsewhere/x.png")
    with pytest.raises(URLRefused, match="scheme"):
        cache.get(evil)
    fenced = MediaCache(cache.directory, allowed_domains=["127.0.0.1"])
    away = origin.route("/away.png", status=302, location="http://localhost:1/x.png")
    with pytest.raises(URLRefused, match="allowed_domains"):
        fenced.get(away)


def test_redirect_loops_are_bounded(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path, max_redirects=3)
    url = origin.route("/loop.png", status=302, location="/loop.png")
    with pytest.raises(requests.TooManyRedirects):
        cache.get(url)
    assert origin.gets["/loop.png"] == 4


def test_download_size_limit(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path, max_download_bytes=1000)
    with pytest.raises(ResponseTooLarge) as info:
        cache.get(origin.url("/gen/1/5000"))
    assert (info.value.limit, info.value.size) == (1000, 5000)
    assert cache.get(origin.url("/gen/1/1000")) is not None


def test_per_call_size_limit_holds_for_downloads_and_hits(
    tmp_path: Path, origin: Origin, clock: Clock
) -> None:
    cache = MediaCache(tmp_path, max_download_bytes=1000, clock=clock)
    url = origin.url("/gen/2/5000")
    assert len(cache.get(url, max_bytes=6000)) == 5000  # the call's limit replaces the default
    with pytest.raises(ResponseTooLarge) as info:
        cache.get(url, max_bytes=4999)  # a hit: the same limit as a cold cache would apply
    assert (info.value.limit, info.value.size) == (4999, 5000)
    with pytest.raises(ResponseTooLarge):
        cache.get(url)  # the default limit holds for hits too
    assert origin.gets["/gen/2/5000"] == 1
    with pytest.raises(ResponseTooLarge) as info:
        cache.get(origin.url("/gen/3/5000"), max_bytes=100)
    assert info.value.limit == 100
    assert not stored(cache, origin.url("/gen/3/5000"))


def test_timeout(cache: MediaCache, origin: Origin) -> None:
    gate = threading.Event()
    url = origin.route("/slow.png", PNG, gate=gate)
    with pytest.raises(requests.Timeout):
        cache.get(url, timeout=0.3)
    gate.set()


# -- opt-in and the adapter ------------------------------------------------------------------


def test_off_by_default() -> None:
    assert MEDIA_CACHE_ROW not in os.environ
    assert MediaCache.from_env() is None


def test_on_when_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEDIA_CACHE_ROW, str(tmp_path / "m"))
    cache = MediaCache.from_env()
    assert cache is not None
    assert cache.directory == str(tmp_path / "m")
    assert cache.max_size_bytes == 5120 * 1024 * 1024
    assert cache.ttl == 24 * 3600
    monkeypatch.setenv(VLLM_MEDIA_CACHE_MAX_SIZE_MB, "2")
    monkeypatch.setenv(VLLM_MEDIA_CACHE_TTL_HOURS, "0.5")
    cache = MediaCache.from_env()
    assert cache is not None
    assert (cache.max_size_bytes, cache.ttl) == (2 * 1024 * 1024, 1800)


def test_on_when_opted_in(monkeypatch: pytest.MonkeyPatch, isolated_cache: Path) -> None:
    monkeypatch.setenv(CACHEROOT_OPT_IN, MEDIA_CACHE_ROW)
    cache = MediaCache.from_env()
    assert cache is not None
    assert cache.directory.startswith(str(isolated_cache))


def test_unusable_directory_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEDIA_CACHE_ROW, "relative/media")
    with pytest.raises(ValueError, match="absolute"):
        MediaCache.from_env()


@pytest.mark.parametrize("bad", ["0", "-1", "lots"])
def test_bad_bounds_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(MEDIA_CACHE_ROW, str(tmp_path))
    monkeypatch.setenv(VLLM_MEDIA_CACHE_MAX_SIZE_MB, bad)
    with pytest.raises(ValueError, match=VLLM_MEDIA_CACHE_MAX_SIZE_MB):
        MediaCache.from_env()


def test_adapter_is_the_identity_when_off() -> None:
    def get_bytes(url: str, *, timeout: float | None = None, allow_redirects: bool = True) -> bytes:
        return b"own"

    async def aget_bytes(url: str, **kwargs: object) -> bytes:
        return b"own"

    assert cached_or(get_bytes) is get_bytes
    assert acached_or(aget_bytes) is aget_bytes


def test_adapter_when_on(cache: MediaCache, origin: Origin) -> None:
    calls: list[str] = []

    def get_bytes(url: str, *, timeout: float | None = None, allow_redirects: bool = True) -> bytes:
        calls.append(url)
        return b"own"

    fetch = cached_or(get_bytes, cache=cache)
    url = origin.route("/a.png", PNG)
    assert fetch(url, timeout=5, allow_redirects=True) == PNG
    assert fetch(url, timeout=5, allow_redirects=True) == PNG
    assert fetch("data:image/png;base64,AAAA", timeout=5, allow_redirects=True) == b"own"
    assert calls == ["data:image/png;base64,AAAA"]
    assert origin.gets["/a.png"] == 1


# -- async -----------------------------------------------------------------------------------


def test_async_matches_sync(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    origin.route("/e.png", PNG, etag='"v1"', headers={"Cache-Control": "max-age=10"})
    origin.route("/n.png", PNG[:100], headers={"Cache-Control": "no-store"})
    origin.route("/empty.png", b"")
    script = ["/e.png", "/e.png", "/n.png", "/empty.png", "/gen/7/3000", "/gen/7/3000"]

    def run_sync(cache: MediaCache) -> list[bytes]:
        out = [cache.get(origin.url(p)) for p in script]
        clock.advance(11)
        out.append(cache.get(origin.url("/e.png")))
        return out

    async def run_async(cache: MediaCache) -> list[bytes]:
        out = [await cache.aget(origin.url(p)) for p in script]
        clock.advance(11)
        out.append(await cache.aget(origin.url("/e.png")))
        return out

    sync_cache = MediaCache(tmp_path / "sync", clock=clock)
    async_cache = MediaCache(tmp_path / "async", clock=clock)
    sync_out = run_sync(sync_cache)
    clock.advance(-11)
    async_out = asyncio.run(run_async(async_cache))
    assert async_out == sync_out
    assert async_cache.stats() == sync_cache.stats()
    assert sorted(os.listdir(async_cache.directory)) == sorted(os.listdir(sync_cache.directory))


def test_async_tasks_are_single_flight(cache: MediaCache, origin: Origin) -> None:
    gate = threading.Event()
    url = origin.route("/a.png", PNG, gate=gate)

    async def main() -> list[bytes]:
        tasks = [asyncio.create_task(cache.aget(url)) for _ in range(12)]
        await asyncio.to_thread(origin.first_get.wait, 10)
        gate.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == [PNG] * 12
    assert origin.gets["/a.png"] == 1


def test_module_stats_aggregate(tmp_path: Path, origin: Origin) -> None:
    reset_stats()
    a = MediaCache(tmp_path / "a")
    b = MediaCache(tmp_path / "b")
    url = origin.route("/a.png", PNG)
    a.get(url)
    a.get(url)
    b.get(url)
    total = stats()
    assert (total["hits"], total["misses"], total["bytes_saved"]) == (1, 2, len(PNG))
