"""Budgets across the whole root: one least-recently-used order over every cache of the layout.

``cacheroot cache prune`` used to look after the test cache alone, while the Hugging Face hub,
Triton, Inductor and the JIT caches beside it grew without bound. This module sees every cache
the layout puts under a root and removes what was used least recently, across all of them, until
the criteria hold: ``max_size`` (the caches total at most this), ``min_free`` (the root's file
system has at least this free) and ``older_than`` (nothing unused for longer). One order across
caches is the point: a Triton kernel unused for a month goes before a model used an hour ago.

What a unit of removal is, and when it was last used, depends on the cache:

- the test cache: its entries, as ``cacheroot cache ls`` shows them, under their own locks
  (:mod:`._cache` removes them; an entry being fetched or built is skipped);
- the Hugging Face hub: revisions, through huggingface_hub's own cache API, which knows which
  blobs another revision still links to; last use is the newest access or modification of the
  revision's blobs. Without huggingface_hub installed, each repository is one plain entry;
- every other cache (Triton, Inductor, the JIT caches, ModelScope, the media caches, pip, ...):
  its top-level entries (a kernel directory, one file), or one level further down where a cache
  keeps its entries in a fixed sub-directory (``torch_compile_cache/<hash>``,
  ``fxgraph/<hash>``); last use is the newest access or modification time of any file in it.

Nothing in use is removed. An entry is kept when a lock beside or inside it (``*.lock``) is held
(``flock``), when a cache-wide ``.lock`` is held, when it has a partial whose writer lives (or
may live), when any of its files changed in the last :data:`SETTLE` seconds, when a Hugging Face
repository has an ``.incomplete`` download that is open or recent, and when a file or directory
of it is open, mapped or the working directory of a process this machine can see
(``/proc/<pid>/fd``, ``maps``, ``cwd``). That last check cannot see processes in another
container or pid namespace, on another host sharing the volume, or (without privileges) of other
users: their files are protected only by the locks and the settle time.

A plain entry is renamed aside before it is deleted and looked at once more there, so a process
that opened it between the check and the rename keeps it (it is renamed back).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import stat
import sys
import time
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_OPT_IN,
    HF_HOME,
    HF_HUB_CACHE,
    INVALID,
    TAGS,
    VLLM_TEST_CACHE,
    XDG_CACHE_HOME,
    resolve,
)
from cacheroot.envs.units import format_size

from . import _proc
from ._cache import QUARANTINE, Entry, _Refused, _remove_entry, entries, prune, quarantined
from ._store import parse_partial, partial_abandoned

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Mapping

__all__ = ["SETTLE", "Summary", "Victim", "apply", "plan"]

#: A file changed this recently (seconds) may still be being written: its entry is kept.
SETTLE = 30.0
#: A Hugging Face ``.incomplete`` download or a partial of another machine counts as abandoned
#: only when untouched this long (seconds), as :mod:`._cache` judges partials.
STALE = 3600.0

#: Sub-directories of a cache whose children are its entries (``*``: any one name), by row.
CONTAINERS: dict[str, tuple[str, ...]] = {
    "VLLM_CACHE_ROOT": ("torch_compile_cache",),
    "TORCHINDUCTOR_CACHE_DIR": ("fxgraph", "aotautograd", "triton/*"),
    "FLASHINFER_WORKSPACE_BASE": (".cache/flashinfer",),
    "MODELSCOPE_CACHE": ("models/*", "datasets/*", "hub/models/*", "hub/datasets/*"),
    "TORCH_HOME": ("hub", "hub/checkpoints"),
}
#: Caches that are one entry as a whole: the NVIDIA driver keeps an index over its files.
WHOLE = frozenset({"CUDA_CACHE_PATH"})
#: Caches under the XDG cache home that no row names but the layout's purpose does.
XDG_CACHES: dict[str, tuple[str, ...]] = {
    "pip": ("http-v2", "http", "wheels"),
    "uv": ("*",),
    "outlines": (),
    "b12x": (),
}
#: How a cache removed as a whole names its one entry.
WHOLE_LABEL = "(the whole cache)"
#: Kinds of victim.
TEST_ENTRY = "test-entry"
QUARANTINED = "quarantined"
HF_REVISION = "hf-revision"
ENTRY = "entry"


class Victim:
    """One unit the budget may remove: a cache entry, a model revision, a kernel directory.

    ``cache`` names the layout row (``TRITON_CACHE_DIR``; ``XDG_CACHE_HOME/pip`` for a cache
    under the XDG home), ``label`` how the cache itself names it, ``last_used`` is a Unix time.
    ``reason`` says which criterion chose it; ``ref`` is what :func:`apply` needs to remove it
    (the test-cache entry, the scanned revision, the plain entry with its sidecars).
    """

    __slots__ = ("cache", "kind", "label", "last_used", "path", "reason", "ref", "size")

    def __init__(
        self,
        *,
        cache: str,
        path: str,
        size: int,
        last_used: float,
        kind: str,
        label: str,
        reason: str = "",
        ref: object = None,
    ) -> None:
        self.cache = cache
        self.path = path
        self.size = size
        self.last_used = last_used
        self.kind = kind
        self.label = label
        self.reason = reason
        self.ref = ref

    def __repr__(self) -> str:
        return f"Victim({self.cache!r}, {self.label!r}, {self.size})"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (a test-cache entry adds those of ``cacheroot cache ls``)."""
        row: dict[str, Any] = self.ref.as_dict() if isinstance(self.ref, Entry) else {}
        row.update(
            cache=self.cache,
            path=self.path,
            size=self.size,
            last_used=self.last_used,
            kind=self.kind,
            label=self.label,
            reason=self.reason,
        )
        return row


class Summary:
    """What :func:`apply` did: ``removed`` victims, and those ``skipped`` (busy) or ``refused``
    (this user may not remove them), each with why."""

    __slots__ = ("refused", "removed", "skipped")

    def __init__(self) -> None:
        self.removed: list[Victim] = []
        self.skipped: list[tuple[Victim, str]] = []
        self.refused: list[tuple[Victim, str]] = []

    def __repr__(self) -> str:
        return f"Summary(removed={self.removed_count}, bytes={self.removed_bytes})"

    @property
    def removed_count(self) -> int:
        """How many victims went."""
        return len(self.removed)

    @property
    def removed_bytes(self) -> int:
        """Bytes they held."""
        return sum(v.size for v in self.removed)


# -- the caches of a root ------------------------------------------------------------------------


class _Cache:
    """One cache directory and how to read it."""

    __slots__ = ("containers", "kind", "name", "path", "whole")

    def __init__(
        self, name: str, path: str, kind: str, containers: tuple[str, ...] = (), *, whole: bool
    ) -> None:
        self.name = name
        self.path = path
        self.kind = kind
        self.containers = containers
        self.whole = whole


def _inside(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip("/") + "/")


def caches(root: str, environ: Mapping[str, str] | None = None) -> list[_Cache]:
    """Every cache directory of the layout for ``root``, all tags and opt-ins included.

    Without ``environ`` the layout is the one ``root`` alone derives. With it, values the user
    set explicitly count too (wherever they point), as ``cacheroot cache du`` shows them.
    """
    base = {} if environ is None else dict(environ)
    base.update({CACHEROOT: root, CACHEROOT_OPT_IN: "all"})
    paths: dict[str, str] = {}
    for tag in TAGS:
        for name, setting in resolve(base, tag=tag).settings.items():
            if setting.value and setting.source != INVALID:
                paths.setdefault(name, os.path.normpath(os.path.expanduser(setting.value)))
    found: list[_Cache] = []
    for name, path in paths.items():
        if name == XDG_CACHE_HOME:
            found += [
                _Cache(f"{name}/{sub}", os.path.join(path, sub), ENTRY, inner, whole=False)
                for sub, inner in XDG_CACHES.items()
            ]
        elif name == HF_HOME:
            hub = (base.get(HF_HUB_CACHE) or "").strip()
            hub = hub if os.path.isabs(hub) else os.path.join(path, "hub")
            found.append(_Cache(name, os.path.normpath(hub), HF_REVISION, whole=False))
            found.append(_Cache(f"{name}/xet", os.path.join(path, "xet"), ENTRY, whole=False))
        elif name == VLLM_TEST_CACHE:
            found.append(_Cache(name, path, TEST_ENTRY, whole=False))
        else:
            found.append(_Cache(name, path, ENTRY, CONTAINERS.get(name, ()), whole=name in WHOLE))
    # One directory, one owner: the first row that names it (parents come first in the table).
    unique: dict[str, _Cache] = {}
    for cache in found:
        unique.setdefault(cache.path, cache)
    return list(unique.values())


# -- what processes hold -------------------------------------------------------------------------


class _Open:
    """Files and directories that processes visible here hold: ``(st_dev, st_ino)`` -> pid."""

    __slots__ = ("held", "hidden")

    def __init__(self) -> None:
        self.held: dict[tuple[int, int], int] = {}
        self.hidden = 0
        seen: dict[str, tuple[int, int] | None] = {}
        try:
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return
        for pid in pids:
            self._process(pid, seen)

    def _add(self, path: str, pid: int, seen: dict[str, tuple[int, int] | None]) -> None:
        if path not in seen:
            try:
                st = os.stat(path)
                seen[path] = (st.st_dev, st.st_ino)
            except OSError:
                seen[path] = None
        key = seen[path]
        if key is not None:
            self.held.setdefault(key, pid)

    def _process(self, pid: int, seen: dict[str, tuple[int, int] | None]) -> None:
        where = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{where}/fd")
        except PermissionError:
            self.hidden += 1
            return
        except OSError:
            return  # gone meanwhile
        for fd in fds:
            with contextlib.suppress(OSError):  # closed meanwhile
                st = os.stat(f"{where}/fd/{fd}")
                self.held.setdefault((st.st_dev, st.st_ino), pid)
        with contextlib.suppress(OSError):
            st = os.stat(f"{where}/cwd")
            self.held.setdefault((st.st_dev, st.st_ino), pid)
        try:
            with open(f"{where}/maps", encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                self._add(fields[5].removesuffix(" (deleted)"), pid, seen)

    def by(self, st: os.stat_result) -> int | None:
        """The pid that holds the file ``st`` describes, if any."""
        return self.held.get((st.st_dev, st.st_ino))


def _lock_held(path: str) -> bool:
    """Whether someone holds an ``flock`` on ``path`` now (it is tried, never waited for)."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover - no locks to judge
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if it was taken
    return False


def _is_lock(name: str) -> bool:
    return name.endswith((".lock", ".lck"))


# -- plain entries -------------------------------------------------------------------------------


class _Scan:
    """One walk of an entry: its size, newest time, and why it is busy (``""``: it is not)."""

    __slots__ = ("busy", "newest", "size")

    def __init__(self, paths: Iterable[str], opened: _Open, now: float, settle: float) -> None:
        self.size = 0
        self.newest = 0.0
        self.busy = ""
        seen: set[tuple[int, int]] = set()
        for top in paths:
            for path, st in _walk(top):
                key = (st.st_dev, st.st_ino)
                pid = opened.by(st)
                if pid is not None and not self.busy:
                    self.busy = f"in use by pid {pid} ({path})"
                recent = settle > 0 and now - st.st_mtime < settle
                if stat.S_ISDIR(st.st_mode):
                    if recent and not self.busy:
                        self.busy = f"changed {now - st.st_mtime:.0f} s ago (may be being written)"
                    continue
                if key not in seen:
                    seen.add(key)
                    self.size += st.st_size
                self.newest = max(self.newest, st.st_mtime, st.st_atime)
                if recent and not self.busy:
                    self.busy = f"changed {now - st.st_mtime:.0f} s ago (may be being written)"
                if _is_lock(path) and not self.busy and _lock_held(path):
                    self.busy = f"its lock {path} is held"


def _walk(top: str) -> Iterable[tuple[str, os.stat_result]]:
    """``top`` and everything under it, with ``lstat`` results.

    Links are never followed, not even to classify them (``os.walk`` stats through them):
    following a link sets its access time, which is how a use through it is seen.
    """
    try:
        st = os.lstat(top)
    except OSError:
        return
    yield top, st
    pending = [top] if stat.S_ISDIR(st.st_mode) else []
    while pending:
        try:
            with os.scandir(pending.pop()) as listing:
                items = list(listing)
        except OSError:
            continue
        for item in items:
            with contextlib.suppress(OSError):
                st = item.stat(follow_symlinks=False)
                yield item.path, st
                if stat.S_ISDIR(st.st_mode):
                    pending.append(item.path)


class _Plain:
    """A plain entry of a cache: the path, the dot-files that belong to it, locks beside it."""

    __slots__ = ("cache_lock", "locks", "partials", "path", "sidecars")

    def __init__(self, path: str, cache_lock: str) -> None:
        self.path = path
        self.cache_lock = cache_lock
        self.sidecars: list[str] = []
        self.locks: list[str] = []
        self.partials: list[str] = []

    def busy(self) -> str:
        """Why a lock or a writer beside the entry keeps it (``""``: none does)."""
        if self.cache_lock and _lock_held(self.cache_lock):
            return f"the cache is locked ({self.cache_lock})"
        for lock in self.locks:
            if _lock_held(lock):
                return f"locked ({lock})"
        for part in self.partials:
            if os.path.exists(part) and not partial_abandoned(part, stale_after=STALE):
                return f"being written ({os.path.basename(part)})"
        return ""


def _matches(rel: str, patterns: tuple[str, ...]) -> tuple[bool, bool]:
    """``(is a container, leads to one)`` for the relative path ``rel``."""
    parts = rel.split("/")
    full = deeper = False
    for pattern in patterns:
        want = pattern.split("/")
        if len(parts) <= len(want) and all(
            fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=False)
        ):
            if len(parts) == len(want):
                full = True
            else:
                deeper = True
    return full, deeper


def _plain_entries(cache: _Cache, claimed: list[str]) -> list[tuple[str, _Plain]]:
    """``(label, entry)`` for every entry of a plain cache, other caches' directories left out."""
    lock = os.path.join(cache.path, ".lock")
    cache_lock = lock if os.path.isfile(lock) else ""
    if cache.whole:
        names = _listdir(cache.path)
        if not names:
            return []
        whole = _Plain(cache.path, cache_lock)
        return [(WHOLE_LABEL, whole)]
    found: list[tuple[str, _Plain]] = []
    pending = [("", cache.path)]
    while pending:
        rel, directory = pending.pop()
        names = _listdir(directory)
        present = set(names)
        here: dict[str, _Plain] = {}
        for name in sorted(names):
            path = os.path.join(directory, name)
            sub = f"{rel}{name}"
            if any(_inside(c, path) for c in claimed):
                continue  # another cache's directory, or holds one
            full, deeper = _matches(sub, cache.containers)
            if (full or deeper) and not os.path.islink(path) and os.path.isdir(path):
                pending.append((sub + "/", path))
                continue
            if name.startswith(".") or _is_lock(name) or name.endswith(".lock.holder"):
                continue  # internal files; a lock and its holder record are never entries
            here[name] = _Plain(path, cache_lock)
            found.append((sub, here[name]))
        for name in names:  # what belongs to an entry of this directory
            owner = _owner(name, present)
            if owner in here:
                path = os.path.join(directory, name)
                if parse_partial(name) is not None:
                    here[owner].partials.append(path)
                elif _is_lock(name):
                    here[owner].locks.append(path)
                else:
                    here[owner].sidecars.append(path)
    return sorted(found)


def _owner(name: str, present: set[str]) -> str:
    """The entry a dot-file or lock file ``name`` belongs to (``""``: none)."""
    parsed = parse_partial(name)
    if parsed is not None:
        return parsed[0]
    for suffix in (".lock.holder", ".meta.json", ".used", ".lock"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if stem.startswith(".") and stem[1:] in present:
                return stem[1:]
            if stem in present:
                return stem
    return ""


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


# -- the survey ----------------------------------------------------------------------------------


class _Candidate:
    """A victim in waiting: when it was used, whether it is busy now, which file system."""

    __slots__ = ("busy", "dev", "priority", "victim")

    def __init__(self, victim: Victim, busy: str, dev: int, priority: int = 1) -> None:
        self.victim = victim
        self.busy = busy
        self.dev = dev
        self.priority = priority


class _HFRepo:
    """The revisions of one Hugging Face repository and the cache scan they came from."""

    __slots__ = ("chosen", "freed", "info", "repo")

    def __init__(self, info: Any, repo: Any) -> None:
        self.info = info
        self.repo = repo
        self.chosen: list[str] = []
        self.freed = 0

    def take(self, commit: str) -> int:
        """Bytes that removing ``commit`` as well frees (huggingface_hub counts shared blobs)."""
        self.chosen.append(commit)
        total = int(self.info.delete_revisions(*self.chosen).expected_freed_size)
        more, self.freed = total - self.freed, total
        return more


class _HFRevision:
    """A revision chosen from a scan: the repository's state and the commit."""

    __slots__ = ("commit", "repo")

    def __init__(self, repo: _HFRepo, commit: str) -> None:
        self.repo = repo
        self.commit = commit


class Survey:
    """Every candidate of every cache of a root, its total size, and notes for the user."""

    __slots__ = ("caches", "candidates", "notes", "root", "total")

    def __init__(self, root: str) -> None:
        self.root = root
        self.caches: list[_Cache] = []
        self.candidates: list[_Candidate] = []
        self.notes: list[str] = []
        self.total = 0


def _dev(path: str) -> int:
    try:
        return os.stat(path).st_dev
    except OSError:
        return -1


def survey(
    root: str,
    *,
    environ: Mapping[str, str] | None = None,
    now: float | None = None,
    settle: float = SETTLE,
) -> Survey:
    """Look at every cache of ``root``: what could go, when it was used, what is busy now."""
    now = time.time() if now is None else now
    found = Survey(root)
    found.caches = [c for c in caches(root, environ) if os.path.isdir(c.path)]
    opened = _Open()
    if opened.hidden:
        found.notes.append(
            f"{opened.hidden} processes could not be inspected (another user's): files they "
            "hold open are protected only by locks and the settle time"
        )
    dirs = [c.path for c in found.caches]
    for cache in found.caches:
        claimed = [d for d in dirs if d != cache.path and _inside(d, cache.path)]
        if cache.kind == TEST_ENTRY:
            _survey_test(found, cache, opened, now)
        elif cache.kind == HF_REVISION and _hf_survey(found, cache, opened, now, settle):
            pass
        else:
            _survey_plain(found, cache, claimed, opened, now=now, settle=settle)
    return found


def _survey_plain(
    found: Survey, cache: _Cache, claimed: list[str], opened: _Open, *, now: float, settle: float
) -> None:
    dev = _dev(cache.path)
    for label, entry in _plain_entries(cache, claimed):
        scan = _Scan([entry.path, *entry.sidecars], opened, now, settle)
        victim = Victim(
            cache=cache.name,
            path=entry.path,
            size=scan.size,
            last_used=scan.newest,
            kind=ENTRY,
            label=label,
            ref=entry,
        )
        found.candidates.append(_Candidate(victim, entry.busy() or scan.busy, dev))
        found.total += scan.size


def _survey_test(found: Survey, cache: _Cache, opened: _Open, now: float) -> None:
    dev = _dev(cache.path)
    for entry in quarantined(cache.path) + entries(cache.path):
        moved = entry.namespace.startswith(QUARANTINE)
        scan = _Scan([entry.path], opened, now, 0.0)
        victim = Victim(
            cache=cache.name,
            path=entry.path,
            size=entry.size,
            last_used=entry.last_used,
            kind=QUARANTINED if moved else TEST_ENTRY,
            label=f"{entry.namespace}/{entry.name}",
            ref=entry,
        )
        found.candidates.append(_Candidate(victim, scan.busy, dev, priority=0 if moved else 1))
        found.total += entry.size


def _hf_busy(repo_path: str, hub: str, opened: _Open, now: float, settle: float) -> str:
    """Why a repository of the hub is busy as a whole: a download in flight (``""``: none)."""
    locks = os.path.join(hub, ".locks", os.path.basename(repo_path))
    for name in _listdir(locks):
        if _is_lock(name) and _lock_held(os.path.join(locks, name)):
            return f"being downloaded (lock {name} held)"
    blobs = os.path.join(repo_path, "blobs")
    for name in _listdir(blobs):
        path = os.path.join(blobs, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if name.endswith(".incomplete"):
            pid = opened.by(st)
            if pid is not None:
                return f"being downloaded by pid {pid} ({name})"
            if now - st.st_mtime < STALE:
                return f"being downloaded ({name}, changed {now - st.st_mtime:.0f} s ago)"
        elif now - st.st_mtime < settle:
            return f"changed {now - st.st_mtime:.0f} s ago ({name})"
    return ""


def _hf_survey(found: Survey, cache: _Cache, opened: _Open, now: float, settle: float) -> bool:
    """Candidates of a Hugging Face hub cache, by revision; ``False`` without huggingface_hub."""
    try:
        from huggingface_hub import scan_cache_dir  # noqa: PLC0415 - optional
    except ImportError:
        found.notes.append(
            f"huggingface_hub is not installed: {cache.path} is treated as a plain tree "
            "(each repository one entry, all its revisions at once)"
        )
        return False
    try:
        info = scan_cache_dir(cache.path)
    except (OSError, ValueError) as exc:
        found.notes.append(f"cannot scan {cache.path} with huggingface_hub: {exc}")
        return True
    for warning in info.warnings:
        found.notes.append(f"{cache.name}: huggingface_hub skipped {warning}")
    dev = _dev(cache.path)
    found.total += int(info.size_on_disk)  # shared blobs once, not once per revision
    for repo in sorted(info.repos, key=lambda r: str(r.repo_path)):
        busy = _hf_busy(str(repo.repo_path), str(info.cache_dir), opened, now, settle)
        state = _HFRepo(info, repo)
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            used = max(
                (max(f.blob_last_accessed, f.blob_last_modified) for f in rev.files),
                default=rev.last_modified,
            )
            victim = Victim(
                cache=cache.name,
                path=str(rev.snapshot_path),
                size=int(rev.size_on_disk),
                last_used=float(used),
                kind=HF_REVISION,
                label=f"{repo.repo_type}/{repo.repo_id}@{rev.commit_hash}",
                ref=_HFRevision(state, rev.commit_hash),
            )
            found.candidates.append(_Candidate(victim, busy or _hf_open(rev, opened), dev))
    return True


def _hf_open(rev: Any, opened: _Open) -> str:
    """Why a revision is in use: a process holds one of its blobs (``""``: none does)."""
    for f in rev.files:
        with contextlib.suppress(OSError):
            pid = opened.by(os.stat(f.blob_path))
            if pid is not None:
                return f"in use by pid {pid} ({f.file_name})"
    return ""


# -- choosing ------------------------------------------------------------------------------------


def _free(path: str) -> tuple[int, int]:
    """``(bytes free to this user, device)`` of the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, _dev(path)


def choose(
    found: Survey,
    *,
    max_size: int | None = None,
    min_free: int | None = None,
    older_than: float | None = None,
    now: float | None = None,
) -> tuple[list[Victim], list[tuple[Victim, str]]]:
    """``(victims, kept)``: the least recently used first, until every criterion holds.

    ``kept`` are those a criterion chose but that are busy now, with why.
    """
    now = time.time() if now is None else now
    total = found.total
    free, root_dev = _free(found.root) if min_free is not None else (0, -1)
    order = sorted(found.candidates, key=lambda c: (c.priority, c.victim.last_used, c.victim.path))
    victims: list[Victim] = []
    kept: list[tuple[Victim, str]] = []
    for cand in order:
        v = cand.victim
        if older_than is not None and now - v.last_used > older_than:
            why = "unused for longer than the limit"
        elif max_size is not None and total > max_size:
            why = "over the size budget (least recently used)"
        elif min_free is not None and free < min_free and cand.dev == root_dev:
            why = "the file system is short of free space (least recently used)"
        else:
            continue
        if cand.busy:
            kept.append((v, cand.busy))
            continue
        if isinstance(v.ref, _HFRevision):  # what it frees depends on the others chosen
            v.size = v.ref.repo.take(v.ref.commit)
        v.reason = why
        victims.append(v)
        total -= v.size
        if cand.dev == root_dev:
            free += v.size
    return victims, kept


def plan(
    root: str,
    *,
    max_size: int | None = None,
    min_free: int | None = None,
    older_than: float | None = None,
    now: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Victim]:
    """What to remove from the caches of ``root``, least recently used first (see the module).

    ``max_size``: until the caches total at most this many bytes; ``min_free``: until the root's
    file system has this many bytes free (only what lies on it counts); ``older_than``: every
    entry unused for longer (seconds). Criteria combine: an entry goes when any one wants it.
    Busy entries are never chosen; the next least recently used goes in their place.
    """
    found = survey(root, environ=environ, now=now)
    return choose(found, max_size=max_size, min_free=min_free, older_than=older_than, now=now)[0]


# -- removing ------------------------------------------------------------------------------------


#: Plain entries renamed aside at a time before one look at ``/proc`` decides their fate.
BATCH = 256


def apply(victims: Iterable[Victim]) -> Summary:
    """Remove ``victims`` (from :func:`plan`), each checked once more for use right before.

    Plain entries are renamed aside in batches of :data:`BATCH`; one fresh look at what
    processes hold then either deletes each or, when a process opened it in between, renames it
    back. Two scans of ``/proc`` per batch, rather than one per entry, keep thousands of
    kernel directories cheap to remove.
    """
    done = Summary()
    todo = list(victims)
    opened = _Open()
    now = time.time()
    hf: dict[int, tuple[Any, list[Victim]]] = {}
    aside: list[tuple[Victim, str]] = []
    for v in todo:
        if isinstance(v.ref, _HFRevision):
            info = v.ref.repo.info
            hf.setdefault(id(info), (info, []))[1].append(v)
            continue
        try:
            why = _set_aside(v, opened, now, aside) if v.kind == ENTRY else _remove_test(v, opened)
        except _Denied as denied:
            done.refused.append((v, str(denied)))
            continue
        if why:
            done.skipped.append((v, why))
        elif v.kind != ENTRY:
            done.removed.append(v)
        if len(aside) >= BATCH:
            _settle_aside(aside, done)
            opened = _Open()
    _settle_aside(aside, done)
    for info, revs in hf.values():
        _remove_revisions(info, revs, opened, now, done)
    rank = {id(v): i for i, v in enumerate(todo)}  # report in the order planned
    done.removed.sort(key=lambda v: rank[id(v)])
    done.skipped.sort(key=lambda pair: rank[id(pair[0])])
    done.refused.sort(key=lambda pair: rank[id(pair[0])])
    return done


class _Denied(Exception):  # noqa: N818 - control flow inside this module
    """This user may not remove an entry."""


def _set_aside(v: Victim, opened: _Open, now: float, aside: list[tuple[Victim, str]]) -> str:
    """Check a plain entry and rename it aside (``""``), or say why it stays."""
    entry = v.ref
    if not isinstance(entry, _Plain):
        raise TypeError(f"{v!r} is not a plain entry")
    why = entry.busy() or _Scan([entry.path, *entry.sidecars], opened, now, SETTLE).busy
    if why:
        return why
    if v.label == WHOLE_LABEL:
        aside.append((v, ""))
        return ""
    head, name = os.path.split(v.path)
    moved = os.path.join(head, f".{name}.{_proc.machine_tag()}-{os.getpid()}.pruned")
    try:
        os.rename(v.path, moved)
    except FileNotFoundError:
        return "gone meanwhile"
    except OSError as exc:
        raise _Denied(_cannot(v.path, exc)) from None
    aside.append((v, moved))
    return ""


def _settle_aside(aside: list[tuple[Victim, str]], done: Summary) -> None:
    """Delete what was set aside, unless a process opened it in between (it goes back)."""
    if not aside:
        return
    opened = _Open()
    for v, moved in aside:
        late = _Scan([moved or v.path], opened, 0.0, 0.0).busy
        if late:
            if moved:
                with contextlib.suppress(OSError):
                    os.rename(moved, v.path)
            done.skipped.append((v, late))
            continue
        try:
            if moved:
                _rmtree(moved)
            else:
                _empty_whole(v.path)
        except OSError as exc:
            done.refused.append((v, _cannot(moved or v.path, exc)))
            continue
        entry = v.ref
        for side in entry.sidecars if isinstance(entry, _Plain) else []:
            with contextlib.suppress(OSError):
                os.unlink(side)
        done.removed.append(v)
    aside.clear()


def _empty_whole(path: str) -> None:
    """Empty a cache kept as one entry, keeping its directory (tools expect it to exist)."""
    for name in _listdir(path):
        _rmtree(os.path.join(path, name))


def _rmtree(path: str) -> None:
    if not os.path.islink(path) and os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _cannot(path: str, exc: OSError) -> str:
    return f"cannot remove {exc.filename or path}: {exc.strerror or exc}; run this as its owner"


def _remove_test(v: Victim, opened: _Open) -> str:
    why = _Scan([v.path], opened, 0.0, 0.0).busy
    if why:
        return why
    if not isinstance(v.ref, Entry):
        raise TypeError(f"{v!r} is not a test-cache entry")
    try:
        return _remove_entry(v.ref)
    except _Refused as refused:
        raise _Denied(str(refused)) from None


def _remove_revisions(
    info: Any, revs: list[Victim], opened: _Open, now: float, done: Summary
) -> None:
    """Delete Hugging Face revisions with one strategy of a fresh scan (blobs shared stay)."""
    from huggingface_hub import scan_cache_dir  # noqa: PLC0415 - optional

    try:
        fresh = scan_cache_dir(info.cache_dir)
    except (OSError, ValueError) as exc:
        done.skipped += [(v, f"cannot scan the hub cache: {exc}") for v in revs]
        return
    by_commit = {r.commit_hash: (repo, r) for repo in fresh.repos for r in repo.revisions}
    go: list[Victim] = []
    for v in revs:
        commit = v.ref.commit if isinstance(v.ref, _HFRevision) else ""
        if commit not in by_commit:
            done.skipped.append((v, "gone meanwhile"))
            continue
        repo, rev = by_commit[commit]
        why = _hf_busy(str(repo.repo_path), str(fresh.cache_dir), opened, now, SETTLE)
        why = why or _hf_open(rev, opened)
        if why:
            done.skipped.append((v, why))
        else:
            go.append(v)
    if not go:
        return
    strategy = fresh.delete_revisions(*(v.ref.commit for v in go if isinstance(v.ref, _HFRevision)))
    try:
        strategy.execute()
    except OSError as exc:
        done.refused += [(v, _cannot(v.path, exc)) for v in go]
        return
    done.removed += go


# -- the command ---------------------------------------------------------------------------------


def prune_root(
    root: str,
    *,
    max_size: int | None = None,
    min_free: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Plan and (unless ``dry_run``) apply; the report ``cacheroot cache prune`` prints."""
    now = time.time()
    found = survey(root, environ=environ, now=now)
    victims, kept = choose(
        found, max_size=max_size, min_free=min_free, older_than=older_than, now=now
    )
    refused: list[tuple[Victim, str]] = []
    if dry_run:
        removed = victims
    else:
        summary = apply(victims)
        removed, kept, refused = summary.removed, kept + summary.skipped, summary.refused
    freed = sum(v.size for v in removed)
    per_cache: dict[str, dict[str, Any]] = {
        c.name: {"path": c.path, "removed": 0, "freed": 0} for c in found.caches
    }
    for v in removed:
        per_cache[v.cache]["removed"] += 1
        per_cache[v.cache]["freed"] += v.size
    free = None
    with contextlib.suppress(OSError):
        free = _free(root)[0]
    return {
        "root": root,
        "dry_run": dry_run,
        "criteria": {"max_size": max_size, "min_free": min_free, "older_than": older_than},
        "removed": [v.as_dict() for v in removed],
        "kept": [{**v.as_dict(), "reason": why, "error": False} for v, why in kept]
        + [{**v.as_dict(), "reason": why, "error": True} for v, why in refused],
        "caches": per_cache,
        "freed": freed,
        "total_before": found.total,
        "total_after": found.total - freed,
        "free": free,
        "notes": found.notes,
    }


def run_prune(args: argparse.Namespace, cache: str) -> int:
    """``cacheroot cache prune``: the budget over every cache of the root, then the test cache's
    stray files (abandoned partials, orphaned records, dead locks)."""
    layout = resolve(os.environ)
    if layout.root is None:
        sys.stderr.write(f"cacheroot cache prune: {layout.root_reason}\n")
        return 2
    report = prune_root(
        layout.root,
        max_size=args.max_size,
        min_free=getattr(args, "min_free", None),
        older_than=args.older_than,
        dry_run=args.dry_run,
        environ=os.environ,
    )
    report["strays"] = prune(cache, grace=args.grace, dry_run=args.dry_run)["strays"]
    report["freed"] += sum(s["size"] for s in report["strays"])
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render(report))
    return 1 if any(k["error"] for k in report["kept"]) else 0


def render(report: dict[str, Any]) -> str:
    """The text form of a :func:`prune_root` report: per cache, then the total."""
    verb = "would remove" if report["dry_run"] else "removed"
    lines: list[str] = []
    for name, info in report["caches"].items():
        rows = [r for r in report["removed"] if r["cache"] == name]
        held = [k for k in report["kept"] if k["cache"] == name]
        if not rows and not held:
            continue
        lines.append(f"{name} ({info['path']}):\n")
        lines += [
            f"  {verb} {r['label']} ({format_size(r['size'])}): {r['reason']}\n" for r in rows
        ]
        lines += [
            f"  {'could not remove' if k['error'] else 'kept'} {k['label']}: {k['reason']}\n"
            for k in held
        ]
        if rows:
            lines.append(f"  {len(rows)} entries, {format_size(info['freed'])}\n")
    lines += [f"{verb} {s['path']}: {s['reason']}\n" for s in report.get("strays", [])]
    lines += [f"note: {n}\n" for n in report["notes"]]
    free = "" if report["free"] is None else f", {format_size(report['free'])} free"
    lines.append(
        f"{verb} {len(report['removed'])} entries and {len(report.get('strays', []))} stray "
        f"files, {format_size(report['freed'])}; {format_size(report['total_after'])} left"
        f"{free}\n"
    )
    return "".join(lines)
