"""A cross-process lock on a path that only makes concurrent callers single-flight.

Nothing relies on it for correctness: every writer writes its own partial file and publishes it
with ``os.replace``, so where locks do not work (some NFS and Lustre mounts grant every
process) the worst case is a duplicate download. What the lock must do well is not to hang:

- waiting has a timeout and raises :class:`LockTimeout` naming the holder;
- the holder writes who it is (pid, machine, process start time) into a sidecar
  ``<lock>.holder``; a waiter that finds the same record, naming a holder dead on this machine,
  at two checks half a second apart reclaims the lock by unlinking the lock file (the second
  look keeps it from breaking the lock of a new holder that has not yet written its record).
  So a lock kept alive by a descriptor leaked into an orphaned child, or a soft lock left
  behind by a crash, does not block anyone.
- "dead" must be certain (:func:`cacheroot.fetch._proc.alive`): a holder in another pid
  namespace, or behind a ``/proc`` that hides it (``hidepid=``, or the procfs of another pid
  namespace), is of unknown state, and its lock is never broken early: the waiter waits for it
  up to the timeout, whose :class:`LockTimeout` names the holder and why it could not be judged.

In a setgid directory (a volume shared by a group, see :mod:`._store`) the lock file and the
holder record are created group-writable, so that every member of the group can take the lock.

The lock file and the holder record are names on a volume other jobs write: the record is read
and written with ``O_NOFOLLOW | O_NONBLOCK`` (:func:`cacheroot.fetch._store.open_regular`), read
only once ``fstat`` says it is small (:data:`cacheroot.fetch._store.MAX_RECORD`), and a
link, FIFO or device planted under either name is removed before the lock is taken, so that no
open follows it (older filelock releases open the lock file with ``O_TRUNC``, through a link) and
no read waits on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from typing import TYPE_CHECKING

from . import _proc
from ._errors import LockTimeout
from ._redact import printable
from ._store import SHARED_FILE, open_regular, read_json, remove_planted, share, shared

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    import filelock

#: How often a waiter first tries the lock itself (seconds); the interval grows by half per
#: failed attempt up to :data:`POLL_MAX`, so a crowd of waiters costs little CPU.
POLL = 0.05
POLL_MAX = 0.5
#: How often a waiter asks ``done()`` (one ``os.stat`` for a fetch): waiters notice a
#: published file within this, without queueing for the lock. The interval grows with the wait
#: (a twentieth of it, up to :data:`TICK_MAX`), so noticing costs at most about 5 % of the wait
#: and a crowd of waiters on a long download wakes a few times a second, not forty.
TICK = 0.025
TICK_MAX = 0.25
#: Whether the system has ``flock`` (every POSIX one): then :class:`_Flock`, else filelock's.
_FLOCK = os.name == "posix"
#: How often a waiter checks whether the recorded holder died (reads ``/proc``).
RECLAIM_EVERY = 0.5


def holder(lock_path: str) -> dict[str, object] | None:
    """The record the current holder of ``lock_path`` wrote, or ``None`` when there is none
    (or it is damaged: not JSON, or too large to be one, which is never read)."""
    return read_json(lock_path + ".holder")


def _describe(record: dict[str, object] | None) -> str:
    if record is None:
        return ""
    since = record.get("since")
    age = f", for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
    where = str(record.get("machine", "?")).split("|", 1)[0]
    why = _proc.unknown_reason(record)
    state = f" (whether it still runs cannot be checked from here: {why})" if why else ""
    # Every field is the holder's word, written to a volume other jobs share: shown escaped.
    return printable(f"pid {record.get('pid')} on {where}{age}{state}")


class PathLock:
    """An exclusive lock on ``path`` (a file named ``path`` is created for it).

    ``timeout`` is how long :meth:`acquire` waits, in seconds (``None``: forever). The lock is
    not reentrant and not shared between threads: each thread that needs it creates its own
    :class:`PathLock`, and threads of one process exclude each other as processes do.
    """

    def __init__(self, path: str, *, timeout: float | None = 1800.0, poll: float = POLL) -> None:
        self.path = path
        self.timeout = timeout
        self.poll = poll
        self.waited = 0.0
        self._lock: _Flock | filelock.BaseFileLock | None = None
        self._suspect: dict[str, object] | None = None

    def _new(self) -> _Flock | filelock.BaseFileLock:
        if _FLOCK:
            return _Flock(self.path)
        import filelock  # noqa: PLC0415 - a hit never locks; keep filelock off its import path

        if shared(os.path.dirname(self.path)):
            # filelock's own default is the umask (or a fixed 0o644): unusable for the group.
            return filelock.FileLock(
                self.path, mode=SHARED_FILE, thread_local=False, is_singleton=False
            )
        return filelock.FileLock(self.path, thread_local=False, is_singleton=False)

    def acquire(self, done: Callable[[], bool] | None = None) -> bool:
        """Take the lock and return ``True``; raise :class:`LockTimeout` after ``timeout``.

        ``done`` is asked between attempts; once it returns true the wait ends without the lock
        and ``False`` is returned (a waiter whose file the holder has just published need not
        queue for the lock only to find it there). :attr:`waited` says how long it took.
        """
        from filelock import Timeout  # noqa: PLC0415 - see _new (and what _Flock raises)

        start = time.monotonic()
        deadline = None if self.timeout is None else start + self.timeout
        remove_planted(self.path)
        remove_planted(self.path + ".holder")
        lock = self._new()
        next_try, next_reclaim, interval = start, start + RECLAIM_EVERY, self.poll
        while True:
            now = time.monotonic()
            if now >= next_try:
                try:
                    lock.acquire(blocking=False)
                    break
                except Timeout:
                    next_try = now + interval
                    interval = min(interval * 1.5, max(self.poll, POLL_MAX))
            if done is not None and done():
                self.waited = time.monotonic() - start
                return False
            if now >= next_reclaim:
                next_reclaim = now + RECLAIM_EVERY
                if self._reclaim():
                    lock, next_try, interval = self._new(), now, self.poll
                    continue
            if deadline is not None and now >= deadline:
                self.waited = now - start
                raise LockTimeout(self.path, self.timeout or 0.0, _describe(holder(self.path)))
            wake = next_try if done is None else now + min(TICK_MAX, max(TICK, (now - start) / 20))
            if deadline is not None:
                wake = min(wake, deadline)
            time.sleep(max(0.001, wake - time.monotonic()))
        self._lock = lock
        self.waited = time.monotonic() - start
        self._write_holder()
        return True

    def _write_holder(self) -> None:
        record = {**_proc.me(), "since": time.time()}
        tmp = f"{self.path}.holder.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(
                open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w", encoding="utf-8"
            ) as f:
                share(f.fileno(), os.path.dirname(self.path))
                json.dump(record, f)
            os.replace(tmp, self.path + ".holder")
        except OSError:
            # The sidecar only helps others recover from our death; never fail the caller.
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _reclaim(self) -> bool:
        """Break the lock if its recorded holder is dead on this machine; say whether we did."""
        record = holder(self.path)
        suspect, self._suspect = self._suspect, record
        if record is None or _proc.alive(record) is not False:
            return False
        if record != suspect:
            # Seen dead once: a new holder may have the lock and not yet have written its
            # record. Act only if the same record is still there at the next check.
            return False
        # Claim the stale record by renaming it: of several waiters, exactly one succeeds.
        claimed = f"{self.path}.holder.{uuid.uuid4().hex[:8]}.stale"
        try:
            os.rename(self.path + ".holder", claimed)
        except OSError:
            return False
        same = read_json(claimed) == record
        if not same:
            # A new holder replaced the record in between: give it back and keep waiting.
            with contextlib.suppress(OSError):
                os.replace(claimed, self.path + ".holder")
            return False
        for stale in (self.path, claimed):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        return True

    def release(self) -> None:
        """Let the next waiter in (the holder record goes first, then the lock itself)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path + ".holder")
        lock.release(force=True)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._lock is not None

    def __enter__(self) -> PathLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class _Flock:
    """An ``flock`` on the file at ``path``, which is opened by that very path, without following
    a link and without blocking on a FIFO.

    The callers name the lock through the directory they hold (``/proc/self/fd/N/.<entry>.lock``,
    :func:`cacheroot.fetch._shared.held_path`), which no rename or link above that directory can
    redirect. filelock 4 resolves a lock's path to its current name first (``realpath``) and
    opens that: a directory swapped for a link between the two steps had root create the lock
    file, and the directories on its way, wherever the link led. This lock keeps the path as
    given; where the system has no ``flock``, filelock's own lock is used.
    """

    __slots__ = ("fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self, *, blocking: bool = False) -> None:
        """Take the lock now or raise ``filelock.Timeout`` (it is never waited for here)."""
        import fcntl  # noqa: PLC0415 - POSIX only, as this class

        from filelock import Timeout  # noqa: PLC0415 - the error PathLock already handles

        del blocking
        try:
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            made = True
        except FileExistsError:
            fd, made = open_regular(self.path, os.O_RDWR), False
        try:
            st = os.fstat(fd)
            if made:
                share(fd, os.path.dirname(self.path))
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A lock on a file unlinked meanwhile (a reclaim, a prune) excludes nobody: the
            # lock is ours only if the file is still the one at its name.
            now = os.stat(self.path, follow_symlinks=False)
        except BlockingIOError:
            os.close(fd)
            raise Timeout(self.path) from None
        except FileNotFoundError:
            os.close(fd)
            raise Timeout(self.path) from None
        except BaseException:
            os.close(fd)
            raise
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise Timeout(self.path)
        self.fd = fd

    def release(self, *, force: bool = False) -> None:
        """Let go of the lock (closing the file releases the ``flock``)."""
        del force
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
