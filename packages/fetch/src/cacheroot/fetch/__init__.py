"""Cached, single-flight, atomic, verified and resumable downloads.

``fetch(url, sha256=...)`` returns a path under ``$VLLM_TEST_CACHE/<namespace>/``; the building
blocks (the lock, atomic publishing of files and directories, the error hierarchy) are public for
the other cacheroot packages.
"""

from __future__ import annotations

from ._errors import CacheMissError, ChecksumError, DownloadError, FetchError, LockTimeout
from ._fetcher import Fetcher, cache_dir, default_fetcher, fetch
from ._lock import PathLock, holder
from ._naming import check_filename, check_namespace, entry_name, entry_path
from ._stats import reset_stats, stats
from ._store import (
    Partial,
    Staging,
    atomic_write,
    current_meta,
    fsync_dir,
    lock_path,
    partial_abandoned,
    partials,
    publish_dir,
    read_meta,
    remove_abandoned,
    sha256_file,
    staged_dir,
    write_meta,
)

__all__ = [
    "CacheMissError",
    "ChecksumError",
    "DownloadError",
    "FetchError",
    "Fetcher",
    "LockTimeout",
    "Partial",
    "PathLock",
    "Staging",
    "atomic_write",
    "cache_dir",
    "check_filename",
    "check_namespace",
    "current_meta",
    "default_fetcher",
    "entry_name",
    "entry_path",
    "fetch",
    "fsync_dir",
    "holder",
    "lock_path",
    "partial_abandoned",
    "partials",
    "publish_dir",
    "read_meta",
    "remove_abandoned",
    "reset_stats",
    "sha256_file",
    "staged_dir",
    "stats",
    "write_meta",
]
