"""Credentials in a URL's query (``?token=``, ``sig=``, ``X-Amz-Signature=``) are passwords.

A signed object-store URL or a tokened API URL is sent as it is, and its entry is keyed by the
whole URL (two signatures, two entries), but no record, log line or exception message holds the
value: records are read by every user of the volume, and messages end up in CI logs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import TYPE_CHECKING

import pytest
import requests

from cacheroot.mediacache import MediaCache, ResponseTooLarge, URLRefused, entry_name
from cacheroot.mediacache._redact import redact

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import Clock
    from .origin import Origin

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
SECRET = "Qu3ryS3cret"  # noqa: S105 - the credential the tests look for


def everything_on_disk(directory: str) -> bytes:
    """Every byte of every file under ``directory``, with the file names."""
    out = b""
    for here, _dirs, names in os.walk(directory):
        for name in names:
            with open(os.path.join(here, name), "rb") as f:
                out += name.encode() + b"\0" + f.read()
    return out


def test_records_hold_no_query_credential(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    cache = MediaCache(tmp_path / "media", clock=clock)
    base = origin.route("/signed.png", PNG)
    url = f"{base}?w=2&token={SECRET}&X-Amz-Signature={SECRET}&sig={SECRET}"
    assert cache.get(url) == PNG
    assert (
        origin.seen[-1]["path"]
        == f"/signed.png?w=2&token={SECRET}&X-Amz-Signature={SECRET}&sig={SECRET}"
    )
    assert SECRET.encode() not in everything_on_disk(cache.directory)
    with open(os.path.join(cache.directory, f".{entry_name(url)}.meta.json"), "rb") as f:
        record = json.load(f)
    assert record["url"] == f"{base}?w=2&token=***&X-Amz-Signature=***&sig=***"
    assert cache.get(url) == PNG  # a hit: the entry is still found by the whole URL
    other = url.replace(f"sig={SECRET}", "sig=another")
    assert cache.get(other) == PNG  # another signature, another entry
    assert sum(origin.gets.values()) == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_messages_and_logs_hold_no_query_credential(
    tmp_path: Path, origin: Origin, caplog: pytest.LogCaptureFixture
) -> None:
    cache = MediaCache(tmp_path / "media", max_download_bytes=100, max_redirects=1)
    query = f"?token={SECRET}&X-Goog-Signature={SECRET}"
    gone = origin.route("/gone.png", b"no", status=404) + query
    big = origin.route("/big.png", PNG) + query
    loop = origin.route("/loop.png", status=302, location=f"/loop.png?sig={SECRET}") + query
    unreachable = f"http://127.0.0.1:{_closed_port()}/x.png{query}"
    blocked = origin.route("/blocked.png", b"tiny") + query
    os.makedirs(os.path.join(cache.directory, entry_name(blocked)))  # publishing fails: logged
    errors: list[BaseException] = []
    with caplog.at_level(logging.DEBUG, logger="cacheroot.mediacache"):
        assert cache.get(blocked) == b"tiny"
        for url, kind in [
            (gone, requests.HTTPError),
            (big, ResponseTooLarge),
            (loop, requests.TooManyRedirects),
            (unreachable, requests.ConnectionError),
        ]:
            with pytest.raises(kind) as info:
                cache.get(url, timeout=5)
            errors.append(info.value)
        fenced = MediaCache(tmp_path / "media", allowed_domains=["example.com"])
        with pytest.raises(URLRefused) as refused:
            fenced.get(gone)
        errors.append(refused.value)
    assert caplog.records
    assert SECRET not in caplog.text
    for exc in errors:
        assert SECRET not in str(exc), exc
        assert SECRET not in repr(exc), exc
        assert SECRET not in str(getattr(exc, "url", "")), exc
    assert "token=***&X-Goog-Signature=***" in str(errors[0])
    assert "sig=***" in str(errors[2])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://h/x?token=abc", "https://h/x?token=***"),
        ("https://h/x?a=1&access_token=abc&b=2", "https://h/x?a=1&access_token=***&b=2"),
        (
            (
                "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA&X-Amz-Date=20300101T000000Z"
                "&X-Amz-Security-Token=tok&X-Amz-Signature=f00d"
            ),
            (
                "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Date=20300101T000000Z"
                "&X-Amz-Security-Token=***&X-Amz-Signature=***"
            ),
        ),
        (
            "https://a.blob.core.windows.net/c/b?sv=2022&se=2030&sp=r&sig=abc%3D",
            "https://a.blob.core.windows.net/c/b?sv=2022&se=2030&sp=r&sig=***",
        ),
        (
            "https://d.cloudfront.net/i.png?Policy=p&Signature=s&Key-Pair-Id=k",
            "https://d.cloudfront.net/i.png?Policy=***&Signature=***&Key-Pair-Id=***",
        ),
        ("https://h/x?api_key=k&apikey=k&key=k", "https://h/x?api_key=***&apikey=***&key=***"),
        ("https://h/x?client_secret=s#frag", "https://h/x?client_secret=***#frag"),
        ("https://alice:pw@h/x?w=640&h=480", "https://alice:***@h/x?w=640&h=480"),
        ("for url: /x.png?token=abc (Caused by", "for url: /x.png?token=*** (Caused by"),
        ("'https://h/x?sig=abc'", "'https://h/x?sig=***'"),
        ("https://h/x?token=", "https://h/x?token="),
    ],
)
def test_which_parameters_are_credentials(text: str, expected: str) -> None:
    assert redact(text) == expected
