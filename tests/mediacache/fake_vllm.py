"""A stand-in for the few vLLM 0.33 modules the plugin touches, for the default test run.

The real vLLM needs torch; the default run cannot import it. This stand-in has the same shape
where the plugin looks (module paths, ``MediaConnector``'s constructor, ``connection``,
``_media_cache_dir``, ``HTTPConnection.get_bytes``/``async_get_bytes`` and their keywords,
the size errors, the per-request budget) and nothing else. The proof against the real vLLM is
``tests/upstream/test_vllm_media_plugin.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
from typing import Any

import requests

MIB = 1024 * 1024


class MediaDownloadSizeExceededError(ValueError):
    def __init__(self, max_bytes: int, received_bytes: int | None = None) -> None:
        super().__init__(f"over VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB: {received_bytes} > {max_bytes}")
        self.max_bytes, self.received_bytes = max_bytes, received_bytes


class HTTPResponseSizeExceededError(ValueError):
    def __init__(self, max_bytes: int, received_bytes: int) -> None:
        super().__init__(f"over max_bytes: {received_bytes} > {max_bytes}")
        self.max_bytes, self.received_bytes = max_bytes, received_bytes


class BudgetExceededError(ValueError):
    """What a spent request budget raises."""


class Budget:
    """A per-request byte budget: ``charge`` raises once the total passes ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, size: int) -> None:
        if self.used + size > self.limit:
            raise BudgetExceededError(f"{self.used + size} > {self.limit}")
        self.used += size


class HTTPConnection:
    """Downloads with ``requests``; records every call so tests see what reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.reuse = object()

    def _headers(self) -> dict[str, str]:
        return {"User-Agent": "vLLM/0.33.0"}

    def get_bytes(self, url: str, **kwargs: Any) -> bytes:
        self.calls.append((url, kwargs))
        if url.startswith("data:"):
            return b"data"
        r = requests.get(url, headers=self._headers(), timeout=kwargs.get("timeout"))
        r.raise_for_status()
        return r.content

    async def async_get_bytes(self, url: str, **kwargs: Any) -> bytes:
        return await asyncio.to_thread(self.get_bytes, url, **kwargs)

    def get_json(self, url: str) -> str:
        return f"json of {url}"


class MediaConnector:
    """The calling convention of vLLM 0.33's connector, with its own cache reduced to a dict."""

    def __init__(
        self,
        media_io_kwargs: dict[str, Any] | None = None,
        connection: HTTPConnection | None = None,
        *,
        download_budget: Budget | None = None,
    ) -> None:
        self.media_io_kwargs = media_io_kwargs or {}
        self.connection = connection if connection is not None else global_http_connection
        self.download_budget = download_budget
        self._media_cache_dir: str | None = os.environ.get("VLLM_MEDIA_CACHE") or None
        self.own_cache: dict[str, bytes] = {}

    def _get_cached_bytes(self, url: str) -> bytes | None:
        return self.own_cache.get(url) if self._media_cache_dir else None

    def _put_cached_bytes(self, url: str, data: bytes) -> None:
        if self._media_cache_dir:
            self.own_cache[url] = data

    def load_from_url(self, url: str, max_bytes: int | None = None) -> bytes:
        cached = self._get_cached_bytes(url)
        if cached is not None:
            return cached
        budget = {"request_budget": self.download_budget} if self.download_budget else {}
        data: bytes = self.connection.get_bytes(
            url, timeout=5, allow_redirects=True, max_bytes=max_bytes, **budget
        )
        self._put_cached_bytes(url, data)
        return data

    async def load_from_url_async(self, url: str, max_bytes: int | None = None) -> bytes:
        cached = self._get_cached_bytes(url)
        if cached is not None:
            return cached
        data: bytes = await self.connection.async_get_bytes(
            url, timeout=5, allow_redirects=True, max_bytes=max_bytes
        )
        self._put_cached_bytes(url, data)
        return data


global_http_connection = HTTPConnection()


class _Envs(types.ModuleType):
    """``vllm.envs``: values read from the environment on each access, as vLLM does."""

    def __getattr__(self, name: str) -> Any:
        if name == "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB":
            return int(os.environ.get(name, "256"))
        raise AttributeError(name)


class OtherConnector:
    """A connector of another shape: no ``connection`` argument, no own cache methods."""

    def __init__(self, media_io_kwargs: dict[str, Any] | None = None) -> None:
        self.media_io_kwargs = media_io_kwargs

    def load_from_url(self, url: str) -> bytes:
        return url.encode()

    async def load_from_url_async(self, url: str) -> bytes:
        return url.encode()


def modules(
    *, connector_class: type = MediaConnector, without: tuple[str, ...] = ()
) -> dict[str, types.ModuleType]:
    """The stand-in's modules by name (for ``sys.modules``), less the names in ``without``."""
    root = types.ModuleType("vllm")
    root.__version__ = "0.33.0"  # type: ignore[attr-defined]
    connections = types.ModuleType("vllm.connections")
    connections.HTTPConnection = HTTPConnection  # type: ignore[attr-defined]
    connections.MediaDownloadSizeExceededError = MediaDownloadSizeExceededError  # type: ignore[attr-defined]
    connections.HTTPResponseSizeExceededError = HTTPResponseSizeExceededError  # type: ignore[attr-defined]
    connections.global_http_connection = global_http_connection  # type: ignore[attr-defined]
    for name in without:
        delattr(connections, name)
    connector = types.ModuleType("vllm.multimodal.media.connector")
    connector.MediaConnector = connector_class  # type: ignore[attr-defined]
    return {
        "vllm": root,
        "vllm.envs": _Envs("vllm.envs"),
        "vllm.connections": connections,
        "vllm.multimodal": types.ModuleType("vllm.multimodal"),
        "vllm.multimodal.media": types.ModuleType("vllm.multimodal.media"),
        "vllm.multimodal.media.connector": connector,
    }


def install(monkeypatch: Any, **kwargs: Any) -> types.ModuleType:
    """Put the stand-in into ``sys.modules`` for one test; return its connector module."""
    mods = modules(**kwargs)
    for name, module in mods.items():
        monkeypatch.setitem(sys.modules, name, module)
    return mods["vllm.multimodal.media.connector"]
