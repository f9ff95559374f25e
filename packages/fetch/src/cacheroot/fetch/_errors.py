"""Errors of :mod:`cacheroot.fetch`: a small hierarchy rooted at :class:`FetchError`.

Each leaf is also the built-in a caller would naturally catch (a checksum mismatch is a
``ValueError``, an offline miss a ``FileNotFoundError``, ...), so code that knows nothing of
cacheroot still handles them sensibly. Every class pickles through ``__reduce__`` with its own
constructor arguments: pytest-xdist sends exceptions from workers to the controller, and
``OSError`` subclasses with keyword arguments do not survive the default pickling.

A URL's credentials never reach a message or an attribute: every error redacts the URL it is
given, and the message it is given, with :func:`~._redact.redact_url`.
"""

from __future__ import annotations

import errno
import urllib.parse

from cacheroot.envs import VLLM_TEST_CACHE

from ._redact import redact_url

#: The command that fills a volume before an offline run, as the messages of a miss name it.
WARM_HINT = "`cacheroot warm MANIFEST`"

#: What a write to the cache fails with when its volume is full (or the file too large for it).
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_advice(err: int | None) -> str:
    """What to do about a write to the cache that failed with ``err``: free space only when
    the volume is full. Anything else (a name planted where the file or its record is written,
    a directory made read-only, an I/O error) is no matter of space, and saying so sends the
    reader the wrong way."""
    if err in _FULL:
        return f"free space there or point {VLLM_TEST_CACHE} at a larger volume"
    return "check who else writes that directory (and its permissions), then fetch it again"


TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Any


class FetchError(Exception):
    """Root of every error that :mod:`cacheroot.fetch` raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args)


class ChecksumError(FetchError, ValueError):
    """The downloaded (or cached) bytes do not have the expected sha256; nothing was published."""

    def __init__(self, url: str, expected: str, actual: str, size: int, cached: str = "") -> None:
        url = redact_url(url)
        if actual:
            got = f"got {actual} over {size} bytes"
        elif cached:
            got = f"found {size} bytes, not the size its record gives (not hashed)"
        else:
            got = (
                f"got other bytes ({size} bytes; their digest is not shown: the source is a "
                "local file that not everyone may read)"
            )
        if cached:
            # The bytes are on the volume, and wrong: "the origin served bad bytes" would mislead.
            message = (
                f"the cached entry {cached} for {url} is corrupt: expected sha256 {expected}, "
                f"{got}; it changed after it was published. This run is cache-only and "
                "downloads nothing: run `cacheroot cache verify` to quarantine it, then warm it "
                "again"
            )
        else:
            message = (
                f"sha256 mismatch for {url}: expected {expected}, {got}; "
                "nothing was published. If the file changed upstream, update the expected digest; "
                "otherwise the origin or a proxy served bad bytes (retry later)"
            )
        super().__init__(message)
        self._url, self._expected, self._actual, self._size = url, expected, actual, size
        self._cached = cached

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url, self._expected, self._actual, self._size, self._cached))

    @property
    def url(self) -> str:
        """The URL that was downloaded."""
        return self._url

    @property
    def expected(self) -> str:
        """The digest the caller asked for."""
        return self._expected

    @property
    def actual(self) -> str:
        """The digest of the bytes received (empty when withheld: a private local file)."""
        return self._actual

    @property
    def size(self) -> int:
        """How many bytes were received."""
        return self._size


class EmptyDownloadError(FetchError, ValueError):
    """The origin sent an empty body where a file was expected; nothing was published."""

    def __init__(self, url: str) -> None:
        url = redact_url(url)
        super().__init__(
            f"{url} answered with an empty body; nothing was published. Check the URL (an "
            "empty file cannot be a test asset), or retry later if the origin is misbehaving"
        )
        self._url = url

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url,))

    @property
    def url(self) -> str:
        """The URL that was downloaded."""
        return self._url


class CacheMissError(FetchError, FileNotFoundError):
    """Offline mode and the entry is not in the cache: no request was made.

    ``sha256``, ``namespace`` and ``filename`` are what the missed fetch asked for (where the
    raiser knows them), so that what explains the miss can spell the command or the manifest
    entry that warms it; without a ``hint`` the message gives that command.
    """

    def __init__(
        self,
        url: str,
        path: str,
        hint: str = "",
        *,
        sha256: str | None = None,
        namespace: str = "downloads",
        filename: str | None = None,
    ) -> None:
        url, hint = redact_url(url), redact_url(hint)
        hint = hint or fetch_hint(url, namespace=namespace, filename=filename)
        super().__init__(f"offline and {url} is not cached at {path}: {hint}")
        self._url, self._path, self._hint = url, path, hint
        self.sha256, self.namespace, self.filename = sha256, namespace, filename

    def __reduce__(self) -> tuple[Any, ...]:
        keywords = {"sha256": self.sha256, "namespace": self.namespace, "filename": self.filename}
        return (_rebuild_miss, (self._url, self._path, self._hint, keywords))

    def __str__(self) -> str:
        # FileNotFoundError would render only its errno fields; show the whole message.
        return str(self.args[0])

    @property
    def url(self) -> str:
        """The URL that was asked for."""
        return self._url

    @property
    def path(self) -> str:
        """Where the entry was expected."""
        return self._path

    @property
    def hint(self) -> str:
        """What to do: the command that warms the entry (as the caller that missed knows it)."""
        return self._hint


class DownloadError(FetchError, OSError):
    """A transfer failed for good (after retries), or could not be stored.

    ``status`` is the last HTTP status seen (``None`` when no response came, or when the failure
    was local, such as a full disk; then ``errno`` says which).
    """

    def __init__(
        self, url: str, message: str, status: int | None = None, err: int | None = None
    ) -> None:
        url, message = redact_url(url), redact_url(message)
        super().__init__(message)
        self._url, self._message, self._status, self._err = url, message, status, err
        if err is not None:
            self.errno = err

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url, self._message, self._status, self._err))

    def __str__(self) -> str:
        return self._message

    @property
    def url(self) -> str:
        """The URL that was being fetched."""
        return self._url

    @property
    def status(self) -> int | None:
        """The last HTTP status received, if any."""
        return self._status


class LockTimeout(FetchError, TimeoutError):  # noqa: N818 - filelock names it Timeout too
    """Waiting for another process's download of the same entry took longer than allowed."""

    def __init__(self, path: str, timeout: float, holder: str = "") -> None:
        who = f"; it is held by {holder}" if holder else ""
        super().__init__(
            f"waited {timeout:g} s for the lock on {path}{who}. Another process is still "
            "downloading that entry: wait longer (lock_timeout=...), or, if that process hangs, "
            "stop it. A holder that died is detected and its lock reclaimed automatically where "
            "this process can see the holder's processes (same pid namespace, no hidepid)"
        )
        self._path, self._timeout, self._holder = path, timeout, holder

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._path, self._timeout, self._holder))

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def path(self) -> str:
        """The lock file."""
        return self._path

    @property
    def timeout(self) -> float:
        """How long the caller waited, in seconds."""
        return self._timeout


def loopback_address(url: str) -> str:
    """``url``'s ``host:port`` when its host is this machine, else ``""``.

    A server on loopback lives as long as whatever started it (a test's origin, a local
    mirror): advice to fetch from it later must say that it has to be listening then.
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if host != "localhost":
        import ipaddress  # noqa: PLC0415 - only when a miss is explained

        try:
            if not ipaddress.ip_address(host).is_loopback:
                return ""
        except ValueError:
            return ""
    return parts.netloc.rpartition("@")[2]


def fetch_command(url: str, *, namespace: str = "downloads", filename: str | None = None) -> str:
    """The ``cacheroot fetch`` command line that warms ``url`` (redacted) as it was fetched."""
    command = f"cacheroot fetch {redact_url(url)}"
    if namespace != "downloads":
        command += f" --namespace {namespace}"
    if filename is not None:
        command += f" --filename {filename}"
    return command


def fetch_hint(url: str, *, namespace: str = "downloads", filename: str | None = None) -> str:
    """How to warm ``url`` (redacted) for an offline run, into its namespace and file name."""
    command = f"`{fetch_command(url, namespace=namespace, filename=filename)}` (or {WARM_HINT})"
    where = loopback_address(url)
    if where:
        return f"warm it while its server ({where}, on this machine) listens, with {command}"
    return f"warm it first with {command}"


def _rebuild_miss(url: str, path: str, hint: str, keywords: dict[str, Any]) -> CacheMissError:
    """Unpickle a :class:`CacheMissError` with its keyword arguments."""
    return CacheMissError(url, path, hint, **keywords)
