"""One cache root for every cache an ML test suite touches.

``resolve(environ)`` maps ``CACHEROOT`` (or the XDG cache home) to every cache variable of the
layout table; ``apply()`` sets what it derived. Importing this package imports only :mod:`os`,
because the start-up hook imports it in every Python process.
"""

from __future__ import annotations

from ._export import FORMATS, docker_args, export
from ._layout import (
    DEFAULT_SOURCE,
    DERIVED,
    EXPLICIT,
    INVALID,
    OPT_IN_OFF,
    Layout,
    Setting,
    apply,
    hook,
    path_problem,
    resolve,
    truthy,
)
from ._table import (
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    HF_ENDPOINT,
    HF_HUB_OFFLINE,
    MODELSCOPE_ENDPOINT,
    TABLE,
    TAGS,
    VLLM_MEDIA_CACHE_MAX_SIZE_MB,
    VLLM_MEDIA_CACHE_TTL_HOURS,
    XDG_CACHE_HOME,
    Variable,
)

__all__ = [
    "CACHEROOT",
    "CACHEROOT_DISABLE",
    "CACHEROOT_OFFLINE",
    "CACHEROOT_OPT_IN",
    "CACHEROOT_TAG",
    "DEFAULT_SOURCE",
    "DERIVED",
    "EXPLICIT",
    "FORMATS",
    "HF_ENDPOINT",
    "HF_HUB_OFFLINE",
    "INVALID",
    "MODELSCOPE_ENDPOINT",
    "OPT_IN_OFF",
    "TABLE",
    "TAGS",
    "VLLM_MEDIA_CACHE_MAX_SIZE_MB",
    "VLLM_MEDIA_CACHE_TTL_HOURS",
    "XDG_CACHE_HOME",
    "Layout",
    "Setting",
    "Variable",
    "apply",
    "docker_args",
    "export",
    "hook",
    "path_problem",
    "resolve",
    "truthy",
]
