"""Cached, single-flight, atomic, verified and resumable downloads.

``fetch(url, sha256=...)`` returns a path under ``$_VLLM_TEST_CACHE/<namespace>/``;
``warm_manifest`` fills the caches with what a manifest lists, ``warm_snapshot`` and
``offline_snapshot_path`` do it for one :class:`Model` snapshot, and ``build_once`` builds an
artifact once per volume.

**Stability.** The names in ``__all__`` here are the public API: they follow semantic versioning.
The building blocks that cacheroot's other distributions share (the lock, atomic publishing, the
records) live in :mod:`cacheroot.fetch.store`, which may change in a minor release;
:mod:`cacheroot.fetch.vllm_compat` mirrors upstream vLLM's test helper. Every other module is
private.
"""

from __future__ import annotations

from ._archive import ArchiveError, extract
from ._build import build_once, built_path
from ._cachedir import cache_dir
from ._errors import (
    CacheMissError,
    ChecksumError,
    DownloadError,
    EmptyDownloadError,
    FetchError,
    LockTimeout,
)
from ._fetcher import Fetcher, default_fetcher, fetch
from ._models.model import Model
from ._models.snapshot import (
    SnapshotReport,
    UnpinnedRevisionWarning,
    check_snapshot,
    offline_snapshot_path,
    warm_snapshot,
)
from ._progress import FetchEvent
from ._stats import reset_stats, stats
from ._warm.manifest import Asset, Manifest, ManifestError, load_manifest, parse_manifest
from ._warm.warm import warm_manifest

__all__ = [
    "ArchiveError",
    "Asset",
    "CacheMissError",
    "ChecksumError",
    "DownloadError",
    "EmptyDownloadError",
    "FetchError",
    "FetchEvent",
    "Fetcher",
    "LockTimeout",
    "Manifest",
    "ManifestError",
    "Model",
    "SnapshotReport",
    "UnpinnedRevisionWarning",
    "build_once",
    "built_path",
    "cache_dir",
    "check_snapshot",
    "default_fetcher",
    "extract",
    "fetch",
    "load_manifest",
    "offline_snapshot_path",
    "parse_manifest",
    "reset_stats",
    "stats",
    "warm_manifest",
    "warm_snapshot",
]
