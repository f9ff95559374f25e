"""The origin toolkit, checked with the standard library's HTTP client over real sockets."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from tests.origin import (
        Server,
        cut,
        files,
        gated,
        hang,
        hold,
        paced,
        redirect,
        sequence,
        static,
        status,
    )
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import (
        Server,
        cut,
        files,
        gated,
        hang,
        hold,
        paced,
        redirect,
        sequence,
        static,
        status,
    )

DATA = bytes(range(256)) * 4  # 1024 bytes


def get(
    server: Server, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_static_answers_validators_conditionals_and_ranges() -> None:
    handler = static(DATA, etag='"v1"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT")
    with Server(handler) as server:
        code, headers, body = get(server, "/a")
        assert (code, body) == (200, DATA)
        assert headers["ETag"] == '"v1"'
        assert headers["Content-Length"] == "1024"
        assert headers["Accept-Ranges"] == "bytes"
        assert get(server, "/a", {"If-None-Match": '"v1"'})[::2] == (304, b"")
        ims = {"If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"}
        assert get(server, "/a", ims)[::2] == (304, b"")
        code, headers, body = get(server, "/a", {"Range": "bytes=1000-"})
        assert (code, headers["Content-Range"], body) == (206, "bytes 1000-1023/1024", DATA[1000:])
        code, headers, body = get(server, "/a", {"Range": "bytes=2-5"})
        assert (code, headers["Content-Range"], body) == (206, "bytes 2-5/1024", DATA[2:6])
        code, headers, body = get(server, "/a", {"Range": "bytes=-4"})
        assert (code, headers["Content-Range"], body) == (206, "bytes 1020-1023/1024", DATA[-4:])
        code, headers, _ = get(server, "/a", {"Range": "bytes=1024-"})
        assert (code, headers["Content-Range"]) == (416, "bytes */1024")
        stale = {"Range": "bytes=10-", "If-Range": '"v0"'}
        assert get(server, "/a", stale)[::2] == (200, DATA)
        fresh = {"Range": "bytes=10-", "If-Range": '"v1"'}
        assert get(server, "/a", fresh)[::2] == (206, DATA[10:])
        code, headers, body = get(server, "/a", method="HEAD")
        assert (code, headers["Content-Length"], body) == (200, "1024", b"")


def test_every_request_is_recorded_with_its_headers_and_status() -> None:
    with Server(static(b"x")) as server:
        server.route("/gone", status(410))
        get(server, "/a?size=3", {"X-Probe": "1"})
        get(server, "/a", method="HEAD")
        get(server, "/gone")
        assert server.count() == 3
        assert server.count("/a") == 2
        assert server.count("/a", "GET") == 1
        assert server.counts() == {("GET", "/a"): 1, ("HEAD", "/a"): 1, ("GET", "/gone"): 1}
        first, second, third = server.requests()
        assert (first.target, first.query, first.header("x-probe"), first.n) == (
            "/a?size=3",
            {"size": "3"},
            "1",
            1,
        )
        assert (second.n, second.status, third.n, third.status) == (2, 200, 1, 410)
        server.clear()
        assert server.count() == 0


def test_unsupported_methods_are_501_and_not_recorded() -> None:
    with Server(static(b"x"), methods=("GET",)) as server:
        assert get(server, "/a", method="HEAD")[0] == 501
        assert get(server, "/a", method="POST")[0] == 501
        assert server.count() == 0


def test_a_status_sequence_then_success() -> None:
    with Server(sequence(status(429, retry_after="2"), status(503), static(DATA))) as server:
        code, headers, _ = get(server, "/s")
        assert (code, headers["Retry-After"]) == (429, "2")
        assert get(server, "/s")[0] == 503
        assert get(server, "/s")[::2] == (200, DATA)
        assert get(server, "/s")[::2] == (200, DATA)  # the last handler answers the rest
        assert get(server, "/other")[0] == 429  # numbers are per path


def test_unrouted_paths_are_404_and_redirects_point_on() -> None:
    with Server() as server:
        server.route("/from", redirect("/to"))
        server.route("/to", static(b"here"))
        server.route("/exact?v=2", static(b"two"))
        assert get(server, "/nothing")[0] == 404
        code, headers, _ = get(server, "/from")
        assert (code, headers["Location"]) == (302, "/to")
        assert get(server, "/exact?v=2")[::2] == (200, b"two")
        assert get(server, "/exact?v=3")[0] == 404


def test_paced_bodies_arrive_whole_in_exact_pieces() -> None:
    pieces: list[bytes] = []
    with Server(paced(static(DATA), chunk=256, every=0.05)) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/p")
        resp = conn.getresponse()
        began = time.monotonic()
        while piece := resp.read1(4096):
            pieces.append(piece)
        elapsed = time.monotonic() - began
        conn.close()
    assert b"".join(pieces) == DATA
    assert len(pieces) >= 2  # not all in one write
    assert elapsed >= 0.1  # three waits of 50 ms between four pieces


def test_a_cut_with_reset_breaks_the_connection_after_the_bytes_sent() -> None:
    with Server(cut(static(DATA), 300)) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(b"GET /r HTTP/1.1\r\nHost: x\r\n\r\n")
        received: list[bytes] = []
        with pytest.raises(ConnectionResetError):
            _read_all(sock, received)
        sock.close()
    head, _, body = b"".join(received).partition(b"\r\n\r\n")
    assert b"Content-Length: 1024" in head
    assert body == DATA[:300]


def _read_all(sock: socket.socket, into: list[bytes]) -> None:
    while chunk := sock.recv(65536):
        into.append(chunk)


def test_a_cut_with_close_ends_short_of_the_length() -> None:
    with Server(cut(static(DATA), 300, then="close")) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/c")
        resp = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        conn.close()
    assert info.value.partial == DATA[:300]


def test_close_lets_go_of_held_requests() -> None:
    reached, mid = threading.Event(), threading.Event()
    server = Server().start()
    server.route("/hang", hang(reached))
    server.route("/hold", hold(static(DATA), 100, reached=mid, release=threading.Event()))
    server.route("/gate", gated(static(b"late"), threading.Event()))
    server.route("/stall", cut(static(DATA), 10, then="stall"))
    clients = [threading.Thread(target=_swallow, args=(server, path)) for path in server.routes]
    for client in clients:
        client.start()
    assert reached.wait(10)
    assert mid.wait(10)
    assert server.wait_for(4)
    began = time.monotonic()
    server.close()
    for client in clients:
        client.join(10)
    assert time.monotonic() - began < 5  # not the 60 s a hold lasts at most
    assert not any(client.is_alive() for client in clients)


def _swallow(server: Server, path: str) -> None:
    with contextlib.suppress(OSError, http.client.HTTPException):
        get(server, path)


def test_files_serves_a_directory_with_ranges(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(DATA)
    with Server(files(str(tmp_path))) as server:
        assert get(server, "/big.bin")[::2] == (200, DATA)
        code, headers, body = get(server, "/big.bin", {"Range": "bytes=24-"})
        assert (code, headers["Content-Range"], body) == (206, "bytes 24-1023/1024", DATA[24:])
        assert get(server, "/missing.bin")[0] == 404


def test_a_kept_alive_connection_starts_each_request_plain() -> None:
    reached, release = threading.Event(), threading.Event()
    release.set()
    with Server() as server:
        slow = paced(static(DATA), chunk=512, every=0.01)
        server.route("/held", hold(slow, 10, reached=reached, release=release))
        server.route("/plain", static(DATA))
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/held")
        assert conn.getresponse().read() == DATA
        assert reached.is_set()
        reached.clear()
        conn.request("GET", "/plain")  # the same connection: neither held nor paced
        assert conn.getresponse().read() == DATA
        conn.close()
        assert not reached.is_set()
        assert [(r.path, r.n) for r in server.requests()] == [("/held", 1), ("/plain", 1)]
