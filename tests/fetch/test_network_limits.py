"""Bounds on what a misbehaving network can cost: a deadline, the connect timeout, oversized
headers, and a lock that another process waits on for only as long as the deadline allows."""

from __future__ import annotations

import select
import socket
import time
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import DownloadError, Fetcher
from cacheroot.fetch.store import PathLock, lock_path, partials

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from collections.abc import Iterator


def _clean(f: Fetcher, url: str) -> None:
    dest = str(f.path(url))
    assert partials(dest) == []
    with PathLock(lock_path(dest), timeout=1.0):  # released: the next caller is not kept waiting
        pass


def test_a_trickling_origin_meets_the_deadline(origin: Origin, name: str) -> None:
    # One byte every 0.3 s: every read returns well within the read timeout, forever.
    url = origin.url(f"/trickle/{name}?size=1000&every=0.3")
    f = Fetcher(read_timeout=3.0, deadline=1.5, retries=3, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        f.fetch(url)
    took = time.monotonic() - started
    assert 1.5 <= took < 20, took  # the deadline, not the 300 s the body would take
    message = str(info.value)
    assert "deadline of 1.5 s" in message
    assert "bytes had arrived" in message
    assert "deadline=" in message  # what to raise
    assert not f.path(url).exists()
    _clean(f, url)
    assert origin.gets[f"/trickle/{name}"] == 1  # a slow origin is not retried past it


def test_a_retry_after_beyond_the_deadline_gives_up_at_once(origin: Origin, name: str) -> None:
    url = origin.url(f"/status/503/5/{name}?retry_after=60")
    f = Fetcher(deadline=2.0, retries=5, backoff=0.01, retry_after_max=120.0)
    started = time.monotonic()
    with pytest.raises(DownloadError, match=r"asks to wait 60 s, past the deadline of 2 s"):
        f.fetch(url)
    assert time.monotonic() - started < 20  # at once, not after the 60 s it asks for
    assert origin.gets[f"/status/503/5/{name}"] == 1
    _clean(f, url)


def test_the_default_deadline_leaves_a_normal_download_alone(origin: Origin, name: str) -> None:
    f = Fetcher()
    assert f.deadline == 1800.0
    url = origin.url(f"/ok/{name}")
    assert f.fetch(url, sha256=sha256(body(name))).read_bytes() == body(name)
    assert Fetcher(deadline=None).fetch(origin.url(f"/ok/2{name}")).exists()


@pytest.mark.parametrize("kind", ["bigheader", "manyheaders"])
def test_oversized_response_headers_are_a_permanent_error(
    origin: Origin, fetcher: Fetcher, name: str, kind: str
) -> None:
    url = origin.url(f"/{kind}/{name}")
    with pytest.raises(DownloadError) as info:
        fetcher.fetch(url)
    message = str(info.value)
    assert "response headers" in message
    assert "may be down" not in message
    assert origin.gets[f"/{kind}/{name}"] == 1  # not retried
    _clean(fetcher, url)


@pytest.fixture
def unanswered() -> Iterator[str]:
    """A loopback port whose listener never accepts: its queue is full, new SYNs are dropped."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(8):  # fill the accept queue (its length depends on the kernel)
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(("127.0.0.1", port))
        queued.append(client)
        if not select.select([], [client], [], 0.2)[1]:
            break  # this one hangs: the queue is full
    else:
        pytest.skip("this kernel accepts every connection into the queue of a listen(0) socket")
    yield f"http://127.0.0.1:{port}/never.bin"
    for client in queued:
        client.close()
    listener.close()


def test_the_connect_timeout(unanswered: str) -> None:
    f = Fetcher(connect_timeout=0.3, read_timeout=30.0, retries=1, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(DownloadError) as info:
        f.fetch(unanswered)
    took = time.monotonic() - started
    assert 0.6 <= took < 20, took  # two attempts of 0.3 s each, not the 30 s read timeout
    assert "ConnectTimeout" in str(info.value)
    assert "after 2 attempts" in str(info.value)
