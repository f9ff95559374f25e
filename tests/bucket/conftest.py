"""Fixtures of the bucket tier's tests: an S3 server, a fresh bucket, an origin, hosts."""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

import pytest

from . import s3server

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Server, paced, static

    from .s3server import S3
else:
    # pytest puts tests/ on sys.path; mypy names it tests.
    from origin import Server, paced, static

pytest.importorskip(
    "obstore", reason="the bucket tier needs obstore: pip install 'cacheroot-fetch[s3]'"
)
pytest.importorskip("boto3", reason="the bucket tests read buckets with boto3 (moto[server])")

#: The assets the origin serves: path -> bytes.
ASSETS = {
    "/a.bin": b"alpha " * 50_000,
    "/b.bin": bytes(range(256)) * 1024,
    "/c.txt": b"a small text asset\n",
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """One S3 server for the whole run (each test takes its own bucket)."""
    yield from s3server.serve(tmp_path_factory.mktemp("moto") / "moto.log")


@pytest.fixture
def bucket(s3: S3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket; this process is configured for it (``CACHEROOT_SHARED`` is the test's)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.new_bucket()


@pytest.fixture
def origin() -> Iterator[Server]:
    """The origin of :data:`ASSETS` on 127.0.0.1, counting requests."""
    server = Server()
    for path, data in ASSETS.items():
        # Slow enough that every host asks while the first one still downloads.
        server.route(path, paced(static(data), chunk=64 << 10, every=0.05))
    with server:
        yield server
