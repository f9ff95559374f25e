"""A fault-injecting origin server for the fetch tests (real sockets on 127.0.0.1).

The first path segment picks the behaviour, the last names the file; ``?size=N`` sets its
length (default 64 KiB). Bodies are deterministic per name and size (:func:`body`), so any
process can compute the expected digest. Faults that are "transient" happen on the first GET of
a path only, then the path behaves; every GET is counted per path, with its ``Range`` header.

  /ok/NAME              200 with Content-Length, ETag, Range support (206)
  /slow/NAME?rate=B     as ok, but sends about B bytes per second in 16 KiB pieces
  /reset/NAME           first GET: half the body, then a TCP reset
  /flaky/NAME           every GET: at most 100 000 bytes, then a TCP reset (Range honoured)
  /short/NAME           first GET: full Content-Length, half the body, then a clean close
  /stall/NAME           first GET: half the body, then silence (until the server stops)
  /status/CODE/N/NAME   the first N GETs answer CODE (with ?retry_after=S as Retry-After)
  /norange/NAME         never honours Range; the first GET resets halfway
  /gzip/NAME            Content-Encoding: gzip; the URL's bytes are the gzip stream
  /wrongcl/NAME         always announces 100 bytes more than it sends, then closes
  /nolength/NAME        no Content-Length; the body ends when the connection closes
  /redirect/NAME        302 to /ok/NAME
  /loop/NAME            302 to itself
  /scheme/NAME          302 to ftp://127.0.0.1/NAME
  /missing/NAME         404
  /goto/NAME?to=BASE    302 to BASE/ok/NAME (another origin: http to https and back)
  /changing/NAME        first GET: version 1 of the body, cut halfway by a reset; later GETs:
                        version 2 (another ETag), honouring Range only with a matching If-Range
  /trickle/NAME?every=S one byte every S seconds (default 0.5), never stalling long enough
                        for a read timeout
  /bigheader/NAME       a response header line longer than any client accepts (100 KiB)
  /manyheaders/NAME     200 response headers
  /badlength/NAME       Content-Length: '\u00b2' (a digit to str.isdigit, not to HTTP)

``Origin(tls=context)`` serves HTTPS with that server-side ``ssl.SSLContext``.
"""

from __future__ import annotations

import gzip
import hashlib
import random
import socket
import ssl
import struct
import threading
import time
from collections import Counter, defaultdict
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

DEFAULT_SIZE = 64 * 1024


@lru_cache(maxsize=64)
def body(name: str, size: int = DEFAULT_SIZE) -> bytes:
    """The bytes the origin serves for ``name`` at ``size`` (same in every process)."""
    return random.Random(f"{name}:{size}").randbytes(size)  # noqa: S311 - test data


def sha256(data: bytes) -> str:
    """Hex digest helper."""
    return hashlib.sha256(data).hexdigest()


class Origin(ThreadingHTTPServer):
    """The server; ``gets[path]`` counts GETs, ``ranges[path]`` lists their Range headers."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.gets: Counter[str] = Counter()
        self.ranges: defaultdict[str, list[str | None]] = defaultdict(list)
        #: Per path, the If-Range and Authorization headers of each GET (None when absent).
        self.if_ranges: defaultdict[str, list[str | None]] = defaultdict(list)
        self.auths: defaultdict[str, list[str | None]] = defaultdict(list)
        self.stop = threading.Event()
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` for a TLS origin)."""
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def url(self, path: str) -> str:
        """Absolute URL of ``path`` on this server."""
        return self.base + path

    def count(
        self,
        path: str,
        range_header: str | None,
        if_range: str | None = None,
        auth: str | None = None,
    ) -> int:
        """Record one GET of ``path``; return how many there were, this one included."""
        with self._count_lock:
            self.gets[path] += 1
            self.ranges[path].append(range_header)
            self.if_ranges[path].append(if_range)
            self.auths[path].append(auth)
            return self.gets[path]

    def start(self) -> Origin:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release stalled handlers."""
        self.stop.set()
        self.shutdown()
        self.server_close()

    def handle_error(self, request: object, client_address: object) -> None:
        """Faults break connections on purpose; do not print tracebacks for them."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Origin

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Quiet."""

    def do_GET(self) -> None:  # noqa: PLR0912, PLR0915 - one branch per behaviour (the table)
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segments = parts.path.strip("/").split("/")
        n = self.server.count(
            parts.path,
            self.headers.get("Range"),
            self.headers.get("If-Range"),
            self.headers.get("Authorization"),
        )
        kind, name = segments[0], segments[-1]
        size = int(query.get("size", DEFAULT_SIZE))
        data = body(name, size)
        first = n == 1
        if kind == "status":
            code, times = int(segments[1]), int(segments[2])
            if n <= times:
                extra = {"Retry-After": query["retry_after"]} if "retry_after" in query else {}
                self._simple(code, extra)
                return
            kind = "ok"
        if kind == "missing":
            self._simple(404)
        elif kind == "goto":
            self._simple(302, {"Location": f"{query['to']}/ok/{name}"})
        elif kind == "changing":
            version = body(f"{name}:v{1 if first else 2}", size)
            self._send(version, cut=0.5 if first else None, reset=first)
        elif kind == "trickle":
            self._trickle(data, float(query.get("every", 0.5)))
        elif kind == "bigheader":
            self._simple(200, {"X-Padding": "x" * (100 << 10)})
        elif kind == "manyheaders":
            self._simple(200, {f"X-Header-{i}": str(i) for i in range(200)})
        elif kind == "badlength":
            self._raw_length(data, "\u00b2")
        elif kind in ("redirect", "loop", "scheme"):
            target = {
                "redirect": f"/ok/{name}?{parts.query}",
                "loop": self.path,
                "scheme": f"ftp://127.0.0.1/{name}",
            }[kind]
            self._simple(302, {"Location": target})
        elif kind == "gzip":
            self._send(gzip.compress(data, mtime=0), encoding="gzip")
        elif kind == "wrongcl":
            self._send(data, length=len(data) + 100, close=True)
        elif kind == "nolength":
            self._send(data, length=None, close=True)
        elif kind == "norange":
            self._send(data, honour_range=False, cut=0.5 if first else None, reset=True)
        elif kind == "reset":
            self._send(data, cut=0.5 if first else None, reset=True)
        elif kind == "flaky":
            self._send(data, cut_bytes=100_000, reset=True)
        elif kind == "short":
            self._send(data, cut=0.5 if first else None)
        elif kind == "stall":
            self._send(data, cut=0.5 if first else None, stall=first)
        elif kind == "slow":
            self._send(data, rate=float(query.get("rate", 4 << 20)))
        else:
            self._send(data)

    def _trickle(self, data: bytes, every: float) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        for i in range(len(data)):
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:  # the client gave up
                return
            if self.server.stop.wait(every):
                return

    def _raw_length(self, data: bytes, length: str) -> None:
        self.send_response(200)
        self.send_header("Content-Length", length)  # encoded as latin-1 by http.server
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _simple(self, code: int, headers: dict[str, str] | None = None) -> None:
        payload = f"{code}\n".encode()
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send(  # noqa: PLR0912 - each fault is one branch
        self,
        data: bytes,
        *,
        encoding: str | None = None,
        length: int | None = -1,
        close: bool = False,
        honour_range: bool = True,
        cut: float | None = None,
        cut_bytes: int | None = None,
        reset: bool = False,
        stall: bool = False,
        rate: float | None = None,
    ) -> None:
        etag = '"' + sha256(data)[:16] + '"'
        start = 0
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and honour_range and (if_range is None or if_range == etag):
            start = int(rng.removeprefix("bytes=").split("-")[0])
        part = data[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        if length == -1:
            length = len(part)
        if length is not None:
            self.send_header("Content-Length", str(length))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("ETag", etag)
        if close or length is None or cut is not None or cut_bytes is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if cut is not None:
            part = part[: int(len(part) * cut)]
        if cut_bytes is not None and len(part) > cut_bytes:
            part = part[:cut_bytes]
        else:
            reset = reset and cut is not None
        if rate:
            piece = 16 * 1024
            for i in range(0, len(part), piece):
                self.wfile.write(part[i : i + piece])
                self.wfile.flush()
                if self.server.stop.wait(piece / rate):
                    return
        else:
            self.wfile.write(part)
        self.wfile.flush()
        if stall:
            self.server.stop.wait(30)
        if reset:
            # Let the client read what was sent (a reset discards data not yet read), then
            # reset: SO_LINGER with a zero timeout turns close() into a TCP reset.
            self.server.stop.wait(0.2)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()


def wait_until(predicate: object, timeout: float = 10.0) -> bool:
    """Poll ``predicate()`` (for state in other processes, where no event can be shared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False
