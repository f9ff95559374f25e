"""The entries on disk: consistent reads without a lock, and publishing under a size bound.

Layout of the cache directory::

    <key>.<ext>                 an entry's body (the response bytes, nothing else)
    .<key>.<ext>.meta.json      its record (cacheroot.fetch's sidecar format plus our fields)
    .lock                       the directory lock, held only to evict and publish
    .usage                      the ledger of bytes used (see ``Store._make_room``)
    .locks/<3 hex>.lock         striped per-key locks that make misses single-flight
    .<name>.<16 hex>.partial    a writer's file, renamed into place once complete

The directory may be on a volume other users write, and the cache may run as root
(:mod:`._volume`): it is reached once and held as a descriptor; every file is created under a
random name with ``O_EXCL | O_NOFOLLOW``, written, fsynced and renamed into place relative to
that descriptor; a body or record is read only if it is a regular file with one link, of a user
the volume trusts, and a record only once ``fstat`` says it is small. Anything else where an
entry or its record belongs (a link, a FIFO, a hard link, a sparse giant...) is a miss, never
followed, waited on or read: it is logged once, with the URL its record names (escaped: it is
another user's text), and removed when the cache owns the directory. The next download then
takes its place.

A reader opens the record, then the body, and compares the body's ``fstat`` with the
``(size, mtime_ns, inode)`` the record holds: a mismatch means a writer replaced one of the
two in between, and the read counts as a miss. Eviction unlinks files; a reader that has the
body open keeps reading the old inode, which POSIX keeps alive until it is closed, so eviction
can never corrupt a read in progress.

Recency for LRU is the body's access time, set through its descriptor (with the cache's clock)
after each read and at each publish, so ``noatime`` or ``relatime`` mounts do not matter and
no time is ever set through a name. Every regular file under the directory counts towards the
bound, locks and records included: what a ``du`` reports is what the bound holds.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from typing import Any

from cacheroot.fetch.store import MAX_RECORD, NotRegularFileError

from . import _policy, _volume
from ._lock import DirLock
from ._redact import one_line, shown
from ._volume import Directory, RefusedFileError, planted_kind

log = logging.getLogger("cacheroot.mediacache")

#: Body file names: the hex key plus an optional sanitised extension.
ENTRY = re.compile(r"^[0-9a-f]{64}(\.[a-z0-9]{1,10})?$")
_SIDECAR = re.compile(r"^\.(?P<name>[0-9a-f]{64}(\.[a-z0-9]{1,10})?)\.meta\.json$")
#: A generous allowance for the fields added to a record (sha256, stat, ...).
_META_EXTRA = 320
_LOCK_STRIPES = 3  # hex digits: 4096 lock files at most
_DIR_POLL = 0.002
_SCAN_TRIES = 20
#: The ledger of bytes used, the most it may hold, and how many stores may trust it before a
#: scan checks it.
_LEDGER = ".usage"
_LEDGER_MAX = 64
_RESCAN_EVERY = 1000
#: RefusedFileError names logged as warnings per cache (later ones, and repeats, are debug lines).
_TOLD_MAX = 1024
#: What a name may be refused with: :func:`cacheroot.fetch.store.open_regular`'s error for
#: anything but a regular file, and :class:`._volume.RefusedFileError` for the rest.
_PLANTED = (NotRegularFileError, RefusedFileError)


class Entry:
    """A stored response read consistently: its record and its body."""

    __slots__ = ("body", "expires_at", "headers", "meta")

    def __init__(self, meta: dict[str, Any], body: bytes) -> None:
        self.meta = meta
        self.body = body
        self.expires_at, self.headers = _policy.meta_fields(meta)

    @property
    def vary(self) -> dict[str, str | None]:
        """The request header values this variant was stored for."""
        vary = self.meta.get("vary")
        return {str(k): v for k, v in vary.items()} if isinstance(vary, dict) else {}


class BodyTooLarge(Exception):  # noqa: N818 - a signal to the cache, which raises its own error
    """A body on disk is larger than the caller's limit: nothing of it was read."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class Store:
    """The files of one cache directory (see the module docstring)."""

    def __init__(
        self, directory: str, *, max_size_bytes: int, low_water: float, lock_timeout: float
    ) -> None:
        self.directory = directory
        self.max_size_bytes = max_size_bytes
        self.low_water = low_water
        self.lock_timeout = lock_timeout
        self._dir = Directory(directory)
        self._locks = self._dir.child(".locks")
        self._told: set[str] = set()
        self._told_guard = threading.Lock()

    def path(self, name: str) -> str:
        """Where the body of entry ``name`` lives (for messages)."""
        return self._dir.shown(name)

    def spool_dir(self) -> int | None:
        """A descriptor of the directory for unnamed temporary files, or ``None``."""
        try:
            return self._dir.fd()
        except OSError:
            return None

    def key_lock(self, name: str) -> DirLock:
        """The cross-process lock that makes fetching ``name`` single-flight.

        Locks are striped by the key's first hex digits so that their number stays bounded; two
        URLs sharing a stripe only wait for each other, they never share an entry.
        """
        stripe = name[:_LOCK_STRIPES]
        return DirLock(self._locks, f"{stripe}.lock", timeout=self.lock_timeout)

    def dir_lock(self) -> DirLock:
        """The lock that serialises eviction and publishing within the directory."""
        # Held for a scan and a few unlinks only: waiters poll often rather than every 50 ms.
        return DirLock(self._dir, ".lock", timeout=self.lock_timeout, poll=_DIR_POLL)

    def read(self, name: str, *, now: float, limit: int | None = None) -> Entry | None:
        """The entry ``name`` if its body and record agree, else ``None``; marks it used.

        :class:`BodyTooLarge` when the body is larger than ``limit`` (nothing is read).
        """
        meta = self._record(name)
        if meta is None:
            return None
        try:
            fd, st = self._dir.open_file(name)
        except _PLANTED as exc:
            self._planted(name, exc, meta)
            return None
        except OSError:
            return None
        try:
            return self._read_body(name, fd, st, meta, now=now, limit=limit)
        finally:
            os.close(fd)

    def _read_body(
        self,
        name: str,
        fd: int,
        st: os.stat_result,
        meta: dict[str, Any],
        *,
        now: float,
        limit: int | None,
    ) -> Entry | None:
        """The entry whose body is open at ``fd`` (``fstat`` ``st``), if ``meta`` vouches for it."""
        triple = [st.st_size, st.st_mtime_ns, st.st_ino]
        if meta.get("stat") != triple:
            # A writer replaced the record or the body between our two opens: look again.
            again = self._record(name)
            if again is None or again.get("stat") != triple:
                return None
            meta = again
        if st.st_size > self.max_size_bytes:
            # Larger than anything this cache stores: not an entry it wrote.
            why = f"{st.st_size} bytes, more than the cache's bound ({self.max_size_bytes})"
            self._planted(name, RefusedFileError(name, why, st), meta)
            return None
        if limit is not None and st.st_size > limit:
            raise BodyTooLarge(st.st_size)
        body = _read_all(fd, st.st_size)
        if body is None:
            return None
        _touch(fd, now, st.st_mtime_ns)
        return Entry(meta, body)

    def fresh_on_disk(self, name: str, now: float) -> bool:
        """Whether a record of ``name`` says it is fresh at ``now`` (one small read, no body)."""
        meta = self._record(name)
        return meta is not None and _policy.meta_fields(meta)[0] > now

    def update_meta(self, name: str, meta: dict[str, Any]) -> None:
        """Replace the record of ``name`` (a 304 refreshed it); the body is untouched."""
        self._write_record(name, meta)

    def remove(self, name: str) -> None:
        """Delete entry ``name`` (body first, so a reader sees a miss, never a body alone)."""
        with self.dir_lock():
            self._dir.remove(name)
            self._dir.remove(_record_name(name))

    def publish(self, name: str, body: bytes, meta: dict[str, Any], *, now: float) -> int | None:
        """Store ``body`` as ``name`` within the bound; return how many entries were evicted.

        ``None`` means it was not stored: the body (with its record) alone exceeds the bound,
        or the record would be larger than a reader reads (the core's ``MAX_RECORD``).
        Under the directory lock a publisher evicts what it needs and *reserves* its bytes: its
        file is created at the body's full size, and a placeholder holds the record's room
        until the record exists. A concurrent publisher's scan counts both, so the writing,
        fsync and renames can happen outside the lock and the directory still never holds
        more than the bound.
        """
        record = {
            **meta,
            "sha256": hashlib.sha256(body).hexdigest(),
            "size": len(body),
            "fetched": time.time(),
        }
        meta_room = len(json.dumps(record, sort_keys=True)) + _META_EXTRA + len(name)
        cost = len(body) + meta_room
        if meta_room > MAX_RECORD or cost > self.max_size_bytes:
            return None
        with self.dir_lock():
            evicted = self._make_room(cost, now=now)
            if evicted is None:
                return None
            part_fd, part = self._dir.create(name)
            try:
                room_fd, room = self._dir.create(f"{name}.room")
            except BaseException:
                os.close(part_fd)
                self._dir.remove(part)
                raise
            try:
                os.ftruncate(part_fd, len(body))
                os.ftruncate(room_fd, meta_room)
            except BaseException:
                _discard(self._dir, part_fd, part)
                _discard(self._dir, room_fd, room)
                raise
        try:
            try:
                _write_all(part_fd, body)
                os.fsync(part_fd)
                # Its first use, for LRU; through the descriptor, the mtime as it is.
                _volume.stamp(part_fd, atime_ns=_ns(now), mtime_ns=os.fstat(part_fd).st_mtime_ns)
                st = os.fstat(part_fd)
                triple = [st.st_size, st.st_mtime_ns, st.st_ino]
                self._write_record(name, {**record, "stat": triple})
                self._rename_own(part, part_fd, name)
            except BaseException:
                _discard(self._dir, part_fd, part)
                raise
            os.close(part_fd)
            self._dir.sync()
        finally:
            _discard(self._dir, room_fd, room)
        return evicted

    def usage(self) -> int:
        """Bytes of every regular file under the directory (what the bound applies to)."""
        return self._scan()[0]

    # -- records and refusals -----------------------------------------------------------------

    def _record(self, name: str) -> dict[str, Any] | None:
        """The record of entry ``name``: ``None`` when missing, refused or not a JSON object."""
        record = _record_name(name)
        try:
            data = self._dir.read_small(record)
        except _PLANTED as exc:
            self._planted(record, exc, None)
            return None
        except OSError:
            return None
        try:
            meta = json.loads(data)
        except (ValueError, RecursionError):
            return None
        return meta if isinstance(meta, dict) else None

    def _write_record(self, name: str, meta: dict[str, Any]) -> None:
        """Replace the record of ``name``: a file of its own, fsynced, renamed into place."""
        data = json.dumps(meta, sort_keys=True).encode()
        if len(data) > MAX_RECORD:
            too_big = f"a record of {len(data)} bytes, more than {MAX_RECORD}"
            raise OSError(errno.EFBIG, too_big, self.path(name))
        fd, tmp = self._dir.create(f"{name}.meta")
        try:
            _write_all(fd, data)
            os.fsync(fd)
            self._rename_own(tmp, fd, _record_name(name))
        except BaseException:
            _discard(self._dir, fd, tmp)
            raise
        os.close(fd)

    def _rename_own(self, tmp: str, fd: int, final: str) -> None:
        """Rename ``tmp`` to ``final`` if it is still the file open at ``fd`` (another user may
        have replaced it under its name: that is never published)."""
        try:
            there = self._dir.lstat(tmp)
        except FileNotFoundError:
            there = None
        if there is None or not os.path.samestat(there, os.fstat(fd)):
            raise FileNotFoundError(
                errno.ENOENT,
                "the file being written was removed or replaced by another process before it "
                "could be published",
                self.path(tmp),
            )
        self._dir.replace(tmp, final)

    def _planted(self, name: str, error: OSError, meta: dict[str, Any] | None) -> None:
        """A miss for ``name``, which is not a file the cache may use: removed if the cache owns
        the directory, and said once (later at debug level)."""
        what = planted_kind(self._dir, name, error)
        seen = error.seen if isinstance(error, RefusedFileError) else None
        removed = self._dir.remove_planted(name, seen)
        with self._told_guard:
            first = name not in self._told and len(self._told) < _TOLD_MAX
            if first:
                self._told.add(name)
        url = meta.get("url") if meta is not None else None
        named = f"; its record names {shown(url)}" if isinstance(url, str) else ""
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "media cache %s: %s is %s%s: refused, not read or followed (another user of the "
            "volume may have planted it); a miss%s",
            shown(self.directory),
            one_line(name),
            one_line(what),
            named,
            ", and removed" if removed else "",
        )

    # -- the bound ----------------------------------------------------------------------------

    def _make_room(self, cost: int, *, now: float) -> int | None:
        """Evict until ``cost`` more bytes fit (expired entries first, then LRU).

        Scanning costs a ``stat`` per file (about 12 ms per 1000 entries), too much for every
        store of a large cache. The ledger (``.usage``, read and written only under the
        directory lock) carries the total from one scan to the next: each store adds its
        reservation. Everything else only shrinks the real total (a record smaller than its
        room, an entry replaced or removed, a crashed writer's file), so the ledger stays an
        upper bound, and a scan, which corrects it, happens only when it says the cache is full
        (or every ``_RESCAN_EVERY`` stores).
        """
        ledger = self._read_ledger()
        if (
            ledger is not None
            and ledger[1] < _RESCAN_EVERY
            and ledger[0] + cost <= self.max_size_bytes
        ):
            self._write_ledger(ledger[0] + cost, ledger[1] + 1)
            return 0
        total, entries = self._scan(clean=True)
        if total + cost <= self.max_size_bytes:
            self._write_ledger(total + cost, 0)
            return 0
        target = int(self.max_size_bytes * min(self.low_water, 1.0)) - cost
        if target < 0:  # a large body: free only what it needs
            target = self.max_size_bytes - cost
        ranked = []
        for name, size, atime in entries:
            meta = self._record(name)
            expires = _policy.meta_fields(meta)[0] if meta else 0.0
            expired = expires <= now
            # Expired entries sort first (soonest expired first), then least recently used.
            ranked.append((0 if expired else 1, expires if expired else float(atime), name, size))
        ranked.sort()
        evicted = 0
        for _, _, name, size in ranked:
            if total <= target:
                break
            self._dir.remove(name)
            self._dir.remove(_record_name(name))
            total -= size
            evicted += 1
        if total + cost > self.max_size_bytes:
            self._write_ledger(total, 0)
            return None
        self._write_ledger(total + cost, 0)
        return evicted

    def _read_ledger(self) -> tuple[int, int] | None:
        """``(bytes, stores since the last scan)`` from the ledger, or ``None``."""
        try:
            data = self._dir.read_small(_LEDGER, _LEDGER_MAX)
        except _PLANTED as exc:
            self._planted(_LEDGER, exc, None)
            return None
        except OSError:
            return None
        try:
            used, stores = (int(x) for x in data.decode("ascii").split())
        except ValueError:
            return None
        return (used, stores) if used >= 0 and stores >= 0 else None

    def _write_ledger(self, used: int, stores: int) -> None:
        """Replace the ledger (under the directory lock; a lost ledger only costs a scan)."""
        tmp = None
        try:
            fd, tmp = self._dir.create(_LEDGER[1:])
            try:
                _write_all(fd, f"{used} {stores}\n".encode())
            finally:
                os.close(fd)
            self._dir.replace(tmp, _LEDGER)
        except OSError:
            with contextlib.suppress(OSError):
                if tmp is not None:
                    self._dir.remove(tmp)
                self._dir.remove(_LEDGER)

    def _scan(self, *, clean: bool = False) -> tuple[int, list[tuple[str, int, int]]]:
        """``(bytes of every file, [(entry name, entry bytes with record, atime)])``.

        A listing is not a snapshot: a publisher that renames its file into place between our
        ``readdir`` and our ``stat`` makes its bytes vanish from both names. Publishers rename
        outside the directory lock, so a scan in which a listed file vanished is repeated; one
        in which none did counts every byte at least once (records are created before the
        placeholders that reserve their room are removed). Lock files under ``.locks`` are
        empty and counted when seen.

        With ``clean``, files whose writer is gone (:meth:`._volume.Directory.abandoned`) and
        records whose body is gone (and is not being written) are removed on the way.
        """
        for _ in range(_SCAN_TRIES):
            result = self._scan_once(clean=clean)
            if result is not None:
                return result
        # Renames never stopped long enough: accept one more count as it is (it can miss only
        # the bytes of files renamed during it, and the next publisher's scan sees them).
        return self._scan_once(clean=clean, strict=False) or (0, [])

    def _scan_once(
        self, *, clean: bool, strict: bool = True
    ) -> tuple[int, list[tuple[str, int, int]]] | None:
        try:
            listing = self._dir.listing()
        except FileNotFoundError:
            return 0, []
        writing = {i.name[1:65] for i in listing if i.name.endswith(".partial")}
        total = 0
        bodies: dict[str, tuple[int, int]] = {}
        sidecars: dict[str, int] = {}
        now = time.time()
        for item in listing:
            st = item.st
            if st is None:
                if strict:
                    return None
                continue
            if stat.S_ISDIR(st.st_mode):
                total += self._dir.tree_bytes(item.name)
                continue
            total += st.st_size
            if ENTRY.match(item.name):
                bodies[item.name] = (st.st_size, st.st_atime_ns)
            elif (m := _SIDECAR.match(item.name)) is not None:
                sidecars[m["name"]] = st.st_size
            elif (
                clean
                and item.name.endswith(".partial")
                and stat.S_ISREG(st.st_mode)
                and self._dir.abandoned(item.name, st, now=now)
                and self._dir.remove_same(item.name, st)
            ):
                total -= st.st_size
        for name, size in sidecars.items():
            # A publisher renames the record into place just before the body: not an orphan.
            if clean and name not in bodies and name[:64] not in writing:
                self._dir.remove(_record_name(name))
                total -= size
        entries = [(n, size + sidecars.get(n, 0), atime) for n, (size, atime) in bodies.items()]
        return total, entries


def _record_name(name: str) -> str:
    return f".{name}.meta.json"


def _discard(directory: Directory, fd: int, name: str) -> None:
    """Close and remove a file this process created (idempotent enough for cleanup paths)."""
    with contextlib.suppress(OSError):
        os.close(fd)
    with contextlib.suppress(OSError):
        directory.remove(name)


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _touch(fd: int, now: float, mtime_ns: int) -> None:
    """Record a use: the access time becomes ``now``; the mtime (part of the triple) stays."""
    with contextlib.suppress(OSError, NotImplementedError):
        _volume.stamp(fd, atime_ns=_ns(now), mtime_ns=mtime_ns)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)


def _read_all(fd: int, size: int) -> bytes | None:
    """Exactly ``size`` bytes from ``fd``, or ``None`` if the file is shorter."""
    data = os.read(fd, size) if size else b""
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        chunk = os.read(fd, size - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
