"""Asking the upstream hub, with a deadline, and keeping only what belongs in a store.

The hub cache speaks to one upstream (``https://huggingface.co`` or a mirror). Redirects that
stay on that origin are followed here, so a client never sees the upstream's host; a redirect
of a file's metadata to another host (the Hub's CDN for LFS files) is the file's metadata, so it
is answered 200 without its ``Location``, and the client downloads the bytes from this cache.
When the bytes themselves are fetched, redirects to other hosts are followed with the credential
dropped (whatever the case of its header's name), as browsers and huggingface_hub do, and only
where :mod:`.redirects` allows: a redirect is the upstream's to write, and the hub follows it from
inside its own network, so a target's address is checked before anything is sent to it.

A metadata answer is read only up to :data:`MAX_ANSWER` (a larger one is refused, 502, and never
held whole in memory), and every request has the deadline to get its answer's headers: an
upstream that accepts and never answers costs a client the deadline, not the files' read timeout.

Headers that would send a client around the cache are removed: the Xet storage protocol's
(``X-Xet-*``, ``Link: <...>; rel="xet-auth"``), with which huggingface_hub would fetch the bytes
from Xet's storage directly. So are hop-by-hop headers and cookies.

Every host contacted has a breaker (:mod:`.breaker`): a request to a host whose breaker is open
is not sent, and each answer or failure is reported to the breaker of the host that gave it, so
a failing CDN never counts against the API. Metadata and files' bytes go through two connection
pools (:func:`client_sessions`): downloads that hold every connection of theirs never make a
metadata request wait for one, time out, and pass for an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import time
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urljoin, urlsplit

from .breaker import Breaker, Breakers, asked_wait, origin_of
from .receive import Download, ReceiveError
from .redirects import Hop, RedirectPolicy, RedirectRefusedError, resolve
from .store import MAX_ANSWER, Answer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

    import aiohttp

__all__ = ["MAX_ANSWER", "Upstream", "UpstreamError", "client_sessions", "keep_headers"]

#: Request headers a client's request carries on to the upstream.
FORWARD = ("authorization", "user-agent", "accept", "accept-language", "x-hf-bill-to")
#: Response headers never kept or passed on.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-encoding",
        "set-cookie",
        "date",
        "server",
        "via",
        "alt-svc",
    }
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: How many bytes of a file are asked for in one read.
CHUNK = 1 << 20
#: Connections per upstream host, in each of the two pools (metadata, files' bytes).
POOL_PER_HOST = 32
#: Connections in all, in each pool.
POOL_SIZE = 64


class UpstreamError(Exception):
    """The upstream gave no usable answer: a ``status`` (429, 5xx), or none (timeout, refused,
    reset: ``status`` is ``None``)."""

    def __init__(
        self,
        reason: str,
        status: int | None = None,
        wait: float | None = None,
        *,
        origin: str = "",
        contacted: bool = True,
        outage: bool = True,
        timed_out: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        #: Seconds the upstream asked callers to wait (``Retry-After``, ``RateLimit``), if it did.
        self.wait = wait
        #: The host that failed (``scheme://host:port``); ``""`` when none is known.
        self.origin = origin
        #: ``False``: nothing was sent, that host's breaker is open.
        self.contacted = contacted
        #: Whether it speaks of the host being unavailable (429, 5xx, no answer), rather than
        #: of an answer the cache cannot use (too many redirects, a ``file://`` redirect).
        self.outage = outage
        #: Whether the caller already waited out the deadline for it.
        self.timed_out = timed_out


@contextlib.asynccontextmanager
async def client_sessions(
    trace: Sequence[aiohttp.TraceConfig] = (),
) -> AsyncIterator[tuple[aiohttp.ClientSession, aiohttp.ClientSession]]:
    """The metadata session and the files' session, each with a connection pool of its own.

    With one pool, downloads of large files held every connection to the Hub, a metadata
    request timed out waiting for one, and that timeout cooled the whole upstream off. ``trace``
    sees every request of both (the figures of ``/metrics``, :mod:`.metrics`).
    """
    import aiohttp  # noqa: PLC0415 - only where a hub runs

    def pool() -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_PER_HOST)

    async with (
        aiohttp.ClientSession(
            connector=pool(), auto_decompress=True, trace_configs=list(trace)
        ) as meta,
        aiohttp.ClientSession(
            connector=pool(), auto_decompress=True, trace_configs=list(trace)
        ) as files,
    ):
        yield meta, files


class _SinkError(Exception):
    """An error of the caller's sink (its disk, say): re-raised as it is, never the upstream's."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def keep_headers(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The response headers worth keeping and passing on (see the module docstring)."""
    kept: list[tuple[str, str]] = []
    for name, value in headers.items():
        lower = str(name).lower()
        if lower in _DROP or lower.startswith("x-xet-"):
            continue
        if lower == "link" and "xet-auth" in str(value):
            continue
        kept.append((str(name), str(value)))
    return tuple(kept)


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class Upstream:
    """One upstream hub (``base``, e.g. ``https://huggingface.co``), the sessions to ask it
    (``session`` for metadata, ``downloads`` for files' bytes) and the breakers of the hosts
    it sends the cache to."""

    def __init__(
        self,
        base: str,
        session: aiohttp.ClientSession,
        *,
        deadline: float,
        downloads: aiohttp.ClientSession | None = None,
        breakers: Breakers | None = None,
        redirect_hosts: Iterable[str] = (),
        observe: Callable[[str, int | None], None] | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        #: Sees each request sent outside the sessions (whose trace sees theirs): its URL and
        #: its answer's status, ``None`` when none came.
        self.observe = observe
        #: Where a file's redirects may go (see :mod:`.redirects`).
        self.redirects = RedirectPolicy(self.base, redirect_hosts)
        self.session = session
        self.downloads = session if downloads is None else downloads
        self.deadline = deadline
        self.breakers = (
            Breakers(cooloff=30.0, probe=deadline + 1.0) if breakers is None else breakers
        )
        self._origin = _origin(self.base)

    @property
    def breaker(self) -> Breaker:
        """The breaker of the upstream's own host (its API)."""
        return self.breakers.get(self.base)

    def url(self, target: str) -> str:
        """The upstream URL of a request target (path and query, as the client sent them)."""
        return self.base + target

    async def meta(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        extra: Mapping[str, str] | None = None,
    ) -> Answer:
        """The upstream's answer to ``method target``: a status below 500 other than 429.

        Raises :class:`UpstreamError` for 429, 5xx, a timeout past the deadline, a refused or
        reset connection, or when the API's breaker is open (nothing sent). Same-origin
        redirects are followed; a file's metadata redirected to another host is answered 200
        without its ``Location`` (see the module docstring).
        """
        import aiohttp  # noqa: PLC0415 - only where a hub runs

        breaker = self.breaker
        _admit(breaker)
        try:
            answer = await asyncio.wait_for(
                self._meta(method, target, headers, extra or {}), self.deadline
            )
        except UpstreamError as failed:
            _report(breaker, failed)
            raise
        except asyncio.TimeoutError as exc:  # not the built-in TimeoutError on Python 3.10
            late = UpstreamError(
                f"no answer within {self.deadline:g} s", origin=breaker.origin, timed_out=True
            )
            _report(breaker, late)
            raise late from exc
        except (aiohttp.ClientError, OSError) as exc:
            broken = UpstreamError(f"{type(exc).__name__}: {exc}", origin=breaker.origin)
            _report(breaker, broken)
            raise broken from exc
        breaker.succeeded()
        return answer

    async def _meta(
        self, method: str, target: str, headers: Mapping[str, str], extra: Mapping[str, str]
    ) -> Answer:
        send = {k: v for k, v in headers.items() if k.lower() in FORWARD}
        send["Accept-Encoding"] = "identity"
        send.update(extra)
        url = self.url(target)
        for _ in range(MAX_REDIRECTS + 1):
            async with self.session.request(
                method, url, headers=send, allow_redirects=False
            ) as resp:
                location = resp.headers.get("Location")
                if resp.status in _REDIRECTS and location:
                    next_url = urljoin(url, location)
                    if _origin(next_url) == self._origin:
                        url = next_url
                        continue
                    if method == "HEAD":
                        kept = tuple(
                            (k, v)
                            for k, v in keep_headers(resp.headers)
                            if k.lower() not in ("location", "content-length")
                        )
                        return Answer(200, kept, b"")
                _raise_for(resp.status, resp.headers, url)
                body = b"" if method == "HEAD" else await _read_capped(resp)
                kept = tuple(
                    (k, v)
                    for k, v in keep_headers(resp.headers)
                    if method == "HEAD" or k.lower() != "content-length"
                )
                return Answer(resp.status, kept, body)
        return _too_many()

    async def download(
        self,
        target: str,
        headers: Mapping[str, str],
        started: Callable[[int | None], None],
        sink: Callable[[bytes], Awaitable[None]],
        *,
        receive: Callable[[Download], Awaitable[None]] | None = None,
    ) -> None:
        """Stream a file's bytes into ``sink`` (``started`` gets the length, when sent); with
        ``receive``, hand it the body instead, read off the event loop (:mod:`.receive`).

        Redirects are followed where :mod:`.redirects` allows (a refused one is a 502, its
        target never contacted), the credential dropped once the origin changes; each hop is
        asked only while its host's breaker lets it, and reports to it. The answer's headers
        have the deadline (connecting included), each read of the body 60 s; the whole
        transfer has none. An error of ``sink`` is raised as it is.
        """
        send = {k: v for k, v in headers.items() if k.lower() in FORWARD}
        send["Accept-Encoding"] = "identity"
        url = self.url(target)
        hop = Hop(url)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                if receive is None:
                    next_url = await self._hop(url, hop, send, started, sink)
                else:
                    next_url = await self._hop_off_loop(url, hop, send, started, receive)
                if next_url is None:
                    return
                if _origin(next_url) != _origin(url):
                    send = {k: v for k, v in send.items() if k.lower() != "authorization"}
                try:
                    hop = await self.redirects.hop(next_url, resolve)
                except RedirectRefusedError as exc:
                    raise UpstreamError(str(exc), 502, contacted=False, outage=False) from None
                url = next_url
            _too_many()
        except _SinkError as exc:
            raise exc.error from None

    async def _hop(
        self,
        url: str,
        hop: Hop,
        send: Mapping[str, str],
        started: Callable[[int | None], None],
        sink: Callable[[bytes], Awaitable[None]],
    ) -> str | None:
        """Ask ``url`` (at ``hop``, its checked address) for the bytes: the redirect's target,
        or ``None`` once they were sunk."""
        import aiohttp  # noqa: PLC0415

        breaker = self.breakers.get(url)
        _admit(breaker)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.deadline, sock_read=60)
        sent = dict(send)
        if hop.host_header is not None:
            sent["Host"] = hop.host_header
        try:
            try:
                # The headers within the deadline: the 60 s read timeout is for a body under way.
                answer = await asyncio.wait_for(
                    self.downloads.get(
                        hop.url,
                        headers=sent,
                        allow_redirects=False,
                        timeout=timeout,
                        server_hostname=hop.server_hostname,
                    ),
                    self.deadline,
                )
            except asyncio.TimeoutError as exc:
                late = UpstreamError(
                    f"no answer's headers within {self.deadline:g} s",
                    origin=breaker.origin,
                    timed_out=True,
                )
                raise late from exc
            async with answer as resp:
                location = resp.headers.get("Location")
                if resp.status in _REDIRECTS and location:
                    breaker.succeeded()
                    return urljoin(url, location)
                _raise_for(resp.status, resp.headers, url, expect=200)
                breaker.succeeded()
                started(resp.content_length)
                async for chunk in resp.content.iter_chunked(CHUNK):
                    try:
                        await sink(chunk)
                    except OSError as exc:
                        raise _SinkError(exc) from exc
                return None
        except (UpstreamError, _SinkError) as exc:
            if isinstance(exc, UpstreamError):
                _report(breaker, exc)
            raise
        except asyncio.TimeoutError as exc:
            err = UpstreamError("the upstream stopped sending", origin=breaker.origin)
            _report(breaker, err)
            raise err from exc
        except (aiohttp.ClientError, OSError) as exc:
            err = UpstreamError(f"{type(exc).__name__}: {exc}", origin=breaker.origin)
            _report(breaker, err)
            raise err from exc

    async def _hop_off_loop(
        self,
        url: str,
        hop: Hop,
        send: Mapping[str, str],
        started: Callable[[int | None], None],
        receive: Callable[[Download], Awaitable[None]],
    ) -> str | None:
        """:meth:`_hop`, its request sent and its body read in a thread (:mod:`.receive`)."""
        breaker = self.breakers.get(url)
        _admit(breaker)
        body = Download(hop, send)
        try:
            try:
                head = await body.open(self.deadline)
            except asyncio.TimeoutError as exc:
                self._observed(hop.url, None)
                late = UpstreamError(
                    f"no answer's headers within {self.deadline:g} s",
                    origin=breaker.origin,
                    timed_out=True,
                )
                raise late from exc
            except (OSError, http.client.HTTPException) as exc:
                self._observed(hop.url, None)
                raise UpstreamError(f"{type(exc).__name__}: {exc}", origin=breaker.origin) from exc
            self._observed(hop.url, head.status)
            location = head.headers.get("Location")
            if head.status in _REDIRECTS and location:
                breaker.succeeded()
                return urljoin(url, location)
            _raise_for(head.status, head.headers, url, expect=200)
            breaker.succeeded()
            started(head.length)
            try:
                await receive(body)
            except ReceiveError as exc:
                raise UpstreamError(exc.reason, origin=breaker.origin) from None
            except OSError as exc:
                raise _SinkError(exc) from exc
        except UpstreamError as exc:
            _report(breaker, exc)
            raise
        finally:
            body.close()
        return None

    def _observed(self, url: str, status: int | None) -> None:
        """Count an answer (``None``: none came) of a request sent outside the sessions."""
        if self.observe is not None:
            self.observe(url, status)


def _admit(breaker: Breaker) -> None:
    """Raise (nothing sent) unless ``breaker`` lets a request through now."""
    wait = breaker.admit(time.time())
    if wait > 0:
        raise UpstreamError(
            f"{breaker.origin} is left alone for {wait:.0f} s more after {breaker.reason}",
            origin=breaker.origin,
            contacted=False,
        )


def _report(breaker: Breaker, err: UpstreamError) -> None:
    """Tell ``breaker`` what its host's request came to (an answer the cache cannot use is an
    answer: the host is up)."""
    if not err.contacted:
        return
    if err.outage:
        breaker.failed(time.time(), err.reason, err.wait)
    else:
        breaker.succeeded()


def _raise_for(
    status: int, headers: Mapping[str, str], url: str, expect: int | None = None
) -> None:
    if status == 429 or status >= 500:
        wait = asked_wait(status, headers)
        raise UpstreamError(f"HTTP {status}", status, wait, origin=origin_of(url))
    if expect is not None and status != expect:
        raise UpstreamError(f"HTTP {status} for the file's bytes", 502, outage=False)


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    """The body of a metadata answer, refused (502) past :data:`MAX_ANSWER` bytes: the Hub's
    answers are far smaller, and one read whole would hold all of it in the hub's memory."""
    too_large = UpstreamError(
        f"the upstream's answer is larger than {MAX_ANSWER >> 20} MiB, which the hub cache "
        "neither keeps nor passes on",
        502,
        outage=False,
    )
    if resp.content_length is not None and resp.content_length > MAX_ANSWER:
        raise too_large
    chunks: list[bytes] = []
    held = 0
    async for chunk in resp.content.iter_chunked(CHUNK):
        held += len(chunk)
        if held > MAX_ANSWER:
            resp.close()
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _too_many() -> NoReturn:
    raise UpstreamError(f"more than {MAX_REDIRECTS} redirects", 502, outage=False)
