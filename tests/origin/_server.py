"""The server half of the origin toolkit: bind, serve, record every request, stop cleanly.

A :class:`Server` is a ``ThreadingHTTPServer`` on 127.0.0.1 (an ephemeral port unless one is
asked for) that serves in a daemon thread. Every request is recorded as a :class:`Request`
(method, path, query, headers, its number on that path, the status answered) before a handler
sees it, so a test reads what the origin was asked without the handler's help. What is answered
is up to a *handler*: a callable that gets the :class:`Exchange` (the request handler of
``http.server``, with a few helpers) and answers through it. ``_handlers.py`` builds them.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qs, urlsplit

from ._handlers import not_found

if TYPE_CHECKING:
    from types import TracebackType

_S = TypeVar("_S", bound="Server")

#: Answers one request through the exchange it is given.
Handler = Callable[["Exchange"], None]

#: How long a reset waits before it fires, so that the client reads what was sent first (a reset
#: discards data the peer has not read yet).
RESET_GRACE = 0.2
#: The longest any handler holds a request (a stall, a hang, a gate): tests end long before.
HOLD_MAX = 60.0


@dataclass
class Request:
    """One request as the origin received it."""

    method: str
    #: The request target as sent: path and query.
    target: str
    #: The target's path, without the query.
    path: str
    #: The query's parameters, the last value of each.
    query: dict[str, str]
    #: The request headers, names lower-cased.
    headers: dict[str, str]
    #: This request's number among the requests for the same path (any method), from 1.
    n: int
    #: The status answered (``None`` until a status line was sent, or when none ever was).
    status: int | None = field(default=None, compare=False)

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or ``None``."""
        return self.headers.get(name.lower())


class Exchange(BaseHTTPRequestHandler):
    """One request being answered: ``http.server``'s handler plus the toolkit's helpers.

    Wrapping handlers (``paced``, ``cut``, ``hold``) set :attr:`chunk`, :attr:`every`,
    :attr:`limit` and :attr:`pause` before the inner handler runs; :meth:`write_body` obeys them,
    so any handler that writes its body through it can be slowed, cut or held.
    """

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK add 40 ms to every answer.
    disable_nagle_algorithm = True
    server: Server
    #: The request, as recorded (set before the handler runs).
    info: Request
    #: Bytes per write, and seconds between writes (``None``, ``0``: one write, no wait).
    chunk: int | None = None
    every: float = 0.0
    #: Bytes of the body sent before the connection ends as :attr:`ending` says.
    limit: int | None = None
    #: ``"reset"`` (a TCP reset), ``"close"`` (a clean close), ``"stall"`` (silence until the
    #: server stops, then a close).
    ending: str = "close"
    #: ``(offset, reached, release)``: at ``offset`` bytes set ``reached``, wait for ``release``.
    pause: tuple[int, threading.Event, threading.Event] | None = None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Quiet: pytest shows the test's own output."""

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        if self.command not in self.server.methods:
            self.send_error(501, f"Unsupported method ({self.command!r})")
            return
        # One exchange serves every request of a kept-alive connection: start each plain.
        self.chunk, self.every, self.limit, self.ending, self.pause = None, 0.0, None, "close", None
        self.info = self.server.record(self)
        self.server.handler_for(self.info)(self)

    def send_response(self, code: int, message: str | None = None) -> None:
        """Send the status line, and record the status on the request."""
        info = getattr(self, "info", None)
        if info is not None:
            info.status = code
        super().send_response(code, message)

    # -- answering --------------------------------------------------------------------------
    def respond(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        length: int | None = -1,
    ) -> None:
        """Send a whole answer: status, ``headers``, ``Content-Length``, then ``body``.

        ``length`` is announced instead of ``len(body)`` when given; ``None`` announces none
        and ends the body by closing the connection (a 204 or 304 has no body to end). A HEAD
        request gets no body.
        """
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if length == -1:
            length = len(body)
        if length is not None:
            self.send_header("Content-Length", str(length))
        if (length is None and status not in (204, 304)) or self.limit is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.write_body(body)

    def write_body(self, data: bytes | memoryview) -> None:
        """Write ``data`` as :attr:`chunk`, :attr:`every`, :attr:`limit` and :attr:`pause` say.

        A client that hangs up ends the writing quietly: faults break connections on purpose.
        """
        view = memoryview(data)
        cut = self.limit is not None and self.limit < len(view)
        if self.limit is not None:
            view = view[: self.limit]
        try:
            if self.pause is not None and self.pause[0] < len(view):
                offset, reached, release = self.pause
                self._write(view[:offset])
                reached.set()
                self.wait(release)
                view = view[offset:]
            self._write(view)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return
        if cut or self.limit is not None:
            self.end(self.ending if cut else "close")

    def _write(self, view: memoryview) -> None:
        step = self.chunk or len(view) or 1
        for start in range(0, len(view), step):
            if start and self.every and self.wait(None, self.every):
                raise ConnectionAbortedError("the origin is stopping")
            self.wfile.write(view[start : start + step])
            if self.every:
                self.wfile.flush()

    def end(self, how: str) -> None:
        """End the connection: ``"reset"``, ``"stall"`` (until the server stops) or ``"close"``."""
        self.close_connection = True
        if how == "stall":
            self.wait(None, HOLD_MAX)
        elif how == "reset":
            self.reset()

    def reset(self) -> None:
        """Abort the connection with a TCP reset, after letting the client read what it was sent.

        ``SO_LINGER`` with a zero timeout turns ``close()`` into a reset.
        """
        self.close_connection = True
        self.wait(None, RESET_GRACE)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def wait(self, event: threading.Event | None, timeout: float = HOLD_MAX) -> bool:
        """Wait until ``event`` is set or the server stops (or ``timeout``); True if stopping.

        Every hold in a handler goes through here, so :meth:`Server.close` never waits on a
        handler that holds a request.
        """
        stop = self.server.stopping
        if event is None:
            return stop.wait(timeout)
        remaining = timeout
        while not event.wait(min(0.02, remaining)):
            remaining -= 0.02
            if stop.is_set() or remaining <= 0:
                break
        return stop.is_set()


class Server(ThreadingHTTPServer):
    """A threaded HTTP origin on 127.0.0.1 that records every request.

    ``handler`` answers every request no route claims (default: 404). :meth:`route` sets the
    handler of one path (or one exact target, query included). Use as a context manager, or
    call :meth:`start` and :meth:`close`. ``tls`` serves HTTPS with that server-side context.
    ``methods`` are the methods handled; any other is answered 501 and not recorded.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        methods: tuple[str, ...] = ("GET", "HEAD"),
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__((host, port), Exchange)
        self.host = host
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.handler = handler
        self.methods = methods
        self.routes: dict[str, Handler] = {}
        #: Set by :meth:`close`: every held request lets go.
        self.stopping = threading.Event()
        self._log: list[Request] = []
        self._per_path: Counter[str] = Counter()
        self._arrived = threading.Condition()
        self._thread: threading.Thread | None = None

    # -- addresses --------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server_address[1])

    @property
    def base(self) -> str:
        """``http://HOST:PORT`` (``https://`` with TLS); the host is ``127.0.0.1`` unless
        ``host`` named another loopback address."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def url(self, path: str = "") -> str:
        """The absolute URL of ``path`` (a leading ``/`` is added when missing)."""
        return self.base + ("/" + path if path and not path.startswith("/") else path)

    def route(self, path: str, handler: Handler) -> str:
        """Answer requests for ``path`` with ``handler``; return the path's URL."""
        self.routes[path] = handler
        return self.url(path)

    def handler_for(self, request: Request) -> Handler:
        """The route of the exact target, else of the path, else the default, else 404."""
        found = self.routes.get(request.target) or self.routes.get(request.path)
        return found or self.handler or not_found()

    # -- the record -------------------------------------------------------------------------
    def record(self, exchange: Exchange) -> Request:
        """Record the request ``exchange`` is answering (subclasses may note more)."""
        parts = urlsplit(exchange.path)
        with self._arrived:
            self._per_path[parts.path] += 1
            request = Request(
                method=exchange.command,
                target=exchange.path,
                path=parts.path,
                query={k: v[-1] for k, v in parse_qs(parts.query).items()},
                headers={k.lower(): v for k, v in exchange.headers.items()},
                n=self._per_path[parts.path],
            )
            self._log.append(request)
            self._arrived.notify_all()
        return request

    def requests(self, path: str | None = None, method: str | None = None) -> list[Request]:
        """The requests received (for ``path``, with ``method`` when given), oldest first."""
        return self._select(path, method)

    def count(self, path: str | None = None, method: str | None = None) -> int:
        """How many requests (for ``path``, with ``method`` when given) were received."""
        return len(self._select(path, method))

    def counts(self) -> Counter[tuple[str, str]]:
        """The request counts by ``(method, path)``."""
        return Counter((r.method, r.path) for r in self._select(None, None))

    def _select(self, path: str | None, method: str | None) -> list[Request]:
        with self._arrived:
            return [
                r
                for r in self._log
                if (path is None or r.path == path) and (method is None or r.method == method)
            ]

    def clear(self) -> None:
        """Forget every request received so far (request numbers start again from 1)."""
        with self._arrived:
            self._log.clear()
            self._per_path.clear()

    def wait_for(
        self, n: int, path: str | None = None, method: str | None = None, timeout: float = 10.0
    ) -> bool:
        """Wait until ``n`` requests (for ``path``, with ``method``) arrived; False on timeout."""
        with self._arrived:
            return self._arrived.wait_for(
                lambda: (
                    sum(
                        1
                        for r in self._log
                        if (path is None or r.path == path)
                        and (method is None or r.method == method)
                    )
                    >= n
                ),
                timeout,
            )

    # -- life -------------------------------------------------------------------------------
    def start(self: _S) -> _S:
        """Serve in a daemon thread; return the server."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, let go of held requests, release the port. Safe to call twice."""
        self.stopping.set()
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def handle_error(self, request: object, client_address: object) -> None:
        """Faults break connections on purpose; print no traceback for them."""
