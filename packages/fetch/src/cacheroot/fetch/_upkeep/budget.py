"""Budgets across the whole root: one least-recently-used order over every cache of the layout.

``cacheroot cache prune`` used to look after the test cache alone, while the Hugging Face hub,
Triton, Inductor and the JIT caches beside it grew without bound. This module sees every cache
the layout puts under a root and removes what was used least recently, across all of them, until
the criteria hold: ``max_size`` (the caches total at most this), ``min_free`` (the root's file
system has at least this free) and ``older_than`` (nothing unused for longer). One order across
caches is the point: a Triton kernel unused for a month goes before a model used an hour ago.

What a unit of removal is, and when it was last used, depends on the cache (:mod:`.survey`
finds them in the caches :mod:`.root_caches` lists):

- the test cache: its entries, as ``cacheroot cache ls`` shows them, under their own locks
  (:mod:`.cache` removes them; an entry being fetched or built is skipped);
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
(``/proc/<pid>/fd``, ``maps``, ``cwd``; see :mod:`.in_use`). That last check cannot see
processes in another container or pid namespace, on another host sharing the volume, or
(without privileges) of other users: their files are protected only by the locks and the settle
time.

A plain entry is renamed aside before it is deleted and looked at once more there, so a process
that opened it between the check and the rename keeps it (it is renamed back). A prune killed
between the rename and the deletion leaves ``.<name>.<machine>-<pid>.pruned`` behind, which no
survey counts as an entry: the next prune or ``tier evict`` removes it (:func:`leftovers`) once
its pruner is certainly dead (this machine's pid namespace, see :mod:`.._proc`) or, where that
cannot be known (another host), once it was renamed more than :data:`.cache.FOREIGN_STALE`
seconds ago.

Other jobs write the root. A cache directory that is a link is skipped by the survey, and each
removal reaches its entry's directory from the root without following a link
(:func:`.._shared.open_below`), so a directory swapped for a link after the survey is refused,
not followed; trees are removed as :func:`shutil.rmtree` does on systems with ``openat``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from typing import TYPE_CHECKING, Any

from .. import _held, _proc
from .._hub.prune import remove as remove_stored
from .._shared import fd_path, open_below
from .cache import (
    FOREIGN_STALE,
    Entry,
    Refused,
    entry_dir,
    remove_entry,
    remove_tree_at,
)
from .in_use import SETTLE, Held, Scan, open_seen
from .root_caches import (
    ENTRY,
    WHOLE_LABEL,
    PlainEntry,
    free_space,
    inside,
    open_cache,
    walk_entries,
)
from .survey import (
    HUB_ANSWER,
    HUB_FILE,
    HUB_PARTIAL,
    HubRevision,
    HubStored,
    Survey,
    Victim,
    hub_busy,
    hub_open,
    survey,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = ["LEFTOVER", "SETTLE", "Summary", "Victim", "apply", "choose", "leftovers", "plan"]

#: The kind of victim that a killed prune left renamed aside (always removed, whatever the budget).
LEFTOVER = "pruned-leftover"
#: How :func:`_set_aside` names an entry it renamed aside: ``.<name>.<machine tag>-<pid>.pruned``.
_PRUNED = re.compile(r"^\.(?P<name>.+)\.(?P<tag>[0-9a-f]{8})-(?P<pid>[0-9]+)\.pruned$")
#: The kinds of the hub cache's store's units (:func:`.._hub.prune.remove` removes them).
_HUB_STORE_KINDS = frozenset({HUB_ANSWER, HUB_FILE, HUB_PARTIAL})
#: Sidecars of a plain entry that mean nothing once it is gone (locks stay: one may be held).
_SIDECARS = (".meta.json", ".used")


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


# -- choosing ------------------------------------------------------------------------------------


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
    free, root_dev = free_space(found.root) if min_free is not None else (0, -1)
    order = sorted(found.candidates, key=lambda c: (c.priority, c.victim.last_used, c.victim.path))
    victims: list[Victim] = []
    kept: list[tuple[Victim, str]] = []
    for v, busy in leftovers(found, now=now):  # garbage whatever the criteria: first
        if busy:
            kept.append((v, busy))
            continue
        victims.append(v)
        free += v.size
    for v in found.garbage:
        victims.append(v)
        free += v.size
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
        if isinstance(v.ref, HubRevision):  # what it frees depends on the others chosen
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
    held = Held()
    now = time.time()
    hf: dict[int, tuple[Any, list[Victim]]] = {}
    aside: list[tuple[Victim, str]] = []
    for v in todo:
        if v.kind == LEFTOVER or v.kind in _HUB_STORE_KINDS:  # one file or tree, removed now
            try:
                why = (_remove_leftover if v.kind == LEFTOVER else _remove_stored)(v, held)
            except _Denied as denied:
                done.refused.append((v, str(denied)))
                continue
            if why:
                done.skipped.append((v, why))
            else:
                done.removed.append(v)
            continue
        if isinstance(v.ref, HubRevision):
            info = v.ref.repo.info
            hf.setdefault(id(info), (info, []))[1].append(v)
            continue
        try:
            why = _set_aside(v, held, now, aside) if v.kind == ENTRY else _remove_test(v, held)
        except _Denied as denied:
            done.refused.append((v, str(denied)))
            continue
        if why:
            done.skipped.append((v, why))
        elif v.kind != ENTRY:
            done.removed.append(v)
        if len(aside) >= BATCH:
            _settle_aside(aside, done)
            held = Held()
    _settle_aside(aside, done)
    for info, revs in hf.values():
        _remove_revisions(info, revs, held, now, done)
    rank = {id(v): i for i, v in enumerate(todo)}  # report in the order planned
    done.removed.sort(key=lambda v: rank[id(v)])
    done.skipped.sort(key=lambda pair: rank[id(pair[0])])
    done.refused.sort(key=lambda pair: rank[id(pair[0])])
    return done


# -- what a killed prune left behind ------------------------------------------------------------


def leftovers(found: Survey, *, now: float | None = None) -> list[tuple[Victim, str]]:
    """``(victim, why it stays)`` for every entry a prune renamed aside and never deleted.

    Looked for where plain entries live (each plain cache and its entry sub-directories). One
    whose pruner may still run is not one (its prune is under way); one that a process holds
    open is kept (``why``), and goes back to its name when removed is tried (:func:`apply`).
    """
    now = time.time() if now is None else now
    found_: list[tuple[Victim, str]] = []
    held: Held | None = None
    dirs = [c.path for c in found.caches]
    for cache in found.caches:
        if cache.kind != ENTRY or cache.whole:
            continue
        claimed = [d for d in dirs if d != cache.path and inside(d, cache.path)]
        try:
            fd = open_cache(found.root, cache.path)
        except OSError:
            continue  # gone, or swapped for a link since the survey: never followed
        try:
            for listed in walk_entries(cache, claimed, fd, []):
                for name in sorted(listed.names):
                    match = _PRUNED.match(name)
                    path = os.path.join(listed.directory, name)
                    if match is None or not _abandoned(name, listed.fd, match, now):
                        continue
                    held = Held() if held is None else held
                    scan = Scan([path], held, now, 0.0, dir_fd=listed.fd)
                    victim = Victim(
                        cache=cache.name,
                        path=path,
                        size=scan.size,
                        last_used=scan.newest,
                        kind=LEFTOVER,
                        label=f"{listed.rel}{name}",
                        reason="left renamed aside by a prune that was stopped before deleting it",
                        ref=os.path.join(listed.directory, match["name"]),
                        base=found.root if inside(cache.path, found.root) else cache.path,
                    )
                    found_.append((victim, scan.busy))
        finally:
            os.close(fd)
    return found_


def _abandoned(name: str, dir_fd: int, match: re.Match[str], now: float) -> bool:
    """Whether the prune that renamed ``name`` (in the directory held at ``dir_fd``) aside is
    gone."""
    pid = int(match["pid"])
    if match["tag"] == _proc.machine_tag() and pid != os.getpid() and _proc.gone(pid):
        return True
    try:  # the rename set the ctime: how long ago the prune stopped there
        return now - os.lstat(name, dir_fd=dir_fd).st_ctime > FOREIGN_STALE
    except OSError:
        return False


def _remove_leftover(v: Victim, held: Held) -> str:
    """Delete a leftover (and its entry's orphaned sidecars), or put back one that is open.

    Its directory is reached from the victim's base without following a link and held: the
    look at who holds it, the rename back, the removal and the sidecars are all named relative
    to that descriptor."""
    original = os.path.basename(str(v.ref))
    try:
        with _held_dir(v, v.path) as (fd, name):
            late = Scan([v.path], held, 0.0, 0.0, dir_fd=fd).busy
            if late:
                if _held.lstat_quiet(original, fd) is None:
                    with contextlib.suppress(OSError):
                        _held.move(fd, name, fd, original)
                return late
            remove_tree_at(fd, name)
            if _held.lstat_quiet(original, fd) is None:
                for suffix in _SIDECARS:
                    with contextlib.suppress(OSError):
                        _held.unlink(fd, f".{original}{suffix}")
    except FileNotFoundError:
        return "gone meanwhile"
    except OSError as exc:
        raise _Denied(_cannot(v.path, exc)) from None
    return ""


class _Denied(Exception):  # noqa: N818 - control flow inside this module
    """This user may not remove an entry."""


def _set_aside(v: Victim, held: Held, now: float, aside: list[tuple[Victim, str]]) -> str:
    """Check a plain entry and rename it aside (``""``), or say why it stays.

    Its directory is reached as :func:`_held_dir` does, the entry looked at there once more (it
    stays unless it is what the survey saw, ``st_dev`` and ``st_ino``), and it is renamed
    relative to that descriptor."""
    entry = v.ref
    if not isinstance(entry, PlainEntry):
        raise TypeError(f"{v!r} is not a plain entry")
    whole = v.label == WHOLE_LABEL
    try:
        with _held_dir(v, os.path.join(v.path, ".") if whole else v.path) as (fd, name):
            why = entry.busy(dir_fd=fd)
            if not why and not whole:
                st = os.lstat(name, dir_fd=fd)
                if entry.ident is not None and (st.st_dev, st.st_ino) != entry.ident:
                    return "replaced meanwhile"
            tops = [os.path.join(v.path, n) for n in os.listdir(fd)] if whole else [v.path]
            tops += [] if whole else entry.sidecars
            why = why or Scan(tops, held, now, SETTLE, dir_fd=fd).busy
            if why:
                return why
            if whole:
                aside.append((v, ""))
                return ""
            aside_name = f".{name}.{_proc.machine_tag()}-{os.getpid()}.pruned"
            _held.move(fd, name, fd, aside_name)
    except FileNotFoundError:
        return "gone meanwhile"
    except OSError as exc:
        raise _Denied(_cannot(v.path, exc)) from None
    aside.append((v, os.path.join(os.path.dirname(v.path), aside_name)))
    return ""


@contextlib.contextmanager
def _held_dir(v: Victim, path: str) -> Iterator[tuple[int, str]]:
    """``(descriptor, name)``: the directory of ``path`` (default: the victim's), reached from
    the victim's base without following a link (a directory swapped for one since the survey
    is refused, :class:`OSError`), and the name of ``path`` in it. A test-cache entry is
    reached from the cache root as its own removal reaches it; a victim with no base to start
    from is refused, never reached by its path."""
    head, name = os.path.split(path)
    if v.base:
        fd = open_below(v.base, os.path.relpath(head, v.base))
    elif isinstance(v.ref, Entry) and path == v.path:
        fd = entry_dir(v.ref)
    else:
        raise OSError(errno.EINVAL, "no root to reach it from without following a link", path)
    try:
        yield fd, name
    finally:
        os.close(fd)


def _settle_aside(aside: list[tuple[Victim, str]], done: Summary) -> None:
    """Delete what was set aside, unless a process opened it in between (it goes back). Each
    is looked at, put back or removed through its directory reached again from the victim's
    base without following a link (:func:`_held_dir`)."""
    if not aside:
        return
    held = Held()
    for v, moved in aside:
        try:
            late = _settle_one(v, moved, held)
        except OSError as exc:
            done.refused.append((v, _cannot(moved or v.path, exc)))
            continue
        if late:
            done.skipped.append((v, late))
            continue
        entry = v.ref
        sides = entry.sidecars if isinstance(entry, PlainEntry) else []
        with contextlib.suppress(OSError):
            if sides:
                with _held_dir(v, v.path) as (fd, _name):
                    for side in sides:
                        with contextlib.suppress(OSError):
                            _held.unlink(fd, os.path.basename(side))
        done.removed.append(v)
    aside.clear()


def _settle_one(v: Victim, moved: str, held: Held) -> str:
    """Delete ``v``, set aside as ``moved`` (``""``: a cache kept whole, emptied in place), or
    put it back and say why when a process opened it in between."""
    with _held_dir(v, moved or v.path) as (fd, name):
        late = Scan([moved or v.path], held, 0.0, 0.0, dir_fd=fd).busy
        if late:
            if moved:
                with contextlib.suppress(OSError):
                    _held.move(fd, name, fd, os.path.basename(v.path))
            return late
        if moved:
            remove_tree_at(fd, name)
        else:
            _empty_whole(fd, name)
    return ""


def _empty_whole(parent: int, name: str) -> None:
    """Empty the cache ``name`` of the directory held at ``parent``, kept as one entry, keeping
    its directory (tools expect it to exist)."""
    fd = open_seen(parent, name, name, os.lstat(name, dir_fd=parent), lambda _why: None)
    if fd is None:  # swapped for a link or another directory since it was looked at
        raise OSError(errno.ELOOP, "not the directory surveyed: not followed (refused)", name)
    try:
        for child in os.listdir(fd):
            remove_tree_at(fd, child)
    finally:
        os.close(fd)


def _cannot(path: str, exc: OSError) -> str:
    """Why ``path`` could not be removed; a name the system gave relative to a held directory
    is shown in the directory of ``path``."""
    where = exc.filename if isinstance(exc.filename, str) else ""
    if where and not os.path.isabs(where):
        where = os.path.join(os.path.dirname(path), where)
    return f"cannot remove {where or path}: {exc.strerror or exc}; run this as its owner"


def _remove_stored(v: Victim, held: Held) -> str:
    """Remove an answer, a file or a dead partial of the hub cache's store (``""``), or say why
    it stays: a process holds it open, or the store's own check right before says so (served
    since the survey, replaced, a partial's writer alive)."""
    ref = v.ref
    if not isinstance(ref, HubStored):
        raise TypeError(f"{v!r} is not a unit of the hub cache's store")
    late = _late_busy(v, held)
    if late:
        return late
    try:
        return remove_stored(ref.store, ref.unit, top=v.base or None)
    except OSError as exc:
        raise _Denied(_cannot(v.path, exc)) from None


def _late_busy(v: Victim, held: Held) -> str:
    """Why ``v`` is busy right before its removal (a process holds it), weighed again through
    its directory reached from the root; "gone meanwhile"; or ``""`` to go ahead."""
    try:
        with _held_dir(v, v.path) as (fd, _name):
            return Scan([v.path], held, 0.0, 0.0, dir_fd=fd).busy
    except FileNotFoundError:
        return "gone meanwhile"
    except OSError as exc:
        raise _Denied(_cannot(v.path, exc)) from None


def _remove_test(v: Victim, held: Held) -> str:
    """Remove a test-cache entry (:func:`.cache.remove_entry`) unless a process holds it: both
    reach its namespace from the cache root without following a link."""
    if not isinstance(v.ref, Entry):
        raise TypeError(f"{v!r} is not a test-cache entry")
    why = _late_busy(v, held)
    if why:
        return why
    try:
        return remove_entry(v.ref)
    except Refused as refused:
        raise _Denied(str(refused)) from None


def _remove_revisions(info: Any, revs: list[Victim], held: Held, now: float, done: Summary) -> None:
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
        commit = v.ref.commit if isinstance(v.ref, HubRevision) else ""
        if commit not in by_commit:
            done.skipped.append((v, "gone meanwhile"))
            continue
        repo, rev = by_commit[commit]
        why = hub_busy(str(repo.repo_path), str(fresh.cache_dir), held, now, SETTLE)
        why = why or hub_open(rev, held)
        if why:
            done.skipped.append((v, why))
        else:
            go.append(v)
    if not go:
        return
    strategy = fresh.delete_revisions(*(v.ref.commit for v in go if isinstance(v.ref, HubRevision)))
    try:
        with _pinned(strategy, str(fresh.cache_dir)) as held_strategy:
            held_strategy.execute()
    except OSError as exc:
        done.refused += [(v, _cannot(v.path, exc)) for v in go]
        return
    done.removed += go


@contextlib.contextmanager
def _pinned(strategy: Any, hub: str) -> Iterator[Any]:
    """huggingface_hub's deletion ``strategy`` with each path it removes named through its
    parent directory, reached from the hub cache ``hub`` without following a link and held open
    while it runs (:func:`fd_path`): a repository or snapshot directory swapped for a link after
    the scan leads nowhere else. The plan stays the library's; only the names are pinned.
    :class:`OSError` (``ELOOP``) when a directory on the way is a link now."""
    import dataclasses  # noqa: PLC0415 - removal only
    from pathlib import Path  # noqa: PLC0415

    parents: dict[str, int] = {}

    def pin(path: Path) -> Path:
        rel = os.path.relpath(path, hub)
        if rel.startswith(os.pardir):
            raise OSError(errno.EXDEV, "outside the hub cache: refused", str(path))
        head, name = os.path.split(rel)
        if head not in parents:
            parents[head] = open_below(hub, head)
        return Path(fd_path(parents[head], name))

    try:
        fields = ("blobs", "refs", "repos", "snapshots", "files")
        pinned = {
            f: frozenset(pin(p) for p in getattr(strategy, f, frozenset()))
            for f in fields
            if hasattr(strategy, f)
        }
        yield dataclasses.replace(strategy, **pinned)
    finally:
        for fd in parents.values():
            os.close(fd)
