"""A small static origin for the cache-operation tests (real sockets on 127.0.0.1).

``serve(name, data)`` publishes bytes at ``/NAME``; every request is counted per path.
``hold(name)`` makes GETs of that path send their headers and the first half of the body, then
wait until :meth:`Origin.release` (a download that is in flight for as long as a test needs).
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Origin(ThreadingHTTPServer):
    """The server: ``files`` by path, ``requests`` counted by path."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.requests: Counter[str] = Counter()
        self.held: set[str] = set()
        self.holding = threading.Semaphore(0)
        self.released = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._counter = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def start(self) -> Origin:
        self._thread.start()
        return self

    def close(self) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"

    def serve(self, name: str, data: bytes) -> str:
        self.files["/" + name] = data
        return self.url(name)

    def hold(self, name: str) -> None:
        self.held.add("/" + name)

    def release(self) -> None:
        self.released.set()

    def count(self, path: str) -> None:
        with self._counter:
            self.requests[path] += 1

    def enter(self) -> None:
        with self._counter:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self._counter:
            self.in_flight -= 1

    @property
    def total(self) -> int:
        with self._counter:
            return sum(self.requests.values())


class _Handler(BaseHTTPRequestHandler):
    server: Origin
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - upstream name
        pass

    def _send(self, head_only: bool) -> None:
        path = self.path.split("?", 1)[0]
        self.server.count(path)
        data = self.server.files.get(path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if head_only:
            return
        if path in self.server.held:
            half = len(data) // 2
            self.wfile.write(data[:half])
            self.wfile.flush()
            self.server.holding.release()
            self.server.released.wait(60)
            self.wfile.write(data[half:])
        else:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.enter()
        try:
            self._send(head_only=False)
        finally:
            self.server.leave()

    def do_HEAD(self) -> None:
        self._send(head_only=True)
