"""Model snapshots from Hugging Face and ModelScope: warmed once, checked offline, found offline.

Model weights are the largest downloads of an ML test suite and the hub is where CI fails: a
matrix of jobs asking for one model at once meets rate limits (429), a hub outage (5xx) fails
every job, and a cache that is *almost* warm (one shard missing) breaks offline mode only when
a test needs that shard. So:

- :func:`warm_snapshot` downloads with the hub's own client into the caches the layout set
  (``HF_HOME``, ``MODELSCOPE_CACHE``), so libraries find the files where they look. One process
  per (hub, repo type, repo, revision) downloads at a time across every process and container
  sharing the volume (a file lock); the others wait and then find the snapshot complete.
  Transient hub failures are retried with backoff, honouring ``Retry-After``.
- After a successful download it records a small completeness record: every selected file with
  its size and sha256, checked at that moment against the hub's own digest where the hub gives
  one (Hugging Face names each cached blob after its ETag: the sha256 of an LFS file, the git
  blob id of the others; the ModelScope client verifies sha256 against its listing itself).
- :func:`check_snapshot` compares the cache with that record without touching the network:
  every file present, of the recorded size, and of the recorded sha256 (re-hashed only when the
  file's size, mtime or inode changed since it was verified, or when ``deep=True``).
- :func:`offline_snapshot_path` returns the snapshot directory when it is complete and raises
  :class:`CacheMissError` naming the manifest entry to add when it is not.

With a shared tier (``CACHEROOT_SHARED``, a fleet's volume) a pinned revision missing here is
copied, verified, from another host's write-through before the hub is asked, one host per
revision asks the hub, and a cache-only run looks there too (:mod:`.shared`; a bucket as the
shared tier, ``CACHEROOT_SHARED=s3://BUCKET/PREFIX``: :mod:`.bucket`).

Records and locks live under ``VLLM_CACHE_ROOT`` (the cache root when that is unusable):
``snapshots/<key>.json`` and ``locks/snapshots/<key>.lock``. A record stores the snapshot's
path relative to the hub's cache root, so a volume mounted elsewhere keeps working.

A revision that is not a commit hash (a branch or tag) can move: it is accepted with a
:class:`UnpinnedRevisionWarning`, re-resolved online by every warm, and its record says which
commit it resolved to.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import random
import re
import stat
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    CACHEROOT,
    HF_HUB_OFFLINE,
    VLLM_CACHE_ROOT,
    resolve,
    truthy,
)
from cacheroot.envs._shared_tier import shared_url

from .. import _held, _store
from .._errors import WARM_HINT, CacheMissError, ChecksumError, DownloadError, LockTimeout
from .._fetcher import cache_only
from .._lock import PathLock
from .._progress import counted
from . import hubs, shared
from .model import COMMIT_HASH, Model

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from . import bucket

log = logging.getLogger("cacheroot.fetch")

#: Version of the completeness record's format.
RECORD_FORMAT = 1
_CHUNK = 1 << 20


class UnpinnedRevisionWarning(UserWarning):
    """A model's revision is a branch or tag, which can move, rather than a commit hash."""


@dataclass(frozen=True)
class SnapshotReport:
    """Whether a snapshot is complete in the cache, and what is wrong when it is not."""

    spec: Model
    complete: bool
    path: Path | None = None
    commit: str | None = None
    missing: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        if self.complete:
            return f"{self.spec.uri}: complete at {self.path}"
        return f"{self.spec.uri}: incomplete: {'; '.join(self.problems)}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for ``--json`` outputs)."""
        return {
            "hub": self.spec.hub,
            "repo_id": self.spec.repo_id,
            "repo_type": self.spec.repo_type,
            "revision": self.spec.revision,
            "complete": self.complete,
            "path": None if self.path is None else str(self.path),
            "commit": self.commit,
            "missing": list(self.missing),
            "wrong": list(self.wrong),
            "problems": list(self.problems),
        }


# -- where things live ----------------------------------------------------------------------------


def _state_dir(environ: Mapping[str, str]) -> str:
    layout = resolve(environ)
    base = layout.settings[VLLM_CACHE_ROOT].value or layout.root
    if base is None:
        raise RuntimeError(
            f"cannot place snapshot records: the cache layout is invalid ({layout.root_reason}); "
            f"set {CACHEROOT} to an absolute, writable directory"
        )
    return base


def _slug(spec: Model, *, with_patterns: bool) -> str:
    """A file name for ``spec``: readable, collision-free, within NAME_MAX."""
    key = [spec.hub, spec.repo_type, spec.repo_id, spec.revision]
    if with_patterns:
        key += [json.dumps([spec.allow_patterns, spec.ignore_patterns])]
    digest = hashlib.sha256("\x00".join(key).encode()).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", f"{spec.repo_id.replace('/', '--')}@{spec.revision}")
    return f"{spec.hub}-{spec.repo_type}-{readable[:120]}-{digest}"


def _slug_prefix(spec: Model) -> str:
    """What the record names of every revision of ``spec``'s repository start with."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", f"{spec.repo_id.replace('/', '--')}@")
    return f"{spec.hub}-{spec.repo_type}-{readable[:120]}"


def record_path(spec: Model, environ: Mapping[str, str] | None = None) -> Path:
    """Where the completeness record of ``spec`` lives."""
    base = _state_dir(os.environ if environ is None else environ)
    return Path(base, "snapshots", _slug(spec, with_patterns=True) + ".json")


def failure_path(spec: Model, environ: Mapping[str, str] | None = None) -> Path:
    """Where the last failed warm of ``spec`` is recorded (when, and why) until one succeeds."""
    base = _state_dir(os.environ if environ is None else environ)
    return Path(base, "snapshots", "failed", _slug(spec, with_patterns=True) + ".json")


def lock_path(spec: Model, environ: Mapping[str, str] | None = None) -> Path:
    """The lock that makes warming ``spec`` single-flight (patterns share one lock)."""
    base = _state_dir(os.environ if environ is None else environ)
    return Path(base, "locks", "snapshots", _slug(spec, with_patterns=False) + ".lock")


def _hub_root(spec: Model, environ: Mapping[str, str]) -> str:
    root = hubs.cache_root(spec.hub, environ)
    if root is None:
        raise RuntimeError(
            f"cannot locate the {spec.hub} cache: the cache layout is invalid "
            f"(run `cacheroot doctor`); set {CACHEROOT} to an absolute, writable directory"
        )
    return root


def _is_offline(spec: Model, environ: Mapping[str, str]) -> bool:
    if cache_only(environ):
        return True
    return spec.hub == "hf" and truthy(environ.get(HF_HUB_OFFLINE))


# -- names on the volume, reached through held directories -----------------------------------------

#: A blob's name in huggingface_hub's cache: the sha256 of an LFS file, the git blob sha1 of
#: another. Every link of a snapshot must lead to one of its own repository's.
_BLOB_NAME = re.compile(r"[0-9a-f]{64}|[0-9a-f]{40}")
#: What the hub's client leaves next to a blob while it downloads: its own partials and locks.
_CLIENT_PARTIALS = (".incomplete", ".lock", ".tmp")


@contextlib.contextmanager
def _held_dir(path: str | os.PathLike[str], *, create: bool = False) -> Iterator[int]:
    """The directory ``path`` reached from the cache root one component at a time without
    following a link (:func:`.._held.reach`; made where missing with ``create``), held while the
    block runs: what is read, made, renamed or removed in it goes through the descriptor, so a
    component swapped for a link after the walk leads nowhere."""
    fd, _name, _on_volume = _held.reach(os.path.join(os.fspath(path), "-"), create=create)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _parent_of(path: str | os.PathLike[str], *, create: bool = False) -> Iterator[tuple[int, str]]:
    """``(descriptor, name)``: the held directory ``path`` lies in (:func:`_held_dir`), and
    ``path``'s name in it."""
    fd, name, _on_volume = _held.reach(os.fspath(path), create=create)
    try:
        yield fd, name
    finally:
        os.close(fd)


def _read_at(path: str | os.PathLike[str], limit: int = shared.MAX_RECORD) -> bytes:
    """The small regular file ``path`` with one name (:func:`.._store.read_small`, read only
    once ``fstat`` says so), opened in its held directory."""
    with _parent_of(path) as (fd, name):
        return _store.read_small(name, dir_fd=fd, limit=limit)


def _read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in the record ``path`` (:func:`_read_at`); ``None`` when it is missing,
    unreachable, larger than a record, not JSON or not an object: a damaged record is none."""
    try:
        data = json.loads(_read_at(path))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _clear(dir_fd: int, name: str, label: str) -> None:
    """Remove whatever is at ``name`` in the held ``dir_fd``, never following it: a planted
    object where cacheroot or the hub's client keeps a name of its own (a tree through held
    descriptors, anything else as a name; a hard link loses this name only)."""
    st = _held.lstat_quiet(name, dir_fd)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        _held.remove_tree(dir_fd, name)
    else:
        _held.remove(dir_fd, name, directory=False)
    log.warning("removed %s: %s where the hub cache keeps its own", label, _store.kind(st.st_mode))


def _own_dir(parent: int, name: str, label: str) -> int:
    """The directory ``name`` in the held ``parent``, made where missing. Anything else there (a
    link, FIFO, socket, device or file) is removed first, never followed: the name is the hub
    client's own, and the client would follow it."""
    st = _held.lstat_quiet(name, parent)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        _clear(parent, name, label)
    return _held.subdir(parent, name, create=True, share=True)


def _publish(path: str | os.PathLike[str], data: bytes) -> None:
    """Publish ``data`` as the file ``path`` in its directory, reached from the cache root and
    held (made where missing): :func:`_publish_in`."""
    with _parent_of(path, create=True) as (fd, _name):
        _publish_in(fd, path, data)


def _publish_in(dir_fd: int, path: str | os.PathLike[str], data: bytes) -> None:
    """Publish ``data`` as the file ``path``, which lies in the held ``dir_fd``: a partial of
    its own made ``O_EXCL|O_NOFOLLOW`` there, synced, then renamed over the name. A directory
    at the name is removed first (it would stop the rename); a link, FIFO or anything else
    there is replaced by the rename, never followed."""
    name = os.path.basename(path)
    st = _held.lstat_quiet(name, dir_fd)
    if st is not None and stat.S_ISDIR(st.st_mode):
        _clear(dir_fd, name, os.fspath(path))
    part = _store.Partial(os.fspath(path), dir_fd=dir_fd)
    try:
        part.write(data)
        part.commit(sidecar=False)
    except BaseException:
        part.discard()
        raise


def _remove_file(path: str | os.PathLike[str]) -> None:
    """Remove the file ``path`` by its name in its held directory (best effort)."""
    with contextlib.suppress(OSError), _parent_of(path) as (fd, name):
        _held.remove(fd, name, directory=False)


def _volume_error(uri: str, exc: OSError, doing: str) -> DownloadError:
    """The error for a name of the hub cache or of the records that could not be reached or
    written (``exc``), naming it, what was found and what to do."""
    where = f"{exc.filename} " if isinstance(exc.filename, str) else ""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        why = (
            "is a symbolic link or not a directory, not followed (another job may have planted "
            "it): remove it if it is not yours, then warm again"
        )
    else:
        why = f"{exc.strerror or exc}"
    return DownloadError(uri, f"{uri}: cannot {doing}: {where}{why}", err=exc.errno)


def _blob_of(target: str, depth: int) -> str | None:
    """The blob a snapshot link's ``target`` names, for a link ``depth`` directories below its
    snapshot directory: ``../../blobs/<name>`` (as huggingface_hub makes them), ``None`` for any
    other target (a link out of the repository is no blob of it)."""
    prefix = "../" * (depth + 2) + "blobs/"
    if not target.startswith(prefix):
        return None
    name = target[len(prefix) :]
    return name if _BLOB_NAME.fullmatch(name) else None


def _vouched(hub: str, blob: str | None) -> tuple[str, str] | None:
    """What the blob's name vouches for (Hugging Face names a blob after its ETag): ``("sha256",
    hex)`` for an LFS file, ``("git-sha1", hex)`` for another; ``None`` for a copy (no link)."""
    if hub != "hf" or blob is None:
        return None
    return ("sha256", blob) if len(blob) == 64 else ("git-sha1", blob)


class _Snapshot:
    """A snapshot directory held from the cache root, its files reached through it: a file is
    a regular file there (ModelScope), or a link to a blob of its own repository (Hugging Face)
    opened in the repository's held ``blobs/``. Nothing else is followed or opened."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.fd = _held.reach(os.path.join(self.path, "-"))[0]
        self._blobs: int | None = None

    def __enter__(self) -> _Snapshot:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the held directories."""
        for fd in (self.fd, self._blobs):
            if fd is not None:
                os.close(fd)
        self._blobs = None

    @property
    def at(self) -> str:
        """A path of the held directory that no rename or link above it can redirect."""
        return _held.held_path(self.fd, self.path + os.sep)

    def blobs(self) -> int:
        """The repository's ``blobs/`` (two levels up), held from the cache root."""
        if self._blobs is None:
            repo = os.path.dirname(os.path.dirname(os.path.normpath(self.path)))
            self._blobs = _held.reach(os.path.join(repo, "blobs", "-"))[0]
        return self._blobs

    def _walk(self, rel: str) -> tuple[int, str, int]:
        """``(held parent, name, depth)`` of ``rel``: its directories opened without following
        a link. The caller closes the parent unless it is :attr:`fd`."""
        *dirs, name = rel.split("/")
        parent = self.fd
        for part in dirs:
            try:
                child = _held.subdir(parent, part)
            finally:
                if parent != self.fd:
                    os.close(parent)
            parent = child
        return parent, name, len(dirs)

    def open(self, rel: str) -> tuple[int, os.stat_result, str | None]:
        """``(descriptor, fstat, blob name or None)`` of the file ``rel``, refused
        (:class:`OSError`) unless it is a regular file or a link to a blob of the repository
        that is one; a missing one raises :class:`FileNotFoundError`."""
        parent, name, depth = self._walk(rel)
        try:
            st = os.lstat(name, dir_fd=parent)
            if not stat.S_ISLNK(st.st_mode):
                fd, st = _store.open_regular_stat(name, dir_fd=parent)
                return fd, st, None
            blob = _blob_of(os.readlink(name, dir_fd=parent), depth)
            if blob is None:
                raise OSError(
                    errno.ELOOP,
                    "expected a link to a blob of its repository, found a link elsewhere: not "
                    "followed (another job may have planted it)",
                    os.path.join(self.path, rel),
                )
            fd, st = _store.open_regular_stat(blob, dir_fd=self.blobs())
            return fd, st, blob
        finally:
            if parent != self.fd:
                os.close(parent)

    def discard(self, rel: str) -> None:
        """Remove the file ``rel`` (and the blob of this repository it links to), so that the
        client downloads it again; a link elsewhere loses its own name only."""
        try:
            parent, name, depth = self._walk(rel)
        except OSError:
            return
        try:
            st = _held.lstat_quiet(name, parent)
            if st is not None and stat.S_ISLNK(st.st_mode):
                with contextlib.suppress(OSError):
                    blob = _blob_of(os.readlink(name, dir_fd=parent), depth)
                    if blob is not None:
                        _clear(self.blobs(), blob, f"blob {blob} of {self.path}")
            _clear(parent, name, os.path.join(self.path, rel))
        finally:
            if parent != self.fd:
                os.close(parent)


def _hash_fd(fd: int, size: int, *, git: bool) -> tuple[str, str | None]:
    """sha256 of the file open at ``fd`` of ``size`` bytes and, when asked, its git blob id,
    in one read."""
    sha = hashlib.sha256()
    blob = None
    if git:
        blob = hashlib.sha1(usedforsecurity=False)
        blob.update(b"blob %d\x00" % size)
    while chunk := os.read(fd, _CHUNK):
        sha.update(chunk)
        if blob is not None:
            blob.update(chunk)
    return sha.hexdigest(), None if blob is None else blob.hexdigest()


# -- the record -----------------------------------------------------------------------------------


def _read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path`` if it is one of this format, read only once ``fstat`` says it is
    small enough to be one (:func:`_read_json`): a planted giant is no record."""
    data = _read_json(path)
    if data is None or data.get("format") != RECORD_FORMAT:
        return None
    return data


def _read_ref(ref: Path) -> str:
    """The text of huggingface_hub's ``refs/<branch>`` file ``ref`` (a commit hash), read only
    once ``fstat`` says it is a small regular file with one name, in its held directory."""
    return _read_at(ref, limit=_store.MAX_RECORD).decode("utf-8")


def _write_record(path: Path, record: dict[str, Any]) -> None:
    """Publish ``record`` at ``path`` (:func:`_publish`); :class:`DownloadError` naming the
    name that could not be reached or written."""
    data = json.dumps(record, indent=1, sort_keys=True).encode()
    try:
        _publish(path, data)
    except DownloadError:
        raise
    except OSError as exc:
        raise _volume_error(str(path), exc, f"record the snapshot at {path}") from exc


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _build_record(
    spec: Model,
    snapshot_dir: str,
    hub_root: str,
    previous: dict[str, Any] | None,
    listing: list[str] | None,
) -> dict[str, Any]:
    """Describe the snapshot the client just produced, verifying each file once.

    ``listing`` is every selected path of the revision as the hub lists it (``None`` where the
    client keeps no listing): the record keeps it, and the snapshot is complete only with each
    of them. A file whose (size, mtime, inode) match the previous record keeps its recorded
    sha256: re-warming a branch must not re-read every weight file.

    Each file is reached through the held snapshot directory (:class:`_Snapshot`): a link
    elsewhere than a blob of the repository, or anything but a regular file with one name, is
    removed and refused, as is a blob of another size than the hub lists (a sparse giant is
    never hashed); the next warm downloads them again.
    """
    known: dict[str, dict[str, Any]] = {}
    if previous is not None:
        known = {f["path"]: f for f in previous.get("files", []) if isinstance(f, dict)}
    sizes = _listed_sizes(spec, snapshot_dir, hub_root)
    files = []
    with _hold_snapshot(spec, snapshot_dir) as held:
        for rel in hubs.snapshot_files(spec, held.at):
            try:
                fd, st, blob = held.open(rel)
            except OSError as exc:
                held.discard(rel)
                raise _damaged(spec, rel, snapshot_dir, exc.strerror or str(exc)) from None
            try:
                if st.st_nlink != 1 or sizes.get(rel, st.st_size) != st.st_size:
                    held.discard(rel)
                    found = (
                        f"{st.st_nlink} names (a hard link to another file)"
                        if st.st_nlink != 1
                        else f"{st.st_size} bytes where the hub lists {sizes[rel]}"
                    )
                    raise _damaged(spec, rel, snapshot_dir, f"found {found}: not read")
                old = known.get(rel)
                if old is not None and old.get("stat") == _stat_key(st):
                    files.append(old)
                    continue
                vouched = _vouched(spec.hub, blob)
                git = vouched is not None and vouched[0] == "git-sha1"
                sha256, git_sha1 = _hash_fd(fd, st.st_size, git=git)
            finally:
                os.close(fd)
            if vouched is not None:
                actual = sha256 if vouched[0] == "sha256" else git_sha1
                if actual != vouched[1]:
                    raise ChecksumError(
                        f"{spec.uri}/{rel}",
                        f"{vouched[0]}:{vouched[1]}",
                        f"{vouched[0]}:{actual}",
                        st.st_size,
                    )
            entry = {"path": rel, "size": st.st_size, "sha256": sha256, "stat": _stat_key(st)}
            files.append(entry)
    relative = os.path.relpath(snapshot_dir, hub_root)
    return {
        "format": RECORD_FORMAT,
        "hub": spec.hub,
        "repo_type": spec.repo_type,
        "repo_id": spec.repo_id,
        "revision": spec.revision,
        "allow_patterns": None if spec.allow_patterns is None else list(spec.allow_patterns),
        "ignore_patterns": None if spec.ignore_patterns is None else list(spec.ignore_patterns),
        "commit": _commit_of(spec, snapshot_dir),
        "branch": spec.branch,
        "listing": listing,
        # Relative to the hub cache root so the volume may be mounted elsewhere; absolute only
        # when the client put the snapshot outside that root (a legacy ModelScope cache).
        "snapshot": snapshot_dir if relative.startswith("..") else relative,
        "files": files,
        "warmed_at": time.time(),
    }


def _damaged(spec: Model, rel: str, snapshot_dir: str, why: str) -> DownloadError:
    """The error for a file of the snapshot the client produced that is not what it should be
    (removed already, so that the next warm downloads it again)."""
    return DownloadError(
        spec.uri,
        f"{spec.uri}: {os.path.join(snapshot_dir, rel)}: {why}; another job may have planted it "
        "in the hub cache: it was removed, warm again",
    )


@contextlib.contextmanager
def _hold_snapshot(spec: Model, snapshot_dir: str) -> Iterator[_Snapshot]:
    """The snapshot directory the client produced, held (:class:`_Snapshot`);
    :class:`DownloadError` when it cannot be reached without following a link."""
    try:
        held = _Snapshot(snapshot_dir)
    except OSError as exc:
        raise _volume_error(spec.uri, exc, f"reach the snapshot {snapshot_dir}") from None
    with held:
        yield held


def _listed_sizes(spec: Model, snapshot_dir: str, hub_root: str) -> dict[str, int]:
    """Each file's size as the hub listed the revision (huggingface_hub's cached listing of the
    commit); empty where there is none: a guard against hashing a planted giant, nothing more."""
    if spec.hub != "hf":
        return {}
    try:
        from huggingface_hub import get_cached_repo_tree  # noqa: PLC0415 - optional

        entries = get_cached_repo_tree(
            spec.repo_id,
            repo_type=spec.repo_type,
            revision=os.path.basename(os.path.normpath(snapshot_dir)),
            cache_dir=hub_root,
        )
    except Exception:  # noqa: BLE001 - no listing: no guard, the digests still decide
        return {}
    found: dict[str, int] = {}
    for entry in entries:
        size = getattr(entry, "size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            found[entry.path] = size
    return found


def _commit_of(spec: Model, snapshot_dir: str) -> str | None:
    if spec.pinned:
        return spec.revision
    name = os.path.basename(os.path.normpath(snapshot_dir))
    # Hugging Face keys snapshots by commit; ModelScope by the revision as asked.
    return name if spec.hub == "hf" and COMMIT_HASH.fullmatch(name) else None


# -- public API -----------------------------------------------------------------------------------


def check_snapshot(
    spec: Model, *, deep: bool = False, environ: Mapping[str, str] | None = None
) -> SnapshotReport:
    """Whether ``spec`` is complete in the cache, without any network access.

    Complete means: a warm recorded this snapshot with the hub's listing of its revision, every
    listed file is recorded, and every recorded file is present with its recorded size and
    sha256. Hashes are re-computed only for files whose size, mtime or inode changed since
    they were verified, or for every file when ``deep`` is true. Hugging Face also needs its
    ``refs/<branch>``: for a branch revision, and for a commit whose entry names its ``branch``.

    A commit is found through the record of a branch that resolved to it, and a branch through
    its ``refs/<branch>`` and the record of the commit it names (same repository and patterns).
    """
    env = os.environ if environ is None else environ
    rpath = record_path(spec, env)
    found = _find_record(spec, env)
    if found is None:
        problem = _no_record(rpath)
        failure = _read_record(failure_path(spec, env))
        if failure is not None:
            problem += f"; {_failed_ago(failure, time.time() - float(failure.get('failed_at', 0)))}"
        return SnapshotReport(spec, complete=False, problems=(problem,))
    record = found
    where = record["snapshot"]
    snapshot = Path(where if os.path.isabs(where) else os.path.join(_hub_root(spec, env), where))
    missing: list[str] = []
    wrong: list[str] = []
    problems: list[str] = []
    recorded = {entry["path"] for entry in record["files"]}
    listing = record.get("listing")
    if listing is None and spec.hub == "hf":
        problems.append(
            "recorded without the hub's listing of the revision (by an older cacheroot), so "
            "it may lack files: run `cacheroot warm` with network access"
        )
    for rel in [] if listing is None else listing:
        if rel not in recorded:
            missing.append(rel)
            problems.append(f"{rel}: listed by the hub, never downloaded")
    try:
        held: _Snapshot | None = _Snapshot(snapshot)
    except FileNotFoundError:
        held = None
    except OSError as exc:
        held = None
        problems.append(f"{snapshot} cannot be reached: {exc.strerror or exc}")
    try:
        for entry in record["files"]:
            _check_file(held, entry, deep=deep, missing=missing, wrong=wrong, problems=problems)
    finally:
        if held is not None:
            held.close()
    problems.extend(_ref_problem(spec, snapshot, record))
    return SnapshotReport(
        spec,
        complete=not problems,
        path=snapshot,
        commit=record.get("commit"),
        missing=tuple(missing),
        wrong=tuple(wrong),
        problems=tuple(problems),
    )


def _check_file(
    held: _Snapshot | None,
    entry: Mapping[str, Any],
    *,
    deep: bool,
    missing: list[str],
    wrong: list[str],
    problems: list[str],
) -> None:
    """Compare the file of the record's ``entry`` in the held snapshot with it; add what is
    wrong to the lists. A file that is no regular file with one name (or no link to a blob of
    the repository that is one) is wrong, and never read."""
    rel = entry["path"]
    if held is None:
        missing.append(rel)
        problems.append(f"{rel}: missing")
        return
    try:
        fd, st, _blob = held.open(rel)
    except FileNotFoundError:
        missing.append(rel)
        problems.append(f"{rel}: missing")
        return
    except OSError as exc:
        wrong.append(rel)
        problems.append(f"{rel}: {exc.strerror or exc}")
        return
    try:
        if st.st_nlink != 1:
            wrong.append(rel)
            problems.append(f"{rel}: {st.st_nlink} names (a hard link to another file): not read")
            return
        if st.st_size != entry["size"]:
            wrong.append(rel)
            problems.append(f"{rel}: {st.st_size} bytes, expected {entry['size']}")
            return
        if deep or _stat_key(st) != entry.get("stat"):
            actual, _ = _hash_fd(fd, st.st_size, git=False)
            if actual != entry["sha256"]:
                wrong.append(rel)
                problems.append(f"{rel}: sha256 {actual}, expected {entry['sha256']}")
    finally:
        os.close(fd)


def _no_record(rpath: Path) -> str:
    old = None
    try:
        old = json.loads(_read_at(rpath))
    except _store.RecordTooLargeError:
        with _parent_of(rpath) as (fd, name):
            size = os.lstat(name, dir_fd=fd).st_size
        return (
            f"its record {rpath} is {size} bytes, over the {shared.MAX_RECORD}-byte limit of a "
            "record: damaged, not read; run `cacheroot warm` to record it again"
        )
    except (OSError, ValueError):
        pass
    if isinstance(old, dict) and old.get("format") != RECORD_FORMAT:
        return (
            f"recorded by another cacheroot version (record format {old.get('format')!r}, "
            f"this one reads {RECORD_FORMAT}): run `cacheroot warm` to record it again"
        )
    return f"never warmed on this cache (no record at {rpath})"


def _same_selection(record: Mapping[str, Any], spec: Model) -> bool:
    identity = _identity(spec)
    return all(record.get(k) == identity[k] for k in shared.IDENTITY if k != "revision")


def _find_record(spec: Model, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """``spec``'s record; else the record that names the same revision another way.

    A commit: a record whose revision resolved to it. A Hugging Face branch: the record of the
    commit that the client's ``refs/<branch>`` names. Only with the same patterns.
    """
    rpath = record_path(spec, environ)
    record = _read_record(rpath)
    if record is not None:
        return record
    commit = spec.revision if spec.pinned else _local_ref(spec, environ)
    if commit is None:
        return None
    folder = rpath.parent
    prefix = _slug_prefix(spec)
    try:
        with _held_dir(folder) as fd:
            names = sorted(
                n for n in os.listdir(fd) if n.startswith(prefix) and n.endswith(".json")
            )
    except OSError:
        return None
    for name in names:
        other = _read_record(folder / name)
        if other is not None and other.get("commit") == commit and _same_selection(other, spec):
            return other
    return None


def _local_ref(spec: Model, environ: Mapping[str, str]) -> str | None:
    """The commit ``refs/<branch>`` names in the Hugging Face cache, or ``None``."""
    if spec.hub != "hf" or spec.pinned:
        return None
    ref = Path(hubs.repo_folder(spec, _hub_root(spec, environ)), "refs", *spec.revision.split("/"))
    try:
        text = _read_ref(ref).strip()
    except (OSError, ValueError):
        return None
    return text if COMMIT_HASH.fullmatch(text) else None


def _ref_problem(spec: Model, snapshot: Path, record: Mapping[str, Any]) -> list[str]:
    """Hugging Face resolves a branch offline through ``refs/<branch>``: it must name the
    warmed commit (for a branch revision, and for a commit whose entry names its branch)."""
    commit = record.get("commit")
    branch = spec.branch if spec.pinned else spec.revision
    if spec.hub != "hf" or branch is None or commit is None:
        return []
    ref = snapshot.parent.parent.joinpath("refs", *branch.split("/"))
    try:
        current = _read_ref(ref).strip()
    except _store.RecordTooLargeError:
        damaged = f"refs/{branch} is damaged (too large to be a ref), so offline clients cannot"
        return [f"{damaged} resolve the branch"]
    except (OSError, ValueError):
        return [f"refs/{branch} is missing, so offline clients cannot resolve the branch"]
    if current != commit:
        return [f"refs/{branch} now points to {current}, not the warmed {commit}"]
    return []


def _write_ref(spec: Model, snapshot: Path) -> None:
    """Point huggingface_hub's ``refs/<branch>`` at a pinned commit, as the client itself
    stores a resolved branch: the commit hash alone, written atomically."""
    if spec.hub != "hf" or spec.branch is None or not spec.pinned:
        return
    ref = snapshot.parent.parent.joinpath("refs", *spec.branch.split("/"))
    with contextlib.suppress(OSError, ValueError):
        if _read_ref(ref) == spec.revision:
            return
    # ``refs/`` and the directories of a branch with slashes are the client's own names: a link,
    # FIFO or file planted in their place is removed, never followed.
    repo = snapshot.parent.parent
    try:
        with _held_dir(repo) as top:
            fd = _own_dir(top, "refs", str(repo / "refs"))
            try:
                here = repo / "refs"
                for part in spec.branch.split("/")[:-1]:
                    here = here / part
                    child = _own_dir(fd, part, str(here))
                    os.close(fd)
                    fd = child
                _publish_in(fd, ref, spec.revision.encode())
            finally:
                os.close(fd)
    except OSError as exc:
        raise _volume_error(spec.uri, exc, f"write {ref}") from exc


def offline_snapshot_path(spec: Model, *, environ: Mapping[str, str] | None = None) -> Path:
    """The local directory of a complete snapshot; :class:`CacheMissError` when incomplete.

    Never touches the network. The error names what is missing and the manifest entry to add.
    """
    report = check_snapshot(spec, environ=environ)
    if report.complete:
        assert report.path is not None  # noqa: S101 - a complete report always has its path
        return report.path
    found = _from_shared(spec, os.environ if environ is None else environ)
    if found is not None:
        return found
    raise _miss(spec, report)


def _miss(spec: Model, report: SnapshotReport) -> CacheMissError:
    shown = "; ".join(report.problems[:5])
    if len(report.problems) > 5:
        shown += f"; ... ({len(report.problems) - 5} more)"
    hint = (
        f"{shown}. Add this entry to the test manifest and run {WARM_HINT} "
        f"with network access:\n{spec.to_toml()}"
    )
    where = report.path if report.path is not None else record_path(spec)
    return CacheMissError(spec.uri, str(where), hint)


@dataclass(frozen=True)
class Warmed:
    """A warmed snapshot: its directory, and the bytes this warm downloaded for it."""

    path: Path
    downloaded: int = 0


def warm_snapshot(
    spec: Model,
    *,
    offline: bool | None = None,
    lock_timeout: float = 3600.0,
    attempts: int = 6,
    backoff: float = 1.0,
    max_delay: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
    failure_hold: float | None = None,
) -> Path:
    """Make ``spec`` complete in the cache and return its snapshot directory.

    A pinned snapshot that is already complete returns at once, without a request. Otherwise
    one process at a time (across the volume) runs the hub's client; a process that waited for
    another finds the work done. Transient failures (429, 5xx, connection errors, and a
    listing the hub would not give) are retried up to ``attempts`` times with exponential
    backoff and jitter starting at ``backoff`` seconds, waiting what ``Retry-After`` asks when
    the hub says (capped at ``max_delay``). A snapshot is recorded complete only when every file
    of the revision's listing (for its patterns) is there and verified; anything less is a
    :class:`DownloadError` naming what the hub answered.

    ``offline`` (default: ``CACHEROOT_OFFLINE`` or ``_VLLM_TEST_CACHE_ONLY``, and for Hugging
    Face also ``HF_HUB_OFFLINE``) turns a miss into :class:`CacheMissError` instead of a download.

    A failed warm is recorded on the volume (:func:`failure_path`) until one succeeds. With
    ``failure_hold`` (seconds), a failure recorded less than that long ago is raised again at
    once, naming its reason, instead of asking the hub: the pytest plugin's warms do this, so
    that a model missing during an outage costs one attempt per run, not one per session.
    """
    _warn_unpinned(spec)
    return fill_snapshot(
        spec,
        offline=offline,
        lock_timeout=lock_timeout,
        attempts=attempts,
        backoff=backoff,
        max_delay=max_delay,
        sleep=sleep,
        failure_hold=failure_hold,
    ).path


def _warn_unpinned(spec: Model) -> None:
    if not spec.pinned:
        warnings.warn(
            UnpinnedRevisionWarning(
                f"{spec.uri}: revision {spec.revision!r} is a branch or tag, which can move; pin "
                "a commit hash so every job and every later run gets the same files"
            ),
            stacklevel=3,
        )


def fill_snapshot(
    spec: Model,
    *,
    offline: bool | None = None,
    lock_timeout: float = 3600.0,
    attempts: int = 6,
    backoff: float = 1.0,
    max_delay: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
    failure_hold: float | None = None,
) -> Warmed:
    """:func:`warm_snapshot` (without its warning), also saying how many bytes it downloaded."""
    env = os.environ
    is_offline = _is_offline(spec, env) if offline is None else offline
    report = _check_and_ref(spec, env)
    if report.complete and (spec.pinned or is_offline):
        assert report.path is not None  # noqa: S101 - a complete report always has its path
        return Warmed(report.path)
    if is_offline:
        found = _from_shared(spec, env, lock_timeout)
        if found is not None:
            return Warmed(found)
        raise _miss(spec, report)
    if failure_hold is not None:
        _raise_recent_failure(spec, env, failure_hold)
    hub_root = _hub_root(spec, env)
    # Raises LockTimeout naming the holder; a holder that died is detected and its lock taken.
    with _locked(spec, lock_path(spec), lock_timeout):
        # Another process may have finished (or damaged something) while this one waited.
        report = _check_and_ref(spec, env)
        if report.complete and spec.pinned:
            assert report.path is not None  # noqa: S101 - complete implies a path
            return Warmed(report.path)
        _discard_wrong(spec, report)
        rpath = record_path(spec)
        _prepare(spec, hub_root)
        before = _inventory(spec, hub_root)
        tier: shared.Tiers | bucket.Revision | None = None

        def download() -> dict[str, Any]:
            if tier is not None:
                # The shared tier's copy may have been refused for an object planted on this
                # host since the directories were made real: the client must not meet it.
                _prepare(spec, hub_root)
            _check_client_root(spec, env)
            snapshot_dir, listing = _download_with_retries(
                spec, hub_root, attempts=attempts, backoff=backoff, max_delay=max_delay, sleep=sleep
            )
            record = _build_record(spec, snapshot_dir, hub_root, _read_record(rpath), listing)
            _write_ref(spec, Path(snapshot_dir))
            _write_record(rpath, record)
            return record

        try:
            tier = _tiers(spec, env)
            if tier is None:
                record = download()
            else:
                # A fleet (CACHEROOT_SHARED): another host's copy first, one host asking the hub.
                _fill(
                    tier,
                    _identity(spec),
                    download,
                    partial(_write_record, rpath),
                    timeout=lock_timeout,
                    environ=env,
                )
                record = _read_record(rpath) or {}
                _write_ref(spec, _snapshot_dir(record, hub_root))
        except Exception as error:
            _record_failure(spec, env, error)
            raise
        _remove_file(failure_path(spec, env))
        after = _inventory(spec, hub_root)
    downloaded = sum(size for key, size in after.items() if key not in before)
    return Warmed(_snapshot_dir(record, hub_root), downloaded)


def _check_and_ref(spec: Model, environ: Mapping[str, str]) -> SnapshotReport:
    """:func:`check_snapshot`; where only a pinned entry's ``refs/<branch>`` is wrong, it is
    written (the files are complete: nothing to ask the hub) and the snapshot checked again."""
    report = check_snapshot(spec, environ=environ)
    if (
        not report.complete
        and spec.branch is not None
        and report.path is not None
        and all(p.startswith(f"refs/{spec.branch} ") for p in report.problems)
    ):
        _write_ref(spec, report.path)
        report = check_snapshot(spec, environ=environ)
    return report


def _record_failure(spec: Model, environ: Mapping[str, str], error: BaseException) -> None:
    reason = " ".join(str(error).split()).removeprefix(f"{spec.uri}: ")
    if not isinstance(error, DownloadError):
        reason = f"{type(error).__name__}: {reason}"
    with contextlib.suppress(OSError):
        _write_record(
            failure_path(spec, environ),
            {"format": RECORD_FORMAT, "failed_at": time.time(), "reason": reason[:2000]},
        )


def _raise_recent_failure(spec: Model, environ: Mapping[str, str], hold: float) -> None:
    """Raise the failure recorded for ``spec`` less than ``hold`` seconds ago, if any."""
    failure = _read_record(failure_path(spec, environ))
    if failure is None:
        return
    age = time.time() - float(failure.get("failed_at", 0.0))
    if not 0 <= age < hold:
        return
    raise DownloadError(
        spec.uri,
        f"{spec.uri}: {_failed_ago(failure, age)}; not asking the hub again for "
        f"{hold - age:.0f} s (run `cacheroot warm` on its manifest to try now)",
    )


def _failed_ago(failure: Mapping[str, Any], age: float) -> str:
    return f"warming it failed {age:.0f} s ago: {failure.get('reason') or 'no reason recorded'}"


def _snapshot_dir(record: Mapping[str, Any], hub_root: str) -> Path:
    where = str(record.get("snapshot", ""))
    return Path(where if os.path.isabs(where) else os.path.join(hub_root, where))


# -- the shared tier ------------------------------------------------------------------------------


def _identity(spec: Model) -> dict[str, Any]:
    """The record fields that name ``spec``'s revision and selection (as JSON reads them back)."""
    return {
        "format": RECORD_FORMAT,
        "hub": spec.hub,
        "repo_type": spec.repo_type,
        "repo_id": spec.repo_id,
        "revision": spec.revision,
        "allow_patterns": None if spec.allow_patterns is None else list(spec.allow_patterns),
        "ignore_patterns": None if spec.ignore_patterns is None else list(spec.ignore_patterns),
    }


def _tiers(spec: Model, environ: Mapping[str, str]) -> shared.Tiers | bucket.Revision | None:
    """Where ``spec`` lives on this host and on the shared tier (a file system, or a bucket:
    :mod:`.bucket`); ``None`` without one.

    Only a pinned revision is shared: a branch moves, and the hub is asked which commit it
    names on every warm anyway.
    """
    if not spec.pinned:
        return None
    record, hub_root = str(record_path(spec, environ)), _hub_root(spec, environ)
    if shared_url(environ) is not None:
        from . import bucket  # noqa: PLC0415 - only a bucket tier loads its client

        return bucket.tiers(record, hub_root, environ)
    return shared.tiers(record, hub_root, environ)


def _fill(
    tier: shared.Tiers | bucket.Revision,
    identity: Mapping[str, Any],
    download: Callable[[], dict[str, Any]],
    write: Callable[[dict[str, Any]], None],
    *,
    timeout: float | None,
    environ: Mapping[str, str],
) -> str:
    """:func:`.shared.fill` or :func:`.bucket.fill`, as the shared tier is."""
    if isinstance(tier, shared.Tiers):
        return shared.fill(tier, identity, download, write, timeout=timeout, environ=environ)
    from . import bucket  # noqa: PLC0415 - only a bucket tier loads its client

    return bucket.fill(tier, identity, download, write, timeout=timeout)


def _pull(
    tier: shared.Tiers | bucket.Revision, identity: Mapping[str, Any]
) -> dict[str, Any] | None:
    """:func:`.shared.pull` or :func:`.bucket.pull`, as the shared tier is."""
    if isinstance(tier, shared.Tiers):
        return shared.pull(tier, identity)
    from . import bucket  # noqa: PLC0415 - only a bucket tier loads its client

    return bucket.pull(tier, identity)


def _from_shared(
    spec: Model, environ: Mapping[str, str], lock_timeout: float = 3600.0
) -> Path | None:
    """A cache-only miss: the shared tier's verified copy of ``spec``, pulled into this host's
    cache (the shared tier is local infrastructure, not the hub), or ``None``."""
    tier = _tiers(spec, environ)
    if tier is None:
        return None
    try:
        with _locked(spec, lock_path(spec, environ), lock_timeout):
            report = check_snapshot(spec, environ=environ)
            if not report.complete:
                _discard_wrong(spec, report)
                _prepare(spec, _hub_root(spec, environ))
                record = _pull(tier, _identity(spec))
                if record is None:
                    return None
                _write_record(record_path(spec, environ), record)
    except OSError as exc:
        log.warning("%s: the shared tier could not be read (%s)", spec.uri, exc.strerror or exc)
        return None
    report = check_snapshot(spec, environ=environ)
    return report.path if report.complete else None


def _discard_wrong(spec: Model, report: SnapshotReport) -> None:
    """Remove files the check found wrong, so that the client downloads them again.

    The ModelScope client re-verifies sha256 against its listing and replaces a bad file by
    itself. The Hugging Face client trusts any file present, so a damaged one is removed here,
    together with the blob of its repository that its snapshot entry links to (a link elsewhere
    loses its own name only: what it points to is never touched).
    """
    if spec.hub != "hf" or report.path is None or not report.wrong:
        return
    try:
        held = _Snapshot(report.path)
    except OSError:
        return
    with held:
        for rel in report.wrong:
            held.discard(rel)


@contextlib.contextmanager
def _locked(spec: Model, lpath: Path, timeout: float) -> Iterator[None]:
    """Hold the lock file ``lpath``, its directory reached from the cache root and held."""
    try:
        fd, _name, _on_volume = _held.reach(str(lpath), create=True)
    except OSError as exc:
        raise _volume_error(spec.uri, exc, f"take the lock {lpath}") from None
    try:
        lock = PathLock(_held.held_path(fd, str(lpath)), timeout=timeout)
        try:
            lock.acquire()
        except LockTimeout as exc:
            # Named as the user knows it, not by this process's descriptor.
            _path, waited, holder = exc.__reduce__()[1]
            raise LockTimeout(str(lpath), waited, holder) from None
        try:
            yield
        finally:
            lock.release()
    finally:
        os.close(fd)


def _prepare(spec: Model, hub_root: str) -> None:
    """Make the repository's directories in the hub cache real directories reached from the
    cache root, and clear what is planted where the client keeps its files, before the client
    runs: it opens everything there by path and trusts what it finds (a blob or a snapshot link
    that exists is never downloaded again, and is followed wherever it leads).

    A link, FIFO, socket, device or file where one of the repository's directories belongs is
    removed; in ``blobs/`` everything but a regular file with one name; in the pinned
    revision's snapshot directory every link that leads elsewhere than a blob of the
    repository and everything but such a link, a regular file with one name or a directory
    (ModelScope, whose revision directory holds the files themselves: every link too).
    The hub cache itself and the directories above it are refused (:class:`DownloadError`),
    never followed.
    """
    folder = hubs.repo_folder(spec, hub_root)
    try:
        with _held_dir(os.path.dirname(folder), create=True) as top:
            repo = _own_dir(top, os.path.basename(folder), folder)
            try:
                if spec.hub == "hf":
                    _prepare_hf(spec, repo, folder)
                else:
                    _prepare_ms(spec, repo, folder)
            finally:
                os.close(repo)
    except OSError as exc:
        raise _volume_error(spec.uri, exc, f"reach the hub cache's {folder}") from None


def _prepare_hf(spec: Model, repo: int, folder: str) -> None:
    for sub in ("blobs", "snapshots", "refs", "trees"):
        label = os.path.join(folder, sub)
        fd = _own_dir(repo, sub, label)
        try:
            if sub in ("blobs", "trees"):
                for name in os.listdir(fd):
                    st = _held.lstat_quiet(name, fd)
                    if st is not None and not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                        _clear(fd, name, os.path.join(label, name))
            elif sub == "snapshots" and spec.pinned:
                st = _held.lstat_quiet(spec.revision, fd)
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    _clear(fd, spec.revision, os.path.join(label, spec.revision))
                elif st is not None:
                    snap = _held.subdir(fd, spec.revision)
                    try:
                        _clear_snapshot(snap, os.path.join(label, spec.revision), 0)
                    finally:
                        os.close(snap)
        finally:
            os.close(fd)


def _prepare_ms(spec: Model, repo: int, folder: str) -> None:
    """ModelScope's client keeps a revision's files themselves in ``snapshots/<revision>/``,
    and opens, hashes and replaces what it finds there by path: ``snapshots/`` is made a real
    directory, what is planted in the pinned revision's directory's place is removed, and that
    directory is cleared of every name that is not a directory or a regular file with one name
    (its layout has no links: one there is planted, and the client would follow it)."""
    label = os.path.join(folder, "snapshots")
    fd = _own_dir(repo, "snapshots", label)
    try:
        here = os.path.join(label, spec.revision)
        st = _held.lstat_quiet(spec.revision, fd) if spec.pinned else None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            _clear(fd, spec.revision, here)
        elif st is not None:
            snap = _held.subdir(fd, spec.revision)
            try:
                _clear_snapshot(snap, here, 0, links=False)
            finally:
                os.close(snap)
    finally:
        os.close(fd)


def _clear_snapshot(fd: int, label: str, depth: int, *, links: bool = True) -> None:
    """Clear the held snapshot directory ``fd`` (``depth`` below the revision's) of every name
    that is not a directory, a regular file with one name, or (``links``: Hugging Face's
    layout) a link to a blob."""
    for name in os.listdir(fd):
        st = _held.lstat_quiet(name, fd)
        if st is None:
            continue
        here = os.path.join(label, name)
        if stat.S_ISDIR(st.st_mode):
            child = _held.subdir(fd, name)
            try:
                _clear_snapshot(child, here, depth + 1, links=links)
                empty = not os.listdir(child)
            finally:
                os.close(child)
            if empty:  # the client makes a directory only to hold files: this one is planted
                _clear(fd, name, here)
        elif stat.S_ISLNK(st.st_mode):
            if not links or _blob_of(os.readlink(name, dir_fd=fd), depth) is None:
                _clear(fd, name, here)
        elif not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
            _clear(fd, name, here)


def _inventory(spec: Model, hub_root: str) -> dict[tuple[int, int], int]:
    """The files the client keeps for ``spec``'s repository: ``(device, inode) -> size``, found
    through held directories (Hugging Face: the blobs; ModelScope: the whole repository).
    Compared before and after a download, the new ones are what it downloaded."""
    folder = hubs.repo_folder(spec, hub_root)
    found: dict[tuple[int, int], int] = {}
    with (
        contextlib.suppress(OSError),
        _held_dir(os.path.join(folder, "blobs") if spec.hub == "hf" else folder) as fd,
    ):
        _files_below(fd, found)
    return found


def _files_below(fd: int, found: dict[tuple[int, int], int]) -> None:
    for name in os.listdir(fd):
        st = _held.lstat_quiet(name, fd)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                child = _held.subdir(fd, name)
            except OSError:
                continue
            try:
                _files_below(child, found)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode) and not name.endswith(_CLIENT_PARTIALS):
            found[st.st_dev, st.st_ino] = st.st_size


def _check_client_root(spec: Model, environ: Mapping[str, str]) -> None:
    expected = os.path.realpath(_hub_root(spec, environ))
    actual = os.path.realpath(hubs.client_cache_root(spec.hub))
    if expected != actual:
        client = "huggingface_hub" if spec.hub == "hf" else "modelscope_hub"
        raise RuntimeError(
            f"{client} in this process caches in {actual}, but the cache layout says {expected}: "
            f"{client} reads its cache location once, when first imported, and was imported "
            "before the layout was applied. Apply the layout first (the cacheroot start-up hook "
            "does it at interpreter start), or warm in a fresh process (`cacheroot warm`)"
        )


class IncompleteSnapshotError(Exception):
    """The hub's client returned a snapshot that is not known to hold the whole revision.

    huggingface_hub does so when listing the revision fails (after its own retries) while a
    part of it is cached: it returns that part. ``status`` is the HTTP status the client met,
    when it logged one (a 429, a 503): worth another attempt then, never a complete record.
    """

    def __init__(self, uri: str, problem: str, status: int | None = None) -> None:
        super().__init__(problem)
        self.uri, self.problem, self.status_code = uri, problem, status
        self.retryable = status is None or status in hubs.RETRY_STATUSES

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.uri, self.problem, self.status_code))


_HTTP_ERROR = re.compile(r"HTTP Error (\d{3})")


def _download_once(spec: Model, hub_root: str) -> tuple[str, list[str]]:
    """One download by the hub's client, checked against the revision's listing."""
    snapshot_dir, hub_error = hubs.download(spec)
    with _hold_snapshot(spec, snapshot_dir) as held:
        present = hubs.snapshot_files(spec, held.at)
    listing = hubs.listing(spec, snapshot_dir, hub_root)
    if listing is None:
        found = _HTTP_ERROR.search(hub_error or "")
        why = f"last: {hub_error}" if hub_error else "no error was reported"
        raise IncompleteSnapshotError(
            spec.uri,
            f"the hub did not list the revision ({why}), so the {len(present)} file(s) cached "
            "cannot be known to be all of it",
            int(found.group(1)) if found else None,
        )
    missing = sorted(set(listing) - set(present))
    if missing:
        shown = ", ".join(missing[:5]) + (
            f", ... ({len(missing) - 5} more)" if len(missing) > 5 else ""
        )
        raise IncompleteSnapshotError(
            spec.uri, f"{len(missing)} file(s) of the revision were not downloaded: {shown}"
        )
    return snapshot_dir, listing


def _download_with_retries(
    spec: Model,
    hub_root: str,
    *,
    attempts: int,
    backoff: float,
    max_delay: float,
    sleep: Callable[[float], None],
) -> tuple[str, list[str]]:
    for attempt in range(1, attempts + 1):
        try:
            return _download_once(spec, hub_root)
        except Exception as error:  # noqa: PERF203 - the retry loop
            retry, status, retry_after = hubs.transient(error)
            if not retry:
                raise
            if attempt == attempts:
                raise DownloadError(
                    spec.uri,
                    f"{spec.uri}: the hub kept failing after {counted(attempts, 'attempt')} "
                    f"(last: {'HTTP ' + str(status) if status else type(error).__name__}: "
                    f"{error}); try again later, or raise attempts (cacheroot warm --attempts)",
                    status,
                ) from error
            if retry_after is not None:
                delay = min(max_delay, retry_after)
            else:
                delay = min(max_delay, backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
