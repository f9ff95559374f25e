"""The bucket tier's protocol for one missing entry, and the per-process state behind it.

On an L1 miss (this host's lock on the entry held):

1. the entry's record (``records/<h>.json``); if it names the same key (and the digest the
   caller pins), its blob is streamed into an L1 partial, verified, and published;
2. otherwise, in trust tier ``rw``, the entry's lease (:mod:`.lease`): the holder downloads,
   the others wait for its record and pull it; a host that waited ``timeout`` seconds downloads
   too;
3. the holder downloads from the origin as with one tier, then writes its verified entry through
   (:func:`.transfer.push`: blob, then record) and releases the lease.

``ro`` reads (step 1) and never writes: no probe, no lease, no blob, no record. ``off`` ignores
the bucket. A bucket that fails costs one note on stderr per cause and process, never a fetch
the origin can serve: a failure that says the bucket cannot serve this process (no endpoint,
no bucket, refused credentials, no client installed, a malformed URL) drops the tier for the
rest of the process; a 503 SlowDown or a timeout rests it for :data:`REST` seconds; another
failure sends that entry to the origin.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_SHARED_MODE, resolve
from cacheroot.envs._shared_tier import OFF, RW, shared_mode, shared_url

from .. import _store
from .failures import Failure, denied, describe
from .location import INSTALL, ClientMissingError, Clients, open_clients, parse
from .names import RECORDS, lease_name, record_name
from .records import MAX_RECORD, Record
from .records import parse as parse_record

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .lease import Lease

__all__ = [
    "LOCAL",
    "SHARED",
    "Bucket",
    "bucket_of",
    "fill_file",
    "open_bucket",
    "pull_only",
    "say_once",
]

log = logging.getLogger("cacheroot.fetch")

#: What a fill did (as :mod:`.._shared` says it): served from the bucket, or downloaded here.
SHARED, LOCAL = "shared", "local"
#: The probe's verdict for a process that may not write (:data:`.probe.DENIED`).
DENIED_VERDICT = "denied"

#: Seconds a bucket that asked to slow down (or timed out) is left alone by this process.
REST = 30.0

_SAID: set[str] = set()
_LOCK = threading.Lock()


def say_once(text: str, key: str | None = None) -> None:
    """Log ``text`` as a warning (stderr), once per process and ``key`` (default: the text)."""
    with _LOCK:
        if (key or text) in _SAID:
            return
        _SAID.add(key or text)
    log.warning("%s", text)


class Bucket:
    """The bucket tier as this process uses it: its clients, its trust tier, and what it
    learned (the probe's verdict, whether it is down)."""

    def __init__(self, clients: Clients, mode: str) -> None:
        self.clients = clients
        self.url = clients.location.url
        self.mode = mode
        self.down = False
        self.resting_until = 0.0
        self._probed: str | None = None
        self._contacted = False
        self._lock = threading.Lock()

    def failed(self, exc: BaseException, what: str) -> Failure:
        """Say (once per cause) that ``what`` failed with ``exc``; drop the tier for this
        process if the failure says it cannot serve it."""
        found = describe(exc, self.url)
        if found.rest:
            self.resting_until = time.monotonic() + REST
        if found.fatal:
            self.down = True
            say_once(f"shared tier (bucket) not used by this process: {found.cause}", found.cause)
        else:  # said once per cause: a bucket that keeps asking to slow down is one note
            say_once(
                f"shared tier (bucket) could not {what} ({found.cause}): fetched from the origin",
                found.cause,
            )
        return found

    def contact(self) -> bool:
        """Whether the bucket answers: one listing of at most one record, the first time a
        process needs the bucket (a listing denied by a policy that grants reads is fine)."""
        if self._contacted:
            return not self.down
        with self._lock:
            if not self._contacted:
                self._contacted = True
                try:
                    import obstore  # noqa: PLC0415 - the client, present: the clients opened

                    next(iter(obstore.list(self.clients.control, prefix=RECORDS, chunk_size=1)))
                except StopIteration:
                    pass
                except Exception as exc:  # noqa: BLE001 - every failure is said, then the origin
                    # A policy may grant reads and no listing: the bucket answered.
                    if not denied(exc):
                        self.failed(exc, "be listed")
        return not self.down and time.monotonic() >= self.resting_until

    def writes(self) -> str | None:
        """How this process writes: ``"conditional"``, ``"unconditional"``, or ``None`` when it
        may not write (trust tier ``ro``, or writes denied: said once)."""
        if self.mode != RW or self.down:
            return None
        with self._lock:
            if self._probed is None:
                from .probe import DENIED, UNCONDITIONAL, probe  # noqa: PLC0415 - bucket only

                try:
                    self._probed = probe(self.clients.control)
                except Exception as exc:  # noqa: BLE001 - said, and no write this time
                    self.failed(exc, "be written")
                    return None
                if self._probed == DENIED:
                    say_once(
                        f"shared tier (bucket) at {self.url} denies this process writes: read "
                        f"through, never written (as with {CACHEROOT_SHARED_MODE}=ro); grant "
                        "s3:PutObject and s3:DeleteObject on the prefix to share downloads"
                    )
                elif self._probed == UNCONDITIONAL:
                    say_once(
                        f"shared tier (bucket) at {self.url} ignores conditional writes "
                        "(If-None-Match): used without leases, so hosts may download an entry "
                        "twice; what they publish is still whole and verified"
                    )
        return None if self._probed == DENIED_VERDICT else self._probed

    def record(self, rel: str) -> Record | None:
        """The record of the entry ``rel``, if there is one this version trusts."""
        try:
            return self.record_at(record_name(rel))
        except FileNotFoundError:
            return None

    def record_at(self, name: str) -> Record | None:
        """The record object ``name`` if it is one this version trusts (``None``: it is not);
        :class:`FileNotFoundError` when there is none."""
        import obstore  # noqa: PLC0415 - the client, present: the clients opened

        got = obstore.get(self.clients.control, name)
        if got.meta["size"] > MAX_RECORD:
            return None
        return parse_record(bytes(got.bytes()))


#: The bucket per ``(URL, trust tier)``: opened once per process (``None``: unusable, said).
_BUCKETS: dict[tuple[str, str], Bucket | None] = {}


def bucket_of(environ: Mapping[str, str] | None) -> tuple[Bucket, str] | None:
    """``(bucket, cache root)`` of the environment's bucket tier; ``None`` when there is none,
    it is off, or it is unusable (said once)."""
    env = os.environ if environ is None else environ
    url = shared_url(env)
    if url is None:
        return None
    try:
        mode = shared_mode(env)
    except ValueError as exc:
        say_once(f"shared tier not used by this process: {exc}")
        return None
    root = resolve(env).root
    if mode == OFF or root is None:
        return None
    key = (url, mode)
    if key not in _BUCKETS:
        _BUCKETS[key] = _open(url, mode, env)
    found = _BUCKETS[key]
    if found is None or found.down or time.monotonic() < found.resting_until:
        return None
    if not found.contact():
        return None
    return found, root


def open_bucket(url: str, mode: str, env: Mapping[str, str]) -> tuple[Bucket | None, str]:
    """The bucket ``url`` used with the trust tier ``mode``, or why it cannot be opened (a
    malformed URL, no client, a configuration the client refuses); nothing is asked of it."""
    try:
        location = parse(url)
    except ValueError as exc:
        return None, str(exc)
    try:
        clients = open_clients(location, env)
    except ClientMissingError:
        return None, (
            f"{location.url} needs the object-store client obstore, which is not installed: "
            f"{INSTALL}"
        )
    except Exception as exc:  # noqa: BLE001 - the client refused its configuration: said
        return None, describe(exc, location.url).cause
    return Bucket(clients, mode), ""


def _open(url: str, mode: str, env: Mapping[str, str]) -> Bucket | None:
    bucket, problem = open_bucket(url, mode, env)
    if problem:
        say_once(f"shared tier not used by this process: {problem}")
    return bucket


def rel_of(dest: str, root: str) -> str | None:
    rel = os.path.relpath(os.path.abspath(dest), root)
    if rel in (".", "..") or rel.startswith(".." + os.sep):
        return None
    return "/".join(rel.split(os.sep))


def _pull(bucket: Bucket, record: Record, dest: str, key: str, dir_fd: int) -> bool:
    from .transfer import BadBlobError, pull  # noqa: PLC0415 - only a bucket tier loads it

    try:
        return pull(bucket.clients.data, record, dest, key, dir_fd=dir_fd)
    except BadBlobError as exc:
        say_once(
            f"shared tier (bucket) at {bucket.url}: {exc}: not used; fetched from the origin "
            "(a host that may write the bucket replaces it with its verified copy)"
        )
        return False


def fill_file(
    dest: str,
    key: str,
    digest: str | None,
    download: Callable[[], None],
    *,
    timeout: float | None = 1800.0,
    environ: Mapping[str, str] | None = None,
    dir_fd: int | None = None,
) -> str:
    """Make the missing entry ``dest`` present from the bucket, or by ``download()`` (see the
    module docstring); :data:`SHARED` or :data:`LOCAL`. Called with this host's lock on
    ``dest`` held; ``dir_fd``: the held directory ``dest`` lies in (without one, ``download()``:
    the bucket writes into held directories only, never by path)."""
    found = bucket_of(environ)
    rel = None if found is None else rel_of(dest, found[1])
    if found is None or rel is None or dir_fd is None:
        download()  # the bucket writes into a directory its caller holds, never by path
        return LOCAL
    bucket = found[0]

    def ready() -> Record | None:
        record = bucket.record(rel)
        return record if record is not None and record.matches(key, digest) else None

    lease: Lease | None = None
    try:
        writes: str | None = None
        try:
            record = ready()
            if record is not None and _pull(bucket, record, dest, key, dir_fd):
                return SHARED
            writes = bucket.writes()
            if writes == "conditional":
                from .lease import Lease as _Lease  # noqa: PLC0415 - only a bucket tier loads it

                lease = _Lease(bucket.clients.control, lease_name(rel))
                outcome = lease.acquire(lambda: ready() is not None, timeout)
                if outcome != "held":
                    lease = None
                # The record may have come while this host waited, or between its first look
                # and the lease.
                record = ready() if outcome != "timeout" else None
                if record is not None and _pull(bucket, record, dest, key, dir_fd):
                    return SHARED
        except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the fetch
            bucket.failed(exc, "serve this entry")
            writes = None
        download()
        if writes is not None and not bucket.down:
            _push(bucket, dest, key, rel, dir_fd, conditional=writes == "conditional")
    finally:
        if lease is not None:
            lease.release()
    return LOCAL


def _push(bucket: Bucket, dest: str, key: str, rel: str, dir_fd: int, *, conditional: bool) -> None:
    from .transfer import push  # noqa: PLC0415 - only a bucket tier loads it

    meta = _store.read_meta(dest, dir_fd=dir_fd)
    record = None if meta is None else Record.of(key, rel, meta)
    if record is None:
        return
    try:
        push(
            bucket.clients.control,
            bucket.clients.data,
            record,
            dest,
            dir_fd=dir_fd,
            conditional=conditional,
        )
    except Exception as exc:  # noqa: BLE001 - the entry is here; sharing it failed: said
        bucket.failed(exc, "take this entry")


def pull_only(
    dest: str,
    key: str,
    digest: str | None,
    environ: Mapping[str, str] | None = None,
    *,
    open_dir: Callable[[], int] | None = None,
) -> bool:
    """Cache-only runs: copy the bucket's verified copy of ``key`` into ``dest``; whether it
    was published. ``open_dir`` as for :func:`.._shared.pull_only` (called only when the bucket
    has a record to try); without it the bucket is not read (it writes into held directories
    only)."""
    found = bucket_of(environ) if open_dir is not None else None
    rel = None if found is None else rel_of(dest, found[1])
    if found is None or rel is None or open_dir is None:
        return False  # the bucket writes into a directory its caller holds, never by path
    bucket = found[0]
    try:
        record = bucket.record(rel)
        if record is None or not record.matches(key, digest):
            return False
    except Exception as exc:  # noqa: BLE001 - said; the miss is a miss
        bucket.failed(exc, "serve this entry")
        return False
    dfd = open_dir()  # what it raises (a link planted on the way) is the caller's
    try:
        return _pull(bucket, record, dest, key, dfd)
    except Exception as exc:  # noqa: BLE001 - said; the miss is a miss
        bucket.failed(exc, "serve this entry")
        return False
