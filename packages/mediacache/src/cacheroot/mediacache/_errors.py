"""Errors of :mod:`cacheroot.mediacache`: a small hierarchy rooted at :class:`MediaCacheError`.

Each leaf is also the built-in a caller would naturally catch: a refused URL and an oversized
body are ``ValueError`` s (the input was wrong, retrying will not help). Transport failures and
HTTP error statuses are *not* wrapped: they propagate as the ``requests`` exceptions that a
media connector already handles, so turning the cache on does not change its error paths.
Every class pickles through ``__reduce__`` with its own constructor arguments. A URL's
credentials (``user:password@``, and query parameters such as ``?token=`` or
``X-Amz-Signature=``) never reach a message or an attribute: they are redacted
(:func:`._redact.redact`) when the error is made, and messages are kept to one line.
"""

from __future__ import annotations

from typing import Any

from ._redact import one_line, redact


class MediaCacheError(Exception):
    """Root of every error that :mod:`cacheroot.mediacache` raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args)


class URLRefused(MediaCacheError, ValueError):  # noqa: N818 - it is a refusal, not a crash
    """The URL (or a redirect) is not one the cache may fetch: wrong scheme or domain."""

    def __init__(self, url: str, reason: str) -> None:
        url, reason = redact(url), redact(reason)
        super().__init__(f"refusing to fetch {url!r}: {one_line(reason)}")
        self._url, self._reason = url, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url, self._reason))

    @property
    def url(self) -> str:
        """The URL that was refused (its credentials redacted)."""
        return self._url

    @property
    def reason(self) -> str:
        """Why, and what would be accepted."""
        return self._reason


class ResponseTooLarge(MediaCacheError, ValueError):  # noqa: N818 - mirrors requests' naming
    """The origin announced or sent more than ``max_download_bytes``; the transfer was stopped."""

    def __init__(self, url: str, limit: int, size: int) -> None:
        url = redact(url)
        super().__init__(
            f"{one_line(url)} sent at least {size} bytes, over the limit of {limit} bytes; "
            "nothing was stored. Raise max_download_bytes if such media is expected"
        )
        self._url, self._limit, self._size = url, limit, size

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url, self._limit, self._size))

    @property
    def url(self) -> str:
        """The URL being downloaded (its credentials redacted)."""
        return self._url

    @property
    def limit(self) -> int:
        """The configured maximum, in bytes."""
        return self._limit

    @property
    def size(self) -> int:
        """How many bytes were announced or received when the transfer stopped."""
        return self._size
