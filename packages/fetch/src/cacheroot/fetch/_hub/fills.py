"""Files being fetched into the hub's store, and the clients that read them as they grow.

A :class:`Fill` is one file on its way into the store. Its bytes go to a partial file beside the
blob; clients that ask meanwhile read that partial as it grows (:func:`follow`) and never wait
for the whole download. Once the size and the digest the Hub gave check out, the partial is
renamed into place. When the fill finds the file already stored (another hub process on the
store fetched it while this one waited for the lock), that stored file is what its readers read:
nothing is copied.

What a client may be sent, and when:

- Never a byte past the size the Hub declared: a body that runs longer fails the fill
  (:class:`BadBytesError`), as does a ``Content-Length`` other than the declared size.
- Never the last byte of a file before its digest is checked, so bytes that fail it never reach
  a client whole. A file of at most :data:`SMALL` bytes is answered only once checked and
  stored: a digest that fails is then an error status with ``X-Error-Message`` (which
  huggingface_hub shows), never a cut connection. A larger file's headers go out with its
  first bytes; if it fails later, cutting the connection is all that is left (the client sees
  a short body).
- A larger file's last byte goes out once its digest checked out, without waiting for the
  file's sync and publish (see below): a client that has it whole may, for a moment, not find
  it stored yet, and a hub stopped in that moment drops it (it is fetched again).
- The status an error answer carries is the upstream's own for a 429 or 5xx, 502 otherwise.
- Ranges (RFC 9110): ``bytes=N-``, ``bytes=N-M`` and ``bytes=-N`` are answered 206 with
  ``Content-Range``; a range that starts at or past the end 416 with ``Content-Range: bytes
  */SIZE``; several ranges, or one that does not parse, the whole file (200). While the size is
  not known yet (no ``X-Linked-Size``, no ``Content-Length``), a range waits for it.

Writing and hashing run in a small pool of their own threads (:data:`IO_THREADS`), one batch
behind the network, never on the event loop: a digest of a large file takes seconds, and a
write can block for long under writeback pressure. A batch's write and its hashing run side by
side (two threads), so a batch costs the longer of the two, not their sum. The pool is not the
default one, where the store's lock waits sit, so contended locks never starve a download.

The file is synced once, after its digest checked out and before it is published; its readers
may have the last byte as soon as the digest checked out (:meth:`Fill.check`), without waiting
for the sync (seconds for a large file): nothing unsynced is ever published, and a reader is
sent only bytes whose digest checked out.

A file whose ETag is no digest the hub can check (neither sha256 nor git blob sha1) is streamed
through from the upstream and never stored (:func:`relay`): stored, it would be kept under its
URL, and a branch URL's bytes change. A file whose bytes failed their check is remembered for
:data:`REMEMBER` seconds (:class:`Failures`): asked again meanwhile, it is answered the failure
at once rather than fetched again, so a client's retries do not each download it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections import deque
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from threading import Event
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .receive import receiving
from .store import digest_of
from .upstream import CHUNK, UpstreamError

log = logging.getLogger("cacheroot.fetch")

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .receive import Download
    from .upstream import Upstream

__all__ = [
    "REMEMBER",
    "SMALL",
    "BadBytesError",
    "Failures",
    "Fill",
    "byte_range",
    "checkable",
    "failure",
    "follow",
    "in_background",
    "in_pool",
    "new_hasher",
    "relay",
    "unsatisfiable",
]

#: Threads that write, hash and sync the files being fetched (all fills together).
IO_THREADS = 4
_IO = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="cacheroot-hub-io")
#: The thread of :func:`in_background`'s writes.
_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cacheroot-hub-write")
#: Bytes gathered from the network before they are handed to a write.
BATCH = CHUNK
#: A file received off the loop (:meth:`Sink.receive`): bytes read into one buffer, and how
#: many buffers one fill cycles through (received, written, being hashed).
RECEIVE_BATCH = 4 << 20
RECEIVE_BUFFERS = 3
#: A file of at most this many bytes is answered only once its digest is checked.
SMALL = CHUNK
#: Seconds a file whose bytes failed their check is answered that failure without a download.
REMEMBER = 30.0
#: What :func:`byte_range` returns for a range that cannot be satisfied (416).
UNSATISFIABLE = (-1, -1)
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_HEX = frozenset("0123456789abcdef")
STATE_HEADER = "X-Cacheroot-Hub"


def in_pool(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Run the blocking ``fn(*args)`` in the fills' threads (not the default pool)."""
    return asyncio.wrap_future(_IO.submit(fn, *args))


def in_background(fn: Callable[..., None], *args: Any) -> None:
    """Run the blocking ``fn(*args)`` off the loop and go on without its result: for a small
    write whose failure only costs what it would have saved. One thread runs them all, in the
    order given (two records of one thing land as they were asked); what one raises is logged."""
    with contextlib.suppress(RuntimeError):  # the process is shutting its threads down
        _BACKGROUND.submit(fn, *args).add_done_callback(_said)


def _said(done: Future[None]) -> None:
    exc = done.exception()
    if exc is not None:
        log.warning("hub cache: a background write failed: %s", exc)


class BadBytesError(UpstreamError):
    """The upstream answered, but with bytes that are not the file: too many, or another
    digest. Not an outage (its host is up); remembered for a while (:class:`Failures`)."""

    def __init__(self, reason: str, counter: str = "size_mismatch") -> None:
        super().__init__(reason, 502, outage=False)
        #: The hub's counter of this failure (``GET /.cacheroot/hub``).
        self.counter = counter


def checkable(etag: str) -> bool:
    """Whether ``etag`` is a digest the hub can check bytes against (sha256, git blob sha1)."""
    return len(etag) in (40, 64) and set(etag) <= _HEX


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, stop)`` of the one range ``header`` asks of ``size`` bytes; ``None`` for the
    whole file (no range, several, or one that does not parse); :data:`UNSATISFIABLE` (416)."""
    match = _RANGE.fullmatch((header or "").strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first:
        if not last:
            return None
        suffix = int(last)
        return (max(0, size - suffix), size) if suffix and size else UNSATISFIABLE
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        return UNSATISFIABLE
    return start, size if not last else min(int(last) + 1, size)


def unsatisfiable(request: web.BaseRequest, size: int) -> bool:
    """Whether ``request`` asks for a range that ``size`` bytes cannot satisfy."""
    return byte_range(request.headers.get("Range"), size) == UNSATISFIABLE


def _header_text(message: str) -> str:
    """``message`` as a header value: printable ASCII, one line, not too long."""
    text = "".join(c if " " <= c <= "~" else "?" for c in message)
    return text[:1000]


def failure(status: int, message: str) -> web.Response:
    """An error answer whose reason huggingface_hub shows (``X-Error-Message``)."""
    out = {"X-Error-Message": _header_text(message), STATE_HEADER: "error"}
    body = json.dumps({"error": message}).encode()
    return web.Response(status=status, body=body, headers=out, content_type="application/json")


def not_satisfiable(size: int, headers: Mapping[str, str]) -> web.Response:
    """416 for a range past the end of ``size`` bytes, with the size in ``Content-Range``."""
    out = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    out["Content-Range"] = f"bytes */{size}"
    return web.Response(status=416, headers=out)


def error_status(exc: UpstreamError) -> int:
    """The status a client is answered for ``exc``: the upstream's 429 or 5xx, else 502."""
    status = exc.status or 0
    return status if status == 429 or 500 <= status <= 599 else 502


class Failures:
    """Files whose bytes failed their check lately (blob path -> until when, and why)."""

    def __init__(self, remember: float = REMEMBER) -> None:
        self.remember = remember
        self._failed: dict[str, tuple[float, str]] = {}

    def add(self, path: str, why: str) -> None:
        now = time.monotonic()
        self._failed = {k: v for k, v in self._failed.items() if v[0] > now}
        self._failed[path] = (now + self.remember, why)

    def recall(self, path: str) -> str | None:
        """Why ``path`` failed, if it did within the last :attr:`remember` seconds."""
        found = self._failed.get(path)
        if found is None:
            return None
        until, why = found
        left = until - time.monotonic()
        if left <= 0:
            del self._failed[path]
            return None
        return f"{why}; the hub cache asks the upstream again in {left:.0f} s"


class Fill:
    """One file being fetched into the store, shared by the task that fetches it and by the
    clients that read it (see the module docstring).

    ``fd`` is what readers read: the partial being written, or the stored file the fill found.
    It is closed once the fetching task and every reader are done with it, and never while a
    write to it is still running in a thread: a closed descriptor's number is soon reused.
    """

    def __init__(self, path: str, size: int | None) -> None:
        self.path = path
        #: The size the Hub declared; else the download's ``Content-Length``, once known.
        self.size = size
        self.partial: str | None = None
        self.fd: int | None = None
        #: Bytes in ``fd`` that readers may have (see :meth:`readable`).
        self.written = 0
        #: Every byte is in and its digest checked out (readers may have them all).
        self.checked = False
        self.done = False
        self.error: str | None = None
        self.status = 502
        #: Who started it, for the hub's own book-keeping (:mod:`.grants`).
        self.owner: object = None
        #: The fetching task and each reader.
        self._users = 1
        self._busy: Future[Any] | None = None
        self._moved = asyncio.Event()

    # -- the fetching task's side -------------------------------------------------------
    def changed(self) -> None:
        """Wake the readers: bytes arrived, the size became known, the fill ended."""
        self._moved.set()
        self._moved = asyncio.Event()

    def write_to(self, partial: str | None, fd: int) -> None:
        """Bytes will be written to ``partial``, open at ``fd`` (``None``: another process of
        the store writes it, :mod:`.peers`)."""
        self.partial, self.fd = partial, fd

    def let_go(self) -> None:
        """Close ``fd`` before any reader had a byte of it (a followed peer stopped first)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def hand_over(self, fd: int) -> None:
        """The file is stored already, open at ``fd``: its readers read that (no copy)."""
        self.fd = fd
        self.size = self.written = os.fstat(fd).st_size
        self.finish()

    def check(self) -> None:
        """Every byte is in and checked: readers may have them all (the sync may still run)."""
        self.checked = True
        self.changed()

    def finish(self) -> None:
        """Every byte is in, checked and published."""
        self.checked = self.done = True
        self.changed()

    def fail(self, message: str, status: int = 502) -> None:
        self.error, self.status = message, status
        self.changed()

    def run(self, fn: Callable[..., Any], *args: Any, pool: Executor = _IO) -> asyncio.Future[Any]:
        """Run the blocking ``fn(*args)`` on ``fd`` in ``pool``'s threads (the fills', unless
        said; one at a time)."""
        busy = pool.submit(fn, *args)
        self._busy = busy
        return asyncio.wrap_future(busy)

    # -- both sides ---------------------------------------------------------------------
    def join(self) -> None:
        self._users += 1

    def leave(self) -> None:
        """One user is done; the last one closes ``fd`` (after a write in flight, if any)."""
        self._users -= 1
        if self._users > 0 or self.fd is None:
            return
        fd, self.fd = self.fd, None
        if self._busy is None:
            os.close(fd)
        else:  # at once if the last write is over, else in its thread when it ends
            self._busy.add_done_callback(lambda _done: os.close(fd))

    # -- the readers' side --------------------------------------------------------------
    def readable(self) -> int:
        """Bytes readers may have: all once checked; before that all but the last, and never
        more than the declared size."""
        if self.checked:
            return self.written
        have = self.written if self.size is None else min(self.written, self.size)
        return max(0, have - 1)

    def ended(self) -> bool:
        return self.checked or self.error is not None

    def failed(self) -> web.Response | None:
        """The answer to a reader of a fill that failed; ``None`` while it has not."""
        return None if self.error is None else failure(self.status, self.error)

    async def until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` or the fill ends."""
        while not (ready() or self.ended()):
            await self._moved.wait()

    async def until_stored(self) -> None:
        """Wait until the file is published (or handed over), or the fill failed."""
        while not (self.done or self.error is not None):
            await self._moved.wait()

    async def until_past(self, offset: int) -> None:
        """Wait until readers may have the byte at ``offset``, or the fill ends."""
        while not (self.readable() > offset or self.ended()):
            await self._moved.wait()


def new_hasher(etag: str, size: int | None) -> Any:
    """A hasher for the digest ``etag`` names (sha256, or a git blob sha1 of ``size`` bytes);
    ``None`` for a sha1 whose size is not known yet."""
    if len(etag) == 64:
        return hashlib.sha256()
    if len(etag) == 40 and size is not None:
        return hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)
    return None


def _hash(hasher: Any, batch: list[bytes]) -> None:
    for piece in batch:
        hasher.update(piece)


class Sink:
    """Takes a download's bytes off the network for ``fill``; they are written and hashed in
    the fills' threads, one batch behind (the next batch arrives while the last is written).

    Raises :class:`BadBytesError` for a ``Content-Length`` other than the declared size, for a body
    longer than it, and (:meth:`finish`) for bytes whose digest is not ``etag``.
    """

    def __init__(self, fill: Fill, fd: int, etag: str) -> None:
        self.fill, self.fd, self.etag = fill, fd, etag
        self.hasher = new_hasher(etag, fill.size)
        self.received = 0
        self._batch: list[bytes] = []
        self._batched = 0
        self._pending: list[asyncio.Future[Any]] = []
        #: Bytes handed to a write so far (where the next batch goes).
        self._submitted = 0
        #: Off the loop (:meth:`receive`): bytes written so far, and whether the loop was
        #: asked to pass that on to the readers and has not yet.
        self._written = 0
        self._telling = False

    def started(self, length: int | None) -> None:
        fill = self.fill
        if length is not None and fill.size is not None and length != fill.size:
            raise BadBytesError(
                f"the upstream announced {length} bytes for a file the Hub gave {fill.size} for"
            )
        if fill.size is None and length is not None:
            fill.size = length
            self.hasher = self.hasher or new_hasher(self.etag, length)
            fill.changed()

    async def __call__(self, chunk: bytes) -> None:
        size = self.fill.size
        if size is not None and self.received + len(chunk) > size:
            raise BadBytesError(
                f"the upstream sent more than the {size} bytes the Hub gave as the file's size"
            )
        self.received += len(chunk)
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= BATCH:
            await self._flush()

    async def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            await asyncio.gather(*pending)
        if not self._batch:
            return
        # The pieces as they came (no joining copy on the loop): one writev, one hash each.
        batch, length = self._batch, self._batched
        self._batch, self._batched = [], 0
        fill = self.fill

        def wrote(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None:
                fill.written += length
                fill.changed()

        write = fill.run(self._write, batch, self._submitted)
        self._submitted += length
        write.add_done_callback(wrote)
        self._pending.append(write)
        if self.hasher is not None:  # beside the write, in another thread (the GIL is let go)
            self._pending.append(in_pool(_hash, self.hasher, batch))

    def _write(self, batch: list[bytes] | list[memoryview], offset: int) -> None:
        # At an offset of its own: readers' sendfile moves the descriptor's shared position.
        views = [memoryview(piece) for piece in batch]
        while views:
            done = os.pwritev(self.fd, views, offset)
            offset += done
            while views and done >= len(views[0]):
                done -= len(views[0])
                views.pop(0)
            if views and done:
                views[0] = views[0][done:]

    def off_loop(self) -> bool:
        """Whether the file is received off the event loop (:meth:`receive`): its size is
        declared and larger than :data:`SMALL` (see :mod:`.receive`)."""
        return self.fill.size is not None and self.fill.size > SMALL and self.hasher is not None

    async def receive(self, body: Download) -> None:
        """Take the whole body from ``body`` off the event loop: received in a receiving
        thread; each buffer then written in one thread and hashed in another, side by side and
        beside the next buffer's receive; readers woken as bytes are written (one wake-up for
        however many writes ended meanwhile). Raises what :meth:`_pump` raises."""
        loop = asyncio.get_running_loop()
        stop = Event()
        job = self.fill.run(self._pump, body, loop, stop, pool=receiving())
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            stop.set()
            body.abort()
            await asyncio.wait([job])  # its threads let go of the descriptor and the socket
            raise
        finally:
            self._tell()

    def _wrote(self, end: int, loop: asyncio.AbstractEventLoop) -> None:
        """(A writing thread.) Bytes up to ``end`` are written: wake the readers, once."""
        self._written = end
        if not self._telling:
            self._telling = True
            loop.call_soon_threadsafe(self._tell)

    def _tell(self) -> None:
        self._telling = False  # before reading how far: a later write then tells again
        if self._written > self.fill.written:
            self.fill.written = self._written
            self.fill.changed()

    def _write_at(self, piece: memoryview, offset: int, loop: asyncio.AbstractEventLoop) -> None:
        self._write([piece], offset)
        self._wrote(offset + len(piece), loop)

    def _pump(self, body: Download, loop: asyncio.AbstractEventLoop, stop: Event) -> None:
        """Receive the body, handing each buffer to a write and a hash (see :meth:`receive`).

        Raises :class:`~.receive.ReceiveError` for the network, ``OSError`` for the store,
        :class:`BadBytesError` for a body longer than the declared size.
        """
        size = self.fill.size
        hasher = self.hasher
        if size is None or hasher is None:
            raise ValueError("a file received off the loop needs its size and its digest")
        writing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cacheroot-hub-write")
        hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cacheroot-hub-hash")
        free = [memoryview(bytearray(RECEIVE_BATCH)) for _ in range(RECEIVE_BUFFERS)]
        # Buffers handed over, oldest first, with their write and their hash.
        queued: deque[tuple[memoryview, Future[Any], Future[Any]]] = deque()

        def oldest() -> memoryview:
            view, wrote, hashed = queued.popleft()
            wrote.result()  # a write's error (the store's) is raised here
            hashed.result()
            return view

        try:
            while not stop.is_set():
                view = free.pop() if free else oldest()
                # One byte more than the file has left: a body that runs longer shows here.
                got = body.readinto(view[: min(len(view), size - self.received + 1)])
                if not got:
                    break
                if self.received + got > size:
                    raise BadBytesError(
                        f"the upstream sent more than the {size} bytes the Hub gave as the "
                        "file's size"
                    )
                piece = view[:got]
                wrote = writing.submit(self._write_at, piece, self.received, loop)
                queued.append((view, wrote, hashing.submit(hasher.update, piece)))
                self.received += got
            while queued:
                oldest()
        finally:
            for _view, wrote, hashed in queued:
                wrote.exception()  # waits: a buffer is never let go while in use
                hashed.exception()
            writing.shutdown()
            hashing.shutdown()

    async def finish(self) -> None:
        """Write what is left, then check the size and the digest (its readers may then have
        every byte); then sync the file."""
        await self._flush()
        await self._flush()  # the last batch's write
        size = self.fill.size
        if size is not None and self.received != size:
            # A body cut short: the connection, most likely, not the file.
            raise UpstreamError(f"got {self.received} bytes, expected {size}", 502, outage=False)
        if self.hasher is not None:
            found = self.hasher.hexdigest()
        else:  # a git blob sha1 whose size was known only at the end
            found = await self.fill.run(digest_of, self.fd, self.etag, self.received) or ""
        if found != self.etag:
            kind = "sha256" if len(self.etag) == 64 else "git blob sha1"
            raise BadBytesError(
                f"the upstream sent bytes that do not match the file's digest: {kind} "
                f"{self.etag} was expected, the bytes have {found}",
                "digest_mismatch",
            )
        self.fill.check()  # readers may have the last byte; the sync is the store's business
        await self.fill.run(os.fsync, self.fd)


async def follow(
    request: web.BaseRequest, fill: Fill, headers: Mapping[str, str]
) -> web.StreamResponse:
    """Answer ``request`` from ``fill`` as its bytes arrive (see the module docstring)."""
    fill.join()
    try:
        return await _follow(request, fill, headers)
    finally:
        fill.leave()


async def _follow(
    request: web.BaseRequest, fill: Fill, headers: Mapping[str, str]
) -> web.StreamResponse:
    spec = request.headers.get("Range")
    if spec is not None:
        await fill.until(lambda: fill.size is not None)  # a range needs the size
    failed = fill.failed()
    if failed is not None:
        return failed
    total = fill.size if fill.size is not None else (fill.written if fill.checked else None)
    span = byte_range(spec, total) if total is not None else None
    if span == UNSATISFIABLE and total is not None:
        return not_satisfiable(total, headers)
    start, stop = (0, total) if span is None else span
    # The headers wait for the first byte asked for; a small file's, for the check and the
    # publish (its sync is short): a client that has it whole finds it stored.
    if total is not None and total <= SMALL:
        await fill.until_stored()
    else:
        await fill.until_past(start)
    failed = fill.failed()
    if failed is not None:
        return failed
    resp = web.StreamResponse(status=200 if span is None else 206, headers=headers)
    if span is not None:
        resp.headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{total}"
    if stop is not None:
        resp.content_length = stop - start
    await resp.prepare(request)
    if stop is not None and request.method == "GET" and request.transport is not None:
        sent = await _sendfile(request.transport, fill, start, stop)
    else:
        sent = await _stream(resp, fill, start, stop)
    if sent:
        await resp.write_eof()
    elif request.transport is not None:
        # Headers are out: cutting the connection short is all that is left. The client sees
        # fewer bytes than announced and asks again (with a Range).
        request.transport.abort()
    return resp


async def _sendfile(transport: asyncio.Transport, fill: Fill, start: int, stop: int) -> bool:
    """Send ``fill``'s bytes ``start`` to ``stop`` as they become readable, by ``sendfile``
    (the kernel copies them from the page cache: no read into the hub and no write out of it
    on the event loop); whether they all went."""
    if fill.fd is None:
        return False
    loop = asyncio.get_running_loop()
    # A file object over a second descriptor of the fill's file (sendfile takes a file, and
    # closing it must leave the fill's own open): no name is opened, so nothing can be planted.
    with os.fdopen(os.dup(fill.fd), "rb", buffering=0) as file:
        offset = start
        while offset < stop:
            await fill.until_past(offset)
            ready = min(fill.readable(), stop)
            if ready <= offset:
                return False  # failed, or shorter than said
            sent = await loop.sendfile(transport, file, offset, ready - offset)
            if not sent:
                return False
            offset += sent
    return True


async def _stream(resp: web.StreamResponse, fill: Fill, start: int, stop: int | None) -> bool:
    """Send ``fill``'s bytes ``start`` to ``stop`` (its end: ``None``) as they become readable;
    whether they all went."""
    offset = start
    while stop is None or offset < stop:
        await fill.until_past(offset)
        ready = fill.readable() if stop is None else min(fill.readable(), stop)
        data = b""
        if ready > offset and fill.fd is not None:
            data = os.pread(fill.fd, min(ready - offset, CHUNK), offset)
        if data:
            await resp.write(data)
            offset += len(data)
        elif fill.error is not None or stop is not None:
            return False  # failed, or shorter than said
        else:
            break
    return True


class _Enough(Exception):  # noqa: N818 - not an error: the range asked for is sent
    """Ends a relayed download early."""


class _Relay:
    """One client's answer streamed straight from the upstream (see :func:`relay`)."""

    def __init__(
        self, request: web.BaseRequest, headers: Mapping[str, str], size: int | None
    ) -> None:
        self.request, self.headers, self.size = request, headers, size
        self.received = 0
        self.span: tuple[int, int] | None = None
        self.resp: web.StreamResponse | None = None
        self.held: list[bytes] = []
        self.refused = False

    def started(self, length: int | None) -> None:
        if length is not None and self.size is not None and length != self.size:
            raise BadBytesError(
                f"the upstream announced {length} bytes for a file the Hub gave {self.size} for"
            )
        if self.size is None:
            self.size = length
        if self.size is not None:
            span = byte_range(self.request.headers.get("Range"), self.size)
            if span == UNSATISFIABLE:
                self.refused = True
                raise _Enough
            self.span = span

    async def sink(self, chunk: bytes) -> None:
        size = self.size
        if size is not None and self.received + len(chunk) > size:
            raise BadBytesError(
                f"the upstream sent more than the {size} bytes the Hub gave as the file's size"
            )
        first = self.received
        self.received += len(chunk)
        start, stop = self.span or (0, None)
        lo = max(start - first, 0)
        hi = len(chunk) if stop is None else min(stop - first, len(chunk))
        if lo < hi:
            piece = chunk[lo:hi]
            if self.resp is None and (size is None or size > SMALL):
                await self._open()
            if self.resp is None:
                self.held.append(piece)
            else:
                await self.resp.write(piece)
        if stop is not None and self.received >= stop and stop < (size or 0):
            raise _Enough

    async def _open(self) -> web.StreamResponse:
        resp = web.StreamResponse(status=200 if self.span is None else 206, headers=self.headers)
        if self.span is not None:
            start, stop = self.span
            resp.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{self.size}"
            resp.content_length = stop - start
        elif self.size is not None:
            resp.content_length = self.size
        await resp.prepare(self.request)
        self.resp = resp
        for piece in self.held:
            await resp.write(piece)
        self.held = []
        return resp

    async def end(self) -> web.StreamResponse:
        want = self.size if self.span is None else self.span[1]
        if want is not None and self.received < want:
            raise UpstreamError(f"got {self.received} bytes, expected {self.size}", 502)
        resp = self.resp or await self._open()
        await resp.write_eof()
        return resp


async def relay(
    request: web.BaseRequest,
    up: Upstream,
    target: str,
    headers: Mapping[str, str],
    size: int | None,
) -> tuple[web.StreamResponse, UpstreamError | None]:
    """Stream a file with no digest to check straight from the upstream, storing nothing;
    the answer, and the upstream's failure if there was one.

    A range is cut from the whole download (the upstream is asked for the file as a fill
    would). A small file is held until its end, so that a body longer than declared is an
    error status; a larger one is cut off there.
    """
    if size is not None and unsatisfiable(request, size):
        return not_satisfiable(size, headers), None
    out = _Relay(request, headers, size)
    try:
        await up.download(target, request.headers, out.started, out.sink)
        return await out.end(), None
    except _Enough:
        if out.refused and out.size is not None:
            return not_satisfiable(out.size, headers), None
        return await out.end(), None
    except (UpstreamError, OSError) as exc:
        err = exc if isinstance(exc, UpstreamError) else UpstreamError(str(exc), 502)
        if out.resp is None:
            return failure(error_status(err), err.reason), err
        if request.transport is not None:
            request.transport.abort()
        return out.resp, err
