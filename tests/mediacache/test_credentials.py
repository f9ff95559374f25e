"""Credentials are sent where they belong and never written down or shown by the cache.

``user:password@`` in a URL, ``~/.netrc`` entries (which requests adds inside
``Session.request``), and cookies: a request that carries any of them, as the HTTP client really
sends it, is neither served from nor stored in the cache; no sidecar, log line, exception message
or counter holds a password.
"""

from __future__ import annotations

import base64
import logging
import os
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.mediacache import MediaCache, ResponseTooLarge, URLRefused, entry_name

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import Clock
    from .origin import Origin

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
SECRET = "S3cr3t"  # noqa: S105 - the password the tests look for


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://alice:{SECRET}@")


def everything_on_disk(directory: str) -> bytes:
    """Every byte of every file under ``directory``, with the file names."""
    out = b""
    for here, _dirs, names in os.walk(directory):
        for name in names:
            with open(os.path.join(here, name), "rb") as f:
                out += name.encode() + b"\0" + f.read()
    return out


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- nothing written down or shown -------------------------------------------------------------


def test_sidecar_holds_no_password(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    cache = MediaCache(tmp_path / "media", clock=clock, allow_credentials=True)
    url = with_userinfo(origin.route("/a.png", PNG))
    assert cache.get(url) == PNG
    assert origin.seen[-1]["authorization"] == basic("alice", SECRET)
    assert os.path.exists(os.path.join(cache.directory, entry_name(url)))
    assert SECRET.encode() not in everything_on_disk(cache.directory)
    assert cache.get(url) == PNG  # a hit: the entry is still found by its URL
    assert origin.gets["/a.png"] == 1


def test_logs_hold_no_password(
    tmp_path: Path, origin: Origin, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    cache = MediaCache(tmp_path / "media", clock=clock, allow_credentials=True)
    url = with_userinfo(origin.route("/blocked.png", PNG))
    os.makedirs(os.path.join(cache.directory, entry_name(url)))  # publishing fails
    with caplog.at_level(logging.DEBUG, logger="cacheroot.mediacache"):
        assert cache.get(url) == PNG
    assert caplog.records
    assert SECRET not in caplog.text


def test_exception_messages_hold_no_password(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path / "media", max_download_bytes=100, max_redirects=1)
    gone = with_userinfo(origin.route("/gone.png", b"no", status=404))
    big = with_userinfo(origin.route("/big.png", PNG))
    loop = with_userinfo(origin.route("/loop.png", status=302, location="/loop.png"))
    away = with_userinfo(origin.route("/away.png", status=302, location=f"ftp://bob:{SECRET}@x/"))
    errors: list[BaseException] = []
    for url, kind in [
        (gone, requests.HTTPError),
        (big, ResponseTooLarge),
        (loop, requests.TooManyRedirects),
        (away, URLRefused),
        (with_userinfo("ftp://host/x.png"), URLRefused),
    ]:
        with pytest.raises(kind) as info:
            cache.get(url)
        errors.append(info.value)
    fenced = MediaCache(tmp_path / "media", allowed_domains=["example.com"])
    with pytest.raises(URLRefused) as refused:
        fenced.get(gone)
    errors.append(refused.value)
    for exc in errors:
        assert SECRET not in str(exc), exc
        assert SECRET not in repr(exc), exc
        assert SECRET not in str(getattr(exc, "url", "")), exc
    assert "alice:***@" in str(errors[0])
    assert SECRET not in repr(cache.stats())


def test_vary_on_a_credential_is_served_not_stored(tmp_path: Path, origin: Origin) -> None:
    """The variant would be recorded by the token itself, in the sidecar."""
    cache = MediaCache(tmp_path / "media", allow_credentials=True)
    url = origin.route("/v.png", PNG, headers={"Vary": "Authorization"})
    token = f"Bearer {SECRET}"
    assert cache.get(url, headers={"Authorization": token}) == PNG
    assert cache.get(url, headers={"Authorization": token}) == PNG
    assert origin.gets["/v.png"] == 2
    assert SECRET.encode() not in everything_on_disk(cache.directory)
    assert cache.stats()["not_stored"] == 2


# -- credentials the HTTP client adds on its own -------------------------------------------------


@pytest.fixture
def netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A real netrc file, as requests finds it (``$NETRC``), with a password for 127.0.0.1."""
    path = tmp_path / "netrc"
    path.write_text(f"machine 127.0.0.1\n  login bob\n  password N3trc{SECRET}\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))
    return basic("bob", f"N3trc{SECRET}")


def test_netrc_credentials_are_sent_and_nothing_is_stored(
    tmp_path: Path, origin: Origin, netrc: str
) -> None:
    cache = MediaCache(tmp_path / "media")
    url = origin.route("/n.png", PNG)
    assert cache.get(url) == PNG
    assert cache.get(url) == PNG
    assert [h.get("authorization") for h in origin.seen] == [netrc, netrc]
    assert not os.path.exists(os.path.join(cache.directory, entry_name(url)))
    assert SECRET.encode() not in everything_on_disk(str(tmp_path / "media"))
    assert cache.stats()["bypassed"] == 2


def test_a_stored_entry_is_not_served_to_a_netrc_request(
    tmp_path: Path, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = MediaCache(tmp_path / "media")
    url = origin.route("/n.png", PNG)
    cache.get(url)  # stored for anonymous callers
    path = tmp_path / "netrc"
    path.write_text("machine 127.0.0.1 login bob password pw\n")
    monkeypatch.setenv("NETRC", str(path))
    assert cache.get(url) == PNG
    assert origin.gets["/n.png"] == 2
    assert origin.seen[-1]["authorization"] == basic("bob", "pw")


def test_netrc_credentials_on_a_redirect_hop_are_seen(
    tmp_path: Path, origin: Origin, netrc: str
) -> None:
    """The first host has no netrc entry, the one redirected to has: nothing stored."""
    cache = MediaCache(tmp_path / "media")
    origin.route("/final.png", PNG)
    origin.route("/hop.png", status=302, location=origin.url("/final.png"))
    url = f"http://localhost:{origin.server_address[1]}/hop.png"
    assert cache.get(url) == PNG
    assert cache.get(url) == PNG
    assert [h.get("authorization") for h in origin.seen] == [None, netrc, None, netrc]
    assert not os.path.exists(os.path.join(cache.directory, entry_name(url)))
    assert cache.stats()["not_stored"] == 2


def test_userinfo_in_a_redirect_is_seen(tmp_path: Path, origin: Origin) -> None:
    cache = MediaCache(tmp_path / "media")
    origin.route("/final.png", PNG)
    origin.route("/hop.png", status=302, location=with_userinfo(origin.url("/final.png")))
    assert cache.get(origin.url("/hop.png")) == PNG
    assert origin.seen[-1]["authorization"] == basic("alice", SECRET)
    assert not os.path.exists(os.path.join(cache.directory, entry_name(origin.url("/hop.png"))))
    assert SECRET.encode() not in everything_on_disk(cache.directory)


def test_cookies_an_origin_sets_are_not_sent_with_later_requests(
    tmp_path: Path, origin: Origin
) -> None:
    """A shared cache carries no cookie from one request to the next (nor stops storing)."""
    cache = MediaCache(tmp_path / "media")
    first = origin.route("/a.png", PNG, headers={"Set-Cookie": "session=s3cret; Path=/"})
    second = origin.route("/b.png", PNG)
    cache.get(first)
    cache.get(second)
    assert "cookie" not in origin.seen[-1]
    assert os.path.exists(os.path.join(cache.directory, entry_name(second)))
