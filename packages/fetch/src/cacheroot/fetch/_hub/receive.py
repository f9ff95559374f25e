"""A large file's bytes received off the event loop, into buffers that are not copied again.

aiohttp's client receives on the event loop's thread: 256 KiB reads, a parser that copies the
body, and chunks joined again into the sizes asked for. For a file of gigabytes that is most
of the hub's CPU time, on the one thread that also answers every other client: measured here,
0.5 to 0.9 CPU seconds per GiB received, where ``http.client`` reading into a buffer of its own
(``readinto``) takes 0.2.

So a fill of a large file whose size the Hub declared (see :mod:`.fills`) asks for its bytes
with :class:`Download`: one ``GET`` over a connection of its own, sent and read in a thread of
:data:`RECEIVE_THREADS`. Everything around it stays where it was: the redirect policy decides
each hop, on the address, before the request is sent (:mod:`.redirects`); the breakers see each
hop's answer; the answer's headers have the deadline, each read of the body
:data:`READ_TIMEOUT`. Small files, files whose size is not known, and bytes streamed through
unstored keep the pooled aiohttp sessions: a connection per file costs a handshake, which only
a large file makes up for.

A thread blocked on its socket cannot be cancelled; :meth:`Download.abort` shuts the socket
down from any thread, which ends the blocked read at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Mapping

    from multidict import CIMultiDictProxy

    from .redirects import Hop

__all__ = [
    "READ_SIZE",
    "READ_TIMEOUT",
    "RECEIVE_THREADS",
    "Download",
    "Head",
    "ReceiveError",
    "receiving",
]

#: Threads that send the requests and receive the bodies of large files (all fills together).
RECEIVE_THREADS = 32
_RECEIVE = ThreadPoolExecutor(max_workers=RECEIVE_THREADS, thread_name_prefix="cacheroot-hub-rx")
#: Seconds one read of a body may wait for its next bytes.
READ_TIMEOUT = 60.0
#: Bytes asked of the socket in one read. Each read makes a ``bytes`` of its own (http.client
#: has no read into the caller's buffer that returns what has come): kept under 1 MiB, those
#: stay reusable heap rather than growing every receiving thread's arena by a buffer's size.
READ_SIZE = 1 << 20


def receiving() -> ThreadPoolExecutor:
    """The threads that receive large files (a fill runs its whole receive in one of them)."""
    return _RECEIVE


class ReceiveError(Exception):
    """The connection failed while the body was received (reset, cut short, stalled): the
    upstream's failure, never the store's (a failed write is the caller's ``OSError``)."""

    def __init__(self, reason: str, *, stalled: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        #: No bytes came for :data:`READ_TIMEOUT` seconds.
        self.stalled = stalled


class Head(NamedTuple):
    """An answer's status line and headers (names as sent; look them up in any case)."""

    status: int
    headers: CIMultiDictProxy[str]
    #: ``Content-Length``; ``None`` for a chunked body.
    length: int | None


class _Pinned(http.client.HTTPSConnection):
    """A TLS connection to an address, checked against the name the redirect gave."""

    def __init__(
        self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls, self._name = context, name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._name)


class Download:
    """One ``GET`` of ``hop`` with ``headers``, over a connection of its own.

    :meth:`open` (on the loop) waits for the answer's headers, sent and read in a thread;
    :meth:`readinto` is then called from one thread until it returns 0; :meth:`close` ends it.
    """

    def __init__(self, hop: Hop, headers: Mapping[str, str]) -> None:
        parts = urlsplit(hop.url)
        self._https = parts.scheme.lower() == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._name = hop.server_hostname or self._host
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = dict(headers)
        if hop.host_header is not None:
            self._headers["Host"] = hop.host_header
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._aborted = False

    async def open(self, deadline: float) -> Head:
        """The answer's status and headers; raises ``TimeoutError`` past ``deadline`` seconds
        (connecting included, the connection shut), ``OSError`` or ``HTTPException`` else."""
        job = asyncio.wrap_future(_RECEIVE.submit(self._open, deadline))
        try:
            return await asyncio.wait_for(asyncio.shield(job), deadline)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self.abort()
            await asyncio.wait([job])  # its thread lets go of the socket before it is closed
            self.close()
            raise

    def _open(self, deadline: float) -> Head:
        if self._https:
            context = ssl.create_default_context()
            self._conn = _Pinned(
                self._host, self._port, timeout=deadline, context=context, name=self._name
            )
        else:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=deadline)
        if self._aborted:
            raise ConnectionAbortedError("the request was given up before it was sent")
        self._conn.request("GET", self._target, headers=self._headers)
        resp = self._conn.getresponse()
        self._resp = resp
        if self._conn.sock is not None:
            self._conn.sock.settimeout(READ_TIMEOUT)
        from multidict import CIMultiDict, CIMultiDictProxy  # noqa: PLC0415 - aiohttp's, hub only

        headers = CIMultiDictProxy(CIMultiDict(resp.msg.items()))
        return Head(resp.status, headers, resp.length)

    def readinto(self, view: memoryview) -> int:
        """Read the next bytes of the body into ``view`` (blocking): what has come, up to its
        length (reads of :data:`READ_SIZE` until one finds less than it asked for: the
        socket is drained); 0 only at the body's end.

        Raises :class:`ReceiveError` when the connection fails or stalls.
        """
        resp = self._resp
        if resp is None:
            return 0
        got = 0
        try:
            while got < len(view):
                asked = min(READ_SIZE, len(view) - got)
                n = resp.readinto1(view[got : got + asked])
                got += n
                if n < asked:
                    break
        except TimeoutError:
            raise ReceiveError(
                f"the upstream sent nothing for {READ_TIMEOUT:g} s", stalled=True
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ReceiveError(f"{type(exc).__name__}: {exc}") from None
        return got

    def abort(self) -> None:
        """End a blocked read or connect at once (from any thread)."""
        self._aborted = True
        conn = self._conn
        sock = None if conn is None else conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the connection (once no thread reads from it)."""
        if self._conn is not None:
            self._conn.close()
