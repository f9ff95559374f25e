"""Two tiers for the caches that libraries write themselves (Hugging Face, Triton, Inductor, ...).

cacheroot's own entries go through the shared tier file by file (:mod:`.._shared`). The other
caches of the layout are written by their libraries, which know nothing of tiers, so the tiers
are joined around the run instead:

- :func:`.view.up` shows the shared tier (L2) under the host's root (L1) as one tree: an
  OverlayFS mount with L2 as the read-only lower layer and L1 as the upper one, where the kernel
  and the privileges allow it; otherwise :func:`seed` copies L2's most recently used files into
  L1, within L1's budget and free-space headroom, and the merged path is a link to L1;
- :func:`sync` pushes what the run added to L1 (the overlay's upper layer) to L2, file by file;
- :func:`.view.down` undoes :func:`.view.up`.

What :func:`sync` copies is only ever a complete file: it skips partial downloads
(``*.incomplete``, cacheroot's partials), locks and leases, overlay whiteouts, files changed in
the last :data:`SETTLE` seconds, and files a process on this host has open for writing; it
checks that the source did not change while it was copied. It never replaces a file that is
already on L2 (another host's copy is as complete as ours), and publishes each copy with a
private temporary file, an fsync, a hard link that fails if the name exists, and an fsync of
the directory. A sync killed at any point leaves only hidden partials (removed by the next sync
on the same host, or once abandoned for an hour by any host); running it again finishes the job.

Neither :func:`seed` nor :func:`sync` ever creates L2's root (see :mod:`.._shared`): a root that is
not there is an unmounted volume or a typo, and they raise :class:`FileNotFoundError` instead.

Both trees are written by other jobs, so neither is trusted. The walks open each directory without
following a link (:func:`os.fwalk`), directories on the other side are reached and made component by
component without following one either (:func:`.._shared.open_below`), a source is opened
``O_NOFOLLOW`` and must be the file of one name the walk saw (and hold the size its cacheroot record
gives, where it has one), a copy never gets a permission bit its source lacked, and a link is copied
only when its target stays inside the tree. Credential files (:data:`CREDENTIALS`: the hub's tokens,
netrc-like files) and what ``cacheroot cache verify`` quarantined are never copied.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import re
import stat
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from .. import _held, _store
from .._progress import counted
from .._shared import copy_new, fd_path, open_below, publish_new
from .._upkeep.in_use import open_for_writing
from .._used import used_path

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "CREDENTIALS",
    "SETTLE",
    "SeedReport",
    "SyncReport",
    "root_gone",
    "seed",
    "skip_reason",
    "sync",
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
#: Credential files of the layout's libraries (Hugging Face's ``token`` and ``stored_tokens``,
#: ModelScope's ``credentials`` directory and its ``git_token``) and netrc-like files: a job's
#: secrets, never copied to a tier that other jobs read.
CREDENTIALS = frozenset(
    {
        "token",
        "stored_tokens",
        "credentials",
        "git_token",
        ".netrc",
        "_netrc",
        ".git-credentials",
        ".pypirc",
    }
)
#: What ``cacheroot cache verify`` moved aside (corrupt entries): never copied between tiers.
_QUARANTINE = ".quarantine"
#: Files copied at once by one sync.
WORKERS = 8


def skip_reason(name: str) -> str:
    """Why a file or directory named ``name`` is never copied between tiers (``""``: it may)."""
    if name.endswith(_SKIP_SUFFIXES):
        return "partial, lock or lease"
    if _store.parse_partial(name) is not None or _SKIP_NAMES.match(name):
        return "partial or temporary"
    if name.startswith(".") and name.endswith(".used"):
        return "record of use (each tier keeps its own)"
    if name in CREDENTIALS:
        return "credentials (never shared)"
    if name == _QUARANTINE:
        return "quarantined (corrupt)"
    return ""


class SyncReport:
    """What one :func:`sync` pass did (counts and bytes), for the command's summary."""

    __slots__ = ("copied", "copied_bytes", "failed", "linked", "present", "skipped", "unsettled")

    def __init__(self) -> None:
        self.copied = 0
        self.copied_bytes = 0
        self.present = 0
        self.skipped = 0
        self.unsettled = 0
        self.failed = 0
        #: Files with more than one name, never read (see :meth:`_Pass.candidate`).
        self.linked = 0

    def __str__(self) -> str:
        linked = (
            f"; {counted(self.linked, 'file')} with several names not copied (a hard link "
            "may lead to anyone's file)"
            if self.linked
            else ""
        )
        return (
            f"copied {counted(self.copied, 'file')} ({counted(self.copied_bytes, 'byte')}); "
            f"{self.present} already there; {self.unsettled} still being written (next sync); "
            f"{self.skipped} partial or internal; {self.failed} failed{linked}"
        )


def root_gone(root: str) -> FileNotFoundError:
    return FileNotFoundError(
        errno.ENOENT,
        "the shared tier's root is not a directory (it is never created: mount the volume)",
        root,
    )


def _walk(top: str) -> Iterator[tuple[str, list[str], int]]:
    """``(relative directory, file names, its descriptor)`` under ``top``, skipping internal
    directories; no link is followed (one to a directory is listed as a file, to be copied as
    a link), and a directory swapped for a link during the walk is not entered."""
    for here, dirs, files, dfd in os.fwalk(top, follow_symlinks=False):
        links = [d for d in dirs if _is_link(d, dfd)]
        dirs[:] = sorted(d for d in dirs if d not in links and not skip_reason(d))
        rel = os.path.relpath(here, top)
        yield ("" if rel == "." else rel), sorted(files + links), dfd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return True  # gone meanwhile: not entered


def _inside(rel_dir: str, target: str) -> bool:
    """Whether a link in ``rel_dir`` (relative to its tree) to ``target`` stays in the tree."""
    if os.path.isabs(target):
        return False
    resolved = os.path.normpath(os.path.join(rel_dir, target))
    return resolved != ".." and not resolved.startswith(".." + os.sep)


class _Dir:
    """A directory pair some copies still work in: both descriptors, closed after the last."""

    __slots__ = ("copied", "dst", "left", "lock", "src")

    def __init__(self, src: int, dst: int) -> None:
        self.src = os.dup(src)
        self.dst = dst
        self.left = 1  # the submitter's own hold, dropped once it has submitted them all
        self.copied = False
        self.lock = threading.Lock()

    def hold(self) -> None:
        with self.lock:
            self.left += 1

    def drop(self, *, copied: bool = False) -> None:
        """One copy done (``copied``: it published a name, made durable by the last one)."""
        with self.lock:
            self.left -= 1
            self.copied = self.copied or copied
            last = self.left == 0
        if last:
            if self.copied:  # one fsync makes the directory's new names durable
                with contextlib.suppress(OSError):
                    os.fsync(self.dst)
            os.close(self.src)
            os.close(self.dst)


class _Pass:
    """What one sync pass shares between directories: what it saw and counted."""

    __slots__ = ("busy", "now", "report", "settle", "top")

    def __init__(self, settle: float, top: str) -> None:
        self.top = top
        self.busy = open_for_writing()
        self.now = time.time()
        self.settle = settle
        self.report = SyncReport()

    def candidate(self, name: str, dir_fd: int) -> os.stat_result | None:
        """The stat of ``name`` if it is a settled file or link to copy; counts it otherwise."""
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            self.report.skipped += 1  # whiteouts (character devices), sockets, fifos
            return None
        if stat.S_ISREG(st.st_mode) and st.st_nlink != 1:
            # Another name may be anywhere (a co-tenant's hard link to a root-only file): not
            # read. A cache that links its files legitimately (uv's into environments) keeps
            # them on this host; counted and said, not a failure.
            self.report.linked += 1
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


#: Copies a pass lets wait at once (each holds its directories open): bounds the descriptors.
_IN_FLIGHT = 256


def sync(l1: str, l2: str, *, settle: float = SETTLE, workers: int = WORKERS) -> SyncReport:
    """Copy every complete file of ``l1`` that ``l2`` lacks to ``l2`` (see the module docs).

    ``workers`` files are copied at once: each copy waits for its own fsync (and, on a network
    volume, for round trips), and those waits overlap. Raises :class:`FileNotFoundError` when
    ``l2`` is not a directory (it is never created).
    """
    l2 = os.path.normpath(l2)
    if not os.path.isdir(l2):
        raise root_gone(l2)
    state = _Pass(settle, l2)
    pending: collections.deque[tuple[str, os.stat_result, Future[str]]] = collections.deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cacheroot-sync") as pool:
        for rel, names, src_fd in _walk(l1):
            pending += _sync_dir(state, pool, src_fd, rel, names)
            while len(pending) > _IN_FLIGHT:
                _settle_one(state, *pending.popleft())
        while pending:
            _settle_one(state, *pending.popleft())
    return state.report


def _settle_one(state: _Pass, dst: str, st: os.stat_result, job: Future[str]) -> None:
    try:
        outcome = job.result()
    except OSError as exc:
        state.report.failed += 1
        log.warning("tier sync: %s not copied: %s", dst, exc.strerror or exc)
        return
    state.count(outcome, st.st_size)


def _listing(top: str, rel: str) -> tuple[int, set[str]]:
    """L2's directory ``rel``, open (``-1`` when it is not there yet), and the names in it.

    The partials of a writer that is gone are removed here, whether or not the directory needs
    a copy now: a sync killed between publishing a copy and removing its partial leaves one in a
    directory that may be complete.
    """
    try:
        fd = open_below(top, rel)
    except FileNotFoundError:
        return -1, set()
    try:
        there = set(os.listdir(fd))
        if any(_store.parse_partial(n) is not None for n in there):
            _store.remove_abandoned(fd_path(fd))
    except OSError:
        os.close(fd)
        raise
    return fd, there


def _sync_dir(
    state: _Pass, pool: ThreadPoolExecutor, src_fd: int, rel: str, names: list[str]
) -> list[tuple[str, os.stat_result, Future[str]]]:
    """Start copying what L2's ``rel`` lacks of ``names`` (in the directory open at ``src_fd``)."""
    report = state.report
    dst_dir = os.path.join(state.top, rel)
    try:
        dst_fd, there = _listing(state.top, rel)
    except OSError as exc:
        report.failed += 1
        log.warning("tier sync: %s not used: %s", dst_dir, exc.strerror or exc)
        return []
    held: _Dir | None = None
    jobs: list[tuple[str, os.stat_result, Future[str]]] = []
    try:
        for name in names:
            if skip_reason(name):
                report.skipped += 1
                continue
            if name in there:
                report.present += 1
                continue
            st = state.candidate(name, src_fd)
            if st is None:
                continue
            if held is None:
                try:
                    if dst_fd < 0:
                        dst_fd = open_below(state.top, rel, create=True)
                    _store.remove_abandoned(fd_path(dst_fd))
                except OSError as exc:
                    report.failed += 1
                    log.warning("tier sync: cannot create %s: %s", dst_dir, exc.strerror or exc)
                    return jobs
                held, dst_fd = _Dir(src_fd, dst_fd), -1
            held.hold()
            dst = os.path.join(dst_dir, name)
            jobs.append((dst, st, pool.submit(_copy_one, held, name, rel, st)))
    finally:
        if held is not None:
            held.drop()
        elif dst_fd >= 0:
            os.close(dst_fd)
    return jobs


_COPIED, _PRESENT, _CHANGED = "copied", "present", "changed"


def _copy_one(where: _Dir, name: str, rel: str, st: os.stat_result) -> str:
    """Publish ``name`` (a link as a link) in ``where`` unless something is there."""
    outcome = _CHANGED
    try:
        outcome = _copy_at(where.src, where.dst, name, rel, st)
    finally:
        where.drop(copied=outcome == _COPIED)
    return outcome


def _recorded_size(name: str, dir_fd: int, st: os.stat_result) -> int | None:
    """The size cacheroot's record beside the file ``name`` (in the directory held at
    ``dir_fd``; ``st``: what the walk saw) gives it, ``None`` where it has none.

    A tree others write may hold a sparse giant under an entry's name next to that entry's
    record, or a giant under a record's name: copying either whole would fill the other tier
    (``copy_file_range`` writes a hole's zeros out). Both raise :class:`OSError`, copying
    nothing: a file of another size than its record says, and a record larger than any record.
    """
    if name.startswith(".") and name.endswith(".meta.json"):
        if st.st_size > _store.MAX_RECORD:
            raise OSError(
                errno.EFBIG,
                f"a record of {st.st_size} bytes, over the {_store.MAX_RECORD}-byte limit of a "
                "record: damaged, not copied",
                name,
            )
        return None
    meta = _store.read_meta(name, dir_fd=dir_fd)
    size = None if meta is None else meta.get("size")
    if isinstance(size, bool) or not isinstance(size, int):
        return None
    if st.st_size != size:
        raise OSError(
            errno.EFBIG, f"holds {st.st_size} bytes, its record says {size}: not copied", name
        )
    return size


def _copy_at(src_fd: int, dst_fd: int, name: str, rel: str, st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=src_fd)
        if not _inside(rel, target):
            raise OSError(errno.EPERM, f"a link out of its tree ({target}): not copied", name)
        tmp = _store.partial_path(name)
        _held.symlink(dst_fd, target, tmp)
        return _COPIED if publish_new(tmp, name, durable=False, dir_fd=dst_fd) else _PRESENT
    size = _recorded_size(name, src_fd, st)
    try:
        won = copy_new(
            name, name, size=size, durable=False, src_dir_fd=src_fd, dst_dir_fd=dst_fd, expect=st
        )
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
            f"seeded {counted(self.copied, 'file')} ({counted(self.copied_bytes, 'byte')}); "
            f"{self.present} already there; {self.left} ({counted(self.left_bytes, 'byte')}) "
            "left on the shared tier (budget)"
        )


def _last_used(name: str, dir_fd: int, st: os.stat_result) -> float:
    """The newest of the access and modification times, and of cacheroot's record of use."""
    when = max(st.st_atime, st.st_mtime)
    with contextlib.suppress(OSError):
        used = os.stat(os.path.basename(used_path(name)), dir_fd=dir_fd, follow_symlinks=False)
        when = max(when, used.st_mtime)
    return when


def _usage(top: str) -> int:
    total = 0
    for here, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total


class _Found:
    """A file of L2 to seed: when it was used, where, how big, and what the walk saw."""

    __slots__ = ("rel", "st", "when")

    def __init__(self, when: float, rel: str, st: os.stat_result) -> None:
        self.when = when
        self.rel = rel
        self.st = st


def _survey(l2: str) -> tuple[list[_Found], list[str]]:
    """``l2``'s files, most recently used first, and its links' relative paths."""
    files: list[_Found] = []
    links: list[str] = []
    for rel, names, dfd in _walk(l2):
        for name in names:
            if skip_reason(name):
                continue
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                links.append(os.path.join(rel, name))
            elif stat.S_ISREG(st.st_mode):
                files.append(_Found(_last_used(name, dfd, st), os.path.join(rel, name), st))
    files.sort(key=lambda f: (-f.when, f.rel))
    return files, links


class _Dirs:
    """The directory pair of the last file seeded (most files share their directory)."""

    def __init__(self, l2: str, l1: str) -> None:
        self.l2, self.l1 = l2, l1
        self.rel: str | None = None
        self.fds = (-1, -1)

    def at(self, rel: str) -> tuple[int, int]:
        """Descriptors of ``rel`` on L2 and on L1 (made there as needed), links refused."""
        if rel != self.rel:
            self.close()
            src = open_below(self.l2, rel)
            try:
                dst = open_below(self.l1, rel, create=True)
            except BaseException:
                os.close(src)
                raise
            self.rel, self.fds = rel, (src, dst)
        return self.fds

    def close(self) -> None:
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.rel, self.fds = None, (-1, -1)


def seed(
    l2: str, l1: str, *, max_size: int | None = None, min_free: int | None = None
) -> SeedReport:
    """Copy ``l2``'s files to ``l1``, most recently used first, while ``l1`` stays within
    ``max_size`` bytes in all and its file system keeps ``min_free`` bytes free.

    Links are copied as links, after the files, and only where their target is there and stays
    inside the tree (a Hugging Face snapshot links into its blobs). Files ``l1`` already has are
    left alone. Directories on either side are reached without following a link.
    """
    report = SeedReport()
    _store.makedirs(l1)  # the operator's own L1
    files, links = _survey(l2)
    used = _usage(l1) if max_size is not None else 0
    dirs = _Dirs(l2, l1)
    try:
        for found in files:
            size = found.st.st_size
            if os.path.lexists(os.path.join(l1, found.rel)):
                report.present += 1
                continue
            if not _room(l1, used, size, max_size, min_free):
                report.left += 1
                report.left_bytes += size
                continue
            name = os.path.basename(found.rel)
            try:
                src_fd, dst_fd = dirs.at(os.path.dirname(found.rel))
                recorded = _recorded_size(name, src_fd, found.st)
                won = copy_new(
                    name,
                    name,
                    size=recorded,
                    src_dir_fd=src_fd,
                    dst_dir_fd=dst_fd,
                    expect=found.st,
                )
            except OSError as exc:  # evicted meanwhile, L1 full, or refused: fetched instead
                log.info("tier seed: %s not copied: %s", found.rel, exc.strerror or exc)
                continue
            if won:
                report.copied += 1
                report.copied_bytes += size
                used += size
        for rel in links:
            _seed_link(dirs, rel)
    finally:
        dirs.close()
    return report


def _seed_link(dirs: _Dirs, rel: str) -> None:
    head, name = os.path.split(rel)
    with contextlib.suppress(OSError):
        src_fd, dst_fd = dirs.at(head)
        target = os.readlink(name, dir_fd=src_fd)
        if not _inside(head, target) or not os.path.exists(fd_path(dst_fd, target)):
            return
        tmp = _store.partial_path(name)
        _held.symlink(dst_fd, target, tmp)
        publish_new(tmp, name, dir_fd=dst_fd)


def _room(l1: str, used: int, size: int, max_size: int | None, min_free: int | None) -> bool:
    if max_size is not None and used + size > max_size:
        return False
    if min_free is not None:
        st = os.statvfs(l1)
        if st.f_bavail * st.f_frsize - size < min_free:
            return False
    return True
