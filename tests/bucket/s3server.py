"""An S3 server for the bucket tier's tests: moto's server in its own process on 127.0.0.1.

Set ``CACHEROOT_TEST_S3_ENDPOINT`` (with ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``) to
run the same tests against another S3 server instead (``nox -s s3`` starts SeaweedFS); tests that
need moto's own switches (authentication) are skipped there.

Buckets are made and read with boto3 (moto's own dependency): the expected contents of a bucket
come from a client that is not the one under test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _cacheroot_layout import (
    AWS_ACCESS_KEY_ID,
    AWS_ENDPOINT_URL,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    CACHEROOT_TEST_S3_ENDPOINT,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Names another S3 server (``http://127.0.0.1:PORT``) for the tests instead of moto's.
EXTERNAL = CACHEROOT_TEST_S3_ENDPOINT
#: The credentials the tests use with moto (moto accepts any unless told to check them).
KEY_ID = "AKIACACHEROOTTEST01"
SECRET = "cacheroot-test-secret-Zq93xN1v"  # noqa: S105 - a test value, looked for in outputs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    return free_port()


class S3:
    """One S3 endpoint and the credentials to use it."""

    def __init__(
        self, endpoint: str, key_id: str, secret: str, *, moto: bool, log: Path | None = None
    ) -> None:
        self.endpoint = endpoint
        self.log = log
        self.key_id = key_id
        self.secret = secret
        self.moto = moto

    def requests(self) -> int:
        """How many requests the server logged so far (moto's access log; 0 elsewhere)."""
        if self.log is None:
            return 0
        seen = -1
        while True:  # the server logs a request after it answered it: wait for the log to settle
            now = sum(1 for line in self.log.read_text().splitlines() if ' HTTP/1.1" ' in line)
            if now == seen:
                return now
            seen = now
            time.sleep(0.3)

    def env(self, **extra: str) -> dict[str, str]:
        """The variables a process needs to reach this server."""
        return {
            AWS_ENDPOINT_URL: self.endpoint,
            AWS_ACCESS_KEY_ID: self.key_id,
            AWS_SECRET_ACCESS_KEY: self.secret,
            AWS_REGION: "us-east-1",
            **extra,
        }

    def client(self, key_id: str | None = None, secret: str | None = None) -> Any:
        return self.client_of("s3", key_id, secret)

    def client_of(self, service: str, key_id: str | None = None, secret: str | None = None) -> Any:
        import boto3  # type: ignore[import-untyped]

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=key_id or self.key_id,
            aws_secret_access_key=secret or self.secret,
            region_name="us-east-1",
        )

    def new_bucket(self) -> str:
        name = f"fleet-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects_names(self, bucket: str) -> list[str]:
        """The names of every object of ``bucket``."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def objects(self, bucket: str) -> dict[str, bytes]:
        """Every object of ``bucket``: name -> bytes."""
        c = self.client()
        found: dict[str, bytes] = {}
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                key = item["Key"]
                found[key] = c.get_object(Bucket=bucket, Key=key)["Body"].read()
        return found


def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode} before it listened")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"moto_server did not listen on 127.0.0.1:{port} within 20 s")


def serve(log: Path, **env: str) -> Iterator[S3]:
    """A moto server process (``env``: moto's switches), or the external server named by
    :data:`EXTERNAL`; stopped at the end."""
    external = os.environ.get(EXTERNAL, "").strip()
    if external:
        yield S3(
            external,
            os.environ[AWS_ACCESS_KEY_ID],
            os.environ[AWS_SECRET_ACCESS_KEY],
            moto=False,
        )
        return
    port = free_port()
    argv = [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    try:
        _wait_listening(port, proc, time.monotonic() + 20)
        yield S3(f"http://127.0.0.1:{port}", KEY_ID, SECRET, moto=True, log=log)
    finally:
        proc.kill()
        proc.wait()


class Forgetful:
    """A proxy on 127.0.0.1 in front of an S3 server that drops the conditional-write headers
    (``If-None-Match``, ``If-Match``), as some S3-compatible servers ignore them."""

    DROPPED = ("if-none-match", "if-match")

    def __init__(self, upstream: str) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        target = urlsplit(upstream)
        dropped = self.DROPPED

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002, ARG002
                return

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                conn = http.client.HTTPConnection(target.hostname or "", target.port, timeout=30)
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Forgetful:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
