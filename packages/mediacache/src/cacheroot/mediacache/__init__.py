"""An opt-in URL cache for media fetches (images, audio, video).

``MediaCache.from_env()`` is ``None`` unless ``CACHEROOT_MEDIA_CACHE`` is set (or opted into through
``CACHEROOT_OPT_IN``); ``cached_or(get_bytes)`` wraps a connector's download so that it is
unchanged when the cache is off. Keys are the sha256 of the normalised URL; storing follows the
HTTP rules a shared cache must keep; the directory stays within ``VLLM_MEDIA_CACHE_MAX_SIZE_MB``
and entries within ``VLLM_MEDIA_CACHE_TTL_HOURS``.
"""

from __future__ import annotations

from ._adapter import acached_or, cached_or
from ._cache import MediaCache
from ._errors import MediaCacheError, ResponseTooLarge, URLRefused
from ._key import entry_name, normalise_url, url_key
from ._policy import freshness_lifetime, not_storable, parse_cache_control
from ._stats import reset_stats, stats

__all__ = [
    "MediaCache",
    "MediaCacheError",
    "ResponseTooLarge",
    "URLRefused",
    "acached_or",
    "cached_or",
    "entry_name",
    "freshness_lifetime",
    "normalise_url",
    "not_storable",
    "parse_cache_control",
    "reset_stats",
    "stats",
    "url_key",
]
