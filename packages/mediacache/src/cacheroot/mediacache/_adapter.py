"""Drop-in wrappers for a media connector's own download functions.

``cached_or(get_bytes)`` returns ``get_bytes`` itself when the cache is off, so a connector that
wraps its download at construction behaves byte for byte as before unless the user opts in.
When on, the wrapper takes the same call shape (``url``, then ``timeout``, ``allow_redirects``
and ``headers`` keywords) and serves http(s) URLs of allowed domains through the cache; every
other URL (``data:``, ``file:``, other domains) still goes to the wrapped function.

How a connector of one's own uses it (vLLM's ``MediaConnector`` needs no change: the
``vllm.general_plugins`` entry point, :mod:`cacheroot.mediacache.vllm_plugin`, wraps its
connection, keeping vLLM's size limits, budgets and retries)::

    from cacheroot.mediacache import acached_or, cached_or

    class MediaConnector:
        def __init__(self, ..., connection=http_connection):
            self._get_bytes = cached_or(connection.get_bytes)
            self._async_get_bytes = acached_or(connection.async_get_bytes)

        def load_from_url(self, url, media_io, *, fetch_timeout=None):
            ...
            data = self._get_bytes(url, timeout=fetch_timeout, allow_redirects=...)
            return media_io.load_bytes(data)
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ._cache import MediaCache

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


class _Unset:
    """Marker: look the cache up in the environment."""


_FROM_ENV = _Unset()


def cached_or(
    fetch: Callable[..., bytes], *, cache: MediaCache | _Unset | None = _FROM_ENV
) -> Callable[..., bytes]:
    """``fetch`` itself when the cache is off; else a caching function of the same call shape.

    ``cache`` defaults to :meth:`MediaCache.from_env` (evaluated now, once).
    """
    the_cache = MediaCache.from_env() if isinstance(cache, _Unset) else cache
    if the_cache is None:
        return fetch

    @functools.wraps(fetch)
    def cached(url: str, **kwargs: Any) -> bytes:
        return the_cache.fetch_bytes(url, fallback=fetch, **kwargs)

    return cached


def acached_or(
    afetch: Callable[..., Awaitable[bytes]],
    *,
    cache: MediaCache | _Unset | None = _FROM_ENV,
) -> Callable[..., Awaitable[bytes]]:
    """The asynchronous twin of :func:`cached_or` (the cache path runs in a worker thread)."""
    the_cache = MediaCache.from_env() if isinstance(cache, _Unset) else cache
    if the_cache is None:
        return afetch

    @functools.wraps(afetch)
    async def cached(url: str, **kwargs: Any) -> bytes:
        if not the_cache.handles(url):
            return await afetch(url, **kwargs)
        return await the_cache.aget(url, **kwargs)

    return cached
