"""A real HTTP origin on 127.0.0.1 whose answers each test sets, with a count of every GET.

Routes are set per path: status, headers, body, validators (an ``ETag`` or ``Last-Modified``
that turns a matching conditional request into a 304), a body cut short of its
``Content-Length`` or sent without one (ended by closing the connection), a gate that holds
the answer until the test opens it, or a redirect.
Paths under ``/gen/<n>/<size>`` need no route: they answer ``size`` bytes derived from ``n``,
cacheable for an hour, so many processes can fetch many URLs without any setup.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def gen_body(n: int, size: int) -> bytes:
    """The body ``/gen/<n>/<size>`` serves (deterministic, so any process can check it)."""
    seed = hashlib.sha256(str(n).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


class Route:
    """What the origin answers for one path."""

    def __init__(
        self,
        body: bytes = b"",
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        etag: str | None = None,
        last_modified: str | None = None,
        short_by: int = 0,
        length: bool = True,
        gate: threading.Event | None = None,
        location: str | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.headers = dict(headers or {})
        self.etag = etag
        self.last_modified = last_modified
        self.short_by = short_by
        self.length = length
        self.gate = gate
        self.location = location


class Origin(ThreadingHTTPServer):
    """The server; :meth:`start` runs it in a daemon thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.gets: Counter[str] = Counter()
        self.answers: Counter[tuple[str, int]] = Counter()
        self.seen: list[dict[str, str]] = []
        self.first_get = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def url(self, path: str) -> str:
        """The absolute URL of ``path``."""
        return self.base + path

    def route(self, path: str, body: bytes = b"", **kwargs: Any) -> str:
        """Set what ``path`` answers; return its URL."""
        self.routes[path] = Route(body, **kwargs)
        return self.url(path)

    def record(self, path: str, headers: dict[str, str]) -> None:
        with self._lock:
            self.gets[path] += 1
            self.seen.append({"path": path, **headers})
        self.first_get.set()

    def start(self) -> Origin:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        for route in self.routes.values():
            if route.gate is not None:
                route.gate.set()
        self.shutdown()
        self.server_close()

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that hang up mid-answer are part of the tests: stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK add 40 ms to every answer.
    disable_nagle_algorithm = True
    server: Origin

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Quiet."""

    def do_GET(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.record(self.path, headers)
        route = self.server.routes.get(self.path)
        if route is None and self.path.startswith("/gen/"):
            _, _, n, size = self.path.split("/")[:4]
            route = Route(gen_body(int(n), int(size)), headers={"Cache-Control": "max-age=3600"})
        if route is None:
            self._answer(404, {}, b"no such route")
            return
        if route.gate is not None:
            route.gate.wait(30)
        if route.location is not None:
            self._answer(route.status, {"Location": route.location}, b"")
            return
        validators = {**route.headers}
        if route.etag:
            validators["ETag"] = route.etag
        if route.last_modified:
            validators["Last-Modified"] = route.last_modified
        inm = headers.get("if-none-match")
        ims = headers.get("if-modified-since")
        if (route.etag and inm == route.etag) or (
            route.last_modified and inm is None and ims == route.last_modified
        ):
            self._answer(304, validators, b"", length=False)
            return
        if route.short_by or not route.length:
            self.send_response(route.status)
            for k, v in validators.items():
                self.send_header(k, v)
            if route.length:
                self.send_header("Content-Length", str(len(route.body) + route.short_by))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(route.body)
            self.wfile.flush()
            self.close_connection = True
            return
        self._answer(route.status, validators, route.body)

    def _answer(
        self, status: int, headers: dict[str, str], body: bytes, *, length: bool = True
    ) -> None:
        self.server.answers[(self.path, status)] += 1
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)
