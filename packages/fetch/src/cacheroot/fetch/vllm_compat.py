"""A drop-in for vLLM's own test-cache helper (``tests/cache_utils.py`` in vLLM's repository).

A vLLM test switches by changing one import::

    from tests.cache_utils import download_to_vllm_test_cache  # before
    from cacheroot.fetch.vllm_compat import download_to_vllm_test_cache  # after

The three functions keep upstream's signatures, return types, on-disk names and exceptions:

- the root is ``_VLLM_TEST_CACHE`` as the layout resolves it (:func:`~._cachedir.cache_dir`): the
  same directory upstream's helper reads wherever the start-up hook set the variable;
- ``download_to_vllm_test_cache`` stores ``<root>/<namespace>/<16 hex of sha256(url)>-<base>``:
  the digest covers the whole URL as given (query and fragment included), ``base`` is the last
  segment of the URL's path as :func:`urllib.parse.urlparse` splits it (no query, fragment or
  ``;params``; not percent-decoded), or ``download`` when that is empty. A given ``filename``
  is used as is. Namespaces may be nested (``gpt_oss/tiktoken``), and ``cacheroot cache``
  lists, verifies and prunes the files of every level, as it does the fetcher's own;
- an unsafe namespace or filename (empty, absolute, with a ``.`` or ``..`` component; a filename
  of more than one component) raises :class:`ValueError`, and so does an ``expected_sha256``
  that is not 64 hexadecimal digits (either case);
- any non-empty regular file at the path is a hit, whoever wrote it; with ``expected_sha256``
  it must also have that digest, or it is downloaded again and replaced;
- ``local_only`` (default: a cache-only run, ``_VLLM_TEST_CACHE_ONLY=1`` or
  ``CACHEROOT_OFFLINE=1``) turns a miss into :class:`FileNotFoundError`;
- a download that does not have the expected digest, or is empty, raises :class:`ValueError`
  and replaces nothing; a directory at the path raises :class:`IsADirectoryError`.

Underneath, cacheroot's fetcher does the work: one download per file across threads,
processes and containers sharing the volume (the others wait and find it published); retries
with backoff, ``Retry-After`` and resume on a flaky network; the digest computed while
streaming and remembered in a sidecar, so a hit hashes nothing after its first check; each
writer's own partial file, fsynced and renamed into place, so no reader ever sees a partial
file. Network failures raise :class:`OSError` (cacheroot's :class:`~._errors.DownloadError`)
where upstream raises ``urllib.error.URLError``, also an :class:`OSError`.

cacheroot's own files beside an entry all start with a dot (``.<name>.meta.json``,
``.<name>.lock``, ...), so upstream's helper, which looks at the final path only, finds the
files published here and is not confused by the rest. ``download_url_to_file`` leaves the same
dot-files beside a path outside the cache; only entries of the cache record their last use
(for ``cacheroot cache prune``).

Upstream's namespaces are looser than the fetcher's (:func:`~._naming.check_namespace`), and so
are this module's, to stay a drop-in: ``cacheroot cache`` leaves alone what it cannot tell from
its own dot-files or from the cache's root, namely files directly in the root (namespace
``"."``) and anything under a directory whose name starts with a dot; below
:data:`~._naming.MAX_DEPTH` levels, a directory counts as one entry.

Where upstream differs and this module does not follow: it reads ``_VLLM_TEST_CACHE`` raw (a
blank or relative value becomes a relative directory; here the layout decides, and an unusable
value raises :class:`~._errors.FetchError`), and its ``urlopen`` also reads ``ftp:`` and
``data:`` URLs (here: http, https and file).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from pathlib import Path, PurePath
from urllib.parse import urlparse

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY

from . import _store
from ._cachedir import cache_dir
from ._fetcher import Fetcher
from ._used import touch_used

__all__ = ["download_to_vllm_test_cache", "download_url_to_file", "get_vllm_test_cache_dir"]

#: Upstream's default per-call timeout, in seconds (socket connect and each read).
_TIMEOUT = 300
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: What a cache-only miss says (after the URL and the path).
_MISS_HINT = (
    "it is missing, empty or not the expected sha256, and this run is cache-only (local_only="
    f"True, {VLLM_TEST_CACHE_ONLY}=1 or {CACHEROOT_OFFLINE}=1), which never downloads: "
    "populate the test cache with a run that may download, or unset them"
)
_fetcher: Fetcher | None = None
_fetcher_lock = threading.Lock()


def _the_fetcher() -> Fetcher:
    """The fetcher behind this module: default settings, and ``file://`` URLs allowed."""
    global _fetcher  # noqa: PLW0603 - one lazily built instance, like default_fetcher()
    if _fetcher is None:
        with _fetcher_lock:
            if _fetcher is None:
                _fetcher = Fetcher(allow_file=True)  # upstream's urlopen reads file:// too
    return _fetcher


def _relative(value: str, what: str, *, nested: bool) -> PurePath:
    """``value`` as a path that stays inside the directory it is joined to, else ValueError."""
    path = PurePath(value)
    parts = path.parts
    unsafe = (
        not value
        or path.is_absolute()
        or "." in parts
        or ".." in parts
        or (not nested and len(parts) != 1)
    )
    if unsafe:
        shape = "relative path" if nested else "single file name"
        raise ValueError(
            f"{what} {value!r} is not a safe cache path: expected a {shape} with no '.' or "
            "'..' component"
        )
    return path


def _digest(expected_sha256: str | None) -> str | None:
    if expected_sha256 is None:
        return None
    digest = expected_sha256.lower()
    if not _HEX64.fullmatch(digest):
        raise ValueError(
            f"expected_sha256 {expected_sha256!r} must be exactly 64 hexadecimal digits"
        )
    return digest


def _name(url: str) -> str:
    """``<16 hex digits of sha256(url)>-<last path segment or 'download'>``."""
    prefix = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return f"{prefix}-{PurePath(urlparse(url).path).name or 'download'}"


@functools.lru_cache(maxsize=4096)
def _entry(root: str, namespace: str | None, filename: str | None, url: str) -> str:
    """The file :func:`download_to_vllm_test_cache` uses (checked; pure, so memoised)."""
    parts = [root]
    if namespace is not None:
        parts.append(str(_relative(namespace, "namespace", nested=True)))
    if filename is not None:
        parts.append(str(_relative(filename, "filename", nested=False)))
    else:
        parts.append(_name(url))
    return os.path.normpath(os.path.join(*parts))  # namespace "." is the root itself


def _get(
    url: str,
    dest: str,
    *,
    timeout: float,
    local_only: bool | None,
    expected_sha256: str | None,
) -> None:
    _the_fetcher()._fetch_to(  # noqa: SLF001 - the fetcher's entry point for this module
        url,
        dest,
        sha256=_digest(expected_sha256),
        offline=local_only,
        timeout=timeout,
        hint=_MISS_HINT,
    )


def get_vllm_test_cache_dir(namespace: str | None = None) -> Path:
    """``$_VLLM_TEST_CACHE`` (or its ``namespace`` sub-directory), created if missing.

    ``namespace`` may be nested (``a/b``); an unsafe one raises :class:`ValueError`.
    """
    root = Path(cache_dir())
    if namespace is not None:
        root /= _relative(namespace, "namespace", nested=True)
    _store.makedirs(str(root))  # group-shared where the volume is setgid
    return root


def download_url_to_file(
    url: str,
    path: str | Path,
    timeout: float = _TIMEOUT,
    *,
    local_only: bool | None = None,
    expected_sha256: str | None = None,
) -> Path:
    """``url``'s bytes at ``path``, downloaded once unless a valid file is already there.

    A non-empty regular file (not a symbolic link) is a hit; with ``expected_sha256`` it must
    also have that digest. ``local_only`` (default: whether the run is cache-only) turns a miss
    into :class:`FileNotFoundError`. Every caller sharing ``path`` must pass the same digest.
    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    _get(
        url,
        os.path.abspath(path),
        timeout=timeout,
        local_only=local_only,
        expected_sha256=expected_sha256,
    )
    return path


def download_to_vllm_test_cache(
    url: str,
    namespace: str,
    filename: str | None = None,
    timeout: float = _TIMEOUT,
    *,
    local_only: bool | None = None,
    expected_sha256: str | None = None,
) -> Path:
    """``url`` cached as ``$_VLLM_TEST_CACHE/<namespace>/<16 hex of sha256(url)>-<basename>``.

    ``filename`` replaces the derived name (one safe component). See the module docstring for
    the rules; returns the file's path.
    """
    dest = _entry(cache_dir(), namespace, filename, url)
    _get(url, dest, timeout=timeout, local_only=local_only, expected_sha256=expected_sha256)
    touch_used(dest)  # for `cacheroot cache prune`: at most one cheap write an hour
    return Path(dest)
