"""One host downloads an entry; the others wait for its record.

The lease is an object (``leases/<h>``) holding its owner and an expiry. It is taken by creating
it (``If-None-Match: *``: of hosts asking at once, exactly one succeeds), renewed by its holder
every third of its lifetime with ``If-Match`` on the ETag it last wrote, and released by deleting
it. A waiter watches two things: the entry's record (the holder finished: it pulls that) and
the lease's ETag. An ETag that has not changed for a lifetime *by the waiter's own clock* means
its holder died or lost the bucket (a host killed mid-upload renews nothing), and the waiter
takes it over with ``If-Match`` on that very ETag: of several waiters, one wins. The expiry
written in the lease only shortens the wait for a lease abandoned long ago; clock skew between
hosts cannot make a live lease look dead sooner than a lifetime of unchanged ETag would.

Nothing depends on the lease for correctness: a holder that loses it (taken over after a long
stall) just stops renewing; two hosts that both download write the same content-addressed blob
and one record. The lease only saves the origin downloads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError

if TYPE_CHECKING:
    from collections.abc import Callable

    from obstore.store import ObjectStore

__all__ = ["POLL_MAX", "TTL", "Lease", "owner_name"]

#: Seconds a lease lives without renewal; its holder renews it every third of that.
TTL = 30.0
#: A waiter's first and longest pause between two looks (seconds).
POLL = 0.2
POLL_MAX = 1.0
#: The largest lease object read (they are a few dozen bytes).
_MAX_LEASE = 4096
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def owner_name() -> str:
    """This process's name in leases and probes: host, pid and a random part (unique)."""
    host = _UNSAFE.sub("_", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Lease:
    """The lease ``name`` in ``store`` (see the module docstring); ``ttl``: its lifetime."""

    def __init__(self, store: ObjectStore, name: str, *, ttl: float | None = None) -> None:
        self.store = store
        self.name = name
        self.ttl = TTL if ttl is None else ttl
        self.owner = owner_name()
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _body(self) -> bytes:
        doc = {"owner": self.owner, "expires": time.time() + self.ttl, "ttl": self.ttl}
        return json.dumps(doc, sort_keys=True).encode("utf-8")

    def _create(self) -> bool:
        try:
            result = obstore.put(self.store, self.name, self._body(), mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        self.etag = result["e_tag"]
        return True

    def _replace(self, etag: str) -> bool:
        """Write a fresh lease over the version ``etag``; whether it was still that version."""
        try:
            result = obstore.put(self.store, self.name, self._body(), mode={"e_tag": etag})
        except (AlreadyExistsError, PreconditionError, FileNotFoundError):
            return False
        self.etag = result["e_tag"]
        return True

    def _look(self) -> tuple[str | None, float | None]:
        """``(ETag, expiry)`` of the lease there now; ``(None, None)`` when there is none."""
        try:
            got = obstore.get(self.store, self.name)
        except FileNotFoundError:
            return None, None
        etag = got.meta["e_tag"]
        if got.meta["size"] > _MAX_LEASE:
            return etag, None
        try:
            doc = json.loads(bytes(got.bytes()))
            expires = float(doc["expires"])
        except (ValueError, TypeError, KeyError):
            return etag, None
        return etag, expires

    def acquire(self, ready: Callable[[], bool], timeout: float | None) -> str:
        """Take the lease, or wait until ``ready()`` (another host published the entry):
        ``"held"``, ``"ready"``, or ``"timeout"`` once ``timeout`` seconds went by. Errors of
        the bucket are raised."""
        start = time.monotonic()
        seen: str | None = None
        seen_at = start
        delay = POLL
        present = False
        while True:
            if not present and self._create():
                self._start()
                return "held"
            if ready():
                return "ready"
            etag, expires = self._look()
            present = etag is not None
            now = time.monotonic()
            if etag is not None:
                if etag != seen:
                    seen, seen_at = etag, now
                abandoned = expires is not None and time.time() > expires + self.ttl
                if (abandoned or now - seen_at >= self.ttl) and self._replace(etag):
                    self._start()
                    return "held"
            if timeout is not None and now - start >= timeout:
                return "timeout"
            if present:
                time.sleep(delay)
                delay = min(delay * 1.5, POLL_MAX)
            else:
                time.sleep(POLL / 4)  # released meanwhile: create it at once, but never spin

    def _start(self) -> None:
        self._renewer = threading.Thread(
            target=self._renew, name="cacheroot-bucket-lease", daemon=True
        )
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            etag = self.etag
            if etag is None:
                return
            try:
                if not self._replace(etag):
                    self.lost = True  # taken over: downloading on is harmless, renewing is not
                    return
            except Exception:  # noqa: BLE001, S112 - a failed renewal is tried again next time
                continue

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still the version this process wrote."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lost or self.etag is None:
            return
        with contextlib.suppress(Exception):
            if self._owner_there() == self.owner:
                obstore.delete(self.store, self.name)

    def _owner_there(self) -> str | None:
        """The owner the lease there names (``None``: none, or not one this version reads).
        Compared by content, not ETag: servers differ in how they quote and compute ETags."""
        try:
            got = obstore.get(self.store, self.name)
        except FileNotFoundError:
            return None
        if got.meta["size"] > _MAX_LEASE:
            return None
        try:
            owner = json.loads(bytes(got.bytes()))["owner"]
        except (ValueError, TypeError, KeyError):
            return None
        return owner if isinstance(owner, str) else None
