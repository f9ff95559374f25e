"""The media cache's locks: ``flock`` on files reached from its held directory descriptor.

The locks only spare duplicate downloads and keep two publishers from over-filling the bound
(correctness rests on atomic renames), so what they must do is never follow a planted name and
never hang. A lock file is opened relative to the held descriptor of its directory
(:mod:`._volume`), with ``O_NOFOLLOW | O_NONBLOCK``, and must be a regular file: a link, FIFO
or device under a lock's name is removed where the cache owns the directory, and otherwise the
lock is not taken (the caller then fetches without the cache). Nothing is ever read from or
written to a lock file, so its size, owner and links cannot matter; and the kernel drops a
``flock`` when its holder dies, so no record of the holder is kept for others to trust.

Waiting has a timeout (:class:`cacheroot.fetch.LockTimeout`, naming the lock's path on the
volume), and a waiter may stop early once ``done()`` says what it waits for is there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from typing import TYPE_CHECKING

from cacheroot.fetch import LockTimeout
from cacheroot.fetch.store import SHARED_FILE, NotRegularFileError, open_regular

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from ._volume import Directory

#: How often a waiter first tries the lock (seconds); the interval grows by half per failed
#: try up to :data:`POLL_MAX`, so a crowd of waiters costs little CPU.
POLL = 0.05
POLL_MAX = 0.5
#: How often a waiter asks ``done()``: a twentieth of its wait so far, within these bounds.
TICK = 0.025
TICK_MAX = 0.25


class DirLock:
    """An exclusive lock named ``name`` in ``directory`` (not reentrant; one per thread)."""

    def __init__(
        self, directory: Directory, name: str, *, timeout: float | None, poll: float = POLL
    ) -> None:
        self.directory = directory
        self.name = name
        self.timeout = timeout
        self.poll = poll
        self._fd: int | None = None

    @property
    def path(self) -> str:
        """The lock file's path on the volume (for messages)."""
        return self.directory.shown(self.name)

    def _open(self) -> int:
        """A descriptor of the lock file, made if missing (:class:`OSError` when impossible)."""
        dfd = self.directory.fd(create=True)
        for _ in range(2):
            try:
                fd = open_regular(self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL, dir_fd=dfd)
            except FileExistsError:
                pass
            else:
                if self.directory.shared():
                    with contextlib.suppress(OSError):
                        os.fchmod(fd, SHARED_FILE)  # ours: just made
                return fd
            try:
                return open_regular(self.name, os.O_RDWR, dir_fd=dfd)
            except FileNotFoundError:
                continue  # removed in between: make it again
            except NotRegularFileError:
                if not self.directory.remove_planted(self.name, None):
                    raise
        raise OSError(errno.EAGAIN, "the lock file keeps changing", self.path)

    def acquire(self, done: Callable[[], bool] | None = None) -> bool:
        """Take the lock and return ``True``; :class:`LockTimeout` after ``timeout``.

        ``done`` is asked between tries; once it returns true the wait ends without the lock
        and ``False`` is returned.
        """
        fd = self._open()
        start = time.monotonic()
        deadline = None if self.timeout is None else start + self.timeout
        next_try, interval = start, self.poll
        try:
            while True:
                now = time.monotonic()
                if now >= next_try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        next_try = now + interval
                        interval = min(interval * 1.5, max(self.poll, POLL_MAX))
                    else:
                        self._fd, fd = fd, -1
                        return True
                if done is not None and done():
                    return False
                if deadline is not None and now >= deadline:
                    raise LockTimeout(self.path, self.timeout or 0.0)
                wake = next_try
                if done is not None:
                    wake = now + min(TICK_MAX, max(TICK, (now - start) / 20))
                if deadline is not None:
                    wake = min(wake, deadline)
                time.sleep(max(0.001, wake - time.monotonic()))
        finally:
            if fd >= 0:
                os.close(fd)

    def release(self) -> None:
        """Let the next waiter in."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> DirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
