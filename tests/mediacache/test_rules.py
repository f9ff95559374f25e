"""Keys and the HTTP rules as pure functions: no server, no disk, an explicit ``now``."""

from __future__ import annotations

import email.utils
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cacheroot.mediacache import (
    MediaCacheError,
    ResponseTooLarge,
    URLRefused,
    entry_name,
    freshness_lifetime,
    normalise_url,
    not_storable,
    parse_cache_control,
    url_key,
)
from cacheroot.mediacache._policy import (
    bypass_reason,
    conditional_headers,
    may_serve_stale,
    merge_304,
    vary_matches,
    vary_record,
)
from cacheroot.mediacache._store import ENTRY

NOW = 1_800_000_000.0
TTL = 3600.0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("HTTP://Example.COM/a.png", "http://example.com/a.png"),
        ("http://example.com:80/a.png", "http://example.com/a.png"),
        ("https://example.com:443/a.png", "https://example.com/a.png"),
        ("http://example.com/a.png#frag", "http://example.com/a.png"),
        ("http://example.com", "http://example.com/"),
        ("http://[::1]:80/x", "http://[::1]/x"),
    ],
)
def test_equivalent_urls_share_a_key(a: str, b: str) -> None:
    assert normalise_url(a) == normalise_url(b)
    assert url_key(a) == url_key(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://example.com/a.png?x=1&y=2", "http://example.com/a.png?y=2&x=1"),
        ("http://example.com/A.png", "http://example.com/a.png"),
        ("http://example.com:8080/a.png", "http://example.com/a.png"),
        ("https://example.com/a.png", "http://example.com/a.png"),
        ("http://example.com/a%20b.png", "http://example.com/a b.png"),
    ],
)
def test_different_urls_keep_different_keys(a: str, b: str) -> None:
    assert url_key(a) != url_key(b)


@pytest.mark.parametrize(
    ("url", "suffix"),
    [
        ("http://h/cat.JPG", ".jpg"),
        ("http://h/clip.mp4?token=abc", ".mp4"),
        ("http://h/dir.d/noext", ""),
        ("http://h/../../etc/passwd", ""),
        ("http://h/x.p%2Fng", ""),
        ("http://h/a.tar.gz", ".gz"),
        ("http://h/a.verylongextension", ""),
        ("http://h/evil.%00", ""),
        ("http://h/", ""),
    ],
)
def test_entry_names_carry_only_the_key_and_a_clean_extension(url: str, suffix: str) -> None:
    name = entry_name(url)
    assert name == url_key(url) + suffix
    assert "/" not in name
    assert not name.startswith(".")


@given(
    host=st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True),
    path=st.text(max_size=80).filter(lambda t: "#" not in t and "?" not in t),
    query=st.text(max_size=40),
)
def test_any_url_gives_a_safe_entry_name(host: str, path: str, query: str) -> None:
    url = f"http://{host}/{path}?{query}"
    try:
        name = entry_name(url)
    except ValueError:
        return  # urlsplit refused it; so would the cache (URLRefused)
    assert ENTRY.match(name)
    assert name[:64] == url_key(url)


def test_cache_control_parsing() -> None:
    cc = parse_cache_control('max-age=60, No-Store, private="Set-Cookie", s-maxage="30"')
    assert cc == {"max-age": "60", "no-store": None, "private": "Set-Cookie", "s-maxage": "30"}
    assert parse_cache_control(None) == {}


@pytest.mark.parametrize(
    ("headers", "lifetime"),
    [
        ({}, TTL),
        ({"Cache-Control": "max-age=60"}, 60.0),
        ({"Cache-Control": "max-age=999999"}, TTL),
        ({"Cache-Control": "max-age=60, s-maxage=30"}, 30.0),
        ({"Cache-Control": "max-age=60", "Age": "50"}, 10.0),
        ({"Cache-Control": "max-age=60", "Age": "500"}, 0.0),
        ({"Cache-Control": "no-cache, max-age=60"}, 0.0),
        ({"Cache-Control": "max-age=junk"}, TTL),
        (
            {"Expires": "Fri, 15 Jan 2027 08:00:10 GMT", "Date": "Fri, 15 Jan 2027 08:00:00 GMT"},
            10.0,
        ),
        ({"Expires": "0"}, 0.0),
        ({"Expires": "Thu, 01 Jan 2099 00:00:00 GMT"}, TTL),
        ({"Cache-Control": "max-age=5", "Expires": "Thu, 01 Jan 2099 00:00:00 GMT"}, 5.0),
    ],
)
def test_freshness_is_capped_by_the_ttl(headers: dict[str, str], lifetime: float) -> None:
    assert freshness_lifetime(headers, now=NOW, ttl=TTL) == lifetime


def test_expires_without_date_counts_from_now() -> None:
    expires = email.utils.formatdate(NOW + 1000, usegmt=True)
    base = freshness_lifetime({"Expires": expires}, now=NOW, ttl=1e12)
    later = freshness_lifetime({"Expires": expires}, now=NOW + 100, ttl=1e12)
    assert (base, later) == (1000, 900)


@pytest.mark.parametrize(
    ("status", "headers", "size", "wire", "reason"),
    [
        (200, {}, 10, None, ""),
        (200, {"Content-Length": "10"}, 10, 10, ""),
        (200, {"Content-Length": "10", "Content-Encoding": "gzip"}, 40, 10, ""),
        (203, {}, 10, None, "status 203"),
        (404, {}, 10, None, "status 404"),
        (206, {}, 10, None, "status 206"),
        (200, {"cache-control": "no-store"}, 10, None, "no-store"),
        (200, {"Cache-Control": "max-age=60, private"}, 10, None, "private"),
        (200, {"Vary": "*"}, 10, None, "Vary: *"),
        (200, {}, 0, None, "empty body"),
        (200, {"Content-Length": "12"}, 10, 10, "Content-Length says 12"),
        (200, {"Content-Length": "x"}, 10, 10, "malformed Content-Length"),
    ],
)
def test_storability(
    status: int, headers: dict[str, str], size: int, wire: int | None, reason: str
) -> None:
    got = not_storable(status, headers, size, wire)
    assert (reason in got) if reason else got == ""
    assert bool(got) == bool(reason)


@pytest.mark.parametrize(
    ("headers", "userinfo", "allowed", "bypass"),
    [
        ({}, False, False, False),
        ({"Authorization": "Bearer x"}, False, False, True),
        ({"cookie": "a=b"}, False, False, True),
        ({}, True, False, True),
        ({"Authorization": "Bearer x"}, False, True, False),
        ({"Range": "bytes=0-1"}, False, True, True),
        ({"If-None-Match": '"x"'}, False, False, True),
        ({"Accept": "image/*"}, False, False, False),
    ],
)
def test_bypass(headers: dict[str, str], userinfo: bool, allowed: bool, bypass: bool) -> None:
    reason = bypass_reason(headers, url_has_userinfo=userinfo, allow_credentials=allowed)
    assert bool(reason) == bypass


def test_validators_and_304_merge() -> None:
    stored = {"etag": '"v1"', "last-modified": "Mon, 01 Jan 2024 00:00:00 GMT"}
    assert conditional_headers(stored) == {
        "If-None-Match": '"v1"',
        "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT",
    }
    assert conditional_headers({}) == {}
    merged = merge_304(
        {**stored, "content-type": "image/png", "cache-control": "max-age=1"},
        {"Cache-Control": "max-age=99", "Content-Type": "text/html", "X-Other": "1"},
    )
    assert merged["cache-control"] == "max-age=99"
    assert "age" not in merge_304({"age": "50"}, {})
    assert merged["content-type"] == "image/png"
    assert "x-other" not in merged


def test_vary_selects_the_stored_variant() -> None:
    record = vary_record({"Vary": "Accept, Accept-Language"}, {"accept": "image/webp"})
    assert record == {"accept": "image/webp", "accept-language": None}
    assert vary_matches(record, {"Accept": "image/webp"})
    assert not vary_matches(record, {"Accept": "image/png"})
    assert not vary_matches(record, {"Accept": "image/webp", "Accept-Language": "fr"})


@pytest.mark.parametrize(
    ("cc", "ok"),
    [("max-age=1", True), ("must-revalidate", False), ("no-cache", False), ("s-maxage=1", False)],
)
def test_stale_service_obeys_the_origin(cc: str, ok: bool) -> None:
    assert may_serve_stale({"cache-control": cc}) == ok


@pytest.mark.parametrize(
    ("exc", "builtin"),
    [
        (URLRefused("ftp://h/x", "scheme"), ValueError),
        (ResponseTooLarge("http://h", 1, 2), ValueError),
    ],
)
def test_errors_pickle_and_are_builtins(exc: MediaCacheError, builtin: type[Exception]) -> None:
    assert isinstance(exc, builtin)
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    assert type(back) is type(exc)
    assert str(back) == str(exc)
