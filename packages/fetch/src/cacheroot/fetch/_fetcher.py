"""The cache in front of :mod:`._http`: hits, single-flight misses, publishing, offline mode.

The hit path is what test suites run thousands of times, so it is kept to one ``os.stat`` and
two dictionary look-ups once a process has seen an entry: the sidecar is read the first time and
remembered with the entry's ``(size, mtime_ns, inode, ctime_ns)``; nothing is re-hashed unless
one of them changed. The ctime catches a file written in place even when its mtime was put back
(``touch -d``): users cannot set it. A changed file is hashed once; if its bytes do not match
the digest recorded for it (or the caller's ``sha256=``) it is corrupt: downloaded again, or
:class:`ChecksumError` when cache-only. ``CACHEROOT_VERIFY=first-use`` also hashes each entry
the first time a process uses it, which catches bytes substituted together with a forged
sidecar when the caller pins ``sha256=``. ``requests`` is imported only when something must be
downloaded.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from cacheroot.envs import CACHEROOT as _CACHEROOT
from cacheroot.envs import (
    CACHEROOT_MIRRORS,
    CACHEROOT_OFFLINE,
    CACHEROOT_VERIFY,
    VLLM_TEST_CACHE,
    VLLM_TEST_CACHE_ONLY,
    resolve,
    truthy,
)

from . import _shared, _stats, _store
from ._cachedir import CACHE_VARIABLE, cache_dir
from ._errors import (
    CacheMissError,
    ChecksumError,
    DownloadError,
    EmptyDownloadError,
    FetchError,
    LockTimeout,
    write_advice,
)
from ._lock import PathLock
from ._naming import entry_path, record_key, url_key
from ._progress import FALLBACK, HIT, MISS, RETRY, SHARED_TIER, FetchEvent, bars_wanted, host_of
from ._redact import Secret, forget_locals, printable, redact_url
from ._used import forget, touch_used

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import requests

    from ._progress import Reporter

    #: What a Fetcher knows of one version of an entry: its signature (size, mtime_ns, inode,
    #: ctime_ns), its sha256 (recorded, or hashed here), the URL key it holds, and its state.
    _Known = tuple[tuple[int, int, int, int], str | None, str | None, int]

log = logging.getLogger("cacheroot.fetch")

_SHA256 = re.compile(r"[0-9a-f]{64}")


def cache_only(environ: Mapping[str, str] | None = None) -> bool:
    """Whether downloads are cache-only now: ``CACHEROOT_OFFLINE`` or ``_VLLM_TEST_CACHE_ONLY``.

    The second is upstream vLLM's switch for its test helper. Read at every call: a cache-only
    run never downloads, a miss is an error. The fetcher, the pytest plugin and the model
    snapshots all ask this one function.
    """
    env = os.environ if environ is None else environ
    return truthy(env.get(CACHEROOT_OFFLINE)) or truthy(env.get(VLLM_TEST_CACHE_ONLY))


def not_a_directory(directory: str) -> str:
    """Why ``directory`` cannot be made because a file stands where it or an ancestor goes (a
    root that is a file), or ``""``: named as such, not as a cache that cannot be written."""
    current = directory
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            return ""
        current = parent
    if os.path.isdir(current):
        return ""
    return (
        f"cannot create {directory}: {current} is not a directory (expected a directory of the "
        f"cache, found a file); remove it, or point {_CACHEROOT} (or {CACHE_VARIABLE}) at a "
        "directory"
    )


#: States of a version in :attr:`Fetcher._known`: its sidecar vouches for it (not hashed here);
#: this process hashed it and it holds what it should; this process hashed it and it does not
#: hold what its own record (or the caller's pin that the record claims) says: corrupt.
_RECORDED, _HASHED, _CORRUPT = 0, 1, 2
#: The value of ``CACHEROOT_VERIFY`` that makes hits re-hash an entry once per process.
FIRST_USE = "first-use"


#: The last value of ``CACHEROOT_VERIFY`` that :func:`verify_first_use` accepted, and its answer
#: (every hit asks: a look-up, not a parse).
_verify_memo: list[Any] = [None, False]


def verify_first_use() -> bool:
    """Whether ``CACHEROOT_VERIFY`` asks to hash each entry the first time a process uses it.

    Read at every call; unset or blank means no (a hit trusts the recorded stat and ctime).
    Any other value than ``first-use`` raises :class:`FetchError`: a mistyped safety switch
    must not pass for "off".
    """
    value = os.environ.get(CACHEROOT_VERIFY)
    if value is None:
        return False
    if value == _verify_memo[0]:
        return bool(_verify_memo[1])
    mode = value.strip().lower()
    if mode == FIRST_USE or not mode:
        _verify_memo[:] = [value, bool(mode)]
        return bool(mode)
    raise FetchError(
        f"{CACHEROOT_VERIFY}={value!r} is not understood: set it to {FIRST_USE} (hash each "
        "cached entry the first time a process uses it) or leave it unset"
    )


def _hash_version(dest: str, sig: tuple[int, int, int, int]) -> tuple[str, int] | None:
    """``(sha256, size)`` of the version ``sig`` of ``dest``; ``None`` when that version is no
    longer there to hash (gone, replaced since the stat, or written while it was read)."""
    try:
        hashed = _store.hash_version(dest)
    except OSError:
        return None
    if hashed is None or hashed[2] != sig:
        return None
    return hashed[0], hashed[1]


def _log_corrupt(dest: str, actual: str, recorded: str) -> None:
    log.warning(
        "%s changed since it was published: sha256 %s, its record says %s; not served "
        "(downloaded again, or ChecksumError when cache-only)",
        printable(dest),
        actual,
        printable(recorded),
    )


def _resized(meta: dict[str, Any] | None, size: int) -> bool:
    """Whether ``meta`` records a size (its ``size``, else the size in its ``stat``) other
    than ``size``: the file is then not the one its record's digest was taken of."""
    if meta is None:
        return False
    recorded = meta.get("size")
    if not isinstance(recorded, int):
        st = meta.get("stat")
        recorded = st[0] if isinstance(st, list) and st and isinstance(st[0], int) else None
    return recorded is not None and recorded != size


def _log_resized(dest: str, size: int, recorded: str) -> None:
    log.warning(
        "%s changed since it was published: %d bytes, not the size its record gives (sha256 "
        "%s); not hashed, not served (downloaded again, or ChecksumError when cache-only)",
        printable(dest),
        size,
        printable(recorded),
    )


_S_ISREG = stat.S_ISREG


def _planted(dest: str) -> str:
    """What stands at ``dest`` if it is neither a regular file nor a directory (a link, FIFO or
    device another job planted: never followed, and replaced by a download), else ``""``."""
    try:
        mode = os.lstat(dest).st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    what = _store.kind(mode)
    log.warning("%s is %s, not a cached file: refused, not followed", dest, what)
    return what


def _within(path: str, top: str) -> bool:
    rel = os.path.relpath(path, top)
    return rel != ".." and not rel.startswith(".." + os.sep)


def _top(base: str | None, dest: str) -> str:
    """Where the walk down to ``dest``'s directory starts: the cache root when the cache
    directory ``base`` lies in it, ``base`` when it was set outside the root, ``dest``'s own
    directory for a caller's own path (``base`` ``None``). That start is the operator's (or the
    caller's) own setting, taken as given; nothing below it is reached through a link."""
    if base is None:
        return os.path.dirname(dest)
    root = resolve(os.environ).root
    if root is not None and _within(base, root):
        return root
    return base


def _base_of(dest: str) -> str | None:
    """The cache directory when the caller's own path ``dest`` lies in it (its directories are
    then reached from the root, as an entry's are), else ``None``."""
    try:
        base = cache_dir()
    except FetchError:
        return None
    return base if _within(dest, base) else None


def _refused(url: str, dest: str, exc: OSError) -> DownloadError:
    """The error for the directory of ``dest`` that could not be reached or made (``exc``):
    named by its path on the volume, never by a descriptor's."""
    where = exc.filename if isinstance(exc.filename, str) and os.path.isabs(exc.filename) else ""
    mode = 0
    with contextlib.suppress(OSError):
        mode = os.lstat(where).st_mode if where else 0
    if stat.S_ISLNK(mode):
        target = "?"
        with contextlib.suppress(OSError):
            target = os.readlink(where)
        return DownloadError(
            url,
            f"{where} is a symbolic link, to {target!r}: cacheroot does not write through a "
            "link inside the cache (another job may have planted it). Remove it; to keep a "
            f"namespace on another disk, point {VLLM_TEST_CACHE} there instead",
            err=errno.ELOOP,
        )
    if mode and not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        return DownloadError(
            url,
            f"{where} is {_store.kind(mode)}, where a directory of the cache belongs: refused, "
            "not used (another job may have planted it); remove it",
            err=errno.ENOTDIR,
        )
    blocked = not_a_directory(os.path.dirname(dest))
    if blocked:
        return DownloadError(url, blocked, err=errno.ENOTDIR)
    return DownloadError(
        url,
        f"cannot write into {os.path.dirname(dest)}: {exc.strerror or exc}; a read-only or "
        "foreign cache serves hits only: warm it where it is writable, or set "
        f"{CACHEROOT_OFFLINE}=1 to fail fast on misses",
        err=exc.errno,
    )


def _record_use(dfd: int, dest: str) -> None:
    """Record that ``dest`` was used (:func:`._used.touch_used`), its record made in the
    directory held at ``dfd``; what :mod:`._used` remembers is kept under ``dest``'s own path."""
    held = _shared.held_path(dfd, dest)
    touch_used(held)
    if held != dest:
        forget(held)


class _GoneError(Exception):
    """The held directory of an entry was removed (a prune of empty directories, which may
    also take a lock file nobody held yet) before this process made its partial there: it is
    reached, and made, again."""


#: How often an entry's directory removed under a miss is reached again before giving up.
_REOPEN = 16


def _removed(dfd: int) -> bool:
    """Whether the directory held at ``dfd`` was removed (no name leads to it any more)."""
    try:
        return os.fstat(dfd).st_nlink == 0
    except OSError:
        return False


#: How often taking an entry's lock is tried again when its lock file vanished under the lock
#: library (a prune removed it as a lock nobody held) before it could be held.
_LOCK_RACES = 8


def _take_lock(
    lock: PathLock, dfd: int, url: str, dest: str, hit: Callable[[], int | None]
) -> bool:
    """``lock.acquire`` for the entry ``dest``, whose directory is held at ``dfd``: ``False``
    when ``hit()`` found the entry first (or the directory went: the caller looks). Errors name
    the lock and the directory by their paths on the volume, not by the descriptor; a lock file
    removed under the lock library is taken again (a few times); :class:`_GoneError` when the
    directory itself was removed."""
    shown = _store.lock_path(dest)
    races = 0
    while True:
        try:
            return lock.acquire(done=lambda: hit() is not None or _removed(dfd))
        except LockTimeout as exc:  # noqa: PERF203 - a loop only to retry a rare race
            _path, waited, holder = exc.__reduce__()[1]
            raise LockTimeout(shown, waited, holder) from None
        except FetchError:
            raise
        except OSError as exc:
            if exc.errno == errno.ENOENT and _removed(dfd):
                raise _GoneError from exc  # its lock would be the first file made there
            if exc.errno in (errno.ENOENT, errno.EEXIST) and races < _LOCK_RACES:
                races += 1
                continue
            raise DownloadError(
                url,
                f"cannot write into {os.path.dirname(dest)}: {exc.strerror or exc}; a "
                "read-only or foreign cache serves hits only: warm it where it is writable, or "
                f"set {CACHEROOT_OFFLINE}=1 to fail fast on misses",
                err=exc.errno,
            ) from exc
        finally:
            _stats.add(lock_wait_seconds=lock.waited)


def _entry_dir(url: str, dest: str, base: str | None) -> int:
    """A descriptor of the directory ``dest`` lies in, made where missing, reached from the
    top (:func:`_top`) one component at a time without following a link
    (:func:`._shared.open_below`): a link planted anywhere between the cache root and the
    entry is refused (:class:`DownloadError` naming it), never written through. The caller
    holds it while it writes next to the entry, and closes it."""
    top = _top(base, dest)
    try:
        if not os.path.isdir(top):
            _store.makedirs(top)  # the operator's own setting
        return _shared.open_below(top, os.path.relpath(os.path.dirname(dest), top), create=True)
    except OSError as exc:
        raise _refused(url, dest, exc) from exc


def _in_the_way(url: str, dest: str) -> DownloadError:
    """The error for a directory where ``url``'s cached file belongs."""
    return DownloadError(
        url,
        f"{dest} is a directory, where the cached file of {url} belongs (replaced by hand, or "
        "unpacked there by another tool); nothing was downloaded. Run `cacheroot cache verify`, "
        "which moves it to the quarantine, or remove it yourself, then fetch again",
        err=errno.EISDIR,
    )


def _no_wider_record(dest: str, dir_fd: int) -> None:
    """Make the record of ``dest`` (a ``file://`` copy, in the directory held at ``dir_fd``) no
    more readable than ``dest`` itself.

    The copy already has no wider permissions than its source (see :mod:`._http`); its record
    holds the source's digest, which is for the same readers.
    """
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.lstat(os.path.basename(dest), dir_fd=dir_fd).st_mode) & 0o666
        record = os.path.basename(_store.meta_path(dest))
        fd = _store.open_regular(record, dir_fd=dir_fd)  # never chmod through a planted link
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


#: How long a hit waits for a publisher between its rename and its second record (seconds).
_SETTLE = 0.25


def _just_written(dest: str) -> bool:
    """Whether the sidecar of ``dest`` was written moments ago (a publish may be under way).

    A record without the ctime that is older than that is not the first half of a publish in
    progress (a crash in between, or a volume from before ctimes were recorded): waiting for it
    would only delay the one hash it needs.
    """
    try:
        return time.time() - os.lstat(_store.meta_path(dest)).st_mtime < _RECENT
    except OSError:
        return False


#: How recent a record without the ctime must be to be waited for (seconds).
_RECENT = 5.0


def _settled_meta(
    dest: str, sig: tuple[int, int, int, int], meta: dict[str, Any]
) -> dict[str, Any]:
    """The record of ``dest`` once its publisher has added the ctime, if it does so shortly.

    A record that matches the file but has no ``ctime_ns`` is the first of the two a publisher
    writes (before its rename; the second, right after it, adds the ctime the rename gave the
    file). A waiter that reads it in between would otherwise hash the whole entry: measured, a
    1 GiB entry cost one of 32 waiters two seconds. It waits up to :data:`_SETTLE` for the
    second record instead; a publisher that died in between leaves the first one, and the
    caller hashes the file once, as before.
    """
    deadline = time.monotonic() + _SETTLE
    while time.monotonic() < deadline:
        time.sleep(0.005)
        again = _store.read_meta(dest)
        if again is None:
            return meta
        if _store.vouches(again, sig) or "ctime_ns" in again:
            return again
    return meta


def _check_sha256(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    digest = sha256.strip().lower()
    if digest.startswith("sha256:"):
        digest = digest[7:]
    if not _SHA256.fullmatch(digest):
        raise ValueError(f"sha256 {sha256!r} is not a digest: expected 64 hexadecimal digits")
    return digest


class _Miss(NamedTuple):
    """How :meth:`Fetcher.fetch` was asked to fill a miss (its keyword arguments)."""

    namespace: str
    filename: str | None
    offline: bool | None
    timeout: float | tuple[float, float] | None
    progress: bool | None
    extract: bool
    max_unpacked: int | None


class Fetcher:
    """Shared settings and one pooled HTTP session for many :meth:`fetch` calls.

    Thread-safe: threads of one process exclude each other on an entry as processes do.
    ``retries`` counts failed attempts in a row (an attempt that moved at least one chunk
    forward resets it); ``backoff`` doubles per failure up to ``backoff_max``, with jitter;
    ``Retry-After`` is honoured up to ``retry_after_max``. ``max_size`` (bytes) refuses larger
    bodies. ``file://`` URLs are read only with ``allow_file``. ``stale_after`` is how old a
    partial file written on another machine must be before it is taken over.

    ``headers`` are sent with every request (``{"Authorization": "Bearer ..."}``), and dropped
    when a redirect leads to another origin (scheme, host or port); like credentials from
    ``~/.netrc`` (or ``$NETRC``), which requests reads for each host, they are never recorded.

    ``deadline`` (seconds; ``None``: none) bounds one download, retries and waits included: an
    origin that trickles a byte at a time, never slow enough for the read timeout, gives up
    there, and so releases the lock other processes wait on. The default, 30 minutes, is the
    default ``lock_timeout``: a waiter gives up no earlier than the download it waits for.

    ``reporter`` (default: none; the library prints nothing) is called with a
    :class:`~cacheroot.fetch.FetchEvent` for each finished fetch, each retry (before its wait)
    and each mirror given up on: the commands print them as lines, a caller may log them.
    Tokens for an origin come from the environment too (``CACHEROOT_AUTH_TOKENS``, ``HF_TOKEN``
    for the Hub), and mirrors from ``CACHEROOT_MIRRORS``: both read at each download.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        retries: int = 5,
        backoff: float = 0.5,
        backoff_max: float = 30.0,
        retry_after_max: float = 120.0,
        chunk_size: int = 1 << 20,
        max_size: int | None = None,
        max_redirects: int = 10,
        lock_timeout: float | None = 1800.0,
        stale_after: float = 3600.0,
        allow_file: bool = False,
        pool: int = 16,
        user_agent: str = "cacheroot-fetch",
        headers: Mapping[str, str] | None = None,
        deadline: float | None = 1800.0,
        reporter: Reporter | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retries = retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.chunk_size = chunk_size
        self.max_size = max_size
        self.max_redirects = max_redirects
        self.lock_timeout = lock_timeout
        self.stale_after = stale_after
        self.allow_file = allow_file
        self.pool = pool
        self.user_agent = user_agent
        # Values kept as Secret: a traceback's locals and any repr show "***", not a token.
        self.headers = {
            k: Secret(v) if isinstance(v, str) else v for k, v in (headers or {}).items()
        }
        self.deadline = deadline
        self.reporter = reporter
        self._session: requests.Session | None = None
        self._session_lock = threading.Lock()
        # entry path -> what this process knows of the version it last saw (see _Known)
        self._known: dict[str, _Known] = {}

    # -- public --------------------------------------------------------------------------
    def path(self, url: str, *, namespace: str = "downloads", filename: str | None = None) -> Path:
        """Where ``url`` is (or would be) cached; touches nothing."""
        return Path(entry_path(cache_dir(), namespace, url, filename))

    def fetch(
        self,
        url: str,
        *,
        sha256: str | None = None,
        namespace: str = "downloads",
        filename: str | None = None,
        offline: bool | None = None,
        timeout: float | tuple[float, float] | None = None,
        progress: bool | None = None,
        extract: bool = False,
        max_unpacked: int | None = None,
        fallbacks: Sequence[str] = (),
    ) -> Path:
        """The local path of ``url``'s bytes, downloading them first on a miss.

        ``sha256`` (hex) is verified on every download, and a cached entry recorded with another
        digest is downloaded again. ``offline`` (default: :func:`cache_only`, that is
        ``CACHEROOT_OFFLINE`` or ``_VLLM_TEST_CACHE_ONLY``) forbids the network: a miss raises
        :class:`CacheMissError`. ``timeout`` is the read timeout, or a
        ``(connect, read)`` pair. ``progress`` shows a bar (default: when standard
        error is a terminal, not a dumb one, outside CI: :func:`~._progress.bars_wanted`).
        ``extract`` unpacks a zip or tar archive once per volume and returns its directory
        (``<entry>.extracted``, published atomically; unsafe members refuse the whole archive).
        ``max_unpacked`` bounds the bytes it may unpack to (default 16 GiB). ``fallbacks`` are
        other URLs of the same bytes, tried in order after ``url`` (and its mirrors) fail; the
        entry is ``url``'s whichever served it.
        """
        started = 0.0 if self.reporter is None else time.monotonic()
        digest = _check_sha256(sha256)
        dest = entry_path(cache_dir(), namespace, url, filename)
        key = record_key(url)
        size = self._cached_size(url, dest, key, digest)
        if size is not None:
            _stats.add(hits=1, bytes_from_cache=size)
            return self._serve(url, dest, HIT, size, started, extract, max_unpacked)
        # A miss: a failure leaves no credential in the traceback's locals (the URL's query,
        # a token in http.client's request bytes) for `pytest -l` to print. The hit above
        # makes no request, and pays nothing for this.
        before = sys.exc_info()[1]  # what the caller is handling stays as it is
        try:
            return self._miss(
                url,
                dest,
                key=key,
                digest=digest,
                started=started,
                how=_Miss(namespace, filename, offline, timeout, progress, extract, max_unpacked),
                fallbacks=fallbacks,
            )
        except Exception as exc:
            forget_locals(exc, before)
            del url, fallbacks  # this frame still runs: its copies of the caller's URLs go
            raise

    def _miss(
        self,
        url: str,
        dest: str,
        *,
        key: str,
        digest: str | None,
        started: float,
        how: _Miss,
        fallbacks: Sequence[str],
    ) -> Path:
        """:meth:`fetch` after its hit step found nothing usable."""
        if os.path.isdir(dest) and not os.path.islink(dest):
            raise _in_the_way(url, dest)
        # A miss records the entry's use where it writes the entry: in its held directory.
        used = not how.extract
        if cache_only() if how.offline is None else how.offline:
            size = self._offline_miss(
                url, dest, key, digest, namespace=how.namespace, filename=how.filename, used=used
            )
            return self._serve(
                url,
                dest,
                MISS,
                size,
                started,
                how.extract,
                how.max_unpacked,
                SHARED_TIER,
                recorded=True,
            )
        kind, served = self._fill(
            url,
            dest,
            digest,
            lambda: self._hit(dest, key, digest),
            timeout=how.timeout,
            progress=how.progress,
            fallbacks=fallbacks,
            base=cache_dir(),
            used=used,
        )
        return self._serve(
            url, dest, kind, None, started, how.extract, how.max_unpacked, served, recorded=True
        )

    def cached(
        self,
        url: str,
        *,
        sha256: str | None = None,
        namespace: str = "downloads",
        filename: str | None = None,
    ) -> Path | None:
        """The entry of ``url`` when this host's cache holds it (as a hit of :meth:`fetch`
        checks it), else ``None``: no network, no shared tier, nothing written."""
        dest = entry_path(cache_dir(), namespace, url, filename)
        if self._hit(dest, record_key(url), _check_sha256(sha256)) is None:
            return None
        return Path(dest)

    # -- the steps of fetch: hit, offline, fill ------------------------------------------
    def _cached_size(self, url: str, dest: str, key: str, digest: str | None) -> int | None:
        """The hit step: the entry's size when ``dest`` holds ``url``'s bytes, else None.

        An entry whose record still names the URL with its credentials (written before records
        were redacted) is a hit too, once its record is rewritten: see :meth:`_legacy_hit`.
        """
        size = self._hit(dest, key, digest)
        if size is None and "@" in url:
            size = self._legacy_hit(url, dest, key, digest)
        return size

    def _offline_miss(
        self,
        url: str,
        dest: str,
        key: str,
        digest: str | None,
        *,
        namespace: str,
        filename: str | None,
        used: bool = False,
    ) -> int:
        """The offline step: a miss served by the shared tier (its size), or an error saying why.

        The network is forbidden, so the only source left is the shared tier (local, not the
        network). Otherwise the error tells what to do: a corrupt entry raises
        :class:`ChecksumError` (a "warm it first" would hide that the cached bytes are wrong), a
        planted link or special file is named as refused, and a call with its own namespace or
        file name gets the exact ``cacheroot fetch`` command that warms it.
        """
        planted = _planted(dest)  # before the shared tier's pull may touch it
        size = self._from_shared(
            url,
            dest,
            key,
            digest,
            lambda: self._hit(dest, key, digest),
            base=cache_dir(),
            used=used,
        )
        if size is not None:
            return size
        self._raise_if_corrupt(url, dest, digest)
        hint = ""
        if planted:
            hint = (
                f"{dest} is {planted}, not a cached file: refused, not followed (another "
                "job may have planted it); remove it and warm the cache again"
            )
        raise CacheMissError(url, dest, hint, sha256=digest, namespace=namespace, filename=filename)

    def _serve(  # noqa: PLR0917 - the state of one fetch, passed on as it is
        self,
        url: str,
        dest: str,
        kind: str,
        size: int | None,
        started: float,
        extract: bool,  # noqa: FBT001
        max_unpacked: int | None,
        served: str = "",
        *,
        recorded: bool = False,
    ) -> Path:
        """The last step of every fetch: the path to return (unpacked when asked), reported.

        ``recorded``: the entry's use is recorded already (by the miss that wrote it)."""
        path = self._finish(dest, extract=extract, max_unpacked=max_unpacked, recorded=recorded)
        if self.reporter is not None:
            if size is None:
                with contextlib.suppress(OSError):
                    size = os.lstat(dest).st_size
            self._done(kind, url, path, size=size, started=started, served=served)
        return path

    def _done(
        self, kind: str, url: str, path: Path, *, size: int | None, started: float, served: str = ""
    ) -> None:
        """Report a finished fetch; ``served`` is the URL a miss came from (or SHARED_TIER)."""
        assert self.reporter is not None  # noqa: S101 - the callers test it
        source = served if served == SHARED_TIER else host_of(served) if served else ""
        self.reporter(
            FetchEvent(
                kind,
                redact_url(url),
                path=str(path),
                size=size,
                seconds=time.monotonic() - started,
                source=source,
                tried=redact_url(served) if served not in ("", url, SHARED_TIER) else "",
            )
        )

    def _fetch_to(
        self,
        url: str,
        dest: str,
        *,
        sha256: str | None,
        offline: bool | None,
        timeout: float | tuple[float, float] | None,
        hint: str = "",
    ) -> None:
        """Make ``url`` present at the caller's own path ``dest`` (absolute), by plain-file rules.

        For callers that name and check paths their own way (:mod:`.vllm_compat`): any non-empty
        regular file at ``dest`` is a hit, whichever URL filled it and with or without a sidecar;
        with ``sha256`` (normalised hex) it must also have that digest, hashed once per version
        of the file. A miss is downloaded under the same lock, partial and atomic publishing as
        :meth:`fetch`; an empty body raises :class:`EmptyDownloadError` and publishes nothing.
        The use is not recorded (``dest`` may lie outside the cache): the caller decides.
        """
        key = record_key(url)
        size = self._plain_hit(dest, key, sha256)
        if size is not None:
            _stats.add(hits=1, bytes_from_cache=size)
            return
        if offline is None:
            offline = cache_only()
        if offline:
            served = self._from_shared(
                url,
                dest,
                key,
                sha256,
                lambda: self._plain_hit(dest, key, sha256),
                base=_base_of(dest),
            )
            if served is not None:
                return
            self._raise_if_corrupt(url, dest, sha256)
            raise CacheMissError(url, dest, hint)
        if os.path.isdir(dest) and not os.path.islink(dest):
            raise IsADirectoryError(
                errno.EISDIR, "a directory is where the cached file should be", dest
            )
        self._fill(
            url,
            dest,
            sha256,
            lambda: self._plain_hit(dest, key, sha256),
            timeout=timeout,
            progress=None,
            nonempty=True,
            base=_base_of(dest),
        )

    def _finish(
        self, dest: str, *, extract: bool, max_unpacked: int | None = None, recorded: bool = False
    ) -> Path:
        """What :meth:`fetch` returns for a cached ``dest``: it, or its unpacked directory.
        Its use is recorded unless ``recorded`` says it was."""
        if extract:
            from ._archive import MAX_SIZE, extract_entry  # noqa: PLC0415 - only when unpacking

            bound = MAX_SIZE if max_unpacked is None else max_unpacked
            return extract_entry(
                dest, lock_timeout=self.lock_timeout, max_size=bound, verify=verify_first_use()
            )
        if not recorded:
            touch_used(dest)  # at most one cheap write per entry per hour: see _used
        return Path(dest)

    def close(self) -> None:
        """Close the HTTP session (a later miss opens a new one)."""
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def _from_shared(
        self,
        url: str,
        dest: str,
        key: str,
        digest: str | None,
        hit: Callable[[], int | None],
        *,
        base: str | None = None,
        used: bool = False,
    ) -> int | None:
        """A cache-only miss served by the shared tier (local, not the network): its size.

        The entry's directory is reached as a download reaches it (:func:`_entry_dir`, from
        ``base``), only once the shared tier has a copy to try; ``used`` records its use there.
        """
        dfd = -1

        def open_dir() -> int:
            nonlocal dfd
            dfd = _entry_dir(url, dest, base)
            return dfd

        try:
            if not _shared.pull_only(dest, key, digest, open_dir=open_dir):
                return None
            if used:
                _record_use(dfd, dest)
        finally:
            if dfd >= 0:
                os.close(dfd)
        size = hit()
        if size is not None:
            _stats.add(misses=1)
        return size

    # -- the hit path --------------------------------------------------------------------
    def _hit(self, dest: str, key: str, digest: str | None) -> int | None:
        """The entry's size if ``dest`` holds ``key``'s bytes (matching ``digest``), else None.

        One ``os.lstat``: only a regular file is a hit (a link is never followed). The version
        it shows (size, mtime, inode, ctime) is compared with what
        this process knows of the entry; the sidecar is read only for a version not seen yet,
        and a version it does not vouch for is hashed once (:meth:`_recheck`). With
        ``CACHEROOT_VERIFY=first-use`` a version vouched for by its sidecar alone is hashed too,
        the first time this process uses it (:meth:`_first_use`). A corrupt version is no hit.
        """
        try:
            st = os.lstat(dest)
        except OSError:
            return None
        if not _S_ISREG(st.st_mode):
            return None  # a link, FIFO or device planted there is never followed nor read
        sig = _store.signature(st)
        known = self._known.get(dest)
        if known is None or known[0] != sig:
            known = self._recheck(dest, sig, key, digest)
            if known is None:
                return None
            self._known[dest] = known
        if known[2] != key or (digest is not None and known[1] != digest):
            return None
        if known[3] == _RECORDED and verify_first_use():
            known = self._first_use(dest, known)
        return None if known is None or known[3] == _CORRUPT else st.st_size

    def _plain_hit(self, dest: str, key: str, digest: str | None) -> int | None:
        """The size of a non-empty regular file at ``dest`` (of ``digest`` if given), else None.

        A symbolic link is not a hit (it may point anywhere). With a digest, a file this
        process has not seen in its current version is hashed once and its sidecar renewed
        (and, with ``CACHEROOT_VERIFY=first-use``, once in this process whatever its sidecar
        says); without one, any such file is a hit and nothing is checked.
        """
        try:
            st = os.lstat(dest)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return None
        if digest is None:
            return st.st_size
        sig = _store.signature(st)
        known = self._known.get(dest)
        if known is None or known[0] != sig:
            known = self._recheck(dest, sig, key, digest)
            if known is not None:
                self._known[dest] = known
        if known is None or known[1] != digest:
            return None
        if known[3] == _RECORDED and verify_first_use():
            known = self._first_use(dest, known)
        return None if known is None or known[3] == _CORRUPT else st.st_size

    def _recheck(
        self, dest: str, sig: tuple[int, int, int, int], key: str, digest: str | None
    ) -> _Known | None:
        """What the version ``sig`` of ``dest`` holds, from its sidecar or by hashing it once.

        A sidecar that records this very version (ctime included) is believed. Otherwise the
        file was written in place (the ctime moved, even if the mtime was put back), replaced,
        touched, copied or restored, or its record predates the ctime: it is hashed and judged
        by the caller's ``digest``, else by the digest its record claims. Bytes that match are
        recorded anew; bytes that do not match their own record are corrupt. ``None``: no
        verdict (nothing to check against, or the file changed while it was hashed).
        """
        meta = _store.read_meta(dest)
        if (
            meta is not None
            and "ctime_ns" not in meta
            and meta.get("stat") == list(sig[:3])
            and _just_written(dest)
        ):
            meta = _settled_meta(dest, sig, meta)
        recorded = meta.get("sha256") if meta is not None else None
        url = meta.get("url") if meta is not None else None
        if not isinstance(recorded, str) or not _SHA256.fullmatch(recorded):
            recorded = None  # a record's digest is 64 hex digits, or it vouches for nothing
        if meta is not None and _store.vouches(meta, sig):
            return sig, recorded, url, _RECORDED
        expected = digest or recorded
        if expected is not None and expected == recorded and _resized(meta, sig[0]):
            # Not the bytes its record describes, whatever they hash to: judged by the size
            # alone, so that a sparse giant planted in the entry's place is never read whole.
            _log_resized(dest, sig[0], recorded)
            return sig, "", url, _CORRUPT
        # Nothing to check it against (download), or no verdict (look again later).
        hashed = None if expected is None else _hash_version(dest, sig)
        if hashed is None:
            return None
        actual, size = hashed
        if actual != expected:
            # Remember the verdict for this version of the file, so that waiters polling for
            # a fresh download do not re-hash the wrong one at every tick.
            if recorded is not None and actual != recorded:
                _log_corrupt(dest, actual, recorded)
                return sig, actual, url, _CORRUPT
            return sig, actual, url, _HASHED  # another version than the one asked for
        # The file is right but its record is stale (copied, touched, restored): renew it.
        if digest is not None:
            url = key
        record = _store.record_signature({**(meta or {}), "url": url, "sha256": actual}, sig)
        record["size"] = size
        with contextlib.suppress(OSError):  # read-only cache: the hash check is what counts
            _store.write_meta(dest, record)
        return sig, actual, url, _HASHED

    def _first_use(self, dest: str, known: _Known) -> _Known | None:
        """``CACHEROOT_VERIFY=first-use``: hash a version its sidecar vouches for, once.

        The verdict is remembered for the version, so this process hashes it only once. The
        recorded digest is the caller's pin when one was given (the caller checked they agree),
        so bytes substituted under a forged record are caught.
        """
        sig, recorded, url, _ = known
        if recorded is None:
            return None  # nothing recorded to check it against: not served
        hashed = _hash_version(dest, sig)
        if hashed is None:
            return None  # replaced or written meanwhile: judged afresh at the next look
        if hashed[0] == recorded:
            verdict: _Known = (sig, recorded, url, _HASHED)
        else:
            _log_corrupt(dest, hashed[0], recorded)
            verdict = (sig, hashed[0], url, _CORRUPT)
        self._known[dest] = verdict
        return verdict

    def _raise_if_corrupt(self, url: str, dest: str, digest: str | None) -> None:
        """Raise :class:`ChecksumError` if ``dest``, as it is now, was found corrupt.

        For cache-only calls: a corrupt entry cannot be downloaded again there, and a
        :class:`CacheMissError` ("warm it first") would hide that the cached bytes are wrong.
        """
        known = self._known.get(dest)
        if known is None or known[3] != _CORRUPT:
            return
        try:
            st = os.lstat(dest)
        except OSError:
            return
        if known[0] != _store.signature(st):
            return
        expected = digest or (_store.read_meta(dest) or {}).get("sha256")
        raise ChecksumError(url, str(expected), str(known[1]), st.st_size, cached=dest)

    def _legacy_hit(self, url: str, dest: str, key: str, digest: str | None) -> int | None:
        """A hit on an entry whose record still names ``url`` with its credentials.

        Versions before records were redacted wrote them so. The record is rewritten redacted
        (the entry keeps its name and bytes), then it is an ordinary hit; a read-only cache
        keeps serving it by the old record.
        """
        raw = url_key(url)
        if raw == key:
            return None
        meta = _store.read_meta(dest)
        if meta is None or meta.get("url") != raw:
            return None
        try:
            _store.write_meta(dest, {**meta, "url": key})
        except OSError:
            return self._hit(dest, raw, digest)
        self._known.pop(dest, None)
        return self._hit(dest, key, digest)

    # -- the miss path -------------------------------------------------------------------
    def _fill(
        self,
        url: str,
        dest: str,
        digest: str | None,
        hit: Callable[[], int | None],
        *,
        timeout: float | tuple[float, float] | None,
        progress: bool | None,
        nonempty: bool = False,
        fallbacks: Sequence[str] = (),
        base: str | None = None,
        used: bool = False,
    ) -> tuple[str, str]:
        """Download ``url`` into ``dest`` once across processes, unless ``hit()`` finds it first.

        ``base`` is the cache directory ``dest`` lies in (``None``: ``dest`` is a caller's own
        path). The directory of ``dest`` is reached from the cache root without following a link
        (:func:`_entry_dir`: a link planted anywhere on the way is refused) and held: the lock,
        the partial, the record and the entry are all made there. ``used`` records the entry's
        use there too. Returns ``(HIT, "")`` when another thread or process published it
        meanwhile, else ``(MISS, where)``: :data:`SHARED_TIER`, or the URL that served it.
        """
        self._check_scheme(url)
        missed: list[bool] = []  # a miss is counted once, however often its directory is made
        for _ in range(_REOPEN):
            dfd = _entry_dir(url, dest, base)
            try:
                found = self._fill_at(
                    dfd,
                    url,
                    dest,
                    digest,
                    hit,
                    timeout=timeout,
                    progress=progress,
                    nonempty=nonempty,
                    fallbacks=fallbacks,
                    missed=missed,
                )
            except _GoneError:
                continue
            else:
                if used:
                    _record_use(dfd, dest)
                return found
            finally:
                os.close(dfd)
        raise DownloadError(
            url,
            f"cannot write into {os.path.dirname(dest)}: it was removed each time it was made "
            f"({_REOPEN} times; a prune of empty directories running in a loop?)",
            err=errno.ENOENT,
        )

    def _fill_at(
        self,
        dfd: int,
        url: str,
        dest: str,
        digest: str | None,
        hit: Callable[[], int | None],
        *,
        timeout: float | tuple[float, float] | None,
        progress: bool | None,
        nonempty: bool,
        fallbacks: Sequence[str],
        missed: list[bool],
    ) -> tuple[str, str]:
        """:meth:`_fill` in the directory held at ``dfd``; :class:`_GoneError` when that
        directory was removed before the partial was made in it. ``missed`` is appended to
        once the miss is counted."""
        served = [url]

        def download() -> None:
            served[0] = self._download(
                url,
                dest,
                digest,
                timeout=timeout,
                progress=progress,
                nonempty=nonempty,
                fallbacks=fallbacks,
                dir_fd=dfd,
            )

        while True:
            lock = PathLock(
                _shared.held_path(dfd, _store.lock_path(dest)), timeout=self.lock_timeout
            )
            acquired = _take_lock(lock, dfd, url, dest, hit)
            if not acquired:  # another process published it while we waited
                size = hit()
                if size is None:
                    if _removed(dfd):
                        raise _GoneError  # no lock can be made there any more
                    continue  # and it was not what we need: take the lock ourselves
                _stats.add(hits=1, bytes_from_cache=size)
                return HIT, ""
            try:
                if _removed(dfd):
                    raise _GoneError  # a lock file taken, then removed with its directory
                size = hit()
                if size is not None:
                    _stats.add(hits=1, bytes_from_cache=size)
                    log.debug(
                        "%s arrived while waiting %.2f s for the lock",
                        redact_url(url),
                        lock.waited,
                    )
                    return HIT, ""
                if not missed:
                    _stats.add(misses=1)
                    missed.append(True)
                # With a shared tier (CACHEROOT_SHARED): its copy first, one host downloading.
                tier = _shared.fill_file(
                    dest, record_key(url), digest, download, timeout=self.lock_timeout, dir_fd=dfd
                )
            except DownloadError as exc:
                if exc.errno == errno.ENOENT and _removed(dfd):
                    raise _GoneError from exc  # removed before the partial was made in it
                raise
            finally:
                lock.release()
            return MISS, SHARED_TIER if tier == _shared.SHARED else served[0]

    def _check_scheme(self, url: str) -> None:
        scheme = urlsplit(url).scheme.lower()
        if scheme in ("http", "https") or (scheme == "file" and self.allow_file):
            return
        allowed = "http, https" + (", file" if self.allow_file else "")
        extra = "" if self.allow_file else " (file:// needs Fetcher(allow_file=True))"
        raise DownloadError(url, f"{url}: scheme {scheme!r} is not supported: use {allowed}{extra}")

    def _session_(self) -> requests.Session:
        from ._http import new_session  # noqa: PLC0415 - requests only on a miss

        with self._session_lock:
            if self._session is None:
                self._session = new_session(self.pool)
            return self._session

    def _download(
        self,
        url: str,
        dest: str,
        digest: str | None,
        *,
        timeout: float | tuple[float, float] | None,
        progress: bool | None,
        nonempty: bool = False,
        fallbacks: Sequence[str] = (),
        dir_fd: int,
    ) -> str:
        """Download ``url`` into ``dest`` from the first source that serves it; that source.

        The sources are ``url``'s mirrors, ``url``, then ``fallbacks`` (:mod:`._mirrors`). Each
        but the last gets one retry; one that fails on the network, with an HTTP error, or with
        bytes that do not verify, is given up for the next. Failures on this side (a full
        disk) stop at once. When all fail, the error names each source and its reason.
        ``dir_fd`` is the held directory ``dest`` lies in: the partial is written there.
        """
        from ._mirrors import candidates  # noqa: PLC0415 - only on a miss

        if timeout is None:
            timeouts = (self.connect_timeout, self.read_timeout)
        elif isinstance(timeout, tuple):
            timeouts = timeout
        else:
            timeouts = (min(self.connect_timeout, timeout), timeout)
        # A quiet reporter (`cacheroot warm -q`) keeps standard error silent, bars included.
        quiet = getattr(self.reporter, "quiet", False)
        show = (not quiet and bars_wanted()) if progress is None else progress
        started = time.monotonic()
        until = None if self.deadline is None else started + self.deadline
        sources = candidates(url, fallbacks)
        # A partial left by a process that died is only worth adopting when a digest will
        # check the spliced result; without one, start clean.
        part = _store.Partial.adopt(dest, stale_after=self.stale_after, dir_fd=dir_fd)
        adopted = part is not None
        if part is not None and digest is None:
            part.discard()
            part, adopted = None, False
        if part is None:
            part = self._new_partial(url, dest, dir_fd)
        failed: list[tuple[str, FetchError]] = []
        try:
            for n, source in enumerate(sources, 1):
                last = n == len(sources)
                try:
                    self._check_scheme(source)
                    meta = self._transfer(
                        source,
                        part,
                        digest,
                        timeouts,
                        adopted=adopted,
                        show=show,
                        nonempty=nonempty,
                        until=until,
                        retries=None if last else min(1, self.retries),
                        canonical=url,
                    )
                except (DownloadError, ChecksumError, EmptyDownloadError) as exc:
                    if len(sources) == 1 or getattr(exc, "errno", None) is not None:
                        raise  # the only source, or a failure on this side: as it is
                    failed.append((source, exc))
                    if last:
                        raise _all_failed(url, failed) from exc
                    self._skip(url, source, sources[n], exc)
                    part.reset()
                    adopted = False
                    continue
                if source != url:
                    meta["mirror"] = redact_url(source)
                self._publish(url, dest, part, meta)
                if urlsplit(source).scheme.lower() == "file":
                    _no_wider_record(dest, dir_fd)
                break
        except BaseException:
            part.discard()
            raise
        elapsed = time.monotonic() - started
        _stats.add(downloads=1)
        rate = part.size / elapsed / 1e6 if elapsed > 0 else float("inf")
        log.info(
            "fetched %s: %d bytes in %.2f s (%.1f MB/s) from %s -> %s",
            redact_url(url),
            part.size,
            elapsed,
            rate,
            host_of(source),
            dest,
        )
        return source

    def _skip(self, url: str, source: str, following: str, exc: FetchError) -> None:
        """Say that ``source`` failed with ``exc`` and ``following`` is tried next."""
        log.info("%s failed (%s); trying %s", redact_url(source), exc, redact_url(following))
        if self.reporter is not None:
            self.reporter(
                FetchEvent(
                    FALLBACK,
                    redact_url(url),
                    tried=redact_url(source),
                    next=redact_url(following),
                    reason=redact_url(str(exc)),
                )
            )

    def _transfer(
        self,
        url: str,
        part: _store.Partial,
        digest: str | None,
        timeouts: tuple[float, float],
        *,
        adopted: bool,
        show: bool,
        nonempty: bool = False,
        until: float | None = None,
        retries: int | None = None,
        canonical: str = "",
    ) -> dict[str, Any]:
        """Fill ``part`` from ``url`` and verify it; an adopted partial that fails gets one clean
        retry.

        ``until`` (``time.monotonic()``) is the deadline of the whole download; ``retries``
        overrides the Fetcher's for this source; ``canonical`` is the entry's URL when ``url``
        is a mirror of it (retries are reported under it).
        """
        from ._auth import auth_headers  # noqa: PLC0415 - requests only on a miss
        from ._http import Transfer  # noqa: PLC0415

        auth = auth_headers(url)
        on_retry = None
        if self.reporter is not None:
            report, entry, shown = self.reporter, redact_url(canonical or url), redact_url(url)

            def on_retry(failures: int, allowed: int, wait: float, reason: str) -> None:
                report(
                    FetchEvent(
                        RETRY,
                        entry,
                        tried=shown,
                        reason=reason,
                        attempt=failures,
                        attempts=allowed,
                        wait=wait,
                    )
                )

        while True:
            transfer = Transfer(
                self._session_(),
                self,  # the Fetcher's own attributes are the transfer's settings
                url,
                part,
                timeout=timeouts,
                progress=show,
                allow_file=self.allow_file,
                until=until,
                retries=retries,
                auth=auth,
                on_retry=on_retry,
            )
            meta = transfer.run()
            _stats.add(bytes_downloaded=transfer.received)
            if nonempty and part.size == 0:
                raise EmptyDownloadError(url)
            if digest is None or part.sha256 == digest:
                return meta
            if not adopted:
                # A local file not everyone may read: its digest is not for the log.
                actual = "" if transfer.private else part.sha256
                raise ChecksumError(url, digest, actual, part.size)
            # The spliced file is wrong: the partial may have come from another version.
            log.info("%s: adopted partial did not verify; downloading again", redact_url(url))
            part.reset()
            adopted = False

    def _new_partial(self, url: str, dest: str, dir_fd: int) -> _store.Partial:
        try:
            return _store.Partial(dest, dir_fd=dir_fd)
        except OSError as exc:
            raise DownloadError(
                url, f"cannot create a file next to {dest}: {exc.strerror}", err=exc.errno
            ) from exc

    def _publish(self, url: str, dest: str, part: _store.Partial, meta: dict[str, Any]) -> None:
        try:
            record = part.commit({**meta, "url": record_key(url)})
        except OSError as exc:
            if exc.errno == errno.ENOENT and not part.present():
                raise DownloadError(
                    url,
                    f"could not publish {dest}: its partial file {part.path} was removed by "
                    "another process while this one was writing it (a prune, or a process that "
                    "took this one for dead); nothing was published: fetch it again",
                    err=exc.errno,
                ) from exc
            raise DownloadError(
                url,
                f"could not publish {dest}: {exc.strerror or exc}; {write_advice(exc.errno)}",
                err=exc.errno,
            ) from exc
        triple = record["stat"]
        sig = (triple[0], triple[1], triple[2], record.get("ctime_ns", -1))
        # Hashed while it was written: this process need not hash it again on first use.
        self._known[dest] = (sig, record["sha256"], record["url"], _HASHED)


def _all_failed(url: str, failed: list[tuple[str, FetchError]]) -> DownloadError:
    """The error when every source of ``url`` failed: each source, in order, with its reason."""
    # One line per source: the reasons are escaped here, so the line feeds between them are the
    # only ones the message holds (its printer escapes none of those, and a reason cannot forge
    # a line of its own).
    tried = "".join(f"\n  {printable(f'{redact_url(source)}: {exc}')}" for source, exc in failed)
    status = next((e.status for _, e in reversed(failed) if isinstance(e, DownloadError)), None)
    return DownloadError(
        url,
        f"could not fetch {url} from any of its {len(failed)} sources (mirrors from "
        f"{CACHEROOT_MIRRORS}, the URL, its fallback URLs), tried in this order:{tried}",
        status=status,
    )


_default: Fetcher | None = None
_default_lock = threading.Lock()


def default_fetcher() -> Fetcher:
    """The :class:`Fetcher` that :func:`fetch` uses (created on first use)."""
    global _default  # noqa: PLW0603 - one lazily built default, like requests' own
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Fetcher()
    return _default


def fetch(
    url: str,
    *,
    sha256: str | None = None,
    namespace: str = "downloads",
    filename: str | None = None,
    offline: bool | None = None,
    timeout: float | tuple[float, float] | None = None,
    progress: bool | None = None,
    extract: bool = False,
    max_unpacked: int | None = None,
    fallbacks: Sequence[str] = (),
) -> Path:
    """Download ``url`` once into ``$_VLLM_TEST_CACHE/<namespace>/`` and return its path.

    See :meth:`Fetcher.fetch`; this calls it on :func:`default_fetcher`.
    """
    try:
        return default_fetcher().fetch(
            url,
            sha256=sha256,
            namespace=namespace,
            filename=filename,
            offline=offline,
            timeout=timeout,
            progress=progress,
            extract=extract,
            max_unpacked=max_unpacked,
            fallbacks=fallbacks,
        )
    except Exception:
        del url, fallbacks  # what Fetcher.fetch cleared below, this frame must not show
        raise
