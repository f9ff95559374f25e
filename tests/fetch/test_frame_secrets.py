"""A download that breaks leaves no token in the locals ``pytest -l`` prints.

http.client writes the request's header block into bytes (``_send_output``'s ``msg``,
``send``'s ``data``) before it connects, so a refused connection or a reset used to put
``Authorization: Bearer TOKEN`` into the traceback's frames, where ``pytest -l`` shows it. A
child ``pytest -l`` run fetches with a token from ``CACHEROOT_AUTH_TOKENS`` from a refused port
and from origins on 127.0.0.1 that reset the connection before answering and halfway through
the body; its whole output is searched for the token.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_AUTH_TOKENS
from cacheroot.fetch import Fetcher

from .origin import Origin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.origin import Exchange, Server
else:
    from origin import Server

TOKEN = "tok0frame0locals0secret"  # noqa: S105 - a test token, sent to local origins only

CHILD_TEST = """
import os
from cacheroot.fetch import Fetcher

def fetch(url):
    Fetcher(retries=0, connect_timeout=5.0, read_timeout=5.0).fetch(url)

def test_refused():
    fetch(os.environ["LEAK_REFUSED"])

def test_reset_before_the_answer():
    fetch(os.environ["LEAK_RESET_EARLY"])

def test_reset_in_the_body():
    fetch(os.environ["LEAK_RESET_BODY"])
"""


def pytest_l(directory: Path, source: str, env: dict[str, str], *flags: str) -> tuple[str, str]:
    """Run ``source`` as a test file with ``pytest -l`` (and ``flags``) in ``directory``, without
    cacheroot's plugin or xdist: ``(its standard output, both outputs together)``."""
    (directory / "test_child.py").write_text(source)
    (directory / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-l", *flags, "-p", "no:cacheroot", "-p", "no:xdist"],
        cwd=directory,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    return done.stdout, done.stdout + done.stderr


def _refused_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then closed: a connect is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _reset(ex: Exchange) -> None:
    ex.reset()


@pytest.fixture
def resetting() -> Iterator[Server]:
    """An origin that reads the request, then resets the connection without a byte of answer."""
    with Server(_reset) as server:
        yield server


@pytest.mark.parametrize("verbose", [[], ["-vv"]], ids=["truncated", "full-reprs"])
def test_pytest_l_shows_no_token_when_the_connection_breaks(
    origin: Origin,
    resetting: Server,
    name: str,
    tmp_path: Path,
    verbose: list[str],
) -> None:
    refused = _refused_port()
    entries = [refused, resetting.port, origin.port]
    env = {
        **os.environ,
        CACHEROOT_AUTH_TOKENS: " ".join(f"http://127.0.0.1:{p}={TOKEN}" for p in entries),
        "LEAK_REFUSED": f"http://127.0.0.1:{refused}/refused/{name}",
        "LEAK_RESET_EARLY": resetting.url(f"/early/{name}"),
        "LEAK_RESET_BODY": origin.url(f"/reset/{name}"),
    }
    stdout, output = pytest_l(tmp_path, CHILD_TEST, env, *verbose)
    assert "3 failed" in stdout, output[-3000:]
    assert "ConnectionRefusedError" in output  # the failures are the ones meant
    assert "Connection reset by peer" in output or "RemoteDisconnected" in output
    assert TOKEN not in output, [line for line in output.splitlines() if TOKEN in line]
    # The token was sent: the requests that got through carried it.
    assert [r.header("Authorization") for r in resetting.requests()] == [f"Bearer {TOKEN}"]
    assert origin.auths[f"/reset/{name}"] == [f"Bearer {TOKEN}"]


def test_the_origin_still_receives_the_token(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{origin.port}={TOKEN}")
    fetcher = Fetcher(retries=0)
    try:
        fetcher.fetch(origin.url(f"/ok/{name}"))
    finally:
        fetcher.close()
    assert origin.auths[f"/ok/{name}"] == [f"Bearer {TOKEN}"]


QUERY = "qry0fetch0frame0secret"

QUERY_CHILD = """
import os
from cacheroot.fetch import Fetcher

def test_refused_method():
    Fetcher(retries=0, connect_timeout=5.0).fetch(os.environ["LEAK_REFUSED"])

def test_reset_method():
    Fetcher(retries=0, read_timeout=5.0).fetch(os.environ["LEAK_RESET_EARLY"])
"""


def test_pytest_l_shows_no_query_credential_of_a_failed_fetch(
    resetting: Server, name: str, tmp_path: Path
) -> None:
    """A URL's query credential (``?token=``, ``sig=``) sits in cacheroot's own frames
    (``url`` in each call down to the request): none of them shows it after a failure."""
    env = {
        **os.environ,
        "LEAK_REFUSED": f"http://127.0.0.1:{_refused_port()}/refused/{name}?token={QUERY}",
        "LEAK_RESET_EARLY": resetting.url(f"/early/{name}?sig={QUERY}"),
    }
    env.pop(CACHEROOT_AUTH_TOKENS, None)
    stdout, output = pytest_l(tmp_path, QUERY_CHILD, env, "-vv")
    assert "2 failed" in stdout, output[-3000:]
    assert "ConnectionRefusedError" in output
    assert [line for line in output.splitlines() if QUERY in line] == []
    assert "Connection reset by peer" in output or "RemoteDisconnected" in output
    assert [r.target for r in resetting.requests()] == [f"/early/{name}?sig={QUERY}"]
