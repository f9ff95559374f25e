"""A lease on the shared tier: one host of a fleet fetches a missing entry, the others wait.

Locks do not cross hosts on the volumes fleets share: ``flock`` on NFS may exclude only the
processes of one client, and FUSE file systems (sshfs) keep locks on the client. A lease needs
only what they all do: create a file unless it exists, replace a file, read it back. The holder
writes ``.<name>.lease`` beside the entry with an identity record and rewrites it every
:data:`BEAT` seconds from a heartbeat thread; a waiter on another host that sees the same record
for :data:`STALE_AFTER` seconds of its *own* clock takes the lease over (its holder died, or its
host lost the volume). Judging staleness by "unchanged while I watched" rather than by
timestamps keeps clocks out of it: hosts disagree about the time, and file times on a network
volume come from the server.

Nothing depends on the lease for correctness: publishing is always a private temporary file,
a rename and a digest check, so two hosts that both believe they hold it (a takeover racing a
slow heartbeat) only download twice.

The lease's name is on a volume other jobs write: it is read with ``O_NOFOLLOW | O_NONBLOCK``
(:func:`cacheroot.fetch._store.open_regular`), and a link, FIFO or device planted under it is
removed at once (the name is ours) instead of being read, followed, or waited on. The lease's
directory is opened once, when the :class:`Lease` is made, and held: every name is then created,
read, renamed and removed in that very directory (:mod:`cacheroot.fetch._held`), so that a
directory renamed away and replaced by a link meanwhile leads nowhere else.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import stat
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Literal

from . import _held, _store

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

__all__ = ["BEAT", "STALE_AFTER", "Lease", "lease_path"]

log = logging.getLogger("cacheroot.fetch")

#: How often a holder rewrites its lease (seconds).
BEAT = 2.0
#: How long a lease may stay unchanged, as a waiter watches it, before the waiter takes it over
#: (seconds). Several beats, so that a holder slowed by a loaded volume is not taken for dead.
STALE_AFTER = 20.0
#: How often a waiter looks at first (seconds); the interval grows by half up to :data:`POLL_MAX`.
POLL = 0.05
POLL_MAX = 0.5

Outcome = Literal["held", "done", "timeout"]


def lease_path(entry: str) -> str:
    """The lease file of the shared-tier entry ``entry``."""
    head, name = os.path.split(entry)
    return os.path.join(head, f".{name}.lease")


def _read(dir_fd: int, name: str, label: str) -> bytes | None:
    """The bytes of the lease ``name`` in the directory held at ``dir_fd`` (``label``: its path,
    for the log), ``None`` when there is none (an empty file reads as ``b""``).

    A link, FIFO, socket or device there is removed and reads as none. What cannot be read
    as a lease reads as ``b""``, never read: a directory (not removed here) and a file with a
    second name (a hard link to a file of someone's choosing; a lease being created has two
    names for an instant too). A waiter watches it as it watches a lease that does not
    change, and takes it over (moves the name aside) once it has not changed for
    :data:`STALE_AFTER`: a planted one costs a wait, never a read and never an endless one.
    """
    try:
        fd, st = _store.open_regular_stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except _store.NotRegularFileError:
        if _is_dir(dir_fd, name):
            return b""
        _store.remove_planted(label, dir_fd=dir_fd)
        return None
    try:
        return os.read(fd, 4096) if st.st_nlink == 1 else b""
    finally:
        os.close(fd)


def _is_dir(dir_fd: int, name: str) -> bool:
    st = _held.lstat_quiet(name, dir_fd)
    return st is not None and stat.S_ISDIR(st.st_mode)


class Lease:
    """A lease on ``path`` (see the module docstring); usable as a context manager.

    ``beat`` and ``stale_after`` are in seconds; a holder must beat well within ``stale_after``.
    ``path``'s directory (the caller's, followed as given: a ``/proc/self/fd/N`` one is the
    directory held at ``N``) is opened here and held until the lease is collected; an
    :class:`OSError` when it cannot be opened.
    """

    def __init__(self, path: str, *, beat: float | None = None, stale_after: float | None = None):
        self._path = path
        self.beat = BEAT if beat is None else beat
        self.stale_after = STALE_AFTER if stale_after is None else stale_after
        self.token = uuid.uuid4().hex
        #: True once another host took the lease over from this holder.
        self.lost = False
        #: Leases this waiter took over from holders that had stopped beating.
        self.taken_over = 0
        self._count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dir = _held.subdir(None, os.path.dirname(path) or ".", follow=True)
        self._close_dir = weakref.finalize(self, os.close, self._dir)

    @property
    def path(self) -> str:
        """The lease's path as the caller gave it (fixed: its directory is held)."""
        return self._path

    @property
    def _name(self) -> str:
        """The lease's name in the held directory."""
        return os.path.basename(self.path)

    def _label(self, name: str) -> str:
        """The path of ``name`` in the lease's directory as the caller named it (for the log)."""
        return os.path.join(os.path.dirname(self.path), name)

    # -- holding -----------------------------------------------------------------------------
    def _record(self) -> bytes:
        self._count += 1
        return json.dumps(
            {
                "token": self.token,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "beat": self._count,
                "time": time.time(),
            },
            sort_keys=True,
        ).encode()

    def _write_partial(self) -> str:
        """A new partial file holding the next record; its name in the held directory."""
        tmp = os.path.basename(_store.partial_path(self.path))
        fd = _store.open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd=self._dir)
        try:
            _store.share(fd, "", dir_fd=self._dir)
            os.write(fd, self._record())
        finally:
            os.close(fd)
        return tmp

    def _create(self) -> bool:
        """Create the lease unless one exists; True when this process now holds it.

        ``link`` publishes a complete record in one step and fails if the name exists; where a
        file system has no hard links, ``O_EXCL`` does (a reader may then see it empty for an
        instant, which only counts as one more unchanged look).
        """
        tmp = self._write_partial()
        try:
            _held.link(self._dir, tmp, self._dir, self._name)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            return self._create_exclusive()
        finally:
            _held.remove(self._dir, tmp, directory=False)
        return True

    def _create_exclusive(self) -> bool:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            fd = _store.open_regular(self._name, flags, dir_fd=self._dir)
        except FileExistsError:
            return False
        try:
            _store.share(fd, "", dir_fd=self._dir)
            os.write(fd, self._record())
        finally:
            os.close(fd)
        return True

    def _mine(self) -> bool:
        raw = _read(self._dir, self._name, self.path)
        try:
            return raw is not None and json.loads(raw).get("token") == self.token
        except (ValueError, AttributeError):
            return False

    def _refresh(self) -> None:
        """Rewrite the record (a new beat) if the lease is still this holder's."""
        if not self._mine():
            self.lost = True
            log.info("lease %s was taken over by another host; carrying on", self.path)
            return
        tmp = self._write_partial()
        try:
            _held.rename(self._dir, tmp, self._name)
        except OSError:
            _held.remove(self._dir, tmp, directory=False)
            raise

    def _beat(self) -> None:
        while not self._stop.wait(self.beat) and not self.lost:
            self._refresh_quietly()

    def _refresh_quietly(self) -> None:
        try:
            self._refresh()
        except OSError as exc:  # a volume that hiccups: the next beat tries again
            log.debug("lease %s: heartbeat failed: %s", self.path, exc)

    def _hold(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="cacheroot-lease", daemon=True)
        self._thread.start()

    # -- waiting -----------------------------------------------------------------------------
    def acquire(
        self, *, done: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> Outcome:
        """Wait for the lease: ``"held"``, or ``"done"`` once ``done()`` is true, or
        ``"timeout"`` after ``timeout`` seconds (the caller may go ahead without it)."""
        started = time.monotonic()
        seen: bytes | None = None
        since = started
        poll = POLL
        while True:
            if done is not None and done():
                return "done"
            if self._create():
                self._hold()
                return "held"
            now = time.monotonic()
            current = _read(self._dir, self._name, self.path)
            if current is None and (timeout is None or now - started < timeout):
                continue  # released just now: try again at once
            if current != seen:
                seen, since = current, now
            elif current is not None and now - since >= self.stale_after:
                self._take_over(current)
                seen, since = None, time.monotonic()
                continue
            if timeout is not None and now - started >= timeout:
                return "timeout"
            time.sleep(poll)
            poll = min(poll * 1.5, POLL_MAX)

    def _take_over(self, stale: bytes) -> None:
        """Move a lease that stopped beating aside, so that the next create can succeed.

        The rename makes the takeover one host's; if what was moved is not the record watched
        (its holder beat, or a new holder came, in between), it is put back.
        """
        aside = os.path.basename(_store.partial_path(self.path)) + ".stale"
        try:
            _held.rename(self._dir, self._name, aside)
        except FileNotFoundError:
            return
        try:
            if _read(self._dir, aside, self._label(aside)) == stale:
                log.info(
                    "took over the lease %s, unchanged for %.0f s", self.path, self.stale_after
                )
                self.taken_over += 1
                return
            with contextlib.suppress(OSError):
                _held.link(self._dir, aside, self._dir, self._name)
        finally:
            _held.remove(self._dir, aside, directory=False)

    def release(self) -> None:
        """Stop beating and remove the lease if it is still this holder's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._mine():
            _held.remove(self._dir, self._name, directory=False)

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
        self._close_dir()  # done with: its directory need not wait for the collector
