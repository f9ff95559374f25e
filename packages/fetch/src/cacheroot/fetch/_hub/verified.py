"""Which stored files the hub checked itself, so that serving one does not hash it again.

The store is on a volume other jobs write, so a stored file is checked against its digest
before this process first serves it (a planted or damaged file is removed and fetched again).
Hashing a multi-gigabyte file takes seconds, and the file the hub published itself was checked
as its bytes arrived: hashing it again on its first serve, or on the first serve after a
restart, would only make that client wait.

So the hub records each file it checked, as it is on disk: ``(device, inode, size, ctime)``.
The ctime is set by the kernel on any change of the file (its bytes, its mode, a rename, a
stamp) and cannot be set back by anyone, so a file rewritten, or swapped for another (a new
inode; or a reused inode number, with a new ctime), no longer matches its record and is checked
again. The records are kept in memory for this process and on disk in ``verified/`` under the
store, one file per digest, so that a restarted hub (or another hub process of the same user on
the store) trusts them too. Only records in a directory that this user owns and that neither
its group nor others may write are believed: a record anyone else could have written would
let them vouch for a file they planted. Elsewhere (a store whose directories are
group-writable) the records on disk are ignored and each process checks a file on its first
serve, as before.

Each serve stamps the file as used (its mtime, what ``hub prune`` goes by); that moves its
ctime, so the stamp and the new record are made together (:meth:`Verified.stamp`).
"""

from __future__ import annotations

import contextlib
import os
import stat

from .. import _held, _store
from .store import publish_at

__all__ = ["Verified"]

#: The directory of the records, under the store's root.
DIRECTORY = "verified"
#: A record's most bytes (four integers).
_MAX = 256

_Identity = tuple[int, int, int, int]


def _identity(st: os.stat_result) -> _Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)


class Verified:
    """The stored files checked against their digest by this user's hubs (module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._seen: set[_Identity] = set()

    def trusted(self, fd: int, name: str) -> bool:
        """Whether the file open at ``fd`` (the blob ``name``) is, unchanged, one this user's
        hub checked."""
        found = _identity(os.fstat(fd))
        if found in self._seen:
            return True
        if self._read(name) != found:
            return False
        self._seen.add(found)
        return True

    def stamp(self, fd: int, name: str) -> None:
        """Stamp the checked file open at ``fd`` (the blob ``name``) as used, and record it as
        it is after the stamp. A stamp or record that fails only costs a later check."""
        before = _identity(os.fstat(fd))
        with contextlib.suppress(OSError):
            _held.stamp(fd)
        after = _identity(os.fstat(fd))
        self._seen.discard(before)
        self._seen.add(after)
        with contextlib.suppress(OSError):
            self._write(name, after)

    def forget(self, fd: int) -> None:
        """The file open at ``fd`` failed its check: never trust it from memory again."""
        with contextlib.suppress(OSError):
            self._seen.discard(_identity(os.fstat(fd)))

    # -- on disk ----------------------------------------------------------------------------
    def _directory(self) -> int | None:
        """A descriptor of the records' directory, if it is one only this user may write
        (made so if missing, or if this user owns it); ``None`` otherwise."""
        try:
            dfd = _held.tree(self.root, DIRECTORY, create=True)
        except OSError:
            return None
        try:
            st = os.fstat(dfd)
            if st.st_uid != os.geteuid():
                os.close(dfd)
                return None
            if stat.S_IMODE(st.st_mode) & 0o022:
                os.fchmod(dfd, 0o755)
        except OSError:
            os.close(dfd)
            return None
        return dfd

    def _read(self, name: str) -> _Identity | None:
        dfd = self._directory()
        if dfd is None:
            return None
        try:
            fd, st = _store.open_regular_stat(name, dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        try:
            # A record with another name (a hard link) could be any file: never read.
            if st.st_uid != os.geteuid() or st.st_size > _MAX or st.st_nlink != 1:
                return None
            fields = os.read(fd, _MAX).split()
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(fields) != 4 or not all(f.isdigit() for f in fields):
            return None
        dev, ino, size, ctime = (int(f) for f in fields)
        return dev, ino, size, ctime

    def _write(self, name: str, found: _Identity) -> None:
        dfd = self._directory()
        if dfd is None:
            return
        try:
            # Not synced: a record lost to a crash only costs a check on the next serve.
            publish_at(dfd, name, b"%d %d %d %d\n" % found, sync=False)
        finally:
            os.close(dfd)
