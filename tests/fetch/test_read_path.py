"""Which reader a download takes: the fast path must not silently fall back to copying."""

from __future__ import annotations

import requests

from cacheroot.fetch._http import _body_reader

from .origin import Origin, body


def _reader_name(url: str) -> tuple[str, bytes]:
    with requests.get(url, stream=True, timeout=5, headers={"Accept-Encoding": "identity"}) as r:
        read = _body_reader(r)
        buf = bytearray(1 << 16)
        got = bytearray()
        while n := read(memoryview(buf)):
            got += buf[:n]
        return read.__name__, bytes(got)


def test_a_body_of_known_length_is_read_into_the_callers_buffer(origin: Origin, name: str) -> None:
    kind, data = _reader_name(origin.url(f"/ok/{name}?size=300000"))
    assert kind == "direct"
    assert data == body(name, 300000)


def test_a_body_without_length_goes_through_urllib3(origin: Origin, name: str) -> None:
    kind, data = _reader_name(origin.url(f"/nolength/{name}?size=300000"))
    assert kind == "copied"
    assert data == body(name, 300000)
