"""One HTTP origin for the tests and benchmarks: real sockets on 127.0.0.1, counted requests.

``with Server(static(b"data")) as origin: origin.url("/x")`` serves; ``origin.requests()`` says
what was asked (method, path, headers, status answered). Each area's origin composes the
handlers of this package with the few behaviours that are its own.

Importable as ``origin`` (pytest puts ``tests/`` on ``sys.path``) and as ``tests.origin`` (from
the repository root, as the benchmarks and the type checker see it): it imports only itself.
"""

from __future__ import annotations

from ._handlers import (
    byte_range,
    cut,
    files,
    gated,
    hang,
    hold,
    not_found,
    paced,
    redirect,
    sequence,
    static,
    status,
)
from ._server import Exchange, Handler, Request, Server

__all__ = [
    "Exchange",
    "Handler",
    "Request",
    "Server",
    "byte_range",
    "cut",
    "files",
    "gated",
    "hang",
    "hold",
    "not_found",
    "paced",
    "redirect",
    "sequence",
    "static",
    "status",
]
