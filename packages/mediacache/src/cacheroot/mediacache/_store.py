"""The entries on disk: consistent reads without a lock, and publishing under a size bound.

Layout of the cache directory::

    <key>.<ext>                 an entry's body (the response bytes, nothing else)
    .<key>.<ext>.meta.json      its sidecar (cacheroot.fetch format plus our fields)
    .lock, .lock.holder         the directory lock, held only to evict and publish
    .usage                      the ledger of bytes used (see ``Store._make_room``)
    .locks/<3 hex>.lock         striped per-key locks that make misses single-flight

Bodies and sidecars are written through :class:`cacheroot.fetch.Partial` (own partial file,
fsync, ``os.replace``), so a reader never sees a half-written file. A reader opens the body and
compares its ``fstat`` with the ``(size, mtime_ns, inode)`` recorded in the sidecar: a mismatch
means a writer replaced one of the two in between, and the read counts as a miss. Eviction
unlinks files; a reader that has the body open keeps reading the old inode, which POSIX keeps
alive until it is closed, so eviction can never corrupt a read in progress.

Recency for LRU is the body's access time, set explicitly (with the cache's clock) after each
read and each publish, so ``noatime`` or ``relatime`` mounts do not matter. Every regular file
under the directory counts towards the bound, locks and sidecars included: what a ``du``
reports is what the bound holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

from cacheroot.fetch.store import Partial, PathLock, partial_abandoned, read_meta, write_meta

from . import _policy

#: Body file names: the hex key plus an optional sanitised extension.
ENTRY = re.compile(r"^[0-9a-f]{64}(\.[a-z0-9]{1,10})?$")
_SIDECAR = re.compile(r"^\.(?P<name>[0-9a-f]{64}(\.[a-z0-9]{1,10})?)\.meta\.json$")
#: A generous allowance for the fields cacheroot.fetch adds to a sidecar (sha256, stat, ...).
_META_EXTRA = 320
_LOCK_STRIPES = 3  # hex digits: 4096 lock files at most
_DIR_POLL = 0.002
_SCAN_TRIES = 20
#: The ledger of bytes used, and how many stores may trust it before a scan checks it.
_LEDGER = ".usage"
_RESCAN_EVERY = 1000


class Entry:
    """A stored response read consistently: its sidecar and its body."""

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


class Store:
    """The files of one cache directory (see the module docstring)."""

    def __init__(
        self, directory: str, *, max_size_bytes: int, low_water: float, lock_timeout: float
    ) -> None:
        self.directory = directory
        self.max_size_bytes = max_size_bytes
        self.low_water = low_water
        self.lock_timeout = lock_timeout
        self._made = False

    def ensure(self) -> None:
        """Create the directory and the lock folder (once per instance)."""
        if not self._made:
            os.makedirs(os.path.join(self.directory, ".locks"), exist_ok=True)
            self._made = True

    def path(self, name: str) -> str:
        """Where the body of entry ``name`` lives."""
        return os.path.join(self.directory, name)

    def key_lock(self, name: str) -> PathLock:
        """The cross-process lock that makes fetching ``name`` single-flight.

        Locks are striped by the key's first hex digits so that their number stays bounded; two
        URLs sharing a stripe only wait for each other, they never share an entry.
        """
        self.ensure()
        stripe = name[:_LOCK_STRIPES]
        return PathLock(
            os.path.join(self.directory, ".locks", f"{stripe}.lock"), timeout=self.lock_timeout
        )

    def read(self, name: str, *, now: float) -> Entry | None:
        """The entry ``name`` if its body and sidecar agree, else ``None``; marks it used."""
        dest = self.path(name)
        meta = read_meta(dest)
        if meta is None:
            return None
        try:
            fd = os.open(dest, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            triple = [st.st_size, st.st_mtime_ns, st.st_ino]
            if meta.get("stat") != triple:
                # A writer replaced the sidecar or the body between our two opens: look again.
                meta = read_meta(dest)
                if meta is None or meta.get("stat") != triple:
                    return None
            body = _read_all(fd, st.st_size)
            if body is None:
                return None
            _touch(fd, now, st.st_mtime_ns)
        finally:
            os.close(fd)
        return Entry(meta, body)

    def fresh_on_disk(self, name: str, now: float) -> bool:
        """Whether a sidecar of ``name`` says it is fresh at ``now`` (one small read, no body)."""
        meta = read_meta(self.path(name))
        return meta is not None and _policy.meta_fields(meta)[0] > now

    def update_meta(self, name: str, meta: dict[str, Any]) -> None:
        """Replace the sidecar of ``name`` (a 304 refreshed it); the body is untouched."""
        write_meta(self.path(name), meta)

    def remove(self, name: str) -> None:
        """Delete entry ``name`` (body first, so a reader sees a miss, never a body alone)."""
        dest = self.path(name)
        with self.dir_lock():
            _unlink(dest)
            _unlink(_sidecar(dest))

    def dir_lock(self) -> PathLock:
        """The lock that serialises eviction and publishing within the directory."""
        self.ensure()
        # Held for a scan and a few unlinks only: waiters poll often rather than every 50 ms.
        return PathLock(
            os.path.join(self.directory, ".lock"), timeout=self.lock_timeout, poll=_DIR_POLL
        )

    def publish(self, name: str, body: bytes, meta: dict[str, Any], *, now: float) -> int | None:
        """Store ``body`` as ``name`` within the bound; return how many entries were evicted.

        ``None`` means it was not stored: the body (with its sidecar) alone exceeds the bound.
        Under the directory lock a publisher evicts what it needs and *reserves* its bytes: its
        partial file is created at the body's full size, and a placeholder partial holds the
        sidecar's room until the sidecar exists. A concurrent publisher's scan counts both, so
        the writing, fsync and renames can happen outside the lock and the directory still never
        holds more than the bound.
        """
        meta_room = len(json.dumps(meta, sort_keys=True)) + _META_EXTRA + len(name)
        cost = len(body) + meta_room
        if cost > self.max_size_bytes:
            return None
        dest = self.path(name)
        with self.dir_lock():
            evicted = self._make_room(cost, now=now)
            if evicted is None:
                return None
            part = Partial(dest)
            # The sidecar's room is held by a placeholder partial until the sidecar exists.
            room = Partial(dest + ".room")
            try:
                os.ftruncate(_fd(part), len(body))
                os.ftruncate(_fd(room), meta_room)
            except BaseException:
                part.discard()
                room.discard()
                raise
        try:
            part.write(body)
            part.commit(meta)
        except BaseException:
            part.discard()
            raise
        finally:
            room.discard()
        with contextlib.suppress(OSError):
            os.utime(dest, ns=(_ns(now), os.stat(dest).st_mtime_ns))
        return evicted

    def usage(self) -> int:
        """Bytes of every regular file under the directory (what the bound applies to)."""
        return _scan(self.directory)[0]

    def _make_room(self, cost: int, *, now: float) -> int | None:
        """Evict until ``cost`` more bytes fit (expired entries first, then LRU).

        Scanning costs a ``stat`` per file (about 12 ms per 1000 entries), too much for every
        store of a large cache. The ledger (``.usage``, read and written only under the
        directory lock) carries the total from one scan to the next: each store adds its
        reservation. Everything else only shrinks the real total (a sidecar smaller than its
        room, an entry replaced or removed, a crashed writer's partial), so the ledger stays an
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
        total, entries = _scan(self.directory, clean=True)
        if total + cost <= self.max_size_bytes:
            self._write_ledger(total + cost, 0)
            return 0
        target = int(self.max_size_bytes * min(self.low_water, 1.0)) - cost
        if target < 0:  # a large body: free only what it needs
            target = self.max_size_bytes - cost
        ranked = []
        for name, size, atime in entries:
            meta = read_meta(self.path(name))
            expires = _policy.meta_fields(meta)[0] if meta else 0.0
            expired = expires <= now
            # Expired entries sort first (soonest expired first), then least recently used.
            ranked.append((0 if expired else 1, expires if expired else float(atime), name, size))
        ranked.sort()
        evicted = 0
        for _, _, name, size in ranked:
            if total <= target:
                break
            dest = self.path(name)
            _unlink(dest)
            _unlink(_sidecar(dest))
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
            with open(os.path.join(self.directory, _LEDGER), encoding="ascii") as f:
                used, stores = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            return None
        return (used, stores) if used >= 0 and stores >= 0 else None

    def _write_ledger(self, used: int, stores: int) -> None:
        """Replace the ledger (under the directory lock; a lost ledger only costs a scan)."""
        path = os.path.join(self.directory, _LEDGER)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(f"{used} {stores}\n")
            os.replace(tmp, path)
        except OSError:
            _unlink(tmp)
            _unlink(path)


def _fd(part: Partial) -> int:
    fd = part.fd
    if fd is None:  # pragma: no cover - a fresh Partial is always open
        raise RuntimeError(f"partial {part.path} is closed")
    return fd


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _touch(fd: int, now: float, mtime_ns: int) -> None:
    """Record a use: the access time becomes ``now``; the mtime (part of the triple) stays."""
    with contextlib.suppress(OSError, NotImplementedError):
        os.utime(fd, ns=(_ns(now), mtime_ns))


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


def _sidecar(dest: str) -> str:
    head, name = os.path.split(dest)
    return os.path.join(head, f".{name}.meta.json")


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _scan(directory: str, *, clean: bool = False) -> tuple[int, list[tuple[str, int, int]]]:
    """``(bytes of every file, [(entry name, entry bytes with sidecar, atime)])``.

    A listing is not a snapshot: a publisher that renames its partial into place between our
    ``readdir`` and our ``stat`` makes its bytes vanish from both names. Publishers rename
    outside the directory lock, so a scan in which a listed file vanished is repeated; one in
    which none did counts every byte at least once (sidecars are created before the
    placeholders that reserve their room are removed). Lock holder records under ``.locks``
    come and go all the time and are tiny: they are counted when seen, never waited for.

    With ``clean``, partial files whose writer died and sidecars whose body is gone (and is not
    being written) are removed on the way.
    """
    for _ in range(_SCAN_TRIES):
        result = _scan_once(directory, clean=clean)
        if result is not None:
            return result
    # Renames never stopped long enough: accept one more count as it is (it can miss only the
    # bytes of files renamed during it, and the next publisher's scan sees them).
    return _scan_once(directory, clean=clean, strict=False) or (0, [])


def _scan_once(
    directory: str, *, clean: bool, strict: bool = True
) -> tuple[int, list[tuple[str, int, int]]] | None:
    try:
        listing = list(os.scandir(directory))
    except FileNotFoundError:
        return 0, []
    writing = {i.name[1:65] for i in listing if i.name.endswith(".partial")}
    total = 0
    bodies: dict[str, tuple[int, int]] = {}
    sidecars: dict[str, int] = {}
    for item in listing:
        try:
            if item.is_dir(follow_symlinks=False):
                total += _tree_bytes(item.path)
                continue
            st = item.stat(follow_symlinks=False)
        except FileNotFoundError:
            if strict:
                return None
            continue
        except OSError:
            continue
        total += st.st_size
        if ENTRY.match(item.name):
            bodies[item.name] = (st.st_size, st.st_atime_ns)
        elif (m := _SIDECAR.match(item.name)) is not None:
            sidecars[m["name"]] = st.st_size
        elif (
            clean
            and item.name.endswith(".partial")
            and partial_abandoned(item.path, stale_after=3600.0)
        ):
            _unlink(item.path)
            total -= st.st_size
    for name, size in sidecars.items():
        # A publisher renames the sidecar into place just before the body: not an orphan.
        if clean and name not in bodies and name[:64] not in writing:
            _unlink(os.path.join(directory, f".{name}.meta.json"))
            total -= size
    entries = [(n, size + sidecars.get(n, 0), atime) for n, (size, atime) in bodies.items()]
    return total, entries


def _tree_bytes(directory: str) -> int:
    """Bytes of every file under ``directory`` that still exists when it is looked at."""
    total = 0
    for here, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(here, name)).st_size
    return total
