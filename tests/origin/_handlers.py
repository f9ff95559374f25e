"""Behaviours of the origin toolkit, as small handlers that compose.

Answers: :func:`static` (bytes with ``ETag``/``Last-Modified`` validators, conditional requests
and single byte ranges), :func:`files` (a directory, sent with ``sendfile``), :func:`status`,
:func:`redirect`, :func:`not_found`, :func:`hang`. Wrappers change how another handler's body
leaves: :func:`paced` (byte-exact pieces at an interval), :func:`cut` (a reset, a clean close or
a stall after so many bytes), :func:`hold` (a pause mid-body until the test releases it),
:func:`gated` (no answer before an event). :func:`sequence` picks a handler by the request's
number on its path: ``sequence(status(429, retry_after="1"), static(data))``.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._server import Exchange, Handler

#: One byte range: ``bytes=FIRST-[LAST]`` or ``bytes=-SUFFIX`` (a list of several is ignored).
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
#: What :func:`byte_range` returns for a range past the end (answered 416).
UNSATISFIABLE = (-1, -1)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``(first, last)`` byte a ``Range`` header asks of ``size`` bytes.

    ``None`` when there is no range to honour (absent, malformed, several ranges, an empty
    body); :data:`UNSATISFIABLE` when it cannot be satisfied (416).
    """
    match = _RANGE.fullmatch((header or "").strip())
    if match is None or size == 0:
        return None
    first, last = match.groups()
    if not first:
        if not last:
            return None
        return (max(0, size - int(last)), size - 1) if int(last) else UNSATISFIABLE
    start = int(first)
    if start >= size:
        return UNSATISFIABLE
    end = min(int(last), size - 1) if last else size - 1
    return None if end < start else (start, end)


def static(
    data: bytes,
    *,
    etag: str | None = None,
    last_modified: str | None = None,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
    status: int = 200,
    ranges: bool = True,
    conditional: bool = True,
) -> Handler:
    """Answer ``data`` with ``status``, its validators and ``headers``.

    With ``conditional``, a matching ``If-None-Match`` (or, without one, ``If-Modified-Since``
    equal to ``last_modified``) is answered 304. With ``ranges``, one ``Range`` is answered 206
    (416 past the end) unless an ``If-Range`` names another validator.
    """
    fixed = dict(headers or {})
    if content_type is not None:
        fixed["Content-Type"] = content_type
    if etag is not None:
        fixed["ETag"] = etag
    if last_modified is not None:
        fixed["Last-Modified"] = last_modified
    if ranges:
        fixed["Accept-Ranges"] = "bytes"

    def answer(ex: Exchange) -> None:
        inm, ims = ex.info.header("If-None-Match"), ex.info.header("If-Modified-Since")
        if conditional and (
            (etag is not None and inm == etag)
            or (last_modified is not None and inm is None and ims == last_modified)
        ):
            ex.respond(304, b"", fixed, length=None)
            return
        wanted = byte_range(ex.info.header("Range"), len(data)) if ranges else None
        if_range = ex.info.header("If-Range")
        if wanted is not None and if_range is not None and if_range not in (etag, last_modified):
            wanted = None
        if wanted == UNSATISFIABLE:
            ex.respond(416, b"", {**fixed, "Content-Range": f"bytes */{len(data)}"})
        elif wanted:
            first, last = wanted
            span = {"Content-Range": f"bytes {first}-{last}/{len(data)}"}
            ex.respond(206, data[first : last + 1], {**fixed, **span})
        else:
            ex.respond(status, data, fixed)

    return answer


def files(directory: str, *, content_type: str = "application/octet-stream") -> Handler:
    """Serve the file named by the path's last segment from ``directory``, ``Range`` honoured.

    The kernel copies the bytes (``os.sendfile`` from the page cache), so a client measured
    against it is not measuring Python's copying. Pacing and cuts do not apply.
    """

    def answer(ex: Exchange) -> None:
        path = os.path.join(directory, os.path.basename(ex.info.path))
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            ex.respond(404, b"not found\n")
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            wanted = byte_range(ex.info.header("Range"), size)
            if wanted == UNSATISFIABLE:
                ex.respond(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            first, last = wanted or (0, size - 1)
            ex.send_response(206 if wanted else 200)
            if wanted:
                ex.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            ex.send_header("Accept-Ranges", "bytes")
            ex.send_header("Content-Length", str(last + 1 - first))
            ex.send_header("Content-Type", content_type)
            ex.end_headers()
            ex.wfile.flush()
            if ex.command == "HEAD":
                return
            offset, left = first, last + 1 - first
            while left > 0:
                sent = os.sendfile(ex.connection.fileno(), f.fileno(), offset, left)
                if sent == 0:
                    break
                offset, left = offset + sent, left - sent

    return answer


def status(
    code: int,
    body: bytes | None = None,
    *,
    headers: dict[str, str] | None = None,
    retry_after: str | None = None,
) -> Handler:
    """Answer ``code`` with ``body`` (default: the code and a newline) and ``headers``."""
    fixed = dict(headers or {})
    if retry_after is not None:
        fixed["Retry-After"] = retry_after
    payload = f"{code}\n".encode() if body is None else body

    def answer(ex: Exchange) -> None:
        ex.respond(code, payload, fixed)

    return answer


def not_found() -> Handler:
    """404, for any path nothing else claims."""
    return status(404, b"not found\n")


def redirect(location: str, code: int = 302) -> Handler:
    """Send the client to ``location`` (relative, absolute, or another scheme)."""
    return status(code, b"", headers={"Location": location})


def hang(reached: threading.Event | None = None, release: threading.Event | None = None) -> Handler:
    """Answer nothing: hold the request until ``release`` (or the server stops), then hang up.

    ``reached`` is set once the request is held.
    """

    def answer(ex: Exchange) -> None:
        if reached is not None:
            reached.set()
        ex.wait(release)
        ex.close_connection = True

    return answer


def sequence(*handlers: Handler) -> Handler:
    """The n-th request of a path gets the n-th handler; the last one answers the rest."""

    def answer(ex: Exchange) -> None:
        handlers[min(ex.info.n, len(handlers)) - 1](ex)

    return answer


def paced(inner: Handler, *, chunk: int, every: float) -> Handler:
    """``inner``'s body in writes of exactly ``chunk`` bytes, ``every`` seconds apart."""

    def answer(ex: Exchange) -> None:
        ex.chunk, ex.every = chunk, every
        inner(ex)

    return answer


def cut(inner: Handler, after: int, *, then: str = "reset") -> Handler:
    """``inner``'s body ends after ``after`` bytes: ``then`` is "reset", "close" or "stall".

    The headers (``Content-Length`` included) are ``inner``'s, so the client expects more.
    """
    if then not in ("reset", "close", "stall"):
        raise ValueError(f"cut(then=...) takes 'reset', 'close' or 'stall', found {then!r}")

    def answer(ex: Exchange) -> None:
        ex.limit, ex.ending = after, then
        inner(ex)

    return answer


def hold(inner: Handler, at: int, *, reached: threading.Event, release: threading.Event) -> Handler:
    """``inner`` sends ``at`` bytes of its body, sets ``reached``, waits for ``release``."""

    def answer(ex: Exchange) -> None:
        ex.pause = (at, reached, release)
        inner(ex)

    return answer


def gated(inner: Handler, gate: threading.Event) -> Handler:
    """``inner`` answers once ``gate`` is set (or the server stops)."""

    def answer(ex: Exchange) -> None:
        ex.wait(gate)
        inner(ex)

    return answer
