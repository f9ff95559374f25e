"""The hub's store: answers kept per request and credential, and files kept per digest.

Layout under the store directory (``$CACHEROOT/hubcache`` unless told otherwise)::

    meta/ab/<key>          one answer: a JSON head line (status, headers, when), then the body
    blobs/<digest>         one file's bytes, named by the digest the Hub gave for them
    served/<host>-<pid>    what this process served, one JSON line per file (for the manifest)
    locks/<key>.lock       one upstream request per key at a time, across processes
    state/<upstream>       until when the upstream asked everyone to wait (``Retry-After``)

The key of an answer is a digest of the upstream, the method, the path with its query, and the
credential: a hash of the ``Authorization`` value, never the value itself, or ``public``. What
another job planted here is read as untrusted: files are opened without following links or
blocking on a FIFO, must be regular files, and a head that does not parse is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from .. import _shared, _store

__all__ = ["Answer", "Store", "credential", "key_of", "read_regular"]

#: The most an answer's body may hold in the store (the Hub's listings are far smaller).
MAX_ANSWER = 64 << 20
#: Digests a blob may be named by: a git blob sha1, or an LFS sha256.
_HEX = frozenset("0123456789abcdef")
PUBLIC = "public"


def credential(authorization: str | None) -> str:
    """The part of a key that says whose answer it is: ``public``, or a hash of the credential."""
    if not authorization:
        return PUBLIC
    return hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def key_of(upstream: str, method: str, target: str, cred: str) -> str:
    """The store key of one request (hex)."""
    text = "\n".join((upstream, method, target, cred))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most ``limit``), or ``None``.

    A link, a FIFO, a device, a missing or larger file is ``None``: never followed, never
    blocked on, never read past the limit.
    """
    try:
        fd = _store.open_regular(path)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            return None
        chunks = []
        left = st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return None if len(data) > limit else data
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Answer:
    """One answer of the upstream as kept: its status, the headers worth keeping, its body."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    #: When it was received (``time.time()``).
    stored: float = field(default_factory=time.time)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        lower = name.lower()
        for key, value in self.headers:
            if key.lower() == lower:
                return value
        return None

    def encode(self) -> bytes:
        head = {"status": self.status, "headers": list(self.headers), "stored": self.stored}
        return json.dumps(head, separators=(",", ":")).encode() + b"\n" + self.body

    @classmethod
    def decode(cls, data: bytes) -> Answer | None:
        """The answer ``data`` holds, or ``None`` when it is not one (a torn or planted file)."""
        head, sep, body = data.partition(b"\n")
        if not sep:
            return None
        try:
            parsed: Any = json.loads(head)
            status = parsed["status"]
            headers = tuple((str(k), str(v)) for k, v in parsed["headers"])
            stored = float(parsed["stored"])
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(status, int) or not 100 <= status <= 599:
            return None
        return cls(status, headers, body, stored)


def blob_name(etag: str) -> str:
    """The file name a blob with this ETag is stored under."""
    if len(etag) in (40, 64) and set(etag) <= _HEX:
        return etag
    return "x-" + hashlib.sha256(etag.encode("utf-8", "surrogateescape")).hexdigest()


class Store:
    """The directory of one hub store (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.meta = os.path.join(root, "meta")
        self.blobs = os.path.join(root, "blobs")
        self.served = os.path.join(root, "served")
        self.locks = os.path.join(root, "locks")
        self.state = os.path.join(root, "state")
        self._made: set[str] = set()
        self._served_path = os.path.join(self.served, f"{socket.gethostname()}-{os.getpid()}")
        self._served_seen: set[str] = set()

    def _dir(self, path: str) -> str:
        """``path`` (a directory of the store), made without following a planted link."""
        if path not in self._made:
            os.makedirs(self.root, exist_ok=True)  # the operator's own setting
            os.close(_shared.open_below(self.root, os.path.relpath(path, self.root), create=True))
            self._made.add(path)
        return path

    def _meta_path(self, key: str) -> str:
        return os.path.join(self.meta, key[:2], key)

    def load(self, key: str) -> Answer | None:
        """The answer kept under ``key``, or ``None``."""
        data = read_regular(self._meta_path(key), MAX_ANSWER + 65536)
        return None if data is None else Answer.decode(data)

    def save(self, key: str, answer: Answer) -> None:
        """Keep ``answer`` under ``key``, in one step (a reader sees the old or the new one)."""
        if len(answer.body) > MAX_ANSWER:
            return
        path = self._meta_path(key)
        self.publish(path, answer.encode())

    def publish(self, path: str, data: bytes) -> None:
        """Write ``data`` to a fresh file beside ``path`` and rename it into place."""
        parent = self._dir(os.path.dirname(path))
        tmp = os.path.join(parent, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}")
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, path)

    # -- files ----------------------------------------------------------------------------
    def blob_path(self, etag: str) -> str:
        """Where the file with this ETag is (or will be) kept."""
        return os.path.join(self.blobs, blob_name(etag))

    def open_blob(self, path: str, size: int | None) -> int | None:
        """A descriptor of the stored file at ``path`` (of ``size`` bytes, when known), or
        ``None``: a planted link, FIFO or device there is removed, never followed."""
        try:
            fd = _store.open_regular(path)
        except FileNotFoundError:
            return None
        except OSError:
            with contextlib.suppress(OSError):
                _store.remove_planted(path)
            return None
        if size is not None and os.fstat(fd).st_size != size:
            os.close(fd)
            return None
        return fd

    def new_partial(self, path: str) -> tuple[str, int]:
        """A fresh partial file beside ``path``: its name and a descriptor open for writing.

        The name carries this process's machine tag and pid (``.NAME.MACHINE-PID.ID.partial``),
        so that a partial left by a writer that died is known as such (:mod:`.partials`).
        """
        self._dir(os.path.dirname(path))
        tmp = _store.partial_path(path)
        return tmp, _store.open_regular(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)

    def lock_path(self, key: str) -> str:
        """The lock file of ``key`` (its directory made)."""
        return os.path.join(self._dir(self.locks), f"{key}.lock")

    # -- what the hub asked upstream to wait for ------------------------------------------
    def blocked_until(self, upstream: str) -> float:
        """Until when (``time.time()``) the upstream asked every caller to wait; 0 if not."""
        data = read_regular(os.path.join(self.state, key_of(upstream, "", "", "")), 64)
        try:
            return float(data) if data else 0.0
        except ValueError:
            return 0.0

    def block(self, upstream: str, until: float) -> None:
        """Record that the upstream asked every caller to wait until ``until``."""
        with contextlib.suppress(OSError):
            self._dir(self.state)
            self.publish(os.path.join(self.state, key_of(upstream, "", "", "")), b"%.3f" % until)

    # -- what was served ------------------------------------------------------------------
    def record_served(self, row: dict[str, str]) -> None:
        """Note one file this process served (once per process), for ``export-manifest``."""
        line = json.dumps(row, sort_keys=True, separators=(",", ":"))
        if line in self._served_seen:
            return
        self._served_seen.add(line)
        with contextlib.suppress(OSError):
            self._dir(self.served)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            fd = _store.open_regular(self._served_path, flags, 0o644)
            try:
                os.write(fd, line.encode() + b"\n")
            finally:
                os.close(fd)

    def served_rows(self) -> list[dict[str, str]]:
        """Every row every process of this store recorded (duplicates removed)."""
        rows: dict[str, dict[str, str]] = {}
        try:
            names = sorted(os.listdir(self.served))
        except OSError:
            return []
        for name in names:
            data = read_regular(os.path.join(self.served, name), MAX_ANSWER)
            for line in (data or b"").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and all(isinstance(v, str) for v in row.values()):
                    rows[json.dumps(row, sort_keys=True)] = row
        return list(rows.values())


def digest_of(fd: int, etag: str, size: int) -> str | None:
    """The digest of the file open at ``fd`` in the form ``etag`` is (sha256, or git blob sha1
    over ``size`` bytes); ``None`` for an ETag that is neither, which cannot be checked."""
    if len(etag) == 64:
        hasher = hashlib.sha256()
    elif len(etag) == 40:
        hasher = hashlib.sha1(b"blob %d\x00" % size, usedforsecurity=False)
    else:
        return None
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()
