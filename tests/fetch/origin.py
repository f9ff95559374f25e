"""A fault-injecting origin server for the fetch tests (real sockets on 127.0.0.1).

The first path segment picks the behaviour, the last names the file; ``?size=N`` sets its
length (default 64 KiB). Bodies are deterministic per name and size (:func:`body`), so any
process can compute the expected digest. Faults that are "transient" happen on the first GET of
a path only, then the path behaves; every GET is recorded (``tests/origin``), and ``gets``,
``ranges``, ``if_ranges`` and ``auths`` read the record per path.

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
import time
from collections import Counter, defaultdict
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

    from tests.origin import Exchange, Handler, Server, cut, paced, redirect, static, status
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, cut, paced, redirect, static, status

DEFAULT_SIZE = 64 * 1024
#: The piece a ``/slow/`` body is sent in.
SLOW_PIECE = 16 * 1024


@lru_cache(maxsize=64)
def body(name: str, size: int = DEFAULT_SIZE) -> bytes:
    """The bytes the origin serves for ``name`` at ``size`` (same in every process)."""
    return random.Random(f"{name}:{size}").randbytes(size)  # noqa: S311 - test data


def sha256(data: bytes) -> str:
    """Hex digest helper."""
    return hashlib.sha256(data).hexdigest()


def _ok(data: bytes, *, ranges: bool = True, headers: dict[str, str] | None = None) -> Handler:
    """``data`` with its ETag, Range honoured (``If-Range`` must match the ETag)."""
    etag = '"' + sha256(data)[:16] + '"'
    return static(data, etag=etag, headers=headers, ranges=ranges, conditional=False)


class Origin(Server):
    """The server; ``gets[path]`` counts GETs, ``ranges[path]`` lists their Range headers."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(self._answer, tls=tls, methods=("GET",))

    @property
    def gets(self) -> Counter[str]:
        """GETs per path."""
        return Counter(r.path for r in self.requests())

    def _headers(self, name: str) -> defaultdict[str, list[str | None]]:
        seen: defaultdict[str, list[str | None]] = defaultdict(list)
        for r in self.requests():
            seen[r.path].append(r.header(name))
        return seen

    @property
    def ranges(self) -> defaultdict[str, list[str | None]]:
        """Per path, the Range header of each GET (None when absent)."""
        return self._headers("Range")

    @property
    def if_ranges(self) -> defaultdict[str, list[str | None]]:
        """Per path, the If-Range header of each GET (None when absent)."""
        return self._headers("If-Range")

    @property
    def auths(self) -> defaultdict[str, list[str | None]]:
        """Per path, the Authorization header of each GET (None when absent)."""
        return self._headers("Authorization")

    @staticmethod
    def _answer(ex: Exchange) -> None:
        _behaviour(ex)(ex)


def _behaviour(ex: Exchange) -> Handler:  # noqa: PLR0911, PLR0912 - one branch per row of the table
    """The handler of this GET, from the table in the module docstring."""
    info = ex.info
    segments = info.path.strip("/").split("/")
    kind, name = segments[0], segments[-1]
    size = int(info.query.get("size", DEFAULT_SIZE))
    data = body(name, size)
    first = info.n == 1
    if kind == "status":
        code, times = int(segments[1]), int(segments[2])
        if info.n <= times:
            return status(code, retry_after=info.query.get("retry_after"))
        kind = "ok"
    half = len(data) // 2
    if kind == "missing":
        return status(404)
    if kind == "goto":
        return redirect(f"{info.query['to']}/ok/{name}")
    if kind == "redirect":
        return redirect(f"/ok/{name}?{info.target.partition('?')[2]}")
    if kind == "loop":
        return redirect(info.target)
    if kind == "scheme":
        return redirect(f"ftp://127.0.0.1/{name}")
    if kind == "changing":
        version = body(f"{name}:v{1 if first else 2}", size)
        return cut(_ok(version), _half_of_rest(ex, version)) if first else _ok(version)
    if kind == "trickle":
        return paced(_closing(data), chunk=1, every=float(info.query.get("every", 0.5)))
    if kind == "bigheader":
        return status(200, headers={"X-Padding": "x" * (100 << 10)})
    if kind == "manyheaders":
        return status(200, headers={f"X-Header-{i}": str(i) for i in range(200)})
    if kind == "badlength":
        return _raw_length(data, "\u00b2")
    if kind == "gzip":
        return _ok(gzip.compress(data, mtime=0), headers={"Content-Encoding": "gzip"})
    if kind == "wrongcl":
        return _length(data, len(data) + 100)
    if kind == "nolength":
        return _length(data, None)
    if kind == "norange":
        return cut(_ok(data, ranges=False), half) if first else _ok(data, ranges=False)
    if kind == "reset":
        return cut(_ok(data), _half_of_rest(ex, data)) if first else _ok(data)
    if kind == "flaky":
        return cut(_ok(data), 100_000)
    if kind == "short":
        return cut(_ok(data), _half_of_rest(ex, data), then="close") if first else _ok(data)
    if kind == "stall":
        return cut(_ok(data), _half_of_rest(ex, data), then="stall") if first else _ok(data)
    if kind == "slow":
        rate = float(info.query.get("rate", 4 << 20))
        return paced(_ok(data), chunk=SLOW_PIECE, every=SLOW_PIECE / rate)
    return _ok(data)


def _half_of_rest(ex: Exchange, data: bytes) -> int:
    """Half of what this GET asks for (a first GET may already resume a partial)."""
    rng = ex.info.header("Range")
    start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
    return (len(data) - start) // 2


def _closing(data: bytes) -> Handler:
    """``data`` with its length, and ``Connection: close`` (the trickle)."""

    def answer(ex: Exchange) -> None:
        ex.respond(200, data, {"Connection": "close"})
        ex.close_connection = True

    return answer


def _length(data: bytes, length: int | None) -> Handler:
    """``data`` announced as ``length`` bytes (``None``: no length), then a close."""

    def answer(ex: Exchange) -> None:
        headers = {"ETag": '"' + sha256(data)[:16] + '"'}
        if length is not None:  # without a length, respond() says the connection closes
            headers["Connection"] = "close"
        ex.respond(200, data, headers, length=length)
        ex.close_connection = True

    return answer


def _raw_length(data: bytes, length: str) -> Handler:
    """A Content-Length that is not a number (http.server encodes it as latin-1)."""

    def answer(ex: Exchange) -> None:
        ex.respond(200, data, {"Content-Length": length}, length=None)  # and it closes

    return answer


def wait_until(predicate: object, timeout: float = 10.0) -> bool:
    """Poll ``predicate()`` (for state in other processes, where no event can be shared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False
