"""Where a URL leads: the host checked is the host connected to, and credentials stay with it.

Two real origins on 127.0.0.1: the one the caller names (and allows), and another one standing
for an attacker, which records every request it gets.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from cacheroot.mediacache import MediaCache, URLRefused

from .origin import Origin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
EVIL = b"\x89PNG\r\n\x1a\n attacker's bytes"
TOKEN = "Bearer s3cret-token"  # noqa: S105 - the token the tests look for


@pytest.fixture
def attacker() -> Iterator[Origin]:
    """A second origin; it answers the path the transport sends for the backslash URL."""
    server = Origin().start()
    server.route("/%5C@localhost/img.png", EVIL)
    server.route("/img.png", EVIL)
    yield server
    server.close()


def backslash_url(server: Origin) -> str:
    """``http://127.0.0.1:PORT\\@localhost/img.png``: urlsplit reads host ``localhost``."""
    return f"http://127.0.0.1:{server.server_address[1]}\\@localhost/img.png"


def files(cache: MediaCache) -> list[str]:
    """The entries on disk (lock files and ledger aside)."""
    if not os.path.isdir(cache.directory):
        return []
    return [n for n in os.listdir(cache.directory) if not n.startswith(".")]


def test_backslash_url_is_refused_as_the_first_url(tmp_path: Path, attacker: Origin) -> None:
    cache = MediaCache(tmp_path / "media", allowed_domains=["localhost"])
    url = backslash_url(attacker)
    with pytest.raises(URLRefused, match="backslash"):
        cache.get(url)
    assert sum(attacker.gets.values()) == 0
    assert files(cache) == []
    assert not cache.handles(url)  # an adapter hands it to the connector's own code


def test_backslash_url_is_refused_as_a_redirect_target(
    tmp_path: Path, origin: Origin, attacker: Origin
) -> None:
    cache = MediaCache(tmp_path / "media", allowed_domains=["localhost"])
    origin.route("/hop.png", status=302, location=backslash_url(attacker))
    url = f"http://localhost:{origin.server_address[1]}/hop.png"
    with pytest.raises(URLRefused, match="backslash"):
        cache.get(url)
    assert origin.gets["/hop.png"] == 1
    assert sum(attacker.gets.values()) == 0
    assert files(cache) == []
    with pytest.raises(URLRefused):
        cache.get(url)  # nothing was stored for the URL either: refused again
    assert sum(attacker.gets.values()) == 0


def test_token_never_reaches_the_backslash_redirect_target(
    tmp_path: Path, origin: Origin, attacker: Origin
) -> None:
    cache = MediaCache(tmp_path / "media", allowed_domains=["localhost"])
    origin.route("/hop.png", status=302, location=backslash_url(attacker))
    url = f"http://localhost:{origin.server_address[1]}/hop.png"
    with pytest.raises(URLRefused):
        cache.get(url, headers={"Authorization": TOKEN})
    assert origin.seen[-1]["authorization"] == TOKEN
    assert attacker.seen == []


@pytest.mark.parametrize(
    ("header", "value"),
    [("Authorization", TOKEN), ("Cookie", "session=s3cret"), ("Proxy-Authorization", "Basic x")],
)
def test_credentials_do_not_follow_a_redirect_to_another_port(
    tmp_path: Path, origin: Origin, attacker: Origin, header: str, value: str
) -> None:
    """Same host, another port: another origin (RFC 6454), so the caller's credentials stay."""
    cache = MediaCache(tmp_path / "media")
    origin.route("/hop.png", status=302, location=attacker.url("/img.png"))
    assert cache.get(origin.url("/hop.png"), headers={header: value}) == EVIL
    assert origin.seen[-1][header.lower()] == value
    assert [h.get(header.lower()) for h in attacker.seen] == [None]


def test_credentials_follow_a_redirect_within_the_origin(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path / "media")
    origin.route("/final.png", PNG)
    origin.route("/hop.png", status=302, location="/final.png")
    assert cache.get(origin.url("/hop.png"), headers={"Authorization": TOKEN}) == PNG
    assert [h["authorization"] for h in origin.seen] == [TOKEN, TOKEN]


def test_credentials_stay_dropped_after_the_redirect_comes_back(
    tmp_path: Path, origin: Origin, attacker: Origin
) -> None:
    cache = MediaCache(tmp_path / "media")
    origin.route("/final.png", PNG)
    origin.route("/hop.png", status=302, location=attacker.url("/back.png"))
    attacker.route("/back.png", status=302, location=origin.url("/final.png"))
    assert cache.get(origin.url("/hop.png"), headers={"Authorization": TOKEN}) == PNG
    assert [h.get("authorization") for h in origin.seen] == [TOKEN, None]
    assert [h.get("authorization") for h in attacker.seen] == [None]


@pytest.mark.parametrize(
    "template",
    [
        "http://127.0.0.1:{port}\\@localhost/img.png",
        "http://localhost\\@127.0.0.1:{port}/img.png",
        "http://127.0.0.1:{port}\\.localhost/img.png",
        "http://local\thost:{port}/img.png",
        "http://localhost:{port}/im\ng.png",
        "http://local host:{port}/img.png",
        "http://localhost:{port}/img\x00.png",
    ],
    ids=[
        "backslash-userinfo",
        "backslash-host",
        "backslash-port",
        "tab",
        "newline",
        "space",
        "nul",
    ],
)
def test_ambiguous_urls_are_refused_before_any_request(
    tmp_path: Path, attacker: Origin, template: str
) -> None:
    cache = MediaCache(tmp_path / "media")
    url = template.format(port=attacker.server_address[1])
    with pytest.raises(URLRefused):
        cache.get(url)
    assert sum(attacker.gets.values()) == 0
    assert not cache.handles(url)


def test_allowed_domains_read_as_the_transport_connects(tmp_path: Path, origin: Origin) -> None:
    """Case, spaces and a leading dot in the allow list change nothing."""
    origin.route("/a.png", PNG)
    cache = MediaCache(tmp_path / "media", allowed_domains=[" .LocalHost "])
    assert cache.get(f"http://LOCALHOST:{origin.server_address[1]}/a.png") == PNG
    with pytest.raises(URLRefused, match="allowed_domains"):
        cache.get(origin.url("/a.png"))
