"""A media fetch that breaks leaves no credential in the locals ``pytest -l`` prints.

The media cache forwards the caller's ``Authorization`` and sends a URL's query as it is
(``?token=``, ``sig=``). A refused connection or a reset raises through requests, urllib3 and
http.client, whose frames hold the request's header block and path as bytes, and through the
cache's own frames, which hold the caller's headers and URL: ``pytest -l`` would print them
all. A child ``pytest -l`` run fetches from a refused port and from an origin on 127.0.0.1 that
resets the connection before answering; its whole output is searched for both secrets.
"""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.fetch.test_frame_secrets import pytest_l
else:
    from fetch.test_frame_secrets import pytest_l

TOKEN = "tok0media0frame0secret"  # noqa: S105 - a test token, sent to local origins only
QUERY = "qry0media0frame0secret"

CHILD_TEST = """
import os
import pytest
from cacheroot.mediacache import MediaCache

def test_refused():
    MediaCache(os.environ["LEAK_DIR"]).get(
        os.environ["LEAK_REFUSED"], headers={"Authorization": os.environ["LEAK_AUTH"]}
    )

def test_reset_before_the_answer():
    MediaCache(os.environ["LEAK_DIR"]).get(
        os.environ["LEAK_RESET"], headers={"Authorization": os.environ["LEAK_AUTH"]}
    )

def test_fetch_bytes_reset():
    MediaCache(os.environ["LEAK_DIR"]).fetch_bytes(
        os.environ["LEAK_RESET"], fallback=None, headers={"Authorization": os.environ["LEAK_AUTH"]}
    )

def test_aget_refused():
    import asyncio
    asyncio.run(MediaCache(os.environ["LEAK_DIR"]).aget(
        os.environ["LEAK_REFUSED"], headers={"Authorization": os.environ["LEAK_AUTH"]}
    ))
"""


def _refused_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then closed: a connect is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class _Resetting:
    """A listener on 127.0.0.1 that reads a request, then resets the connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                self.requests.append(conn.recv(65536))
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def resetting() -> Iterator[_Resetting]:
    server = _Resetting()
    yield server
    server.close()


@pytest.mark.parametrize("verbose", [[], ["-vv"]], ids=["truncated", "full-reprs"])
def test_pytest_l_shows_no_credential_when_a_media_fetch_breaks(
    resetting: _Resetting, tmp_path: Path, verbose: list[str]
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LEAK_DIR": str(tmp_path / "media"),
        "LEAK_AUTH": f"Bearer {TOKEN}",
        "LEAK_REFUSED": f"http://127.0.0.1:{_refused_port()}/a.png?token={QUERY}",
        "LEAK_RESET": f"http://127.0.0.1:{resetting.port}/b.png?sig={QUERY}",
    }
    stdout, output = pytest_l(tmp_path, CHILD_TEST, env, *verbose)
    assert "4 failed" in stdout, output[-3000:]
    assert "ConnectionRefusedError" in output or "Connection refused" in output
    assert "Connection reset by peer" in output or "Connection aborted" in output
    leaked = [line for line in output.splitlines() if TOKEN in line or QUERY in line]
    assert leaked == []
    # The credentials were sent: the request that got through carried both.
    assert len(resetting.requests) >= 1
    assert f"Authorization: Bearer {TOKEN}".encode() in resetting.requests[0]
    assert f"sig={QUERY}".encode() in resetting.requests[0]
