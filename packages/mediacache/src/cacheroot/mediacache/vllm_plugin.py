"""A vLLM general plugin: ``MediaConnector`` downloads go through :mod:`cacheroot.mediacache`.

The wheel declares it as ``vllm.general_plugins: cacheroot-mediacache``; vLLM calls
:func:`register` in each of its processes, possibly more than once. Nothing in vLLM's code is
changed and importing this module does not import vLLM: :func:`register` does, and only when
the cache is on.

Off (``MediaCache.from_env()`` is ``None``, the default): :func:`register` returns at once and
vLLM runs exactly as without the plugin, its own cache (``VLLM_MEDIA_CACHE``) on or off as
configured. On: every ``MediaConnector`` built afterwards gets, for itself only, its
``connection`` wrapped. Its http(s) downloads (``get_bytes`` and ``async_get_bytes``, that is
``load_from_url`` and ``load_from_url_async``) are answered by one :class:`MediaCache` per
process, so the HTTP rules, single flight across threads and processes, the bound, the TTL and
the counters apply; vLLM's own cache is turned off for that connector, so nothing is stored
twice. Everything else stays vLLM's: the allowed media domains (checked before the download),
``VLLM_MEDIA_URL_ALLOW_REDIRECTS`` and the fetch timeout (passed through), the size limit
(``max_bytes`` from the media IO and ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB``, raising vLLM's own
errors, checked on cache hits too), the per-request download budget (charged with every body
delivered, hit or miss, so a request fails or passes the same with the cache warm or cold),
vLLM's retries (its own decorator, when the release has it), its error wrapping (HTTP errors
are ``requests.HTTPError``, which it turns into its 422 for 4xx) and the decoding. Responses
that the cache's rules refuse to store (``Authorization``, ``no-store``, ``private``, over the
bound) are still returned to vLLM.

If vLLM cannot be imported, or its connector does not have the shape this module was written
against (vLLM 0.33), :func:`register` logs one warning and changes nothing: a plugin must never
stop vLLM from starting.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import sys
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from cacheroot.envs import CACHEROOT_MEDIA_CACHE

from ._cache import MediaCache
from ._errors import ResponseTooLarge
from ._redact import shown

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import ModuleType

__all__ = ["CachedConnection", "installed_cache", "register", "unregister"]

log = logging.getLogger("cacheroot.mediacache")

#: Set on the ``__init__`` this module installs, so that a second install is recognised even
#: when this module was loaded twice.
_MARK = "__cacheroot_mediacache__"
#: The keyword arguments vLLM 0.33's connector passes to ``get_bytes``; any other means a
#: release this module does not know, and the call goes to vLLM's own code untouched.
_KNOWN = frozenset({"timeout", "allow_redirects", "max_bytes", "request_budget"})
_MIB = 1024 * 1024
#: What the connector class and the HTTP module must have for the seam to hold.
_CONNECTOR_ATTRS = ("load_from_url", "load_from_url_async", "_get_cached_bytes")
_CONNECTION_ATTRS = ("get_bytes", "async_get_bytes")
_ERRORS = ("MediaDownloadSizeExceededError", "HTTPResponseSizeExceededError")


class _Vllm(NamedTuple):
    """The pieces of vLLM the wrapped connection uses, looked up once."""

    envs: Any
    connections: ModuleType
    connector_class: type
    retry: Callable[[Callable[..., bytes]], Callable[..., bytes]]
    aretry: Callable[[Callable[..., Awaitable[bytes]]], Callable[..., Awaitable[bytes]]]


class _State:
    """What :func:`register` decided in this process (``outcome`` ``None``: nothing yet, or off)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.outcome: str | None = None
        self.cache: MediaCache | None = None
        self.patched: tuple[type, Any] | None = None  # (connector class, its own __init__)
        self.warned_instance = False
        self.told_vllm_cache_off = False


_state = _State()


def register() -> None:
    """Route vLLM's media downloads through the media cache when it is on (idempotent).

    The entry point vLLM calls. Off: returns without importing vLLM. On: patches
    ``MediaConnector.__init__`` once per process. Never raises: a misconfiguration, a missing
    or different vLLM is logged once as a warning and leaves vLLM untouched.
    """
    with _state.lock:
        if _state.outcome is not None:
            return  # installed or refused already: the first decision stands
        try:
            cache = MediaCache.from_env()
        except ValueError as exc:
            _state.outcome = "refused"
            log.warning(
                "cacheroot.mediacache: %s. vLLM's media downloads are not cached by cacheroot "
                "in this process",
                shown(exc),
            )
            return
        if cache is None:
            return  # off: re-evaluated on the next call, vLLM untouched
        vllm = _load_vllm()
        if vllm is None:
            _state.outcome = "refused"
            return
        _state.patched = _install(vllm, cache)
        _state.cache = cache
        _state.outcome = "installed"
        log.info(
            "cacheroot.mediacache: vLLM's media downloads go through %s (%s)",
            shown(cache.directory),
            CACHEROOT_MEDIA_CACHE,
        )


def unregister() -> None:
    """Undo :func:`register` in this process: connectors built from now on are vLLM's own.

    Connectors built before keep the cache. For tests, and for programs that embed vLLM and
    want the choice back; the next :func:`register` decides afresh.
    """
    with _state.lock:
        if _state.patched is not None:
            cls, original = _state.patched
            setattr(cls, "__init__", original)  # noqa: B010 - as in _install
        _state.reset()


def installed_cache() -> MediaCache | None:
    """The cache :func:`register` installed in this process, or ``None``."""
    return _state.cache


def _load_vllm() -> _Vllm | None:
    """vLLM's connector and HTTP module, or ``None`` (with one warning) when unusable."""
    try:
        vllm_envs = importlib.import_module("vllm.envs")
        connections = importlib.import_module("vllm.connections")
        connector = importlib.import_module("vllm.multimodal.media.connector")
    except Exception as exc:  # noqa: BLE001 - vLLM's import can fail in many ways (torch, CUDA)
        log.warning(
            "cacheroot.mediacache: vLLM's media connector cannot be imported (%s: %s); vLLM's "
            "media downloads are not cached by cacheroot",
            type(exc).__name__,
            shown(exc),
        )
        return None
    cls = getattr(connector, "MediaConnector", None)
    http = getattr(connections, "HTTPConnection", None)
    missing = [] if isinstance(cls, type) else ["MediaConnector"]
    if isinstance(cls, type):
        missing += [f"MediaConnector.{a}" for a in _CONNECTOR_ATTRS if not hasattr(cls, a)]
        init = vars(cls).get("__init__")
        if init is None or "connection" not in inspect.signature(init).parameters:
            missing.append("MediaConnector.__init__(connection=...)")
    missing += [f"HTTPConnection.{a}" for a in _CONNECTION_ATTRS if not hasattr(http, a)]
    missing += [f"vllm.connections.{e}" for e in _ERRORS if not hasattr(connections, e)]
    if missing or not isinstance(cls, type):
        version = getattr(sys.modules.get("vllm"), "__version__", "?")
        log.warning(
            "cacheroot.mediacache: vLLM %s's media connector has another shape than the one "
            "this plugin knows (vLLM 0.33): %s missing; vLLM's media downloads are not cached "
            "by cacheroot",
            version,
            ", ".join(missing),
        )
        return None

    def identity(fn: Any) -> Any:
        return fn

    return _Vllm(
        envs=vllm_envs,
        connections=connections,
        connector_class=cls,
        retry=getattr(connections, "_sync_retry", identity),
        aretry=getattr(connections, "_async_retry", identity),
    )


def _install(vllm: _Vllm, cache: MediaCache) -> tuple[type, Any] | None:
    """Wrap ``MediaConnector.__init__`` so each new connector adopts the cache (once).

    Returns the class and the ``__init__`` it had, or ``None`` if it was wrapped already.
    """
    cls = vllm.connector_class
    original = vars(cls)["__init__"]
    if getattr(original, _MARK, False):
        return None

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - it is __init__
        original(self, *args, **kwargs)
        _adopt(self, vllm, cache)

    setattr(__init__, _MARK, True)
    setattr(cls, "__init__", __init__)  # noqa: B010 - mypy refuses a plain assignment here
    return cls, original


def _adopt(connector: Any, vllm: _Vllm, cache: MediaCache) -> None:
    """Give one connector the caching connection and turn its own cache off."""
    connection = getattr(connector, "connection", None)
    if isinstance(connection, CachedConnection):
        return
    if connection is None or not hasattr(connector, "_media_cache_dir"):
        if not _state.warned_instance:
            _state.warned_instance = True
            log.warning(
                "cacheroot.mediacache: a %s has no 'connection' or '_media_cache_dir' after "
                "construction; its downloads are not cached by cacheroot",
                type(connector).__name__,
            )
        return
    connector.connection = CachedConnection(connection, cache, vllm)
    # vLLM's own cache reads and writes only when this is set: off for this connector, so a
    # body is never stored twice (the directory vLLM created, if any, stays as it was).
    theirs = connector._media_cache_dir  # noqa: SLF001 - the one switch of vLLM's own cache
    connector._media_cache_dir = None  # noqa: SLF001
    if theirs and not _state.told_vllm_cache_off:
        _state.told_vllm_cache_off = True
        log.info(
            "cacheroot.mediacache: VLLM_MEDIA_CACHE=%s is not used by vLLM's media connectors "
            "while %s is on (one cache, no body stored twice)",
            shown(theirs),
            CACHEROOT_MEDIA_CACHE,
        )


class CachedConnection:
    """vLLM's ``HTTPConnection`` for one connector, with media downloads through the cache.

    Only ``get_bytes`` and ``async_get_bytes`` of http(s) URLs change; every other attribute
    is the wrapped connection's.
    """

    def __init__(self, inner: Any, cache: MediaCache, vllm: _Vllm) -> None:
        self._inner = inner
        self._cache = cache
        self._vllm = vllm
        make_headers = getattr(inner, "_headers", None)
        # vLLM's own request headers (its User-Agent), so the origin sees the same client.
        self._headers: dict[str, str] = dict(make_headers()) if callable(make_headers) else {}
        # vLLM's retries (timeouts growing per attempt) around one cached fetch, as around its
        # own download; the function takes the connection first, as vLLM's log line expects.
        self._get = vllm.retry(type(self).fetch_once)
        self._aget = vllm.aretry(type(self).afetch_once)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # not set yet (a copy being made): no endless lookup
            raise AttributeError(name)
        return getattr(self._inner, name)

    def get_bytes(self, url: str, **kwargs: Any) -> bytes:
        """vLLM's ``get_bytes``, answered by the cache for http(s) URLs."""
        if not self._routed(url, kwargs):
            body: bytes = self._inner.get_bytes(url, **kwargs)
            return body
        return self._get(self, url, **kwargs)

    async def async_get_bytes(self, url: str, **kwargs: Any) -> bytes:
        """vLLM's ``async_get_bytes``, answered by the cache (in a worker thread) for http(s)."""
        if not self._routed(url, kwargs):
            body: bytes = await self._inner.async_get_bytes(url, **kwargs)
            return body
        return await self._aget(self, url, **kwargs)

    def _routed(self, url: str, kwargs: dict[str, Any]) -> bool:
        return kwargs.keys() <= _KNOWN and self._cache.handles(url)

    async def afetch_once(self, url: str, **kwargs: Any) -> bytes:
        """:meth:`fetch_once` in a worker thread."""
        return await asyncio.to_thread(self.fetch_once, url, **kwargs)

    def fetch_once(
        self,
        url: str,
        *,
        timeout: float | None = None,
        allow_redirects: bool = True,
        max_bytes: int | None = None,
        request_budget: Any = None,
    ) -> bytes:
        """One answer from the cache under vLLM's limits and budget (no retries)."""
        limit, media_limit = self._size_limit(max_bytes)
        try:
            body = self._cache.get(
                url,
                headers=self._headers,
                timeout=timeout,
                allow_redirects=allow_redirects,
                max_bytes=sys.maxsize if limit is None else limit,
            )
        except ResponseTooLarge as exc:
            name = _ERRORS[0] if media_limit else _ERRORS[1]
            raise getattr(self._vllm.connections, name)(exc.limit, exc.size) from exc
        if request_budget is not None:
            request_budget.charge(len(body))
        return body

    def _size_limit(self, max_bytes: int | None) -> tuple[int | None, bool]:
        """The limit vLLM applies to a download, and whether it is its media-wide one.

        vLLM 0.33: the smaller of ``max_bytes`` and ``VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`` (which
        wins a tie; 0 or less means none), reported with the error class of the one that won.
        """
        mb = getattr(self._vllm.envs, "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", 0)
        media = int(mb * _MIB) if mb and mb > 0 else None
        if media is not None and (max_bytes is None or media <= max_bytes):
            return media, True
        return max_bytes, False
