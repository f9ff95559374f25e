"""Smaller leaks: tokens in tracebacks' locals, over plain http or to other ports; escape
sequences from the volume printed raw; a broken redirect that skipped the fallbacks.

Each test reproduces the leak for real: a child ``pytest -l`` run, real origins over http and
https, a record planted on the volume, the ``cacheroot fetch`` command in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_AUTH_TOKENS
from cacheroot.fetch import Fetcher
from cacheroot.fetch._redact import Secret, printable
from cacheroot.fetch._store import meta_path

from .origin import Origin, body, sha256
from .test_tls import https, tls_origin  # noqa: F401 - the HTTPS origin's fixtures

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TOKEN = "tok0hostile0leak"  # noqa: S105 - a test token, sent to local origins only


@pytest.fixture
def other() -> Iterator[Origin]:
    """A second http origin (another port of 127.0.0.1)."""
    server = Origin().start()
    yield server
    server.close()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def test_a_host_token_is_not_sent_over_plain_http(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"127.0.0.1={TOKEN} 127.0.0.1:{origin.port}={TOKEN}")
    Fetcher().fetch(origin.url(f"/ok/{name}"))
    assert origin.auths[f"/ok/{name}"] == [None]


def test_an_http_entry_goes_to_its_port_only(
    origin: Origin, other: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1={TOKEN}")
    Fetcher().fetch(origin.url(f"/ok/{name}"))
    assert origin.auths[f"/ok/{name}"] == [None]  # port 80 only, as the entry names no port
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{other.port}={TOKEN}")
    Fetcher().fetch(origin.url(f"/ok/2-{name}"))
    Fetcher().fetch(other.url(f"/ok/2-{name}"))
    assert origin.auths[f"/ok/2-{name}"] == [None]
    assert other.auths[f"/ok/2-{name}"] == [f"Bearer {TOKEN}"]


def test_a_host_and_port_token_goes_over_https(
    https: Origin,  # noqa: F811 - the fixture imported above
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"127.0.0.1:{https.port}={TOKEN}")
    Fetcher().fetch(https.url(f"/ok/{name}"))
    assert https.auths[f"/ok/{name}"] == [f"Bearer {TOKEN}"]


def test_a_reversed_entry_never_shows_the_token(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"hf_{TOKEN}=127.0.0.1")
    done = _cli(origin.url(f"/ok/{name}"), env=dict(os.environ))
    assert "CACHEROOT_AUTH_TOKENS: entry 1 does not start with a host name" in done.stderr
    assert TOKEN not in done.stdout + done.stderr


CHILD_TEST = """
import os
import pytest
from cacheroot.fetch import Fetcher

def test_fails():
    shown_local = "child0local0shown"
    Fetcher(retries=0).fetch(os.environ["LEAK_URL"])

def test_fails_with_own_header():
    Fetcher(retries=0, headers={"Authorization": "Bearer " + os.environ["LEAK_TOKEN"]}).fetch(
        os.environ["LEAK_URL"]
    )
"""


def test_pytest_l_shows_no_token_in_fetchs_locals(
    origin: Origin, name: str, tmp_path: Path
) -> None:
    (tmp_path / "test_child.py").write_text(CHILD_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    url = origin.url(f"/missing/{name}")
    env = {
        **os.environ,
        CACHEROOT_AUTH_TOKENS: f"http://127.0.0.1:{origin.port}={TOKEN}",
        "LEAK_URL": url,
        "LEAK_TOKEN": TOKEN,
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-l", "-p", "no:cacheroot", "-p", "no:xdist", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert "2 failed" in done.stdout, done.stdout[-2000:]
    # Locals are shown (the child's own), the token is not: a failed fetch leaves its frames,
    # and those of the libraries below it, without locals.
    assert "shown_local = 'child0local0shown'" in done.stdout
    assert "'Authorization'" not in done.stdout
    assert TOKEN not in done.stdout.replace("LEAK_TOKEN", "")
    assert origin.auths[f"/missing/{name}"] == [f"Bearer {TOKEN}"] * 2


def test_a_secret_is_the_token_for_what_sends_it() -> None:
    value = Secret("Bearer abc")
    assert repr(value) == "'***'"
    assert repr({"Authorization": value}) == "{'Authorization': '***'}"
    assert value == "Bearer abc"
    assert value.encode("latin-1") == b"Bearer abc"


def test_escape_sequences_from_a_planted_record_are_not_printed_raw(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    with open(meta_path(str(path)), encoding="utf-8") as f:
        record = json.load(f)
    record.pop("ctime_ns")  # so that the file is hashed and judged by the planted digest
    record["sha256"] = "\x1b]0;owned\x07\x1b[2J"
    with open(meta_path(str(path)), "w", encoding="utf-8") as f:
        json.dump(record, f)
    done = _cli(url, "--offline", env=dict(os.environ))
    assert done.returncode != 0
    assert "\x1b" not in done.stderr
    assert "\x07" not in done.stderr


def test_printable_escapes_controls_but_keeps_text() -> None:
    assert printable("caf\u00e9 a b") == "caf\u00e9 a b"
    assert printable("a\tb\n") == "a\\tb\\n"  # a line break would forge a line of output
    assert printable("a\x1b[31mb\rc\x9bd\x7f") == "a\\x1b[31mb\\rc\\x9bd\\x7f"


def test_a_malformed_redirect_is_a_clean_error_and_fallbacks_are_tried(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHEROOT_AUTH_TOKENS, f"http://127.0.0.1:{origin.port}={TOKEN}")
    broken = origin.url(f"/goto/{name}?to=http://[h:1:2]")
    path = Fetcher(retries=0).fetch(broken, fallbacks=[origin.url(f"/ok/{name}")])
    assert path.read_bytes() == body(name)
    done = _cli(origin.url(f"/goto/2-{name}?to=http://[::1"), env=dict(os.environ))
    assert done.returncode == 1, done.stderr
    assert "its answer names no valid URL (Invalid IPv6 URL)" in done.stderr
    assert "Traceback" not in done.stderr
    assert sha256(body(name))  # the bytes served by the fallback are the origin's
