"""Asking the upstream hub, with a deadline, and keeping only what belongs in a store.

The hub cache speaks to one upstream (``https://huggingface.co`` or a mirror). Redirects that
stay on that origin are followed here, so a client never sees the upstream's host; a redirect
of a file's metadata to another host (the Hub's CDN for LFS files) is the file's metadata, so it
is answered 200 without its ``Location``, and the client downloads the bytes from this cache.
When the bytes themselves are fetched, redirects to other hosts are followed with the
credential dropped, as browsers and huggingface_hub do.

Headers that would send a client around the cache are removed: the Xet storage protocol's
(``X-Xet-*``, ``Link: <...>; rel="xet-auth"``), with which huggingface_hub would fetch the bytes
from Xet's storage directly. So are hop-by-hop headers and cookies.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urljoin, urlsplit

from .._httpvalues import retry_after
from .store import Answer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    import aiohttp

__all__ = ["Upstream", "UpstreamError", "keep_headers"]

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


class UpstreamError(Exception):
    """The upstream gave no usable answer: a ``status`` (429, 5xx), or none (timeout, refused,
    reset: ``status`` is ``None``)."""

    def __init__(self, reason: str, status: int | None = None, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        #: Seconds the upstream asked callers to wait (``Retry-After``), when it did.
        self.wait = wait


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
    """One upstream hub (``base``, e.g. ``https://huggingface.co``) and the session to ask it."""

    def __init__(self, base: str, session: aiohttp.ClientSession, *, deadline: float) -> None:
        self.base = base.rstrip("/")
        self.session = session
        self.deadline = deadline
        self._origin = _origin(self.base)
        #: Until when (``time.time()``) it is left alone after a failure, and that failure.
        self.down_until = 0.0
        self.down: UpstreamError | None = None

    def url(self, target: str) -> str:
        """The upstream URL of a request target (path and query, as the client sent them)."""
        return self.base + target

    async def meta(self, method: str, target: str, headers: Mapping[str, str]) -> Answer:
        """The upstream's answer to ``method target``: a status below 500 other than 429.

        Raises :class:`UpstreamError` for 429, 5xx, a timeout past the deadline, a refused or
        reset connection. Same-origin redirects are followed; a file's metadata redirected to
        another host is answered 200 without its ``Location`` (see the module docstring).
        """
        import aiohttp  # noqa: PLC0415 - only where a hub runs

        try:
            return await asyncio.wait_for(self._meta(method, target, headers), self.deadline)
        except UpstreamError:
            raise
        except asyncio.TimeoutError as exc:  # not the built-in TimeoutError on Python 3.10
            raise UpstreamError(f"no answer within {self.deadline:g} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc

    async def _meta(self, method: str, target: str, headers: Mapping[str, str]) -> Answer:
        send = {k: v for k, v in headers.items() if k.lower() in FORWARD}
        send["Accept-Encoding"] = "identity"
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
                self._raise_for(resp.status, resp.headers.get("Retry-After"))
                body = b"" if method == "HEAD" else await resp.read()
                kept = tuple(
                    (k, v)
                    for k, v in keep_headers(resp.headers)
                    if method == "HEAD" or k.lower() != "content-length"
                )
                return Answer(resp.status, kept, body)
        return _too_many()

    @staticmethod
    def _raise_for(status: int, retry: str | None, expect: int | None = None) -> None:
        if status == 429 or status >= 500:
            raise UpstreamError(f"HTTP {status}", status, retry_after(retry))
        if expect is not None and status != expect:
            raise UpstreamError(f"HTTP {status} for the file's bytes", 502)

    async def download(
        self,
        target: str,
        headers: Mapping[str, str],
        started: Callable[[int | None], None],
        sink: Callable[[bytes], Awaitable[None]],
    ) -> None:
        """Stream a file's bytes into ``sink`` (``started`` gets the length, when sent).

        Redirects are followed to any host, the credential dropped once the origin changes.
        Connecting and each read have the deadline; the whole transfer has none.
        """
        import aiohttp  # noqa: PLC0415

        send = {k: v for k, v in headers.items() if k.lower() in FORWARD}
        send["Accept-Encoding"] = "identity"
        url = self.url(target)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.deadline, sock_read=60)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                async with self.session.get(
                    url, headers=send, allow_redirects=False, timeout=timeout
                ) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in _REDIRECTS and location:
                        next_url = urljoin(url, location)
                        if _origin(next_url) != _origin(url):
                            send.pop("authorization", None)
                            send.pop("Authorization", None)
                        url = next_url
                        continue
                    self._raise_for(resp.status, resp.headers.get("Retry-After"), expect=200)
                    started(resp.content_length)
                    async for chunk in resp.content.iter_chunked(CHUNK):
                        await sink(chunk)
                    return
            _too_many()
        except UpstreamError:
            raise
        except asyncio.TimeoutError as exc:
            raise UpstreamError("the upstream stopped sending") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc


def _too_many() -> NoReturn:
    raise UpstreamError(f"more than {MAX_REDIRECTS} redirects", 502)
