"""The survey of a root: every unit a budget may remove, when it was last used, whether it is busy.

What a unit is, and when it was last used, depends on the cache (:mod:`.root_caches` finds
them):

- the test cache: its entries, as ``cacheroot cache ls`` shows them (:mod:`.cache`), and what
  ``verify`` quarantined, which goes first;
- the Hugging Face hub: revisions, through huggingface_hub's own cache API, which knows which
  blobs another revision still links to; last use is the newest access or modification of the
  revision's blobs. Without huggingface_hub installed, each repository is one plain entry;
- the hub cache's store (``$CACHEROOT/hubcache``, of ``cacheroot hub serve``): its answers and
  files, as ``cacheroot hub prune`` weighs them (:mod:`.._hub.prune` lists and removes them,
  never following a link); last use is the file's modification time, which the hub stamps on
  each serve. The partials of downloads whose hub is gone are garbage whatever the criteria;
  those of a live writer, ``grants/``, ``verified/``, ``locks/``, ``served/`` and ``state/`` are
  never units;
- every other cache: its plain entries; last use is the newest access or modification time of
  any file in it.

Busy is judged once, here, against one look at what processes hold (:mod:`.in_use`); the plan
skips busy units, and removal judges each again right before it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from typing import TYPE_CHECKING, Any

from .._hub.prune import ANSWER, dead_partials, stored
from .cache import FOREIGN_STALE, QUARANTINE, Entry, entries, entry_dir, quarantined
from .in_use import SETTLE, Held, Scan, is_lock, lock_held
from .inventory import HUB_STORE, HUB_STORE_LABEL
from .root_caches import (
    ENTRY,
    HF_REVISION,
    QUARANTINED,
    TEST_ENTRY,
    WHOLE_LABEL,
    CacheDir,
    caches,
    device,
    inside,
    not_followed,
    open_cache,
    walk_entries,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from .._hub.prune import Stored

__all__ = [
    "HUB_ANSWER",
    "HUB_FILE",
    "HUB_PARTIAL",
    "HUB_STORE_KIND",
    "Candidate",
    "HubRepo",
    "HubRevision",
    "HubStored",
    "Survey",
    "Victim",
    "hub_busy",
    "hub_open",
    "survey",
]

#: The kind of the hub cache's store among the caches, and the kinds of its units.
HUB_STORE_KIND = "hub-store"
HUB_ANSWER, HUB_FILE, HUB_PARTIAL = "hub-answer", "hub-file", "hub-partial"


class Victim:
    """One unit the budget may remove: a cache entry, a model revision, a kernel directory.

    ``cache`` names the layout row (``TRITON_CACHE_DIR``; ``XDG_CACHE_HOME/pip`` for a cache
    under the XDG home), ``label`` how the cache itself names it, ``last_used`` is a Unix time.
    ``reason`` says which criterion chose it; ``ref`` is what removing it needs (the test-cache
    entry, the scanned revision, the plain entry with its sidecars).
    """

    __slots__ = ("base", "cache", "kind", "label", "last_used", "path", "reason", "ref", "size")

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
        base: str = "",
    ) -> None:
        self.cache = cache
        self.path = path
        self.size = size
        self.last_used = last_used
        self.kind = kind
        self.label = label
        self.reason = reason
        self.ref = ref
        #: The directory below which no link is followed to reach it (``""``: none).
        self.base = base

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


class Candidate:
    """A victim in waiting: when it was used, whether it is busy now, which file system."""

    __slots__ = ("busy", "dev", "priority", "victim")

    def __init__(self, victim: Victim, busy: str, dev: int, priority: int = 1) -> None:
        self.victim = victim
        self.busy = busy
        self.dev = dev
        self.priority = priority


class HubRepo:
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


class HubRevision:
    """A revision chosen from a scan: the repository's state and the commit."""

    __slots__ = ("commit", "repo")

    def __init__(self, repo: HubRepo, commit: str) -> None:
        self.repo = repo
        self.commit = commit


class HubStored:
    """A unit of the hub cache's store (:class:`.._hub.prune.Stored`) and the store it is in."""

    __slots__ = ("store", "unit")

    def __init__(self, store: str, unit: Stored) -> None:
        self.store = store
        self.unit = unit


class Survey:
    """Every candidate of every cache of a root, its total size, and notes for the user;
    ``garbage``: what goes whatever the criteria (partials of downloads whose hub is gone)."""

    __slots__ = ("caches", "candidates", "garbage", "notes", "root", "total")

    def __init__(self, root: str) -> None:
        self.root = root
        self.caches: list[CacheDir] = []
        self.candidates: list[Candidate] = []
        self.garbage: list[Victim] = []
        self.notes: list[str] = []
        self.total = 0


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
    every = caches(root, environ)
    for cache in every:
        why = not_followed(root, cache.path)
        if why:
            found.notes.append(f"skipped {cache.name} ({cache.path}): {why}")
        elif os.path.isdir(cache.path):
            found.caches.append(cache)
    held = Held()
    if held.hidden and others_reach(root):
        found.notes.append(
            f"{held.hidden} processes could not be inspected (another user's): files they "
            "hold open are protected only by locks and the settle time"
        )
    store = os.path.join(root, HUB_STORE)
    dirs = [c.path for c in every]  # a skipped cache's directory is no entry of another
    hub_store = not any(inside(store, d) for d in dirs)  # else a cache of the layout owns it
    if hub_store:
        dirs.append(store)
    for cache in found.caches:
        claimed = [d for d in dirs if d != cache.path and inside(d, cache.path)]
        if cache.kind == TEST_ENTRY:
            _survey_test(found, cache, held, now)
        elif cache.kind == HF_REVISION and _survey_hub(found, cache, held, now, settle):
            pass
        else:
            _survey_plain(found, cache, claimed, held, now=now, settle=settle)
    if hub_store:
        _survey_hub_store(found, store, held, now, settle)
    return found


def others_reach(path: str) -> bool:
    """Whether users other than the owner may reach ``path``: no directory from it up to ``/``
    shuts out both its group and others (no execute bit for either).

    Processes of other users, which ``/proc`` hides, can hold files of a root only where they
    may reach it; a root below a private directory (a home of mode 0700, pytest's temporary
    directories) is its owner's alone, and on a developer's machine the note on hidden processes
    would otherwise be printed by every prune, for the system's own processes.
    """
    current = os.path.abspath(path)
    while True:
        try:
            st = os.stat(current)
        except OSError:
            st = None  # not made yet: its parent decides
        if st is not None and not st.st_mode & 0o011:
            return False
        parent = os.path.dirname(current)
        if parent == current:
            return True
        current = parent


def _survey_plain(
    found: Survey, cache: CacheDir, claimed: list[str], held: Held, *, now: float, settle: float
) -> None:
    """Candidates of a plain cache, walked through held descriptors (:func:`walk_entries`): a
    directory swapped for a link while it is walked is said once in the notes, and nothing the
    link leads to is listed, weighed or touched."""
    try:
        fd = open_cache(found.root, cache.path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            found.notes.append(f"skipped {cache.name} ({cache.path}): {exc.strerror}")
        return
    planted: list[str] = []
    try:
        dev = os.fstat(fd).st_dev
        for listed in walk_entries(cache, claimed, fd, planted):
            for label, entry in listed.entries:
                if label == WHOLE_LABEL:  # the cache's own directory: weighed from within
                    tops = [os.path.join(cache.path, n) for n in listed.names]
                else:
                    tops = [entry.path, *entry.sidecars]
                scan = Scan(tops, held, now, settle, dir_fd=listed.fd)
                victim = Victim(
                    cache=cache.name,
                    path=entry.path,
                    size=scan.size,
                    last_used=scan.newest,
                    kind=ENTRY,
                    label=label,
                    ref=entry,
                    base=_base(found.root, cache.path),
                )
                busy = entry.busy(dir_fd=listed.fd, cache_fd=fd) or scan.busy
                found.candidates.append(Candidate(victim, busy, dev))
                found.total += scan.size
    finally:
        os.close(fd)
    found.notes += [f"skipped part of {cache.name}: {line}" for line in planted]


def _survey_hub_store(found: Survey, store: str, held: Held, now: float, settle: float) -> None:
    """Candidates of the hub cache's store: its answers and files, each on its own."""
    why = not_followed(found.root, store)
    if why:
        found.notes.append(f"skipped {HUB_STORE_LABEL} ({store}): {why}")
        return
    if not os.path.isdir(store):
        return
    found.caches.append(CacheDir(HUB_STORE_LABEL, store, HUB_STORE_KIND, whole=False))
    dev = device(store)
    for unit in stored(store, top=found.root):
        path = os.path.join(store, unit.rel)
        victim = Victim(
            cache=HUB_STORE_LABEL,
            path=path,
            size=unit.size,
            last_used=unit.last_used,
            kind=HUB_ANSWER if unit.kind == ANSWER else HUB_FILE,
            label=unit.rel,
            ref=HubStored(store, unit),
            base=found.root,
        )
        found.candidates.append(Candidate(victim, Scan([path], held, now, settle).busy, dev))
        found.total += unit.size
    for unit in dead_partials(store, now=now, top=found.root):
        found.garbage.append(
            Victim(
                cache=HUB_STORE_LABEL,
                path=os.path.join(store, unit.rel),
                size=unit.size,
                last_used=unit.last_used,
                kind=HUB_PARTIAL,
                label=unit.rel,
                reason="the partial file of a download whose hub is gone",
                ref=HubStored(store, unit),
                base=found.root,
            )
        )


def _base(root: str, path: str) -> str:
    """Where no link is followed from to reach the entries of the cache at ``path``: the root
    when the cache lies in it, else the cache itself (a directory the user set)."""
    return root if inside(path, root) else path


def _survey_test(found: Survey, cache: CacheDir, held: Held, now: float) -> None:
    dev = device(cache.path)
    for entry in quarantined(cache.path) + entries(cache.path):
        moved = entry.namespace.startswith(QUARANTINE)
        # Weighed again through its directory reached from the root: a namespace swapped for a
        # link since the walk is refused (nothing weighed, nothing listed), not followed.
        try:
            fd = entry_dir(entry)
        except OSError:
            continue
        try:
            scan = Scan([entry.path], held, now, 0.0, dir_fd=fd)
        finally:
            os.close(fd)
        victim = Victim(
            cache=cache.name,
            path=entry.path,
            size=entry.size,
            last_used=entry.last_used,
            kind=QUARANTINED if moved else TEST_ENTRY,
            label=f"{entry.namespace}/{entry.name}",
            ref=entry,
        )
        found.candidates.append(Candidate(victim, scan.busy, dev, priority=0 if moved else 1))
        found.total += entry.size


# -- the Hugging Face hub ------------------------------------------------------------------------


def hub_busy(repo_path: str, hub: str, held: Held, now: float, settle: float) -> str:
    """Why a repository of the hub is busy as a whole: a download in flight (``""``: none).

    An ``.incomplete`` download counts as abandoned only when no process holds it and it has
    been untouched for :data:`.cache.FOREIGN_STALE`. The repository's ``blobs`` and the hub's
    ``.locks/<repo>`` are listed and looked at through descriptors opened from the hub cache
    without following a link: a directory swapped for a link shows nothing of what it leads to.
    """
    repo = os.path.basename(repo_path)
    with _held_below(hub, os.path.join(".locks", repo)) as locks:
        for name in _names(locks):
            if is_lock(name) and lock_held(name, dir_fd=locks):
                return f"being downloaded (lock {name} held)"
    with _held_below(hub, os.path.join(repo, "blobs")) as blobs:
        for name in _names(blobs):
            try:
                st = os.lstat(name, dir_fd=blobs)
            except OSError:
                continue
            if name.endswith(".incomplete"):
                pid = held.by(st)
                if pid is not None:
                    return f"being downloaded by pid {pid} ({name})"
                if now - st.st_mtime < FOREIGN_STALE:
                    return f"being downloaded ({name}, changed {now - st.st_mtime:.0f} s ago)"
            elif now - st.st_mtime < settle:
                return f"changed {now - st.st_mtime:.0f} s ago ({name})"
    return ""


@contextlib.contextmanager
def _held_below(top: str, rel: str) -> Iterator[int | None]:
    """A descriptor of ``top/rel`` reached without following a link below ``top`` (``None``
    where it is missing, a link, or not a directory), closed afterwards."""
    from .._shared import open_below  # noqa: PLC0415 - upkeep only

    try:
        fd: int | None = open_below(top, rel)
    except OSError:
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _names(fd: int | None) -> list[str]:
    """The names in the directory held at ``fd`` (none for ``None`` or an unreadable one)."""
    if fd is None:
        return []
    try:
        return os.listdir(fd)
    except OSError:
        return []


def hub_open(rev: Any, held: Held) -> str:
    """Why a revision is in use: a process holds one of its blobs (``""``: none does)."""
    for f in rev.files:
        with contextlib.suppress(OSError):
            pid = held.by(os.stat(f.blob_path))
            if pid is not None:
                return f"in use by pid {pid} ({f.file_name})"
    return ""


def _leaves_repo(repo: Any) -> str:
    """Why removing a revision of ``repo`` could reach outside it (``""``: it cannot): the
    repository or a snapshot is a link, or a snapshot's file links out of the repository's
    blobs (huggingface_hub would delete that file as a blob)."""
    repo_path = str(repo.repo_path)
    if os.path.islink(repo_path):
        return f"{repo_path} is a symbolic link; never followed"
    blobs = os.path.join(repo_path, "blobs")
    for rev in repo.revisions:
        if os.path.islink(str(rev.snapshot_path)):
            return f"{rev.snapshot_path} is a symbolic link; never followed"
        for f in rev.files:
            blob = os.path.normpath(str(f.blob_path))
            if blob != str(f.file_path) and not inside(blob, blobs):
                return f"{f.file_path} links out of {blobs} (to {blob}); never followed"
    return ""


def _survey_hub(found: Survey, cache: CacheDir, held: Held, now: float, settle: float) -> bool:
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
    dev = device(cache.path)
    found.total += int(info.size_on_disk)  # shared blobs once, not once per revision
    for repo in sorted(info.repos, key=lambda r: str(r.repo_path)):
        why = _leaves_repo(repo)
        if why:
            found.notes.append(f"skipped {cache.name} repository {repo.repo_id}: {why}")
            continue
        busy = hub_busy(str(repo.repo_path), str(info.cache_dir), held, now, settle)
        state = HubRepo(info, repo)
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
                ref=HubRevision(state, rev.commit_hash),
            )
            found.candidates.append(Candidate(victim, busy or hub_open(rev, held), dev))
    return True
