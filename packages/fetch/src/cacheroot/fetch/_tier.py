"""Two tiers for the caches that libraries write themselves (Hugging Face, Triton, Inductor, ...).

cacheroot's own entries go through the shared tier file by file (:mod:`._shared`). The other
caches of the layout are written by their libraries, which know nothing of tiers, so the tiers
are joined around the run instead:

- :func:`up` shows the shared tier (L2) under the host's root (L1) as one tree: an OverlayFS
  mount with L2 as the read-only lower layer and L1 as the upper one, where the kernel and the
  privileges allow it; otherwise :func:`seed` copies L2's most recently used files into L1,
  within L1's budget and free-space headroom, and the merged path is a link to L1;
- :func:`sync` pushes what the run added to L1 (the overlay's upper layer) to L2, file by file;
- :func:`down` undoes :func:`up`.

What :func:`sync` copies is only ever a complete file: it skips partial downloads
(``*.incomplete``, cacheroot's partials), locks and leases, overlay whiteouts, files changed in
the last :data:`SETTLE` seconds, and files a process on this host has open for writing; it
checks that the source did not change while it was copied. It never replaces a file that is
already on L2 (another host's copy is as complete as ours), and publishes each copy with a
private temporary file, an fsync, a hard link that fails if the name exists, and an fsync of
the directory. A sync killed at any point leaves only hidden partials (removed by the next sync
on the same host, or once abandoned for an hour by any host); running it again finishes the job.

Neither :func:`up` nor :func:`sync` ever creates L2's root (see :mod:`._shared`): a root that is
not there is an unmounted volume or a typo, and they raise :class:`FileNotFoundError` instead.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from . import _store
from ._in_use import open_for_writing
from ._shared import copy_new, publish_new
from ._used import used_path

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterator

__all__ = [
    "SETTLE",
    "SeedReport",
    "SyncReport",
    "down",
    "overlay_supported",
    "seed",
    "skip_reason",
    "sync",
    "up",
    "watch",
]

log = logging.getLogger("cacheroot.fetch")

#: A file changed this recently (seconds) may still be being written: the next sync takes it.
SETTLE = 5.0
#: Names that are never complete files: partial downloads of the libraries and of cacheroot,
#: locks, leases, records of use (each tier keeps its own), overlay and aufs whiteouts.
_SKIP_SUFFIXES = (".incomplete", ".lock", ".lock.holder", ".lease", ".partial", ".partial.old")
_SKIP_NAMES = re.compile(
    r"""^(?:
        \.wh\..*                # aufs-style whiteouts and opaque markers
      | .*\.tmp(?:\.pid_.*)?    # Triton's and others' temporary names before a rename
      | \._____temp             # ModelScope's download staging directory
      | .*\.partial\.old        # cacheroot's directories renamed aside
    )$""",
    re.VERBOSE,
)
#: Files copied at once by one sync.
WORKERS = 8
#: The directory ``up`` makes for the overlay's work directory, beside the root (same disk).
WORK_SUFFIX = ".overlay-work"


def skip_reason(name: str) -> str:
    """Why a file or directory named ``name`` is never copied between tiers (``""``: it may)."""
    if name.endswith(_SKIP_SUFFIXES):
        return "partial, lock or lease"
    if _store.parse_partial(name) is not None or _SKIP_NAMES.match(name):
        return "partial or temporary"
    if name.startswith(".") and name.endswith(".used"):
        return "record of use (each tier keeps its own)"
    return ""


class SyncReport:
    """What one :func:`sync` pass did (counts and bytes), for the command's summary."""

    __slots__ = ("copied", "copied_bytes", "failed", "present", "skipped", "unsettled")

    def __init__(self) -> None:
        self.copied = 0
        self.copied_bytes = 0
        self.present = 0
        self.skipped = 0
        self.unsettled = 0
        self.failed = 0

    def __str__(self) -> str:
        return (
            f"copied {self.copied} files ({self.copied_bytes} bytes); {self.present} already "
            f"there; {self.unsettled} still being written (next sync); {self.skipped} partial "
            f"or internal; {self.failed} failed"
        )


def _root_gone(root: str) -> FileNotFoundError:
    return FileNotFoundError(
        errno.ENOENT,
        "the shared tier's root is not a directory (it is never created: mount the volume)",
        root,
    )


def _ensure_dir(path: str, made: set[str], top: str | None = None) -> None:
    """Create ``path`` and its missing parents, each made durable in its parent; never ``top``
    itself (:class:`FileNotFoundError` if it is gone)."""
    if path in made or os.path.isdir(path):
        made.add(path)
        return
    if path == top:
        raise _root_gone(path)
    parent = os.path.dirname(path)
    _ensure_dir(parent, made, top)
    with contextlib.suppress(FileExistsError):
        _store.makedirs(path)
        _store.fsync_dir(parent)
    made.add(path)


def _walk(top: str) -> Iterator[tuple[str, list[str]]]:
    """``(relative directory, file names)`` under ``top``, skipping internal directories."""
    for here, dirs, files in os.walk(top):
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]
        dirs[:] = sorted(d for d in dirs if d not in links and not skip_reason(d))
        rel = os.path.relpath(here, top)
        yield ("" if rel == "." else rel), sorted(files + links)


class _Pass:
    """What one sync pass shares between directories: what it saw, made and counted."""

    __slots__ = ("busy", "made", "now", "report", "settle", "top")

    def __init__(self, settle: float, top: str) -> None:
        self.top = top
        self.busy = open_for_writing()
        self.made: set[str] = set()
        self.now = time.time()
        self.settle = settle
        self.report = SyncReport()

    def candidate(self, src: str) -> os.stat_result | None:
        """The stat of ``src`` if it is a settled file or link to copy; counts it otherwise."""
        try:
            st = os.lstat(src)
        except FileNotFoundError:
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            self.report.skipped += 1  # whiteouts (character devices), sockets, fifos
            return None
        # The mtime, not the ctime: a file renamed into place is complete, whatever its ctime.
        recent = self.now - st.st_mtime < self.settle
        if recent or (st.st_dev, st.st_ino) in self.busy:
            self.report.unsettled += 1
            return None
        return st

    def count(self, outcome: str, size: int) -> None:
        """Count what one copy did."""
        if outcome == _COPIED:
            self.report.copied += 1
            self.report.copied_bytes += size
        elif outcome == _PRESENT:
            self.report.present += 1
        else:
            self.report.unsettled += 1


def sync(l1: str, l2: str, *, settle: float = SETTLE, workers: int = WORKERS) -> SyncReport:
    """Copy every complete file of ``l1`` that ``l2`` lacks to ``l2`` (see the module docs).

    ``workers`` files are copied at once: each copy waits for its own fsync (and, on a network
    volume, for round trips), and those waits overlap. Raises :class:`FileNotFoundError` when
    ``l2`` is not a directory (it is never created).
    """
    l2 = os.path.normpath(l2)
    if not os.path.isdir(l2):
        raise _root_gone(l2)
    state = _Pass(settle, l2)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cacheroot-sync") as pool:
        jobs: list[tuple[str, os.stat_result, Future[str]]] = []
        for rel, names in _walk(l1):
            jobs += _sync_dir(state, pool, os.path.join(l1, rel), os.path.join(l2, rel), names)
        published: set[str] = set()
        for dst, st, job in jobs:
            try:
                outcome = job.result()
            except OSError as exc:
                state.report.failed += 1
                log.warning("tier sync: %s not copied: %s", dst, exc.strerror or exc)
                continue
            state.count(outcome, st.st_size)
            if outcome == _COPIED:
                published.add(os.path.dirname(dst))
    # One fsync per directory makes its new names durable (each file was synced first).
    for directory in sorted(published):
        _store.fsync_dir(directory)
    return state.report


def _sync_dir(
    state: _Pass, pool: ThreadPoolExecutor, src_dir: str, dst_dir: str, names: list[str]
) -> list[tuple[str, os.stat_result, Future[str]]]:
    """Start copying what ``dst_dir`` lacks of ``names`` (in ``src_dir``)."""
    report = state.report
    try:
        there = set(os.listdir(dst_dir))
    except FileNotFoundError:
        there = set()
    cleaned = False
    jobs: list[tuple[str, os.stat_result, Future[str]]] = []
    for name in names:
        if skip_reason(name):
            report.skipped += 1
            continue
        if name in there:
            report.present += 1
            continue
        src = os.path.join(src_dir, name)
        st = state.candidate(src)
        if st is None:
            continue
        try:
            _ensure_dir(os.path.normpath(dst_dir), state.made, state.top)
            if not cleaned:
                _store.remove_abandoned(dst_dir)
                cleaned = True
        except OSError as exc:
            report.failed += 1
            log.warning("tier sync: cannot create %s: %s", dst_dir, exc.strerror or exc)
            return jobs
        dst = os.path.join(dst_dir, name)
        jobs.append((dst, st, pool.submit(_copy_one, src, dst, st)))
    return jobs


_COPIED, _PRESENT, _CHANGED = "copied", "present", "changed"


def _copy_one(src: str, dst: str, st: os.stat_result) -> str:
    """Publish ``src`` at ``dst`` unless something is there (a link as a link)."""
    if stat.S_ISLNK(st.st_mode):
        tmp = _store.partial_path(dst)
        os.symlink(os.readlink(src), tmp)
        return _COPIED if publish_new(tmp, dst, durable=False) else _PRESENT
    try:
        won = copy_new(src, dst, durable=False)
    except FileExistsError:
        return _PRESENT
    if won is None:
        return _CHANGED  # written while copied: the next sync takes it
    return _COPIED if won else _PRESENT


def watch(l1: str, l2: str, every: float, stop: threading.Event, *, settle: float = SETTLE) -> int:
    """:func:`sync` every ``every`` seconds until ``stop`` is set; returns the passes made.

    A pass that finds L2's root gone (the volume unmounted under the run) is logged and the
    next one tries again: the watchdog outlives a volume's hiccup.
    """
    passes = 0
    while True:
        try:
            report = sync(l1, l2, settle=settle)
        except FileNotFoundError as exc:
            log.warning("tier sync pass %d: %s: %s", passes + 1, exc.filename, exc.strerror)
        else:
            log.info("tier sync pass %d: %s", passes + 1, report)
        passes += 1
        if stop.wait(every):
            return passes


# -- seeding ----------------------------------------------------------------------------------


class SeedReport:
    """What :func:`seed` copied, and what it left on L2 for want of room."""

    __slots__ = ("copied", "copied_bytes", "left", "left_bytes", "present")

    def __init__(self) -> None:
        self.copied = 0
        self.copied_bytes = 0
        self.present = 0
        self.left = 0
        self.left_bytes = 0

    def __str__(self) -> str:
        return (
            f"seeded {self.copied} files ({self.copied_bytes} bytes); {self.present} already "
            f"there; {self.left} ({self.left_bytes} bytes) left on the shared tier (budget)"
        )


def _last_used(path: str, st: os.stat_result) -> float:
    """The newest of the access and modification times, and of cacheroot's record of use."""
    when = max(st.st_atime, st.st_mtime)
    with contextlib.suppress(OSError):
        when = max(when, os.stat(used_path(path)).st_mtime)
    return when


def _usage(top: str) -> int:
    total = 0
    for here, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total


def _survey(l2: str) -> tuple[list[tuple[float, str, int]], list[str]]:
    """``l2``'s files as ``(last used, relative path, size)``, most recent first, and its
    links' relative paths."""
    files: list[tuple[float, str, int]] = []
    links: list[str] = []
    for rel, names in _walk(l2):
        for name in names:
            path = os.path.join(l2, rel, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if skip_reason(name):
                continue
            if stat.S_ISLNK(st.st_mode):
                links.append(os.path.join(rel, name))
            elif stat.S_ISREG(st.st_mode):
                files.append((_last_used(path, st), os.path.join(rel, name), st.st_size))
    files.sort(key=lambda f: (-f[0], f[1]))
    return files, links


def seed(
    l2: str, l1: str, *, max_size: int | None = None, min_free: int | None = None
) -> SeedReport:
    """Copy ``l2``'s files to ``l1``, most recently used first, while ``l1`` stays within
    ``max_size`` bytes in all and its file system keeps ``min_free`` bytes free.

    Links are copied as links, after the files, and only where their target is there (a Hugging
    Face snapshot links into its blobs). Files ``l1`` already has are left alone.
    """
    report = SeedReport()
    files, links = _survey(l2)
    used = _usage(l1) if max_size is not None else 0
    made: set[str] = set()
    for _when, rel, size in files:
        dst = os.path.join(l1, rel)
        if os.path.lexists(dst):
            report.present += 1
            continue
        if not _room(l1, used, size, max_size, min_free):
            report.left += 1
            report.left_bytes += size
            continue
        try:
            _ensure_dir(os.path.dirname(dst), made)
            if copy_new(os.path.join(l2, rel), dst):
                report.copied += 1
                report.copied_bytes += size
                used += size
        except OSError as exc:  # evicted meanwhile, or L1 full: the run fetches it instead
            log.info("tier seed: %s not copied: %s", rel, exc.strerror or exc)
    for rel in links:
        _seed_link(os.path.join(l2, rel), os.path.join(l1, rel))
    return report


def _seed_link(src: str, dst: str) -> None:
    with contextlib.suppress(OSError):
        target = os.readlink(src)
        if os.path.lexists(dst) or not os.path.exists(os.path.join(os.path.dirname(dst), target)):
            return
        tmp = _store.partial_path(dst)
        os.symlink(target, tmp)
        publish_new(tmp, dst)


def _room(l1: str, used: int, size: int, max_size: int | None, min_free: int | None) -> bool:
    if max_size is not None and used + size > max_size:
        return False
    if min_free is not None:
        st = os.statvfs(l1)
        if st.f_bavail * st.f_frsize - size < min_free:
            return False
    return True


# -- the merged view --------------------------------------------------------------------------


def overlay_supported(filesystems: str = "/proc/filesystems") -> bool:
    """Whether this kernel knows OverlayFS (mounting it may still be refused: privileges)."""
    try:
        with open(filesystems, encoding="ascii") as f:
            return any(line.split()[-1:] == ["overlay"] for line in f)
    except OSError:
        return False


def work_dir(l1: str) -> str:
    """The overlay's work directory for the upper layer ``l1``: beside it, on the same disk."""
    head, name = os.path.split(os.path.normpath(l1))
    return os.path.join(head, f".{name}{WORK_SUFFIX}")


def _mount_overlay(l1: str, l2: str, merged: str, work: str) -> str:
    """Mount the overlay; ``""`` on success, else why it could not be."""
    if not overlay_supported():
        return "this kernel has no OverlayFS (not in /proc/filesystems)"
    for path in (l1, l2, work):
        if any(c in path for c in ",:\\"):
            return f"{path!r} contains ',', ':' or '\\', which overlay mount options cannot hold"
    os.makedirs(work, exist_ok=True)
    if os.stat(work).st_dev != os.stat(l1).st_dev:
        return (
            f"the work directory {work} is not on the same file system as {l1} (is {l1} a mount "
            "point? pass --work DIR on its disk, or set CACHEROOT to a directory inside it)"
        )
    options = f"lowerdir={l2},upperdir={l1},workdir={work}"
    done = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, merged],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return " ".join((done.stderr or done.stdout).split()) or f"mount exited {done.returncode}"
    return ""


def up(
    l1: str,
    l2: str,
    merged: str,
    *,
    mode: str = "auto",
    work: str | None = None,
    max_size: int | None = None,
    min_free: int | None = None,
) -> tuple[str, str]:
    """Show ``l2`` under ``l1`` at ``merged``: ``("overlay", "")``, or ``("seed", why)`` after
    seeding ``l1`` and linking ``merged`` to it.

    ``mode``: ``auto`` (overlay, else seed), ``overlay`` (raise :class:`OSError` if it cannot),
    ``seed``. ``merged`` must be absent or an empty directory. ``l1`` is made if need be, ``l2``
    never (:class:`FileNotFoundError`).
    """
    if not os.path.isdir(l2):
        raise _root_gone(l2)
    os.makedirs(l1, exist_ok=True)
    if os.path.islink(merged) or os.path.ismount(merged):
        raise OSError(f"{merged} is already up (a link or a mount point): run `tier down` first")
    if os.path.isdir(merged) and os.listdir(merged):
        raise OSError(f"{merged} is a directory that is not empty: the merged view needs its own")
    why = "seeding asked for (--mode seed)"
    if mode != "seed":
        os.makedirs(merged, exist_ok=True)
        why = _mount_overlay(l1, l2, merged, work or work_dir(l1))
        if not why:
            return "overlay", ""
        if mode == "overlay":
            raise OSError(f"cannot mount the overlay at {merged}: {why}")
        log.info("tier up: no overlay (%s); seeding %s from %s", why, l1, l2)
    report = seed(l2, l1, max_size=max_size, min_free=min_free)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(merged)
    os.symlink(os.path.abspath(l1), merged)
    return "seed", f"{why}; {report}"


def down(merged: str) -> str:
    """Undo :func:`up` at ``merged``: unmount the overlay or remove the link; says which."""
    if os.path.islink(merged):
        os.unlink(merged)
        return "link removed"
    if os.path.ismount(merged):
        done = subprocess.run(
            ["umount", merged],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"cannot unmount {merged}: {(done.stderr or done.stdout).strip()}")
        with contextlib.suppress(OSError):
            os.rmdir(merged)
        return "overlay unmounted"
    return "nothing was up"
