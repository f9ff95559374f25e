"""``cacheroot tier`` on a bucket: seed L1 from it, sync L1's entries to it, evict from it.

A bucket has no overlay and no files of the libraries' own caches: what it holds is
cacheroot's own entries (blob and record). So ``tier up`` *seeds* L1 with the bucket's
entries, most recently written first, within L1's budget; ``tier sync`` writes through every
complete, verified entry of L1 the bucket has no record of (one a host fetched while the bucket
was unreachable, or in a job that ran ``ro``); ``tier evict`` removes records by age or total
size, oldest first, then the blobs no record names any more. Built trees (``trees/``) and
model snapshots (``snapshots/``) go by age only, and what their records name with them; the
hub caches' files and signed answers, which no record names, go by age only too.

An entry counts as used when its record was written (the object's time on the server, one clock
for the fleet): hosts read the bucket without writing to it, so a record of use would cost a
write per hit. ``--l2-older-than 14d`` removes an entry two weeks after it was shared. A blob no
record names is kept for :data:`GRACE` seconds: its writer may be about to create the record.
Another host may be pulling a blob that goes: its copy fails, and it fetches from the origin.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import obstore

from .. import _store
from .names import ANSWERS, BLOBS, GIT_BLOBS, LEASES, PROBES, RECORDS, SNAPSHOTS
from .records import Record
from .transfer import ChangedError, object_name, pull, push
from .trees import TREES, archive_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .tier import Bucket

__all__ = ["GRACE", "Eviction", "Report", "evict", "seed", "sync"]

#: Seconds an unreferenced blob, a lease or a probe is kept (its writer may still be at work).
GRACE = 3600.0
_META = re.compile(r"^\.(?P<name>.+)\.meta\.json$")


@dataclass
class Report:
    """What a seed or a sync did."""

    verb: str
    done: int = 0
    size: int = 0
    present: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        from cacheroot.envs.units import format_size  # noqa: PLC0415 - the report only

        return (
            f"{self.verb} {self.done} entries ({format_size(self.size)}); {self.present} "
            f"already there, {self.skipped} skipped, {len(self.failed)} failed"
        )


@dataclass(frozen=True)
class _Object:
    name: str
    size: int
    modified: float


def _seconds(value: datetime) -> float:
    """A listing's time as seconds since the epoch (UTC when it names no zone)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def _listing(bucket: Bucket, prefix: str) -> list[_Object]:
    found: list[_Object] = []
    for chunk in obstore.list(bucket.clients.control, prefix=prefix):
        found.extend(
            _Object(meta["path"], meta["size"], _seconds(meta["last_modified"])) for meta in chunk
        )
    return found


def _records(bucket: Bucket) -> list[tuple[_Object, Record | None]]:
    """Every record object with what it says (``None``: not a record this version trusts),
    most recently written first."""
    found = []
    for obj in _listing(bucket, RECORDS):
        with contextlib.suppress(FileNotFoundError):  # removed since it was listed
            found.append((obj, bucket.record_at(obj.name)))
    found.sort(key=lambda pair: pair[0].modified, reverse=True)
    return found


def _room(l1: str, used: int, size: int, max_size: int | None, min_free: int | None) -> bool:
    if max_size is not None and used + size > max_size:
        return False
    if min_free is not None:
        st = os.statvfs(l1)
        if st.f_bavail * st.f_frsize - size < min_free:
            return False
    return True


def seed(
    bucket: Bucket, l1: str, *, max_size: int | None = None, min_free: int | None = None
) -> Report:
    """Copy the bucket's entries into ``l1``, most recently written first, each verified,
    until L1 would hold more than ``max_size`` or have less than ``min_free`` free."""
    from .._shared import open_below  # noqa: PLC0415 - the volume's walk, as the file tier's

    report = Report("seeded")
    used = 0
    for _obj, record in _records(bucket):
        if record is None:
            report.skipped += 1
            continue
        dest = os.path.join(l1, record.path)
        try:
            # Its directory reached from L1's top without following a link, made where missing,
            # and held for the copy: a directory another job swapped for a link leads nowhere.
            dfd = open_below(l1, os.path.dirname(record.path), create=True)
        except OSError as exc:
            report.failed.append(f"{record.path}: {exc.strerror or type(exc).__name__}")
            continue
        try:
            if _lexists(os.path.basename(dest), dfd):
                report.present += 1
            elif not _room(l1, used, record.size, max_size, min_free):
                report.skipped += 1
            elif pull(bucket.clients.data, record, dest, record.url, dir_fd=dfd):
                report.done += 1
                report.size += record.size
                used += record.size
        except Exception as exc:  # noqa: BLE001 - one entry that fails is counted, and named
            report.failed.append(f"{record.path}: {type(exc).__name__}")
        finally:
            os.close(dfd)
    return report


def _lexists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _entries(l1: str) -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """``(path, relative path, record, directory)`` of every complete entry of cacheroot's in
    ``l1`` whose own record still vouches for it (a file, with its digest and size).

    The walk holds each directory open (:func:`os.fwalk`, no link followed) and everything
    about an entry is read, and pushed, relative to it while the caller handles the entry: a
    directory another job swaps for a link meanwhile leads nowhere."""
    for here, dirs, names, dfd in os.fwalk(l1, follow_symlinks=False):
        dirs.sort()
        for name in sorted(names):
            match = _META.match(name)
            if match is None:
                continue
            entry = match.group("name")
            dest = os.path.join(here, entry)
            meta = _store.current_meta(dest, dir_fd=dfd)
            if meta is None or not isinstance(meta.get("url"), str):
                continue
            try:
                kind = os.lstat(entry, dir_fd=dfd).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(kind):
                continue  # a directory's record (build_once): not an entry of the bucket's
            rel = os.path.relpath(dest, l1)
            yield dest, "/".join(rel.split(os.sep)), meta, dfd


def sync(bucket: Bucket, l1: str) -> Report:
    """Write through every entry of ``l1`` the bucket has no record of (see the module
    docstring); a bucket that may not be written syncs nothing (``failed`` says why)."""
    report = Report("synced")
    writes = bucket.writes()
    if writes is None:
        report.failed.append("the bucket may not be written by this process")
        return report
    for dest, rel, meta, dfd in _entries(l1):
        record = Record.of(meta["url"], rel, meta)
        if record is None:
            report.skipped += 1
            continue
        try:
            if bucket.record(rel) is not None:
                report.present += 1
                continue
            if push(
                bucket.clients.control,
                bucket.clients.data,
                record,
                dest,
                dir_fd=dfd,
                conditional=writes == "conditional",
            ):
                report.done += 1
                report.size += record.size
            else:
                report.present += 1
        except ChangedError:
            report.skipped += 1  # being replaced on this host: the next sync takes it
        except Exception as exc:  # noqa: BLE001 - one entry that fails is counted, and named
            report.failed.append(f"{rel}: {type(exc).__name__}")
    return report


@dataclass
class Eviction:
    """What an eviction removed (or would remove): record names and blob names, with sizes,
    and the hub caches' answers, with sizes."""

    records: list[str] = field(default_factory=list)
    blobs: list[tuple[str, int]] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    answers: list[tuple[str, int]] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes of the blobs removed."""
        return sum(size for _name, size in self.blobs)


def _over_budget(
    kept: list[tuple[_Object, Record | None]], blobs: dict[str, _Object], max_size: int
) -> list[tuple[_Object, Record | None]]:
    """The records (``kept``: newest first) past the newest ones whose blobs total
    ``max_size`` bytes."""
    total = 0
    named: set[str] = set()
    over = []
    for obj, record in kept:
        blob = blobs.get(record.sha256) if record is not None else None
        size = 0 if blob is None or blob.name in named else blob.size  # shared bytes count once
        if total + size > max_size:
            over.append((obj, record))
            continue
        total += size
        if blob is not None:
            named.add(blob.name)
    return over


def _trees(
    bucket: Bucket,
    out: Eviction,
    wanted: set[str],
    named: set[str],
    *,
    older_than: float | None,
    now: float,
) -> None:
    """Built trees go by age only: their records older than ``older_than`` into ``out``; the
    archives of the others ``wanted``; every archive a tree record names ``named``."""
    for obj in _listing(bucket, TREES):
        archive = archive_of(bucket, obj.name)
        if older_than is not None and now - obj.modified > older_than:
            out.records.append(obj.name)
        elif archive is not None:
            wanted.add(archive)
        if archive is not None:
            named.add(archive)


#: The largest model snapshot record read (one names every file of a revision).
MAX_SNAPSHOT = 32 << 20
_DIGEST = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def _snapshot_objects(bucket: Bucket, obj: _Object) -> set[str]:
    """The objects the snapshot record ``obj`` names: each file's (by its ``blobs`` entry, the
    git blob sha1 of a small Hugging Face file or a sha256, else by its sha256); none for a
    record too large or not one this version reads."""
    if obj.size > MAX_SNAPSHOT:
        return set()
    try:
        record = json.loads(bytes(obstore.get(bucket.clients.control, obj.name).bytes()))
    except (FileNotFoundError, ValueError):
        return set()
    if not isinstance(record, dict) or not isinstance(record.get("files"), list):
        return set()
    given_names = record.get("blobs")
    named: dict[str, Any] = given_names if isinstance(given_names, dict) else {}
    found: set[str] = set()
    for entry in record["files"]:
        if not isinstance(entry, dict):
            continue
        given = named.get(str(entry.get("path")))  # its blob's name in the hub's layout
        if isinstance(given, str) and _DIGEST.fullmatch(given):
            found.add(object_name(given))
        elif isinstance(entry.get("sha256"), str) and _DIGEST.fullmatch(entry["sha256"]):
            found.add(object_name(entry["sha256"]))
    return found


def _snapshots(
    bucket: Bucket,
    out: Eviction,
    wanted: set[str],
    named: set[str],
    *,
    older_than: float | None,
    now: float,
) -> None:
    """Model snapshots go by age only, as built trees: their records older than ``older_than``
    into ``out``; the objects the others name ``wanted``; every object any of them names
    ``named`` (object names, not digests)."""
    for obj in _listing(bucket, SNAPSHOTS):
        objects = _snapshot_objects(bucket, obj)
        if older_than is not None and now - obj.modified > older_than:
            out.records.append(obj.name)
        else:
            wanted |= objects
        named |= objects


def evict(
    bucket: Bucket,
    *,
    max_size: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> Eviction:
    """Remove records written more than ``older_than`` seconds ago, then the oldest until the
    blobs the others name total ``max_size`` bytes at most, then the blobs only those records
    named, and leases and probes abandoned for :data:`GRACE`. ``dry_run`` removes nothing.

    A blob no record ever named is the hub cache's (a file named by its sha256 or git blob
    sha1, which it keeps without a record) or a writer's that died before its record: it goes
    when it is older than ``older_than`` (and :data:`GRACE`), never by the size budget, which
    weighs the entries that records name. So do the hub caches' signed answers (``answers/``,
    :mod:`.hub`): by age only, as the files they describe (a commit's answer never changes, and
    a stale one is still served while the upstream cannot be asked)."""
    now = time.time() if now is None else now
    records = _records(bucket)  # newest first
    blobs = {obj.name.rsplit("/", 1)[-1]: obj for obj in _listing(bucket, BLOBS)}
    git_blobs = _listing(bucket, GIT_BLOBS)
    kept: list[tuple[_Object, Record | None]] = []
    out = Eviction()
    for obj, record in records:
        if older_than is not None and now - obj.modified > older_than:
            out.records.append(obj.name)
        else:
            kept.append((obj, record))
    if max_size is not None:
        over = _over_budget(kept, blobs, max_size)
        out.records += [obj.name for obj, _record in over]
        kept = [pair for pair in kept if pair not in over]
    wanted = {record.sha256 for _obj, record in kept if record is not None}
    named_before = {record.sha256 for _obj, record in records if record is not None}
    _trees(bucket, out, wanted, named_before, older_than=older_than, now=now)
    kept_objects: set[str] = set()
    named_objects: set[str] = set()
    _snapshots(bucket, out, kept_objects, named_objects, older_than=older_than, now=now)
    unnamed_until = None if older_than is None else now - max(older_than, GRACE)
    for digest, obj in sorted(blobs.items()):
        if digest in wanted or obj.name in kept_objects:
            continue
        # A blob no record ever named: a hub file, or one whose record is about to be written.
        named = digest in named_before or obj.name in named_objects
        if named or (unnamed_until is not None and obj.modified < unnamed_until):
            out.blobs.append((obj.name, obj.size))
    out.blobs += sorted(
        (o.name, o.size)
        for o in git_blobs
        if o.name not in kept_objects
        and (o.name in named_objects or (unnamed_until is not None and o.modified < unnamed_until))
    )
    if unnamed_until is not None:
        out.answers = sorted(
            (o.name, o.size) for o in _listing(bucket, ANSWERS) if o.modified < unnamed_until
        )
    for prefix in (LEASES, PROBES):
        out.leftovers += [o.name for o in _listing(bucket, prefix) if now - o.modified > GRACE]
    if not dry_run:
        # Records first: a reader never finds a record whose blob went before it.
        gone = out.blobs + out.answers
        for name in out.records + [name for name, _size in gone] + out.leftovers:
            with contextlib.suppress(FileNotFoundError):
                obstore.delete(bucket.clients.control, name)
    return out
