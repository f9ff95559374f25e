"""The two hubs behind one small interface: where each caches, how it downloads, what it retries.

Downloads go through each hub's own client (``huggingface_hub.snapshot_download``, ModelScope's
``snapshot_download``), so the files land exactly where ``transformers``, vLLM and the clients
themselves look for them later. Nothing here knows a hub's cache layout beyond its root
directory, which the cacheroot layout sets (``HF_HOME``, ``MODELSCOPE_CACHE``).

Neither client is a dependency of ``cacheroot-fetch``: both are imported inside the functions
that need them, and a missing one is an :class:`ImportError` naming the package to install.

The clients read their environment when they are imported (huggingface_hub: ``HF_HOME``,
``HF_ENDPOINT``, ``HF_HUB_OFFLINE``; modelscope_hub: ``MODELSCOPE_CACHE`` when its configuration
is first built). A process that imported one before the layout was applied would download
somewhere else than where cacheroot looks, so :func:`client_cache_root` reports the root the
imported client actually uses and the caller compares it with the layout's.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
import threading
from typing import TYPE_CHECKING

from cacheroot.envs import HF_HOME, HF_HUB_CACHE, MODELSCOPE_CACHE, resolve

from .._httpvalues import retry_after

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from .model import Model

#: HTTP statuses worth another attempt: timeouts, rate limits and server-side failures.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Transport failures of huggingface_hub's HTTP stack (httpx-style names; matched by name so
#: that this module imports no HTTP library).
_TRANSPORT_ERRORS = frozenset(
    {
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "TimeoutException",
        "ReadError",
        "RemoteProtocolError",
    }
)
#: The installable distribution of each hub's client, for error messages.
_PACKAGES = {"hf": "huggingface_hub", "modelscope": "modelscope (or modelscope-hub)"}

# The hubs' own variable names, from the layout table (HF_HUB_CACHE is a row the layout never
# sets): read here only to find where a user who set them explicitly told the client to cache.
_HF_HUB_CACHE = HF_HUB_CACHE
_HF_HOME = HF_HOME
_MODELSCOPE_CACHE = MODELSCOPE_CACHE


def _missing_client(hub: str, error: ImportError) -> ImportError:
    return ImportError(
        f"warming a {hub!r} model needs the hub's client, which is not installed ({error}); "
        f"install {_PACKAGES[hub]} in this environment"
    )


def cache_root(hub: str, environ: Mapping[str, str]) -> str | None:
    """The hub cache directory that the layout gives the hub's client, or ``None`` if invalid.

    Hugging Face: ``HF_HUB_CACHE`` when the user set it, else ``$HF_HOME/hub`` (how the client
    derives it). ModelScope: ``MODELSCOPE_CACHE``, the root of modelscope_hub's cache.
    """
    if hub == "hf":
        explicit = environ.get(_HF_HUB_CACHE, "").strip()
        if explicit:
            return os.path.abspath(os.path.expanduser(explicit))
        home = resolve(environ).settings[_HF_HOME].value
        return None if home is None else os.path.join(home, "hub")
    value = resolve(environ).settings[_MODELSCOPE_CACHE].value
    return None if value is None else os.path.abspath(value)


def client_cache_root(hub: str) -> str:
    """The cache root of the hub client as imported in this process (imports the client)."""
    try:
        if hub == "hf":
            from huggingface_hub import constants  # noqa: PLC0415 - optional

            return os.path.abspath(constants.HF_HUB_CACHE)
        from modelscope_hub import get_default_config  # noqa: PLC0415 - optional

        return os.path.abspath(str(get_default_config().cache_dir))
    except ImportError as error:
        raise _missing_client(hub, error) from error


class _HttpErrors(logging.Handler):
    """The last HTTP error huggingface_hub logged in this thread (it logs each one it retries,
    and may then swallow the error and fall back to the cache)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            message = record.getMessage()
            if message.startswith("HTTP Error"):
                self.last = message


def download(spec: Model) -> tuple[str, str | None]:
    """Run the hub's own snapshot download for ``spec``.

    Returns the snapshot directory, and the last HTTP error the client met on the way (for
    Hugging Face, which retries and may then fall back to the cache without raising).
    """
    allow = list(spec.allow_patterns) if spec.allow_patterns is not None else None
    ignore = list(spec.ignore_patterns) if spec.ignore_patterns is not None else None
    if spec.hub == "hf":
        try:
            from huggingface_hub import snapshot_download as hf_snapshot  # noqa: PLC0415 - optional
        except ImportError as error:
            raise _missing_client("hf", error) from error
        errors = _HttpErrors()
        logger = logging.getLogger("huggingface_hub")
        logger.addHandler(errors)
        try:
            found = hf_snapshot(
                spec.repo_id,
                repo_type=spec.repo_type,
                revision=spec.revision,
                allow_patterns=allow,
                ignore_patterns=ignore,
            )
        finally:
            logger.removeHandler(errors)
        return str(found), errors.last
    try:
        # modelscope's entry point is what vLLM calls (VLLM_USE_MODELSCOPE); it delegates to
        # modelscope_hub, whose own compatible function serves when only modelscope-hub is in.
        from modelscope.hub.snapshot_download import snapshot_download as ms_snapshot  # noqa: PLC0415 - optional
    except ImportError:
        try:
            from modelscope_hub.compat.snapshot_download import snapshot_download as ms_snapshot  # noqa: PLC0415 - optional
        except ImportError as error:
            raise _missing_client("modelscope", error) from error
    found = ms_snapshot(
        repo_id=spec.repo_id,
        repo_type=spec.repo_type,
        revision=spec.revision,
        allow_patterns=allow,
        ignore_patterns=ignore,
    )
    return str(found), None


def _ms_matches(path: str, patterns: list[str]) -> bool:
    # modelscope_hub's rule (``_download._matches_patterns``, private): fnmatch on the
    # repo-relative path, where "*" crosses "/", and legacy regex-like patterns such as
    # ".*\\.bin" retried with ".*" read as "*".
    return any(
        fnmatch.fnmatch(path, p) or (".*" in p and fnmatch.fnmatch(path, p.replace(".*", "*")))
        for p in patterns
    )


def select(spec: Model, paths: Iterable[str]) -> list[str]:
    """The repo-relative ``paths`` that ``spec``'s patterns select, decided as the client does.

    Hugging Face: the client's own ``filter_repo_objects`` (it also reads ``dir/`` as
    ``dir/*``). ModelScope: its pattern normalisation (comma-separated lists) and matching rule.
    """
    allow = list(spec.allow_patterns) if spec.allow_patterns is not None else None
    ignore = list(spec.ignore_patterns) if spec.ignore_patterns is not None else None
    if spec.hub == "hf":
        try:
            # Public (documented) but re-exported lazily, which mypy cannot see.
            from huggingface_hub.utils import (  # type: ignore[attr-defined]  # noqa: PLC0415
                filter_repo_objects,
            )
        except ImportError as error:
            raise _missing_client("hf", error) from error
        return list(filter_repo_objects(paths, allow_patterns=allow, ignore_patterns=ignore))
    try:
        from modelscope_hub.utils.patterns import normalize_patterns  # noqa: PLC0415 - optional
    except ImportError as error:
        raise _missing_client("modelscope", error) from error
    allow, ignore = normalize_patterns(allow), normalize_patterns(ignore)
    return [
        p
        for p in paths
        if (not allow or _ms_matches(p, allow)) and not (ignore and _ms_matches(p, ignore))
    ]


def snapshot_files(spec: Model, snapshot_dir: str) -> list[str]:
    """The repo-relative paths (``/``-separated) under ``snapshot_dir`` that ``spec`` selects.

    Partial files of an interrupted ModelScope download (``*.incomplete``) are skipped; the
    Hugging Face snapshot folder holds only links to finished blobs.
    """
    found: list[str] = []
    for parent, dirs, files in os.walk(snapshot_dir):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".incomplete", ".parallel_tmp")):
                continue
            found.append(os.path.relpath(os.path.join(parent, name), snapshot_dir))
    return select(spec, [p.replace(os.sep, "/") for p in found])


def listing(spec: Model, snapshot_dir: str, hub_root: str) -> list[str] | None:
    """Every repo-relative path of the snapshot's revision that ``spec`` selects, as the hub
    listed it; ``None`` when the client holds no listing of the revision.

    Hugging Face: the commit's listing that huggingface_hub cached when the hub listed the
    revision (``get_cached_repo_tree``). It has none when the listing failed (after its own
    retries) and it fell back to whatever part of the revision was cached, returning that as
    the snapshot. A commit's listing never changes. ModelScope: its client lists the revision
    and checks every file against the listing itself (it fails when it cannot), so the files
    it produced are the listing.
    """
    if spec.hub != "hf":
        return snapshot_files(spec, snapshot_dir)
    try:
        from huggingface_hub import get_cached_repo_tree  # noqa: PLC0415 - optional
        from huggingface_hub.errors import CachedRepoTreeNotFoundError  # noqa: PLC0415
    except ImportError as error:
        raise _missing_client("hf", error) from error
    commit = os.path.basename(os.path.normpath(snapshot_dir))
    try:
        entries = get_cached_repo_tree(
            spec.repo_id, repo_type=spec.repo_type, revision=commit, cache_dir=hub_root
        )
    except CachedRepoTreeNotFoundError:
        return None
    return sorted(select(spec, [e.path for e in entries]))


def repo_folder(spec: Model, hub_root: str) -> str:
    """The directory where the hub's client keeps every revision of ``spec``'s repository.

    Hugging Face: ``<type>s--<owner>--<name>`` (huggingface_hub's ``repo_folder_name``).
    ModelScope (modelscope_hub): ``<type>s/<owner>--<name>``.
    """
    if spec.hub == "hf":
        return os.path.join(hub_root, "--".join([f"{spec.repo_type}s", *spec.repo_id.split("/")]))
    return os.path.join(hub_root, f"{spec.repo_type}s", spec.repo_id.replace("/", "--"))


def inventory(spec: Model, hub_root: str) -> dict[tuple[int, int], int]:
    """The files the client keeps for ``spec``'s repository: ``(device, inode) -> size``.

    Compared before and after a download, the new ones are what it downloaded (a file already
    there, linked into a new snapshot, is not new). Nothing is followed or opened.
    """
    found: dict[tuple[int, int], int] = {}
    folder = repo_folder(spec, hub_root)
    # Hugging Face: the bytes are the blobs; the rest (refs, trees/) is the client's metadata.
    for parent, _dirs, files in os.walk(
        os.path.join(folder, "blobs") if spec.hub == "hf" else folder
    ):
        for name in files:
            try:
                st = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not name.endswith((".incomplete", ".lock", ".tmp")):
                found[st.st_dev, st.st_ino] = st.st_size
    return found


def hub_digest(hub: str, file_path: str) -> tuple[str, str] | None:
    """The digest the hub itself vouches for, read from the cache: ``(kind, hex)`` or ``None``.

    Hugging Face names each blob after the file's ETag: the sha256 for LFS files, the git blob
    sha1 for the others. ModelScope's cache keeps no such record (its client checks sha256
    against the listing during the download).
    """
    if hub != "hf":
        return None
    real = os.path.realpath(file_path)
    if os.path.basename(os.path.dirname(real)) != "blobs":
        return None  # a copy, not a link (file systems without symlinks)
    name = os.path.basename(real)
    if len(name) == 64 and _is_hex(name):
        return ("sha256", name)
    if len(name) == 40 and _is_hex(name):
        return ("git-sha1", name)
    return None


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


# -- retries ------------------------------------------------------------------------------------


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything behind it: causes, contexts, and ModelScope's per-file errors."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        failed = getattr(current, "failed_files", None)
        if isinstance(failed, dict):
            todo.extend(e for e in failed.values() if isinstance(e, BaseException))


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _retry_after(error: BaseException) -> float | None:
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is not None:
        try:
            found = retry_after(headers.get("Retry-After"))
        except AttributeError:
            found = None
        if found is not None:
            return found
    return retry_after(getattr(error, "retry_after", None))


def transient(error: BaseException) -> tuple[bool, int | None, float | None]:
    """Whether a hub client's error is worth another attempt, its HTTP status, and Retry-After.

    Retried: HTTP 408/425/429/5xx anywhere in the error's chain (huggingface_hub wraps the
    HTTP error of a failed listing into ``LocalEntryNotFoundError``), transport failures, and
    ModelScope errors that call themselves ``retryable``. Not retried: a missing repository,
    revision or file, an authentication failure, offline mode, a hash mismatch.
    """
    retry = False
    status: int | None = None
    wait: float | None = None
    for cause in _causes(error):
        if type(cause).__name__ == "OfflineModeIsEnabled":
            return (False, None, None)
        code = _status(cause)
        if code is not None:
            status = status if status is not None else code
            if code in RETRY_STATUSES:
                retry = True
                wait = wait if wait is not None else _retry_after(cause)
            elif 400 <= code < 500:
                return (False, code, None)
        if type(cause).__name__ in _TRANSPORT_ERRORS or getattr(cause, "retryable", None) is True:
            retry = True
    return (retry, status, wait)
