"""A bucket that cannot serve never fails a fetch the origin can: one note, then the origin."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import ASSETS, sha
from .fleet import Host, host_env
from .s3server import closed_port

if TYPE_CHECKING:
    from tests.origin import Server, status

    from .s3server import S3
else:
    from origin import Server, status


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def _fetch_all(
    tmp_path: Path, origin: Server, env: dict[str, str]
) -> tuple[int, list[str], str, float]:
    started = time.monotonic()
    done = Host(tmp_path / "jobs", "h", env, urls=[[origin.url(p), None] for p in ASSETS]).wait()
    return done.rc, done.served, done.stderr, time.monotonic() - started


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("s3://", "it names no bucket"),
        ("s3:///prefix", "it names no bucket"),
        ("s3://bucket/a/../b", "'..' segment"),
        ("s3://bucket/p?X-Amz-Signature=hunter2", "query or fragment"),
        ("s3://AKIAUSER:hunter2@bucket/p", "it names a user"),
    ],
)
def test_a_malformed_url_is_one_note_and_the_origin_serves(
    s3: S3, origin: Server, tmp_path: Path, value: str, says: str
) -> None:
    rc, served, stderr, _took = _fetch_all(tmp_path, origin, host_env(tmp_path / "l1", value, s3))
    assert rc == 0, stderr
    assert served == [sha(d) for d in ASSETS.values()]
    notes = _notes(stderr)
    assert len(notes) == 1, notes
    assert says in notes[0]
    assert "s3://BUCKET/PREFIX" in notes[0]
    assert "hunter2" not in stderr
    assert origin.count(method="GET") == 3


def test_an_endpoint_where_nothing_listens_costs_seconds_and_one_note(
    origin: Server, tmp_path: Path
) -> None:
    env = host_env(
        tmp_path / "l1",
        "s3://fleet/p",
        None,
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port()}",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="never-shown-secret",  # noqa: S106 - looked for in outputs
        AWS_REGION="us-east-1",
    )
    rc, served, stderr, took = _fetch_all(tmp_path, origin, env)
    assert rc == 0, stderr
    assert served == [sha(d) for d in ASSETS.values()]
    notes = _notes(stderr)
    assert len(notes) == 1, notes
    assert "nothing answers at the endpoint of s3://fleet/p" in notes[0]
    assert "never-shown-secret" not in stderr
    assert took < 15, took


def test_a_missing_bucket_is_named_once(s3: S3, origin: Server, tmp_path: Path) -> None:
    env = host_env(tmp_path / "l1", "s3://no-such-bucket-here/p", s3)
    rc, served, stderr, _took = _fetch_all(tmp_path, origin, env)
    assert rc == 0, stderr
    assert served == [sha(d) for d in ASSETS.values()]
    notes = _notes(stderr)
    assert len(notes) == 1, notes
    assert "does not exist (NoSuchBucket)" in notes[0]


def test_without_the_client_one_note_says_what_to_install(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    # A fresh interpreter in which obstore cannot be imported (as where it is not installed).
    sitedir = tmp_path / "no-obstore"
    sitedir.mkdir()
    (sitedir / "obstore.py").write_text("raise ImportError('obstore is not installed here')\n")
    env = host_env(tmp_path / "l1", f"s3://{bucket}/p", s3, PYTHONPATH=str(sitedir))
    rc, served, stderr, _took = _fetch_all(tmp_path, origin, env)
    assert rc == 0, stderr
    assert served == [sha(d) for d in ASSETS.values()]
    notes = _notes(stderr)
    assert len(notes) == 1, notes
    assert "pip install 'cacheroot-fetch[s3]'" in notes[0]
    assert s3.objects(bucket) == {}


SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


def test_a_bucket_that_asks_to_slow_down_is_one_note_and_seconds(
    origin: Server, tmp_path: Path
) -> None:
    # An S3 endpoint that answers every request 503 SlowDown, as S3 does under load.
    with Server(status(503, SLOW_DOWN), methods=("GET", "HEAD", "PUT", "POST", "DELETE")) as slow:
        env = host_env(
            tmp_path / "l1",
            "s3://fleet/p",
            None,
            AWS_ENDPOINT_URL=slow.base,
            AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
            AWS_SECRET_ACCESS_KEY="slow-down-secret",  # noqa: S106 - looked for in outputs
            AWS_REGION="us-east-1",
        )
        rc, served, stderr, took = _fetch_all(tmp_path, origin, env)
        asked = slow.count()
    assert rc == 0, stderr
    assert served == [sha(d) for d in ASSETS.values()]
    notes = _notes(stderr)
    assert len(notes) == 1, notes
    assert "asks to slow down (503 SlowDown)" in notes[0]
    assert "slow-down-secret" not in stderr
    assert asked == 3  # the first request and its two retries; then the bucket is left alone
    assert took < 15, took
