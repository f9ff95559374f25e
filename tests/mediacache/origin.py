"""A real HTTP origin on 127.0.0.1 whose answers each test sets, with a count of every GET.

Routes are set per path: status, headers, body, validators (an ``ETag`` or ``Last-Modified``
that turns a matching conditional request into a 304), a body cut short of its
``Content-Length`` or sent without one (ended by closing the connection), a gate that holds
the answer until the test opens it, or a redirect.
Paths under ``/gen/<n>/<size>`` need no route: they answer ``size`` bytes derived from ``n``,
cacheable for an hour, so many processes can fetch many URLs without any setup.
The server, its record of requests and the behaviours are the toolkit's (``tests/origin``).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.origin import Exchange, Handler, Request, Server, gated, static, status
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, gated, static, status


def gen_body(n: int, size: int) -> bytes:
    """The body ``/gen/<n>/<size>`` serves (deterministic, so any process can check it)."""
    seed = hashlib.sha256(str(n).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _generated(ex: Exchange) -> None:
    """``/gen/<n>/<size>``, else 404."""
    if not ex.info.target.startswith("/gen/"):
        ex.respond(404, b"no such route")
        return
    _, _, n, size = ex.info.target.split("/")[:4]
    headers = {"Cache-Control": "max-age=3600"}
    static(gen_body(int(n), int(size)), headers=headers, ranges=False)(ex)


def _unended(body: bytes, code: int, headers: dict[str, str], length: int | None) -> Handler:
    """``body`` announced as ``length`` bytes (``None``: no length), then a close."""

    def answer(ex: Exchange) -> None:
        closing = {} if length is None else {"Connection": "close"}  # respond() says it for None
        ex.respond(code, body, {**headers, **closing}, length=length)
        ex.close_connection = True

    return answer


class Origin(Server):
    """The server; :meth:`start` runs it in a daemon thread."""

    def __init__(self) -> None:
        super().__init__(_generated, methods=("GET",))
        #: Set at every GET (a test clears it to wait for the next one).
        self.first_get = threading.Event()

    def record(self, exchange: Exchange) -> Request:
        """Record the GET, then tell whoever waits for one."""
        request = super().record(exchange)
        self.first_get.set()
        return request

    @property
    def gets(self) -> Counter[str]:
        """GETs per request target (path and query)."""
        return Counter(r.target for r in self.requests())

    @property
    def seen(self) -> list[dict[str, str]]:
        """Each GET's headers (names lower-cased), with its target as ``"path"``."""
        return [{"path": r.target, **r.headers} for r in self.requests()]

    @property
    def answers(self) -> Counter[tuple[str, int]]:
        """Answers by ``(target, status)``."""
        return Counter((r.target, r.status) for r in self.requests() if r.status is not None)

    def route(  # type: ignore[override]  # a route from what the test says it answers
        self,
        path: str,
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
    ) -> str:
        """Set what ``path`` answers; return its URL.

        ``short_by``: announce that many bytes more than are sent; ``length=False``: announce
        no length; ``gate``: answer once it is set; ``location``: a redirect with ``status``.
        """
        fixed = dict(headers or {})
        handler: Handler
        if location is not None:
            handler = _status(status, {"Location": location})
        elif short_by or not length:
            if etag:
                fixed["ETag"] = etag
            if last_modified:
                fixed["Last-Modified"] = last_modified
            handler = _unended(body, status, fixed, len(body) + short_by if length else None)
        else:
            handler = static(
                body,
                status=status,
                headers=fixed,
                etag=etag,
                last_modified=last_modified,
                ranges=False,
            )
        if gate is not None:
            handler = gated(handler, gate)
        return super().route(path, handler)


def _status(code: int, headers: dict[str, str]) -> Handler:
    """An empty answer (``route``'s own ``status`` argument hides the toolkit's name)."""
    return status(code, b"", headers=headers)
