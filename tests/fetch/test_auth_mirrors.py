"""Tokens per host from the environment, and mirrors and fallback URLs, with real origins.

Two servers on 127.0.0.1 stand for two hosts (an origin and a mirror, or an origin and the
host a redirect leads to); what each received is read from its own record. A token goes to the
origin it is for and nowhere else, and is never written or shown; a mirror's bytes are the
canonical URL's entry; a mirror that fails hands over to the next source.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT_AUTH_TOKENS,
    CACHEROOT_MIRRORS,
    HF_ENDPOINT,
    HF_TOKEN,
    HUGGING_FACE_HUB_TOKEN,
)
from cacheroot.fetch import DownloadError, Fetcher, FetchError, FetchEvent, warm_manifest
from cacheroot.fetch._mirrors import candidates
from cacheroot.fetch.store import read_meta

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from collections.abc import Iterator

TOKEN = "tok0s3cr3t"  # noqa: S105 - a test token, sent to the local origin only


@pytest.fixture
def other() -> Iterator[Origin]:
    """A second host: a mirror, or where a redirect leads."""
    server = Origin().start()
    yield server
    server.close()


@pytest.fixture
def events() -> list[FetchEvent]:
    return []


@pytest.fixture
def quick(events: list[FetchEvent]) -> Iterator[Fetcher]:
    f = Fetcher(read_timeout=5.0, retries=2, backoff=0.01, backoff_max=0.02, reporter=events.append)
    yield f
    f.close()


def holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose name or bytes hold ``secret``."""
    found = []
    for here, dirs, names in os.walk(root):
        for entry in names + dirs:
            path = Path(here, entry)
            if secret in entry or (path.is_file() and secret.encode() in path.read_bytes()):
                found.append(str(path))
    return found


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- tokens ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["http://127.0.0.1:{port}", "HTTP://127.0.0.1:{port}"])
def test_a_host_token_goes_to_its_origin_and_not_where_it_redirects(  # noqa: PLR0917 - fixtures
    origin: Origin,
    other: Origin,
    name: str,
    quick: Fetcher,
    isolated_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    entry: str,
) -> None:
    monkeypatch.setenv(
        CACHEROOT_AUTH_TOKENS, f"other.example={TOKEN}x {entry.format(port=origin.port)}={TOKEN}"
    )
    url = origin.url(f"/goto/{name}?to={other.base}")
    quick.fetch(url, sha256=sha256(body(name)))
    assert origin.auths[f"/goto/{name}"] == [f"Bearer {TOKEN}"]
    # Another port of the same host is another origin: the redirect leaves the token behind.
    assert other.auths[f"/ok/{name}"] == [None]
    assert holding(isolated_cache, TOKEN) == []


def test_a_token_for_one_port_is_not_sent_to_another(
    origin: Origin, other: Origin, name: str, quick: Fetcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{origin.port}={TOKEN}")
    quick.fetch(other.url(f"/ok/{name}"))
    assert other.auths[f"/ok/{name}"] == [None]


def test_hf_token_goes_to_the_hub_endpoint_only(
    origin: Origin, other: Origin, name: str, quick: Fetcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HF_TOKEN, f"  {TOKEN}\n")  # huggingface_hub strips it so
    monkeypatch.setenv(HF_ENDPOINT, origin.base)
    quick.fetch(origin.url(f"/goto/{name}?to={other.base}"))
    assert origin.auths[f"/goto/{name}"] == [f"Bearer {TOKEN}"]
    assert other.auths[f"/ok/{name}"] == [None]  # a CDN the Hub redirects to gets none
    quick.fetch(other.url(f"/ok/direct-{name}"))
    assert other.auths[f"/ok/direct-{name}"] == [None]  # not a Hub origin
    # Blank counts as unset; the older name is read then, as huggingface_hub does.
    monkeypatch.setenv(HF_TOKEN, " ")
    monkeypatch.setenv(HUGGING_FACE_HUB_TOKEN, "older")
    quick.fetch(origin.url(f"/ok/older-{name}"))
    assert origin.auths[f"/ok/older-{name}"] == ["Bearer older"]


def test_the_callers_own_header_wins(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{origin.port}={TOKEN}")
    Fetcher(headers={"Authorization": "Bearer mine"}).fetch(origin.url(f"/ok/{name}"))
    assert origin.auths[f"/ok/{name}"] == ["Bearer mine"]


def test_the_token_is_never_in_the_output(origin: Origin, name: str) -> None:
    env = {**os.environ, CACHEROOT_AUTH_TOKENS: f"http://127.0.0.1:{origin.port}={TOKEN}"}
    for url in (origin.url(f"/status/503/1/{name}"), origin.url(f"/missing/{name}")):
        for extra in ([], ["--json"]):
            done = subprocess.run(
                [sys.executable, "-m", "cacheroot.envs._cli", "fetch", url, *extra],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            assert done.stderr, "nothing was said"
            assert TOKEN not in done.stdout + done.stderr
    assert origin.auths[f"/status/503/1/{name}"] == [f"Bearer {TOKEN}"] * 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TOKEN, "CACHEROOT_AUTH_TOKENS: entry 1 has no '=' (its text is not shown"),
        (f"https://h/={TOKEN}", "CACHEROOT_AUTH_TOKENS: entry 1 does not start with a host name"),
        (f"h={TOKEN} 127.0.0.1=", "CACHEROOT_AUTH_TOKENS: entry 2 has an empty token"),
        (f"h=x hf_{TOKEN}=127.0.0.1", "CACHEROOT_AUTH_TOKENS: entry 2 does not start with a host"),
    ],
)
def test_a_malformed_token_entry_is_named_but_never_shown(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, value)
    with pytest.raises(FetchError) as info:
        Fetcher().fetch(origin.url(f"/ok/{name}"))
    text = str(info.value)
    assert text.startswith(expected), text
    assert "expected whitespace-separated HOST=TOKEN, HOST:PORT=TOKEN or http://" in text
    assert TOKEN not in text
    assert origin.gets[f"/ok/{name}"] == 0


# -- mirrors -----------------------------------------------------------------------------------


def test_a_mirror_serves_the_canonical_entry(  # noqa: PLR0917 - fixtures
    origin: Origin,
    other: Origin,
    name: str,
    quick: Fetcher,
    events: list[FetchEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = origin.url(f"/ok/{name}")
    monkeypatch.setenv(CACHEROOT_MIRRORS, f"{origin.base}={other.base}/")
    path = quick.fetch(url, sha256=sha256(body(name)))
    assert (origin.gets[f"/ok/{name}"], other.gets[f"/ok/{name}"]) == (0, 1)
    assert path == Fetcher().path(url)
    assert path.read_bytes() == body(name)
    meta = read_meta(str(path))
    assert meta is not None
    assert (meta["url"], meta["mirror"]) == (url, other.url(f"/ok/{name}"))
    [done] = events
    assert (done.kind, done.url, done.source) == ("miss", url, f"127.0.0.1:{other.port}")
    assert done.tried == other.url(f"/ok/{name}")
    # Without the mirror, the same URL is a hit: no request anywhere.
    monkeypatch.delenv(CACHEROOT_MIRRORS)
    assert Fetcher().fetch(url, offline=True) == path


@pytest.mark.parametrize(
    ("mirror", "reason", "mirror_gets"),
    [
        ("{other}/missing/", "HTTP 404 Not Found from {tried}", 1),
        ("{other}/status/503/9/", "giving up on {tried} after 2 attempts: HTTP 503", 2),
        ("{other}/ok/other-", "sha256 mismatch for {tried}", 1),
        (
            "{dead}/",
            "giving up on {tried} after 2 attempts: ConnectionError: Connection refused",
            0,
        ),
    ],
)
def test_a_failing_mirror_hands_over_to_the_origin(  # noqa: PLR0917 - fixtures
    origin: Origin,
    other: Origin,
    name: str,
    quick: Fetcher,
    events: list[FetchEvent],
    monkeypatch: pytest.MonkeyPatch,
    mirror: str,
    reason: str,
    mirror_gets: int,
) -> None:
    prefix = mirror.format(other=other.base, dead=f"http://127.0.0.1:{_dead_port()}")
    monkeypatch.setenv(CACHEROOT_MIRRORS, f"{origin.base}/ok/={prefix}")
    url = origin.url(f"/ok/{name}")
    tried = prefix + name
    path = quick.fetch(url, sha256=sha256(body(name)))
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1
    assert sum(other.gets.values()) == mirror_gets
    meta = read_meta(str(path))
    assert meta is not None
    assert meta["url"] == url
    assert "mirror" not in meta
    skip = next(e for e in events if e.kind == "fallback")
    assert (skip.tried, skip.next) == (tried, url)
    assert skip.reason.startswith(reason.format(tried=tried)), skip.reason
    assert events[-1].kind == "miss"
    assert events[-1].tried == ""


def test_when_every_source_fails_the_error_names_each(
    origin: Origin, other: Origin, name: str, quick: Fetcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_MIRRORS, f"{origin.base}/missing/={other.base}/missing/")
    url = origin.url(f"/missing/{name}")
    fallback = other.url(f"/status/404/1/{name}")
    with pytest.raises(DownloadError) as info:
        quick.fetch(url, fallbacks=[fallback])
    assert str(info.value) == (
        f"could not fetch {url} from any of its 3 sources (mirrors from CACHEROOT_MIRRORS, the "
        "URL, its fallback URLs), tried in this order:\n"
        f"  {other.url(f'/missing/{name}')}: HTTP 404 Not Found from "
        f"{other.url(f'/missing/{name}')}: expected 200 (or 206 on resume); check the URL\n"
        f"  {url}: HTTP 404 Not Found from {url}: expected 200 (or 206 on resume); check the URL\n"
        f"  {fallback}: HTTP 404 Not Found from {fallback}: expected 200 (or 206 on resume); "
        "check the URL"
    )
    assert info.value.status == 404
    assert not Fetcher().path(url).exists()


def test_mirror_rules_in_order_and_bare_hosts_match_whole_hosts() -> None:
    env = {
        CACHEROOT_MIRRORS: " https://huggingface.co=https://m1.internal\n"
        "HTTPS://huggingface.co/=https://m2.internal/hf/  "
    }
    url = "https://huggingface.co/org/m/resolve/main/config.json"
    assert candidates(url, ["https://fallback.example/config.json"], env) == [
        "https://m1.internal/org/m/resolve/main/config.json",
        "https://m2.internal/hf/org/m/resolve/main/config.json",
        url,
        "https://fallback.example/config.json",
    ]
    assert candidates("https://huggingface.co.example/x", (), env) == [
        "https://huggingface.co.example/x"
    ]
    assert candidates(url, (), {CACHEROOT_MIRRORS: "  "}) == [url]


BAD_MIRRORS = [
    ("bogus", "entry 1 ('bogus') has no '='"),
    ("https://a/=https://b/ https://c/", "entry 2 ('https://c/') has no '='"),
    ("https://a/=ftp://b/", "entry 1, the mirror prefix: 'ftp://b/' is not an http(s) URL"),
    ("https://a/=", "entry 1, the mirror prefix: is empty"),
    ("a.example=https://b/", "entry 1, the origin prefix: 'a.example' is not an http(s) URL"),
    ("https://a/?x=https://b/", "entry 1, the origin prefix: 'https://a/?x' holds '?'"),
    ("https:///=https://b/", "entry 1, the origin prefix: 'https:///' has no host"),
    (
        "https://a/=https://b/,https://c/=https://d/",
        (
            "entry 1, the mirror prefix: 'https://b/,https://c/=https://d/' holds '?', '#' or "
            "'=' (a prefix is a scheme, host and path; entries are separated by whitespace)"
        ),
    ),
]


@pytest.mark.parametrize(("value", "problem"), BAD_MIRRORS)
def test_a_bad_mirrors_value_names_the_variable_and_the_form(value: str, problem: str) -> None:
    with pytest.raises(FetchError) as info:
        candidates("https://a/x", (), {CACHEROOT_MIRRORS: value})
    text = str(info.value)
    assert text.startswith(f"CACHEROOT_MIRRORS: {problem}"), text
    assert "expected whitespace-separated ORIGIN_PREFIX=MIRROR_PREFIX pairs" in text


def test_a_bad_mirrors_value_fails_the_command(origin: Origin, name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", origin.url(f"/ok/{name}")],
        capture_output=True,
        text=True,
        env={**os.environ, CACHEROOT_MIRRORS: "https://huggingface.co/"},
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "cacheroot fetch: CACHEROOT_MIRRORS: entry 1 ('https://huggingface.co/') has no '='; "
        "expected whitespace-separated ORIGIN_PREFIX=MIRROR_PREFIX pairs"
    )
    assert origin.gets[f"/ok/{name}"] == 0


def test_a_manifests_fallback_urls(
    origin: Origin, other: Origin, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/missing/{name}")
    fallback = other.url(f"/ok/{name}")
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        f'[[asset]]\nurl = "{url}"\nsha256 = "{sha256(body(name))}"\nnamespace = "suite"\n'
        f"urls = {json.dumps([origin.url('/missing/again'), fallback])}\n"
    )
    summary = warm_manifest(manifest)
    [row] = summary["entries"]
    assert row["status"] == "miss", row
    assert row["path"] == str(Fetcher().path(url, namespace="suite"))
    meta = read_meta(row["path"])
    assert meta is not None
    assert (meta["url"], meta["mirror"]) == (url, fallback)
    assert origin.gets[f"/missing/{name}"] == 1
    again = warm_manifest(manifest)
    assert [r["status"] for r in again["entries"]] == ["hit"]
    assert other.gets[f"/ok/{name}"] == 1


def test_a_token_follows_the_host_not_the_mirror_rewrite(
    origin: Origin, other: Origin, name: str, quick: Fetcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HF_TOKEN, TOKEN)
    monkeypatch.setenv(HF_ENDPOINT, origin.base)
    monkeypatch.setenv(CACHEROOT_MIRRORS, f"{origin.base}/={other.base}/")
    quick.fetch(origin.url(f"/ok/{name}"))
    assert other.auths[f"/ok/{name}"] == [None]  # the Hub's token stays off the mirror
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{other.port}=mirror-token")
    quick.fetch(origin.url(f"/ok/second-{name}"))
    assert other.auths[f"/ok/second-{name}"] == ["Bearer mirror-token"]
    assert origin.gets[f"/ok/{name}"] + origin.gets[f"/ok/second-{name}"] == 0
