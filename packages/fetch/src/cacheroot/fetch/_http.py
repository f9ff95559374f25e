"""One transfer: bytes of a URL into a :class:`~._store.Partial`, surviving a flaky network.

Only the miss path imports this module (and with it ``requests``), so a warm cache never pays
for it. What it handles, and how:

- connection errors, read timeouts, 408, 429 and 5xx are retried with exponential backoff and
  jitter; ``Retry-After`` (seconds or an HTTP date) is honoured up to a bound; response headers
  larger than http.client accepts (a line over 64 KiB, over 100 fields) are not: that origin
  is broken, not busy;
- a deadline bounds the whole transfer, retries and waits included: every connect and read
  waits at most until then, so an origin that trickles a byte at a time cannot hold a download
  (and the lock that others wait on) for ever;
- a body that breaks off (reset, short read against ``Content-Length``) is resumed with
  ``Range`` from the bytes already written, guarded by ``If-Range`` so that a changed file
  restarts instead of splicing; a server that ignores ``Range`` (200 instead of 206) restarts
  from zero;
- ``Content-Encoding`` is never decoded (``Accept-Encoding: identity`` is asked for, and a
  server that compresses anyway is stored as sent): the cache holds the bytes the URL names;
- redirects are followed by hand, at most ``max_redirects`` times, and only http to http(s)
  or https to https (a downgrade or another scheme is refused); the caller's own headers
  (``Fetcher(headers=...)``) and the tokens of the environment (:mod:`._auth`) go to the first
  origin only, not to another one a redirect names;
- ``max_size`` is checked against the announced length and while streaming;
- each retry is announced (``on_retry``) before its wait, so a dead origin shows at its first
  failure; its reason is the socket's own words (``Connection refused``) where there are some;
- a request that fails leaves its bytes nowhere: http.client holds the header block (tokens
  included) in the locals of the frames it raises through, and those locals are cleared, so
  a traceback that shows locals (``pytest -l``) cannot print a token (see :func:`_request`);
- a ``file://`` copy (where allowed) is made no more readable than its source before a byte is
  written, and the digest of a source that not everyone may read is never shown
  (:attr:`Transfer.private`): a manifest run by a privileged job must not turn a private file
  into a readable cache entry, or print a fingerprint of it in a log.
"""

from __future__ import annotations

import http.client
import io
import logging
import os
import random
import stat
import sys
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter

from ._errors import DownloadError, write_advice
from ._httpvalues import decimal, retry_after
from ._progress import counted, new_bar
from ._redact import forget_locals, printable, redact_url

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Protocol

    from ._store import Partial

    class Settings(Protocol):
        """The knobs of a transfer, as a :class:`~._fetcher.Fetcher` holds them."""

        connect_timeout: float
        read_timeout: float
        retries: int
        backoff: float
        backoff_max: float
        retry_after_max: float
        chunk_size: int
        max_size: int | None
        max_redirects: int
        user_agent: str
        deadline: float | None

        @property
        def headers(self) -> Mapping[str, str]:
            """Extra request headers for the origin named (read only here)."""


log = logging.getLogger("cacheroot.fetch")

#: Statuses worth another try: the origin or something in front of it is busy or broken.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Bytes an attempt must add before its failure stops counting as one (see Transfer.run).
PROGRESS = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: How a message tells a Python caller to raise the deadline; ``cacheroot fetch`` puts its own
#: flag in its place.
DEADLINE_HINT = "Fetcher(deadline=SECONDS), None for none"
#: What a broken transfer raises from inside requests, urllib3 or the socket layer.
_TRANSIENT: tuple[type[BaseException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
)
#: What a read of the body raises when the transfer broke: the above or the socket's own
#: errors (``ssl.SSLError`` and the like, which urllib3 would have wrapped).
_BROKEN: tuple[type[BaseException], ...] = (*_TRANSIENT, OSError)


def new_session(pool: int = 16) -> requests.Session:
    """A pooled session that never retries or decodes behind our back."""
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=pool, pool_maxsize=pool, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def describe(exc: BaseException) -> str:
    """``ConnectionError: Connection refused``: the class of ``exc`` and the socket error's words
    from deep in its chain (requests and urllib3 wrap them in paragraphs of their own), or
    ``exc``'s own message where no socket error is in it."""
    todo: list[BaseException] = [exc]
    seen: list[BaseException] = []
    while todo:
        e = todo.pop(0)
        if any(e is s for s in seen):
            continue
        seen.append(e)
        if isinstance(e, OSError) and e.strerror:
            return f"{type(exc).__name__}: {e.strerror}"
        reason = getattr(e, "reason", None)
        todo += [a for a in (*e.args, reason) if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return f"{type(exc).__name__}: {exc}"


class _Retry(Exception):  # noqa: N818 - control flow, never escapes this module
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, status: int | None = None, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.status, self.wait = reason, status, wait


class Transfer:
    """Moves the bytes of ``url`` into ``part``; :meth:`run` returns what the sidecar records."""

    def __init__(
        self,
        session: requests.Session,
        settings: Settings,
        url: str,
        part: Partial,
        *,
        timeout: tuple[float, float],
        progress: bool,
        allow_file: bool,
        until: float | None = None,
        retries: int | None = None,
        auth: Mapping[str, str] | None = None,
        on_retry: Callable[[int, int, float, str], None] | None = None,
    ) -> None:
        self.session, self.settings, self.url, self.part = session, settings, url, part
        #: Failed attempts in a row allowed (default: the settings'); a mirror gets fewer.
        self.retries = settings.retries if retries is None else retries
        #: Headers for the first origin only, with the caller's own (``settings.headers``).
        self.auth = dict(auth or {})
        #: Called with (failures in a row, retries allowed, seconds to wait, reason) before a wait.
        self.on_retry = on_retry
        #: The deadline of the whole download (``time.monotonic()``), if any.
        self.until = until
        #: How logs and records name the URL (its credentials redacted).
        self.shown = redact_url(url)
        self.timeout, self.show_progress, self.allow_file = timeout, progress, allow_file
        self.validator: str | None = None
        self.etag: str | None = None
        self.total: int | None = None
        self.received = 0
        #: The source is a local file that not everyone may read: its digest is not to be shown.
        self.private = False
        #: Attempts started, and whether any got a response: a deadline that passes while the
        #: origin never answered is no slow origin, and the message must not say so.
        self.attempts = 0
        self.answered = False
        self._last_failure = ""
        self._bar: Any = None

    # -- the retry loop ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Download until complete, retrying what is worth it; raise :class:`DownloadError`."""
        if urlsplit(self.url).scheme == "file":
            self._copy_file()
            return {"url": self.shown, "etag": None}
        failures = 0
        try:
            while True:
                before = self.part.size
                self._check_deadline()
                self.attempts += 1
                try:
                    self._attempt()
                    break
                except _Retry as r:
                    self._last_failure = r.reason
                    # An attempt that moved the transfer on does not count against the retries.
                    if self.part.size - before >= min(self.settings.chunk_size, PROGRESS):
                        failures = 0
                    failures += 1
                    if failures > self.retries:
                        raise DownloadError(
                            self.url,
                            f"giving up on {self.url} after {counted(failures, 'attempt')}: "
                            f"{r.reason}; "
                            "the origin may be down or rate-limiting: retry later, or warm the "
                            "cache from a machine that can reach it",
                            status=r.status,
                        ) from r
                    self._sleep(failures, r)
        finally:
            if self._bar is not None:
                self._bar.close()
        return {"url": self.shown, "etag": self.etag}

    def _sleep(self, failures: int, r: _Retry) -> None:
        s = self.settings
        delay = min(s.backoff_max, s.backoff * 2 ** (failures - 1))
        delay *= 0.5 + random.random() / 2  # noqa: S311 - jitter, not cryptography
        if r.wait is not None:
            delay = max(delay, min(r.wait, s.retry_after_max))
        if self.until is not None and time.monotonic() + delay > self.until:
            limit = f"the deadline of {s.deadline:g} s"
            raise self._past_deadline(
                f"it asks to wait {r.wait:g} s, past {limit}"
                if r.wait is not None
                else f"{redact_url(r.reason)}, and the next try would come after {limit}",
                r.status,
                stop=f"another would come after {limit}",
            )
        reason = redact_url(r.reason)
        log.info("retrying %s in %.2f s: %s", self.shown, delay, reason)
        if self.on_retry is not None:
            self.on_retry(failures, self.retries, delay, reason)
        time.sleep(delay)

    def _check_deadline(self) -> None:
        if self.until is not None and time.monotonic() >= self.until:
            passed = f"the deadline of {self.settings.deadline:g} s passed"
            raise self._past_deadline(passed, stop=passed)

    def _past_deadline(self, what: str, status: int | None = None, *, stop: str) -> DownloadError:
        """Giving up at the deadline: ``what`` happened, ``stop`` says why no try follows."""
        if not self.answered and self.attempts and self._last_failure:
            # No byte came because no attempt got an answer: "too slow" would send the reader
            # looking at bandwidth instead of at a host that is down or a wrong port.
            tries = counted(self.attempts, "attempt") + (
                ", which got no answer from the origin"
                if self.attempts == 1
                else ", none of which got an answer from the origin"
            )
            return DownloadError(
                self.url,
                f"gave up on {self.url} after {tries} (the last: "
                f"{redact_url(self._last_failure)}); {stop}. Check that the origin is up and "
                "that the URL's host and port are right, or fetch it from elsewhere; to wait "
                f"longer for it to come up, raise the deadline ({DEADLINE_HINT})",
                status=status,
            )
        total = "?" if self.total is None else str(self.total)
        return DownloadError(
            self.url,
            f"gave up on {self.url}: {what} ({self.part.size} of {total} bytes had arrived); "
            "the origin is too slow, or trickling: fetch it from elsewhere, or raise the "
            f"deadline ({DEADLINE_HINT}) for a large file on a slow link",
            status=status,
        )

    def _timeouts(self) -> tuple[float, float]:
        """Connect and read timeouts, neither reaching past the deadline."""
        if self.until is None:
            return self.timeout
        left = max(0.001, self.until - time.monotonic())
        return min(self.timeout[0], left), min(self.timeout[1], left)

    # -- one attempt ---------------------------------------------------------------------
    def _attempt(self) -> None:
        offset = self.part.size
        headers = {"Accept-Encoding": "identity", "User-Agent": self.settings.user_agent}
        if offset:
            headers["Range"] = f"bytes={offset}-"
            if self.validator:
                headers["If-Range"] = self.validator
        resp = self._get(headers)
        with resp:
            status = resp.status_code
            if status in RETRY_STATUSES:
                raise _Retry(f"HTTP {status}", status, retry_after(resp.headers.get("Retry-After")))
            if status == 416 and offset:
                # Our partial is at least as long as the file: it changed; start again.
                self.part.reset()
                raise _Retry("HTTP 416 on resume: restarting from the first byte", status, 0.0)
            if status == 206 and offset:
                start, total = _content_range(resp.headers.get("Content-Range"))
                if start != offset:
                    self.part.reset()
                    raise _Retry(f"206 from byte {start}, asked for {offset}: restarting", status)
                self.total = total
            elif status == 200:
                if offset:
                    log.debug("%s ignored Range: restarting from the first byte", self.shown)
                    self.part.reset()
                self.total = self._length(resp)
            else:
                raise DownloadError(
                    self.url,
                    f"HTTP {status} {resp.reason} from {resp.url}: expected 200 (or 206 on "
                    "resume); check the URL",
                    status=status,
                )
            self.etag = resp.headers.get("ETag") or self.etag
            self.validator = self._validator(resp) or self.validator
            self._check_size(self.total)
            self._stream(resp)
        if self.total is not None and self.part.size != self.total:
            raise _Retry(f"body ended at byte {self.part.size} of {self.total}", status)

    def _length(self, resp: requests.Response) -> int | None:
        """The body's announced length; an announced length that is not a number is an error."""
        length = resp.headers.get("Content-Length")
        if length is None:
            return None
        total = decimal(length)
        if total is None:
            raise DownloadError(
                self.url,
                f"{self.url} answered with Content-Length {length!r}: expected a decimal number "
                "of bytes (ASCII digits); the origin or a proxy in front of it is broken, and "
                "the body cannot be trusted to end where it should: report it to whoever runs "
                "it, or fetch the file from elsewhere",
                status=resp.status_code,
            )
        return total

    def _validator(self, resp: requests.Response) -> str | None:
        etag = resp.headers.get("ETag")
        if etag and not etag.startswith("W/"):
            return etag
        return resp.headers.get("Last-Modified")

    def _get(self, headers: dict[str, str]) -> requests.Response:
        url = self.url
        home = origin(url)
        mine = {**self.auth, **self.settings.headers}
        for _ in range(self.settings.max_redirects + 1):
            # The caller's headers and the environment's tokens are for the origin it named.
            sent = {**mine, **headers} if origin(url) == home else headers
            try:
                resp = _request(self.session, url, sent, self._timeouts())
                self.answered = True
            except _TRANSIENT as exc:
                why = _headers_too_large(exc)
                if why:
                    raise DownloadError(
                        self.url,
                        f"the response headers from {url} are larger than this client accepts "
                        f"({why}): that is a broken origin or proxy, not a "
                        "busy one, so it is not retried; check the URL, or report it to whoever "
                        "runs the server",
                    ) from exc
                raise _Retry(describe(exc)) from exc
            except requests.RequestException as exc:  # a bad URL: trying again will not help
                raise DownloadError(self.url, f"cannot request {url}: {exc}") from exc
            except ValueError as exc:
                # requests parses a redirect's Location even when it does not follow it, and
                # urllib's parser raises a bare ValueError ("Invalid IPv6 URL") for a broken one.
                raise DownloadError(
                    self.url,
                    f"cannot request {url}: its answer names no valid URL ({exc}): a broken "
                    "origin or proxy; check the URL, or fetch it from elsewhere",
                ) from exc
            if resp.status_code not in _REDIRECTS:
                return resp
            location = resp.headers.get("Location", "")
            resp.close()
            try:
                target = urljoin(url, location)
                before, after = urlsplit(url).scheme, urlsplit(target).scheme
            except ValueError as exc:  # "Invalid IPv6 URL", a bracketed host that is none
                raise DownloadError(
                    self.url,
                    f"{url} redirects to {printable(location)!r}, which is not a URL ({exc}): a "
                    "broken origin or proxy; check the URL, or fetch it from elsewhere",
                    status=resp.status_code,
                ) from None
            if after not in ("http", "https") or (before == "https" and after != "https"):
                raise DownloadError(
                    self.url,
                    f"{url} redirects to {target!r}: a redirect from {before} to {after} is "
                    "refused (only http to http(s) and https to https are followed)",
                    status=resp.status_code,
                )
            url = target
        raise DownloadError(
            self.url,
            f"{self.url} redirected more than {self.settings.max_redirects} times (last: {url}); "
            "a redirect loop on the server",
            status=resp.status_code,
        )

    def _check_size(self, size: int | None) -> None:
        limit = self.settings.max_size
        if limit is not None and size is not None and size > limit:
            raise DownloadError(
                self.url,
                f"{self.url} is larger than the maximum size: {size} > {limit} bytes; "
                "raise max_size on the Fetcher if that is expected",
            )

    def _stream(self, resp: requests.Response) -> None:
        # Each read hands over whatever arrived (up to a chunk) without waiting to fill the
        # chunk, so a transfer that breaks loses nothing that reached us: the resume starts
        # there. The chunks are the partial's reusable buffers (see _body_reader).
        self._start_progress()
        readinto = _body_reader(resp)
        size = self.settings.chunk_size
        try:
            while True:
                buf = self.part.buffer(size)
                n = readinto(memoryview(buf)[:size])
                if not n:
                    break
                self._write(memoryview(buf)[:n], buf)
                self._check_deadline()
        except DownloadError:
            raise
        except _BROKEN as exc:
            raise _Retry(f"transfer broke at byte {self.part.size}: {exc}") from exc

    def _write(self, chunk: bytes | memoryview, owner: bytearray | None = None) -> None:
        size = len(chunk)
        try:
            self.part.write(chunk, owner=owner)
        except OSError as exc:
            raise DownloadError(
                self.url,
                f"could not write {self.part.path}: {exc.strerror or exc}; "
                f"{write_advice(exc.errno)}",
                err=exc.errno,
            ) from exc
        self.received += size
        self._check_size(self.part.size)
        if self._bar is not None:
            self._bar.update(size)

    def _start_progress(self) -> None:
        if not self.show_progress:
            return
        if self._bar is None:
            self._bar = new_bar(
                total=self.total, initial=self.part.size, desc=_label(self.part.dest)
            )
            # Without tqdm there is no bar, and no reason to look for tqdm again on a retry.
            self.show_progress = self._bar is not None
        else:
            self._bar.reset(total=self.total)
            self._bar.update(self.part.size)

    def _copy_file(self) -> None:
        if not self.allow_file:
            raise DownloadError(
                self.url,
                f"{self.url}: file:// URLs are refused unless allowed (Fetcher(allow_file=True)); "
                "they are meant for local mirrors",
            )
        path = url2pathname(urlsplit(self.url).path)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise DownloadError(self.url, f"cannot read {path}: {exc.strerror}") from exc
        with f:
            self.part.reset()
            source = os.fstat(f.fileno())
            self.private = not source.st_mode & stat.S_IROTH
            fd = self.part.fd
            if fd is not None:  # no wider than the source, before the first byte lands
                mine = stat.S_IMODE(os.fstat(fd).st_mode)
                os.fchmod(fd, mine & stat.S_IMODE(source.st_mode))
            self.total = source.st_size
            self._check_size(self.total)
            while chunk := f.read(self.settings.chunk_size):
                self._write(chunk)


def _label(dest: str) -> str:
    """The bar's name for the entry at ``dest``: its file name without the URL digest that
    ``_naming`` puts before it (``0f3c9a1e2b4d6f80-test.jsonl`` shows as ``test.jsonl``)."""
    name = os.path.basename(dest)
    head, dash, tail = name.partition("-")
    if dash and tail and len(head) == 16 and all(c in "0123456789abcdef" for c in head):
        name = tail
    return name[:40]


def _request(
    session: requests.Session, url: str, headers: Mapping[str, str], timeout: tuple[float, float]
) -> requests.Response:
    """One GET of ``url``, redirects not followed; a failure leaves no request bytes behind.

    http.client writes the request's header block into bytes before it connects (``msg`` in
    ``_send_output``, ``data`` in ``send``), so a refused or reset connection raises through
    frames whose locals hold ``Authorization: Bearer TOKEN`` in clear, whatever type the value
    was handed over as (a :class:`~._redact.Secret` included): ``pytest -l`` and every other
    traceback that shows locals would print it. What such a failure raises, and what it
    chains, has the locals of the library's frames (requests, urllib3, http.client, socket)
    cleared: their code and lines still show where it broke; their variables are gone.
    """
    before = sys.exc_info()[1]  # what the caller is handling: its frames are not ours to clear
    try:
        return session.get(
            url, headers=headers, stream=True, allow_redirects=False, timeout=timeout
        )
    except BaseException as exc:
        forget_locals(exc, before)
        raise


def _headers_too_large(exc: BaseException) -> str:
    """What http.client refused about a response's headers somewhere in ``exc``'s chain, or ``""``.

    It refuses a header line over 64 KiB (``LineTooLong``) and over 100 header fields; requests
    and urllib3 wrap either as a connection error, which would otherwise be retried.
    """
    todo: list[BaseException] = [exc]
    seen: list[BaseException] = []
    while todo:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        if isinstance(e, http.client.LineTooLong) or (
            type(e) is http.client.HTTPException and "headers" in str(e)
        ):
            return str(e)
        todo += [a for a in e.args if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
    return ""


def origin(url: str) -> tuple[str, str | None, int | None]:
    """``(scheme, host, port)`` of ``url`` as the transport connects, the port made explicit.

    Read with urllib3's parser, which requests connects with, not ``urlsplit``: the two disagree
    on URLs such as ``http://127.0.0.1:8080\\@example.com/``, and headers kept for "the same
    origin" by one reading would go to the host of the other.
    """
    from urllib3.exceptions import LocationParseError  # noqa: PLC0415 - off the hit path
    from urllib3.util import parse_url  # noqa: PLC0415

    try:
        parts = parse_url(url)
    except LocationParseError:
        return "", None, None  # matches no origin: headers stay home
    scheme = (parts.scheme or "").lower()
    host = parts.host.lower() if parts.host else None
    return scheme, host, parts.port or {"http": 80, "https": 443}.get(scheme)


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``(first byte, total length)`` of a ``Content-Range: bytes a-b/n`` header."""
    if not value or not value.startswith("bytes "):
        return None, None
    span, _, total = value[6:].partition("/")
    return decimal(span.partition("-")[0]), decimal(total)


def _body_reader(resp: requests.Response) -> Callable[[memoryview], int]:
    """A function that reads what has arrived of the body into a buffer (0 at the end).

    A plain body of known length is read from the socket's buffered file straight into the
    caller's buffer, which the partial reuses. urllib3 (through http.client) would return a new
    ``bytes`` per read instead: on a 1 GiB download that is a gigabyte of fresh memory to fault
    in, a tenth of the transfer's CPU time. The bytes are the same either way, never decoded;
    chunked or unsized bodies, or a library layout other than the one expected, go through
    urllib3's ``read1`` (and a copy). The caller closes the response afterwards, so the
    connection, whose bookkeeping this bypasses, is never reused.
    """
    body = getattr(resp.raw, "_fp", None)  # urllib3 keeps http.client's response here
    file = getattr(body, "fp", None)
    if (
        isinstance(body, http.client.HTTPResponse)
        and not body.chunked
        and isinstance(body.length, int)
        and isinstance(file, io.BufferedReader)
    ):
        length = left = body.length
        readinto1 = file.readinto1

        def direct(view: memoryview) -> int:
            nonlocal left
            if left <= 0:
                return 0
            n: int = readinto1(view[:left]) or 0
            if not n:  # closed before Content-Length, as urllib3 would report it
                raise urllib3.exceptions.IncompleteRead(length - left, left)
            left -= n
            return n

        return direct

    read1 = resp.raw.read1

    def copied(view: memoryview) -> int:
        data: bytes = read1(len(view), decode_content=False)
        view[: len(data)] = data
        return len(data)

    return copied
