"""Cached, single-flight, atomic, verified and resumable downloads.

``fetch(url, sha256=...)`` returns a path under ``$_VLLM_TEST_CACHE/<namespace>/``; the building
blocks (the lock, atomic publishing of files and directories, the error hierarchy) are public for
the other cacheroot packages.
"""

from __future__ import annotations

from ._archive import ArchiveError, extract, extract_entry
from ._build import build_once, built_path
from ._errors import (
    CacheMissError,
    ChecksumError,
    DownloadError,
    EmptyDownloadError,
    FetchError,
    LockTimeout,
)
from ._fetcher import Fetcher, cache_dir, default_fetcher, fetch
from ._lock import PathLock, holder
from ._manifest import Asset, Manifest, ManifestError, Model, load_manifest, parse_manifest
from ._naming import check_filename, check_namespace, entry_name, entry_path
from ._redact import redact_url
from ._snapshot import (
    ModelSpec,
    SnapshotReport,
    UnpinnedRevisionWarning,
    check_snapshot,
    offline_snapshot_path,
    warm_snapshot,
)
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
from ._used import touch_used
from ._warm import warm_manifest

__all__ = [
    "ArchiveError",
    "Asset",
    "CacheMissError",
    "ChecksumError",
    "DownloadError",
    "EmptyDownloadError",
    "FetchError",
    "Fetcher",
    "LockTimeout",
    "Manifest",
    "ManifestError",
    "Model",
    "ModelSpec",
    "Partial",
    "PathLock",
    "SnapshotReport",
    "Staging",
    "UnpinnedRevisionWarning",
    "atomic_write",
    "build_once",
    "built_path",
    "cache_dir",
    "check_filename",
    "check_namespace",
    "check_snapshot",
    "current_meta",
    "default_fetcher",
    "entry_name",
    "entry_path",
    "extract",
    "extract_entry",
    "fetch",
    "fsync_dir",
    "holder",
    "load_manifest",
    "lock_path",
    "offline_snapshot_path",
    "parse_manifest",
    "partial_abandoned",
    "partials",
    "publish_dir",
    "read_meta",
    "redact_url",
    "remove_abandoned",
    "reset_stats",
    "sha256_file",
    "staged_dir",
    "stats",
    "touch_used",
    "warm_manifest",
    "warm_snapshot",
    "write_meta",
]
