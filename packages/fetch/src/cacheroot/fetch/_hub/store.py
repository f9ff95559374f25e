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

Every write reaches its directory through a descriptor opened from the store's root one
component at a time without following a link, held for that write (for a file being filled,
until it is published; for the locks, for the process's life): a directory that another job
swaps for a link after the hub made it never redirects a write, the write fails instead. What
came with a credential (an answer asked with ``Authorization``, a file fetched with it) is
written ``0600``, or ``0640`` for the group the operator names (``--private-group``), so that
other users of the store's volume cannot read a gated repository's answers or files.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import hashlib
import hmac
import json
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

from cacheroot.envs import CACHEROOT_HUB_KEY_FILE
from cacheroot.envs._shared_tier import shared_url

from .. import _held, _proc, _shared, _store
from . import partials

__all__ = [
    "Answer",
    "KeyFileError",
    "Store",
    "answer_key",
    "carries_credential",
    "credential",
    "key_of",
    "publish_at",
    "read_regular",
]

#: The most an answer's body may hold in the store (the Hub's listings are far smaller).
MAX_ANSWER = 64 << 20
#: Digests a blob may be named by: a git blob sha1, or an LFS sha256.
_HEX = frozenset("0123456789abcdef")
PUBLIC = "public"
#: The mode of what anyone may read, and of what came with a credential (without a group).
PUBLIC_MODE, PRIVATE_MODE = 0o644, 0o600
#: The mode of what came with a credential, readable by the operator's group.
GROUP_MODE = 0o640


def carries_credential(headers: Mapping[str, str]) -> bool:
    """Whether a request's headers carry an ``Authorization`` (its name in any case)."""
    return any(str(name).lower() == "authorization" and value for name, value in headers.items())


def authorization(headers: Mapping[str, str]) -> str | None:
    """A request's ``Authorization`` value, its name in any case: a plain mapping built from a
    client's headers keeps the client's spelling (``authorization``), which an exact look-up
    misses, filing a credentialed answer under the public key."""
    return next(
        (value for name, value in headers.items() if str(name).lower() == "authorization"), None
    )


def credential(authorization: str | None) -> str:
    """The part of a key that says whose answer it is: ``public``, or a hash of the credential."""
    if not authorization:
        return PUBLIC
    return hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def key_of(upstream: str, method: str, target: str, cred: str) -> str:
    """The store key of one request (hex)."""
    text = "\n".join((upstream, method, target, cred))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def read_regular(path: str, limit: int, *, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file at ``path`` (at most ``limit``; with ``dir_fd``, ``path``
    is a name in that directory), or ``None``.

    A link, a FIFO, a device, a missing or larger file is ``None``: never followed, never
    blocked on, never read past the limit. So is a file with another name (a hard link planted
    in the store could be any file its planter can name): never read.
    """
    try:
        fd, st = _store.open_regular_stat(path, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if st.st_size > limit or st.st_nlink != 1:
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


#: What a signed answer's file starts with, before the signature's hex and a line feed.
_SIGNED = b"hmac-sha256 "
#: The most bytes a key file may hold.
_MAX_KEY = 4096
#: The most bytes a kept answer's file may hold (its body, its head line, a signature).
_MAX_KEPT = MAX_ANSWER + 65536 + len(_SIGNED) + 65


class KeyFileError(ValueError):
    """``CACHEROOT_HUB_KEY_FILE`` names no usable key (its message says what to do)."""


def answer_key() -> bytes | None:
    """The secret in the file ``CACHEROOT_HUB_KEY_FILE`` names (read now), or ``None`` when it
    is unset. Raises :class:`KeyFileError` for a file that is missing, not a regular file,
    readable by others than its owner, shorter than 16 bytes or larger than 4 KiB."""
    path = os.environ.get(CACHEROOT_HUB_KEY_FILE, "").strip()
    if not path:
        return None
    fix = (
        f"put at least 16 random bytes in a file only its owner may read (e.g. `head -c 32 "
        f"/dev/urandom > FILE && chmod 600 FILE`), outside the store, and point "
        f"{CACHEROOT_HUB_KEY_FILE} at it"
    )
    try:
        fd, st = _store.open_regular_stat(path)
    except OSError as exc:
        raise KeyFileError(
            f"{CACHEROOT_HUB_KEY_FILE}={path}: {exc.strerror or exc}; {fix}"
        ) from None
    try:
        if st.st_mode & 0o077:
            raise KeyFileError(
                f"{CACHEROOT_HUB_KEY_FILE}={path} may be read by others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); {fix}"
            )
        data = os.read(fd, _MAX_KEY + 1).strip()
    finally:
        os.close(fd)
    if not 16 <= len(data) <= _MAX_KEY:
        raise KeyFileError(f"{CACHEROOT_HUB_KEY_FILE}={path} holds {len(data)} bytes; {fix}")
    return data


def _signature(secret: bytes, key: str, data: bytes) -> bytes:
    """The hex HMAC of an answer's bytes ``data`` kept under ``key`` (so that an answer signed
    for one request is no answer for another)."""
    return hmac.new(secret, key.encode() + b"\n" + data, hashlib.sha256).hexdigest().encode()


def blob_name(etag: str) -> str:
    """The file name a blob with this ETag is stored under."""
    if len(etag) in (40, 64) and set(etag) <= _HEX:
        return etag
    return "x-" + hashlib.sha256(etag.encode("utf-8", "surrogateescape")).hexdigest()


class Store:
    """The directory of one hub store (see the module docstring)."""

    def __init__(
        self, root: str, *, private_group: str = "", answer_key: bytes | None = None
    ) -> None:
        self.root = root
        #: The secret that signs answers (:func:`answer_key`): with it, every answer written is
        #: signed and an answer read without a valid signature is none.
        self.answer_key = answer_key
        #: The group that may read what came with a credential; ``None``: only the hub's user.
        self.private_gid = grp.getgrnam(private_group).gr_gid if private_group else None
        #: The partials being filled, and the descriptor of the directory each is in.
        self._partial_dirs: dict[str, int] = {}
        #: Directories held for the process's life, by (device, inode): the locks' directory.
        self._held: dict[tuple[int, int], int] = {}
        self._held_lock = threading.Lock()
        self.meta = os.path.join(root, "meta")
        self.blobs = os.path.join(root, "blobs")
        self.served = os.path.join(root, "served")
        self.locks = os.path.join(root, "locks")
        self.state = os.path.join(root, "state")
        self._served_path = os.path.join(self.served, f"{socket.gethostname()}-{os.getpid()}")
        self._served_seen: set[str] = set()

    def prepare(self) -> None:
        """Make the store's directories where missing, before the hub serves: a request then
        never pays for making one (and syncing its parent) on the event loop."""
        for path in (self.meta, self.blobs, self.served, self.locks, self.state):
            os.close(self._open_dir(path))

    def _open_dir(self, path: str) -> int:
        """A descriptor of ``path`` (a directory of the store, made if missing), reached
        without following a link (:func:`.._held.tree`): raises ``ELOOP`` where a link was
        planted."""
        return _held.tree(self.root, os.path.relpath(path, self.root), create=True)

    def _below(self, path: str) -> int:
        """A descriptor of ``path`` (a directory of the store, not made), reached without
        following a link (:func:`.._held.tree`): what is read in the store is read through it, so
        a directory swapped for a link leads nowhere (``ELOOP``)."""
        return _held.tree(self.root, os.path.relpath(path, self.root))

    def _read(self, path: str, limit: int) -> bytes | None:
        """:func:`read_regular` of the store's file ``path``, in its directory reached without
        following a link (:meth:`_below`); ``None`` also when that directory is not there."""
        try:
            dfd = self._below(os.path.dirname(path))
        except OSError:
            return None
        try:
            return read_regular(os.path.basename(path), limit, dir_fd=dfd)
        finally:
            os.close(dfd)

    def _hold(self, path: str) -> int:
        """A descriptor of the directory ``path`` held for the process's life: reached afresh
        (no link followed) on every call, so a path of it (:func:`_shared.fd_path`) given to a
        library that opens by path can neither be redirected nor closed under it."""
        fd = self._open_dir(path)
        st = os.fstat(fd)
        with self._held_lock:
            held = self._held.setdefault((st.st_dev, st.st_ino), fd)
        if held != fd:
            os.close(fd)
        return held

    def _mode(self, fd: int, *, private: bool) -> None:
        """Give the file open at ``fd`` the mode of what came with a credential, or not."""
        if not private:
            return
        if self.private_gid is None:
            os.fchmod(fd, PRIVATE_MODE)
        else:
            os.fchown(fd, -1, self.private_gid)
            os.fchmod(fd, GROUP_MODE)

    def _meta_path(self, key: str) -> str:
        return os.path.join(self.meta, key[:2], key)

    def load(self, key: str) -> Answer | None:
        """The answer kept under ``key``, or ``None`` (also, with :attr:`answer_key`, for one
        not signed with it: planted, or written without the key). This node's only: the
        shared tier's is :meth:`load_shared`'s, which may wait on a network volume."""
        data = self._read(self._meta_path(key), _MAX_KEPT)
        return None if data is None else self._verified(key, data)

    def load_shared(self, key: str) -> Answer | None:
        """The signed answer kept under ``key`` on the shared tier (then kept here too), or
        ``None``: no key, no tier, none there, or a signature that does not hold. With it, a
        fleet of hubs asks the upstream once per request and TTL (another node's hub wrote it
        through, :meth:`save`). Blocking: off the event loop."""
        if self.answer_key is None:
            return None
        path = self._meta_path(key)
        data = self._from_shared(path)
        found = None if data is None else self._verified(key, data)
        if found is not None and data is not None:
            with contextlib.suppress(OSError):
                self.publish(path, data)
        return found

    def _verified(self, key: str, data: bytes) -> Answer | None:
        """The answer ``data`` holds, if its signature holds (or no key is set)."""
        if data.startswith(_SIGNED):
            signature, _, data = data[len(_SIGNED) :].partition(b"\n")
            secret = self.answer_key
            if secret is not None and not hmac.compare_digest(
                signature, _signature(secret, key, data)
            ):
                return None
        elif self.answer_key is not None:
            return None
        return Answer.decode(data)

    def save(self, key: str, answer: Answer, *, private: bool = False) -> None:
        """Keep ``answer`` under ``key``, in one step (a reader sees the old or the new one);
        ``private``: it came with a credential (see the module docstring)."""
        if len(answer.body) > MAX_ANSWER:
            return
        path = self._meta_path(key)
        data = answer.encode()
        if self.answer_key is not None:
            data = _SIGNED + _signature(self.answer_key, key, data) + b"\n" + data
        self.publish(path, data, private=private)
        if self.answer_key is not None and not private:
            self._to_shared(path, data)

    # -- answers on a fleet's shared tier (signed ones only) ----------------------------------
    def _from_shared(self, path: str) -> bytes | None:
        """The bytes of ``path``'s counterpart on the shared tier, or ``None``: a file of the
        file tier, or an object of a bucket (:func:`.._bucket.hub.load_answer`)."""
        if shared_url(os.environ) is not None:
            from .._bucket import hub  # noqa: PLC0415 - only a bucket tier loads its client

            return hub.load_answer(path, limit=_MAX_KEPT)
        l2 = _shared.counterpart(path)
        if l2 is None:
            return None
        top, rel = _shared.top_of(l2)
        try:
            dfd = _shared.open_below(top, rel)
        except OSError:
            return None
        try:
            return _store.read_small(os.path.basename(l2), dir_fd=dfd, limit=_MAX_KEPT)
        except (OSError, _store.RecordTooLargeError):
            return None
        finally:
            os.close(dfd)

    def _to_shared(self, path: str, data: bytes) -> None:
        """Write ``data`` through to ``path``'s counterpart on the shared tier (a fresh name,
        then a rename, in the directory reached without following a link; or the object of a
        bucket, :func:`.._bucket.hub.save_answer`), where this job may write; what came with a
        credential never goes there."""
        if shared_url(os.environ) is not None:
            from .._bucket import hub  # noqa: PLC0415 - only a bucket tier loads its client

            hub.save_answer(path, data)
            return
        l2 = _shared.counterpart(path)
        if l2 is None or not _shared.may_write():
            return
        top, rel = _shared.top_of(l2)
        with contextlib.suppress(OSError):
            dfd = _shared.open_below(top, rel, create=True)
            try:
                # Not synced: this node keeps its own synced copy, and a copy lost on the tier
                # only has another node ask the upstream.
                publish_at(dfd, os.path.basename(l2), data, sync=False)
            finally:
                os.close(dfd)

    def publish(self, path: str, data: bytes, *, private: bool = False) -> None:
        """Write ``data`` to a fresh file beside ``path`` and rename it into place, both in
        the directory reached without following a link (see the module docstring)."""
        dfd = self._open_dir(os.path.dirname(path))
        try:
            publish_at(
                dfd,
                os.path.basename(path),
                data,
                prepare=lambda fd: self._mode(fd, private=private),
            )
        finally:
            os.close(dfd)

    # -- files ----------------------------------------------------------------------------
    def blob_path(self, etag: str) -> str:
        """Where the file with this ETag is (or will be) kept."""
        return os.path.join(self.blobs, blob_name(etag))

    def open_blob(self, path: str, size: int | None) -> int | None:
        """A descriptor of the stored file at ``path`` (of ``size`` bytes, when known), or
        ``None``: a planted link, FIFO or device there is removed, never followed, and so is
        ``blobs`` swapped for a link (:meth:`_below`). A file with another name (a hard link,
        which could be any file its planter can name) is never read nor stamped: it is fetched
        again, and the fill replaces that name."""
        try:
            dfd = self._below(os.path.dirname(path))
        except OSError:
            return None
        try:
            fd, st = _store.open_regular_stat(os.path.basename(path), dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError:
            with contextlib.suppress(OSError):
                _store.remove_planted(path, dir_fd=dfd)
            return None
        finally:
            os.close(dfd)
        if st.st_nlink != 1 or (size is not None and st.st_size != size):
            os.close(fd)
            return None
        return fd

    def remove_blob(self, path: str) -> None:
        """Remove the stored file at ``path`` (its bytes failed their check), in its directory
        reached without following a link."""
        try:
            dfd = self._below(os.path.dirname(path))
        except OSError:
            return
        try:
            _held.remove(dfd, os.path.basename(path), directory=False)
        finally:
            os.close(dfd)

    def new_partial(self, path: str, *, private: bool = False) -> tuple[str, int]:
        """A fresh partial file beside ``path``: its name and a descriptor open for writing.

        The name carries this process's machine tag and pid (``.NAME.MACHINE-PID.ID.partial``),
        so that a partial left by a writer that died is known as such (:mod:`.partials`). The
        directory's descriptor is held until :meth:`publish_partial` or :meth:`drop_partial`.
        ``private``: the bytes came with a credential (see the module docstring).
        """
        dfd = self._open_dir(os.path.dirname(path))
        tmp = _store.partial_path(path)
        try:
            fd = _store.open_regular(
                os.path.basename(tmp), os.O_RDWR | os.O_CREAT | os.O_EXCL, PUBLIC_MODE, dir_fd=dfd
            )
            try:
                self._mode(fd, private=private)
            except BaseException:
                os.close(fd)
                _held.remove(dfd, os.path.basename(tmp), directory=False)
                raise
        except BaseException:
            os.close(dfd)
            raise
        self._partial_dirs[tmp] = dfd
        return tmp, fd

    def publish_partial(self, partial: str, path: str) -> None:
        """Rename ``partial`` (of :meth:`new_partial`) to ``path``, in the directory it was
        made in, whatever was swapped in for that directory's path meanwhile (on failure the
        partial is still :meth:`drop_partial`'s to remove)."""
        dfd = self._partial_dirs.get(partial)
        if dfd is None:
            raise OSError(errno.ENOENT, "not a partial of this store", partial)
        _held.rename(dfd, os.path.basename(partial), os.path.basename(path))
        del self._partial_dirs[partial]
        os.close(dfd)

    def drop_partial(self, partial: str) -> None:
        """Remove ``partial`` (of :meth:`new_partial`) from the directory it was made in."""
        dfd = self._partial_dirs.pop(partial, None)
        if dfd is None:
            return
        try:
            _held.remove(dfd, os.path.basename(partial), directory=False)
        finally:
            os.close(dfd)

    def peer_partial(self, path: str) -> int | None:
        """A read-only descriptor of the partial another live process is writing for ``path``
        (the most recently written, if several), or ``None``: see :mod:`.peers`. Only a
        regular file reached without following a link, one its writer has not abandoned."""
        prefix = f".{os.path.basename(path)}."
        mine = f".{_proc.machine_tag()}-{os.getpid()}."
        now = time.time()
        try:
            dfd = self._open_dir(os.path.dirname(path))
        except OSError:
            return None
        try:
            best: tuple[float, str] | None = None
            for name in os.listdir(dfd):
                if not (name.startswith(prefix) and name.endswith(".partial")) or mine in name:
                    continue
                try:
                    st = os.lstat(name, dir_fd=dfd)
                except OSError:
                    continue
                # A partial with another name (a hard link) could be any file: never read.
                if (
                    stat.S_ISREG(st.st_mode)
                    and st.st_nlink == 1
                    and not partials.abandoned(name, st, now, partials.STALE_AFTER)
                ):
                    best = max(best or (st.st_mtime, name), (st.st_mtime, name))
            if best is None:
                return None
            try:
                fd, st = _store.open_regular_stat(best[1], dir_fd=dfd)
            except OSError:
                return None
            if st.st_nlink != 1:  # linked since it was listed
                os.close(fd)
                return None
            return fd
        finally:
            os.close(dfd)

    def lock_path(self, key: str) -> str:
        """The lock file of ``key``: a path through the locks' held descriptor (see
        :meth:`_hold`), since the lock library opens by path."""
        return _shared.fd_path(self._hold(self.locks), f"{key}.lock")

    # -- what the hub asked upstream to wait for ------------------------------------------
    def blocked_until(self, upstream: str) -> float:
        """Until when (``time.time()``) the upstream asked every caller to wait; 0 if not."""
        data = self._read(os.path.join(self.state, key_of(upstream, "", "", "")), 64)
        try:
            return float(data) if data else 0.0
        except ValueError:
            return 0.0

    def block(self, upstream: str, until: float) -> None:
        """Record that the upstream asked every caller to wait until ``until``; a longer wait
        already recorded (by another process, say) is kept."""
        if self.blocked_until(upstream) >= until:
            return
        with contextlib.suppress(OSError):
            self.publish(os.path.join(self.state, key_of(upstream, "", "", "")), b"%.3f" % until)

    # -- what was served ------------------------------------------------------------------
    def served_line(self, row: dict[str, str]) -> str | None:
        """The served log's line for ``row``, or ``None`` once this process has it (each file
        is noted once per process): cheap, for the event loop; :meth:`record_served` writes."""
        line = json.dumps(row, sort_keys=True, separators=(",", ":"))
        if line in self._served_seen:
            return None
        self._served_seen.add(line)
        return line

    def record_served(self, line: str) -> None:
        """Append ``line`` (:meth:`served_line`) to this process's served log, for
        ``export-manifest`` (best effort). Blocking: off the event loop."""
        with contextlib.suppress(OSError):
            dfd = self._open_dir(self.served)
            try:
                fd = _served_log(os.path.basename(self._served_path), dfd)
            finally:
                os.close(dfd)
            try:
                os.write(fd, line.encode() + b"\n")
            finally:
                os.close(fd)

    def served_rows(self) -> list[dict[str, str]]:
        """Every row every process of this store recorded (duplicates removed)."""
        rows: dict[str, dict[str, str]] = {}
        try:
            dfd = self._below(self.served)
        except OSError:
            return []
        try:
            names = sorted(os.listdir(dfd))
            found = [read_regular(name, MAX_ANSWER, dir_fd=dfd) for name in names]
        except OSError:
            return []
        finally:
            os.close(dfd)
        for data in found:
            for line in (data or b"").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and all(isinstance(v, str) for v in row.values()):
                    rows[json.dumps(row, sort_keys=True)] = row
        return list(rows.values())


def _served_log(name: str, dir_fd: int) -> int:
    """This process's served log ``name`` in the directory open at ``dir_fd``, open for
    appending. One with another name (a hard link planted under this process's name, which
    could be any file) is refused (:class:`OSError`), never written, as a planted link is."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fd, st = _store.open_regular_stat(name, flags, PUBLIC_MODE, dir_fd=dir_fd)
    if st.st_nlink != 1:
        os.close(fd)
        raise _store.NotRegularFileError(
            errno.EMLINK, f"has {st.st_nlink} names (a hard link to another file): refused", name
        )
    return fd


def publish_at(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    prepare: Callable[[int], None] | None = None,
    sync: bool = True,
) -> None:
    """Put ``data`` at ``name`` in the directory held at ``dir_fd`` in one step: a fresh file
    (``O_EXCL``, no link followed) written beside it and renamed over it, so that a reader sees
    the old bytes or the new ones, never a torn file, and nothing planted under ``name`` is
    written through. ``prepare`` is given the fresh file's descriptor before any byte (to make
    it private); ``sync`` makes the bytes durable before the rename (a record whose loss only
    costs work again goes without). The fresh file is removed if anything fails.

    The hub's answers, its records of checked files and its answers on the shared tier are all
    written so: one routine, so that each keeps the same guarantees.
    """
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = _store.open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PUBLIC_MODE, dir_fd=dir_fd)
    try:
        try:
            if prepare is not None:
                prepare(fd)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        _held.rename(dir_fd, tmp, name)
    except BaseException:
        _held.remove(dir_fd, tmp, directory=False)
        raise


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
