"""Single-process behaviour against a misbehaving origin: faults, hashes, offline, schemes."""

from __future__ import annotations

import gzip
import logging
import os
import time
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE, VLLM_TEST_CACHE_LEGACY
from cacheroot.fetch import (
    CacheMissError,
    ChecksumError,
    DownloadError,
    Fetcher,
    FetchError,
    cache_dir,
    fetch,
    stats,
)
from cacheroot.fetch.store import PathLock, lock_path, partials, read_meta, retry_after

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from pathlib import Path


def assert_clean(path: Path) -> None:
    """Nothing half-done is left: no partials, and the entry's lock is free."""
    assert partials(str(path)) == []
    with PathLock(lock_path(str(path)), timeout=1.0):
        pass


def test_plain_download_then_hit(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest, namespace="gsm8k")
    assert path.parent == fetcher.path(url, namespace="gsm8k").parent
    assert str(path).startswith(os.path.join(cache_dir(), "gsm8k") + os.sep)
    assert path.name.endswith(f"-{name}")
    assert path.read_bytes() == body(name)
    meta = read_meta(str(path))
    assert meta is not None
    assert meta["url"] == url
    assert meta["sha256"] == digest
    assert meta["size"] == len(body(name))
    assert meta["etag"]
    assert fetcher.fetch(url, sha256=digest, namespace="gsm8k") == path
    assert fetcher.fetch(url, namespace="gsm8k") == path
    assert origin.gets[f"/ok/{name}"] == 1
    s = stats()
    assert (s["hits"], s["misses"], s["downloads"]) == (2, 1, 1)
    assert s["bytes_downloaded"] == len(body(name))
    assert s["bytes_from_cache"] == 2 * len(body(name))
    assert_clean(path)


def test_module_function_uses_the_layout(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetch(url, sha256=sha256(body(name)))
    assert path.parent == __import__("pathlib").Path(cache_dir()) / "downloads"
    assert path.read_bytes() == body(name)


@pytest.mark.parametrize("variable", [VLLM_TEST_CACHE, VLLM_TEST_CACHE_LEGACY])
def test_cache_dir_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, origin: Origin, name: str, variable: str
) -> None:
    # The isolation fixture sets the current name as a user would (no CACHEROOT_APPLIED), and
    # a user's current name wins over the legacy one: a user of the legacy name has none.
    monkeypatch.delenv(VLLM_TEST_CACHE)
    monkeypatch.setenv(variable, str(tmp_path / "elsewhere"))
    path = fetch(origin.url(f"/ok/{name}"))
    assert path.parent == tmp_path / "elsewhere" / "downloads"


@pytest.mark.parametrize("value", ["relative/dir", "./here"])
def test_cache_dir_refuses_a_value_the_layout_calls_invalid(
    monkeypatch: pytest.MonkeyPatch, origin: Origin, name: str, value: str
) -> None:
    monkeypatch.setenv(VLLM_TEST_CACHE, value)
    with pytest.raises(FetchError, match="is not an absolute path"):
        cache_dir()
    with pytest.raises(FetchError, match=VLLM_TEST_CACHE):
        fetch(origin.url(f"/ok/{name}"))
    assert origin.gets[f"/ok/{name}"] == 0


@pytest.mark.parametrize("kind", ["reset", "short", "norange"])
def test_broken_transfer_resumes(origin: Origin, fetcher: Fetcher, name: str, kind: str) -> None:
    url = origin.url(f"/{kind}/{name}?size=300000")
    data = body(name, 300000)
    path = fetcher.fetch(url, sha256=sha256(data))
    assert path.read_bytes() == data
    key = f"/{kind}/{name}"
    assert origin.gets[key] == 2
    # The second request asks for the rest; only the Range-ignoring server sends it all again.
    assert origin.ranges[key][0] is None
    second = origin.ranges[key][1]
    assert second is not None
    assert second.startswith("bytes=")
    assert int(second[6:].rstrip("-")) > 0
    expected = len(data) // 2 + (len(data) if kind == "norange" else len(data) - len(data) // 2)
    assert stats()["bytes_downloaded"] == expected
    assert_clean(path)


def test_stall_past_read_timeout_is_retried(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/stall/{name}")
    started = time.monotonic()
    path = fetcher.fetch(url, sha256=sha256(body(name)))
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/stall/{name}"] == 2
    assert time.monotonic() - started < 10  # the stall lasts 30 s: the timeout cut it short


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 504])
def test_retryable_status(origin: Origin, fetcher: Fetcher, name: str, code: int) -> None:
    url = origin.url(f"/status/{code}/2/{name}")
    path = fetcher.fetch(url, sha256=sha256(body(name)))
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/status/{code}/2/{name}"] == 3


def test_retry_after_is_honoured(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/status/429/1/{name}?retry_after=1")
    started = time.monotonic()
    fetcher.fetch(url)
    assert time.monotonic() - started >= 1.0  # backoff alone would be about 10 ms


def test_retry_after_formats() -> None:
    assert retry_after("3") == 3.0
    assert retry_after(None) is None
    assert retry_after("soon") is None
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    value = retry_after(later)
    assert value is not None
    assert 25 <= value <= 31


def test_persistent_503_gives_up(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/status/503/99/{name}")
    with pytest.raises(DownloadError, match="after 4 attempts: HTTP 503") as info:
        fetcher.fetch(url)
    assert info.value.status == 503
    assert info.value.url == url
    assert origin.gets[f"/status/503/99/{name}"] == 4  # retries=3 in the fixture
    path = fetcher.path(url)
    assert not path.exists()
    assert_clean(path)


def test_404_is_not_retried(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/missing/{name}")
    with pytest.raises(DownloadError, match="HTTP 404") as info:
        fetcher.fetch(url)
    assert info.value.status == 404
    assert origin.gets[f"/missing/{name}"] == 1


def test_wrong_hash_publishes_nothing(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as info:
        fetcher.fetch(url, sha256=wrong)
    err = info.value
    assert (err.url, err.expected, err.actual, err.size) == (
        url,
        wrong,
        sha256(body(name)),
        len(body(name)),
    )
    path = fetcher.path(url)
    assert not path.exists()
    assert_clean(path)


def test_cached_entry_with_another_digest_is_fetched_again(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    fetcher.fetch(url)
    with pytest.raises(ChecksumError):
        fetcher.fetch(url, sha256="1" * 64)
    assert origin.gets[f"/ok/{name}"] == 2
    assert fetcher.path(url).read_bytes() == body(name)  # the good entry stays


def test_a_hit_notices_bytes_changed_in_place(origin: Origin, fetcher: Fetcher, name: str) -> None:
    """A hit compares (size, mtime_ns, inode, ctime_ns): bytes written in place are noticed
    even with the mtime put back, and the entry is downloaded again; an untouched one is not."""
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    st = path.stat()
    assert Fetcher().fetch(url, sha256=digest) == path  # untouched: served, nothing asked
    assert origin.gets[f"/ok/{name}"] == 1
    # Corrupt a byte and put the mtime back: size, mtime and inode are as recorded, the ctime
    # (which no user can set) is not.
    with path.open("r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert Fetcher().fetch(url, sha256=digest).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2


def test_touched_but_intact_file_is_rehashed_not_refetched(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    os.utime(path, ns=(1, 1))
    assert Fetcher().fetch(url, sha256=digest) == path
    assert origin.gets[f"/ok/{name}"] == 1
    meta = read_meta(str(path))
    assert meta is not None
    assert meta["stat"][1] == 1


def test_gzip_is_stored_as_sent(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/gzip/{name}")
    sent = gzip.compress(body(name), mtime=0)
    path = fetcher.fetch(url, sha256=sha256(sent))
    assert path.read_bytes() == sent


def test_wrong_content_length_fails_cleanly(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/wrongcl/{name}")
    with pytest.raises(DownloadError, match="giving up"):
        fetcher.fetch(url)
    path = fetcher.path(url)
    assert not path.exists()
    assert_clean(path)


def test_body_without_length(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/nolength/{name}")
    assert fetcher.fetch(url, sha256=sha256(body(name))).read_bytes() == body(name)


@pytest.mark.parametrize("kind", ["ok", "nolength"])
def test_body_over_the_maximum(origin: Origin, name: str, kind: str) -> None:
    small = Fetcher(max_size=10_000, retries=0)
    url = origin.url(f"/{kind}/{name}")
    with pytest.raises(DownloadError, match="larger than the maximum size"):
        small.fetch(url)
    path = small.path(url)
    assert not path.exists()
    assert_clean(path)


def test_redirects(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/redirect/{name}")
    assert fetcher.fetch(url).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


def test_redirect_loop_is_bounded(origin: Origin, name: str) -> None:
    f = Fetcher(max_redirects=5, retries=0)
    with pytest.raises(DownloadError, match="redirected more than 5 times") as info:
        f.fetch(origin.url(f"/loop/{name}"))
    assert info.value.status == 302
    assert origin.gets[f"/loop/{name}"] == 6


def test_redirect_to_another_scheme_is_refused(origin: Origin, fetcher: Fetcher, name: str) -> None:
    with pytest.raises(DownloadError, match="from http to ftp is refused"):
        fetcher.fetch(origin.url(f"/scheme/{name}"))


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "gopher://h/x", "file:///etc/hostname"])
def test_unsupported_schemes(fetcher: Fetcher, url: str) -> None:
    with pytest.raises(DownloadError, match="not supported"):
        fetcher.fetch(url)


def test_file_urls_when_allowed(tmp_path: Path) -> None:
    src = tmp_path / "mirror.bin"
    src.write_bytes(b"local mirror")
    path = Fetcher(allow_file=True).fetch(src.as_uri(), sha256=sha256(b"local mirror"))
    assert path.read_bytes() == b"local mirror"


def test_offline_miss_names_url_path_and_command(
    origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = origin.url(f"/ok/{name}")
    monkeypatch.setenv(CACHEROOT_OFFLINE, "1")
    with pytest.raises(CacheMissError) as info:
        fetcher.fetch(url, namespace="gsm8k")
    message = str(info.value)
    assert url in message
    assert str(fetcher.path(url, namespace="gsm8k")) in message
    assert f"cacheroot fetch {url} --namespace gsm8k" in message
    assert "cacheroot warm" in message
    assert isinstance(info.value, FileNotFoundError)
    monkeypatch.delenv(CACHEROOT_OFFLINE)
    with pytest.raises(CacheMissError):
        fetcher.fetch(url, offline=True)
    assert origin.gets[f"/ok/{name}"] == 0
    fetcher.fetch(url)
    monkeypatch.setenv(CACHEROOT_OFFLINE, "1")
    assert fetcher.fetch(url).read_bytes() == body(name)  # a hit needs no network
    assert fetcher.fetch(url, offline=False).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


def test_bad_arguments(fetcher: Fetcher, origin: Origin) -> None:
    with pytest.raises(ValueError, match="64 hexadecimal"):
        fetcher.fetch(origin.url("/ok/x"), sha256="abc")
    with pytest.raises(ValueError, match="namespace"):
        fetcher.fetch(origin.url("/ok/x"), namespace="../up")
    with pytest.raises(ValueError, match="filename"):
        fetcher.fetch(origin.url("/ok/x"), filename="a/b")


def test_filename_and_prefixed_digest(origin: Origin, fetcher: Fetcher, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url, sha256="sha256:" + sha256(body(name)).upper(), filename="data.bin")
    assert path.name == "data.bin"
    assert path.read_bytes() == body(name)


def test_progress_bar_and_log_line(
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="cacheroot.fetch")
    fetcher.fetch(origin.url(f"/ok/{name}"), progress=True)
    bar = capsys.readouterr().err
    assert "%" in bar
    assert name[:20] in bar
    fetcher.fetch(origin.url(f"/ok/2{name}"), progress=False)
    assert capsys.readouterr().err == ""
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fetched ")]
    assert len(lines) == 2


def test_threads_are_single_flight(origin: Origin, fetcher: Fetcher, name: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url = origin.url(f"/slow/{name}?size=200000&rate=1000000")
    with ThreadPoolExecutor(8) as pool:
        paths = set(
            pool.map(lambda _: fetcher.fetch(url, sha256=sha256(body(name, 200000))), range(8))
        )
    assert len(paths) == 1
    assert origin.gets[f"/slow/{name}"] == 1


def test_wrong_file_is_hashed_once_per_version(
    origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cacheroot.fetch import _store

    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    # Other bytes of the same size (another size is judged unread), a new mtime: the record no
    # longer vouches for it, and only its hash can tell.
    path.write_bytes(b"t" * len(body(name)))
    hashed: list[str] = []
    real = _store.sha256_file

    def counting(p: str) -> tuple[str, int]:
        hashed.append(p)
        return real(p)

    monkeypatch.setattr(_store, "sha256_file", counting)
    for _ in range(3):
        assert fetcher._hit(str(path), url, sha256(body(name))) is None
    assert len(hashed) == 1
    assert fetcher.fetch(url, sha256=sha256(body(name))).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2


def _abandon(dest: Path, data: bytes) -> None:
    """Leave a partial of ``dest`` holding ``data``, written by a process that then died."""
    import subprocess
    import sys

    code = (
        "import sys; from cacheroot.fetch.store import Partial; "
        "p = Partial(sys.argv[1]); p.write(open(sys.argv[2], 'rb').read())"
    )
    src = dest.parent / "abandoned-bytes"
    dest.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    subprocess.run([sys.executable, "-c", code, str(dest), str(src)], check=True)
    src.unlink()
    assert len(partials(str(dest))) == 1


@pytest.mark.parametrize("verified", [True, False])
def test_dead_process_partial_is_adopted_only_when_verified(
    origin: Origin, fetcher: Fetcher, name: str, verified: bool
) -> None:
    size = 200_000
    url = origin.url(f"/ok/{name}?size={size}")
    data = body(name, size)
    dest = fetcher.path(url)
    _abandon(dest, data[:120_000])
    path = fetcher.fetch(url, sha256=sha256(data) if verified else None)
    assert path.read_bytes() == data
    assert origin.ranges[f"/ok/{name}"] == (["bytes=120000-"] if verified else [None])
    assert partials(str(dest)) == []


def test_adopted_partial_of_another_version_is_redone(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    size = 200_000
    url = origin.url(f"/ok/{name}?size={size}")
    data = body(name, size)
    dest = fetcher.path(url)
    _abandon(dest, b"x" * 120_000)  # same length as a real prefix, wrong bytes
    assert fetcher.fetch(url, sha256=sha256(data)).read_bytes() == data
    assert origin.ranges[f"/ok/{name}"] == ["bytes=120000-", None]


def test_attempts_that_make_progress_do_not_use_up_retries(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    size = 1_000_000  # ten broken attempts of 100 000 bytes each; retries=3 in the fixture
    url = origin.url(f"/flaky/{name}?size={size}")
    assert fetcher.fetch(url, sha256=sha256(body(name, size))).read_bytes() == body(name, size)
    assert origin.gets[f"/flaky/{name}"] == 10


@pytest.mark.parametrize("pinned", [False, True])
def test_a_body_that_changes_between_attempts_is_never_spliced(
    origin: Origin, fetcher: Fetcher, name: str, pinned: bool
) -> None:
    """``If-Range``: the resume names the version it has; a new version comes whole."""
    size = 300_000
    url = origin.url(f"/changing/{name}?size={size}")
    old, new = body(f"{name}:v1", size), body(f"{name}:v2", size)
    path = fetcher.fetch(url, sha256=sha256(new) if pinned else None)
    assert path.read_bytes() == new  # not old[:half] + new[half:]
    key = f"/changing/{name}"
    assert origin.gets[key] == 2
    assert origin.ranges[key][0] is None
    resumed_at = origin.ranges[key][1]
    assert resumed_at is not None
    assert 0 < int(resumed_at.removeprefix("bytes=").rstrip("-")) < size
    assert origin.if_ranges[key] == [None, '"' + sha256(old)[:16] + '"']  # the first ETag
    assert stats()["bytes_downloaded"] == int(resumed_at[6:-1]) + size
