"""``MediaCache``: a URL cache for media fetches with HTTP semantics, a TTL and a size bound.

A hit costs a sidecar read, one ``open`` and one ``read`` and takes no lock. A miss takes a
per-key thread lock, then a per-key file lock, and looks again before asking the origin: of
any number of threads and processes asking for one URL, one downloads and the others read what
it stored. The locks only avoid duplicate downloads; correctness rests on atomic files
(:mod:`cacheroot.fetch`), so a lock that does not work costs a second download, not a bad read.
A directory where no lock file can be made (read-only, another user's) still serves its hits;
its misses are downloaded and served without the cache, with one warning.

``aget`` runs the same ``get`` in a worker thread (:func:`asyncio.to_thread`): the file locks
and disk reads block anyway, a second HTTP client would be a second implementation of every
rule here to keep in step, and the offload costs tens of microseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import requests
import requests.utils

from cacheroot.envs import (
    CACHEROOT_MEDIA_CACHE,
    INVALID,
    VLLM_MEDIA_CACHE,
    VLLM_MEDIA_CACHE_MAX_SIZE_MB,
    VLLM_MEDIA_CACHE_TTL_HOURS,
    path_problem,
    resolve,
)
from cacheroot.fetch import LockTimeout
from cacheroot.fetch.store import forget_locals, forgets_locals

from . import _policy
from ._body import read_body
from ._errors import MediaCacheError, ResponseTooLarge, URLRefused
from ._key import entry_name, normalise_url
from ._redact import redact, shown
from ._stats import Counters
from ._store import BodyTooLarge, Entry, Store
from ._url import Target, domain, target

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

log = logging.getLogger("cacheroot.mediacache")

#: Upstream vLLM's defaults for the bound (MiB) and the time to live (hours).
DEFAULT_MAX_SIZE_MB = 5120
DEFAULT_TTL_HOURS = 24
_MIB = 1024 * 1024
#: What a public call that failed clears the frames of (:func:`forgets_locals`): the caller's
#: URL (a signed query) and ``Authorization`` sit in the locals of the cache's frames and of
#: requests', urllib3's and http.client's, where ``pytest -l`` would print them. A
#: ``validate`` callback's own exceptions keep their frames.
_FAILURES: tuple[type[Exception], ...] = (requests.RequestException, OSError, MediaCacheError)

Timeout = float | tuple[float, float] | None


def _env_number(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name} must be a positive number, found {raw!r}; unset it or fix it")
    return value


class _Response:
    """What a transfer produced: status, headers, body and the bytes counted on the wire.

    ``credentialed``: some request of the transfer (a redirect hop included) carried
    credentials, as the HTTP client sent it (``~/.netrc`` and a redirect's ``user:pass@`` too).
    """

    __slots__ = ("body", "credentialed", "headers", "response", "status", "wire_size")

    def __init__(
        self, response: requests.Response, body: bytes, wire: int | None, *, credentialed: bool
    ) -> None:
        self.response = response
        self.status = response.status_code
        self.headers = dict(response.headers)
        self.body = body
        self.wire_size = wire
        self.credentialed = credentialed


class _Unwritable(Exception):  # noqa: N818 - a signal inside this module, never raised out
    """The cache directory cannot take a lock file (read-only, another user's, uncreatable)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class MediaCache:
    """An on-disk cache of media URLs (see the module docstring).

    ``directory``: where entries live (created on first use). ``max_size_bytes``: bound on every
    byte under it. ``ttl``: the longest any response stays fresh, in seconds (the origin's
    ``max-age``/``Expires`` can only shorten it). ``clock``: seconds since the epoch, injectable
    so tests move time instead of sleeping. ``allowed_domains``: hosts (and their subdomains) the
    cache may fetch from, compared with the host the HTTP client connects to
    (:mod:`cacheroot.mediacache._url`); ``None`` allows any. ``max_download_bytes``: larger
    transfers stop with :class:`ResponseTooLarge`, decoded or on the wire.
    ``max_redirects``: redirects followed, each checked again. ``serve_stale_on_error``:
    serve an expired entry when the origin is unreachable or answers 5xx (unless the entry
    says ``must-revalidate``). ``allow_credentials``: cache requests that carry
    ``Authorization`` or ``Cookie``, a URL's ``user:pass@`` or ``~/.netrc`` credentials (only
    for origins whose media is the same for every user; the sidecar keeps no password).
    ``timeout``: default per request, as in ``requests``. ``low_water``: when eviction is
    needed it frees down to this fraction of the bound, so that a full cache does not scan the
    directory on every store. ``lock_timeout``: how long a miss waits for another process's
    download of the same URL.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_size_bytes: int = DEFAULT_MAX_SIZE_MB * _MIB,
        ttl: float = DEFAULT_TTL_HOURS * 3600.0,
        clock: Callable[[], float] = time.time,
        allowed_domains: list[str] | tuple[str, ...] | None = None,
        max_download_bytes: int = 512 * _MIB,
        max_redirects: int = 10,
        serve_stale_on_error: bool = False,
        allow_credentials: bool = False,
        timeout: Timeout = 30.0,
        low_water: float = 0.9,
        lock_timeout: float = 300.0,
    ) -> None:
        if max_size_bytes <= 0 or ttl < 0 or max_download_bytes <= 0 or max_redirects < 0:
            raise ValueError(
                "max_size_bytes and max_download_bytes must be positive, ttl and max_redirects "
                f"not negative; found {max_size_bytes}, {max_download_bytes}, {ttl}, "
                f"{max_redirects}"
            )
        self.directory = os.fspath(directory)
        self.ttl = float(ttl)
        self.clock = clock
        self.allowed_domains = (
            None if allowed_domains is None else tuple(domain(d) for d in allowed_domains)
        )
        self.max_download_bytes = max_download_bytes
        self.max_redirects = max_redirects
        self.serve_stale_on_error = serve_stale_on_error
        self.allow_credentials = allow_credentials
        self.timeout = timeout
        self.counters = Counters()
        self._store = Store(
            self.directory,
            max_size_bytes=max_size_bytes,
            low_water=low_water,
            lock_timeout=lock_timeout,
        )
        self._guard = threading.Lock()
        self._key_locks: dict[str, list[Any]] = {}
        self._local = threading.local()
        self._told: set[int] = set()  # errnos of storage failures already logged

    def __repr__(self) -> str:
        return f"MediaCache({self.directory!r}, max_size_bytes={self.max_size_bytes})"

    @property
    def max_size_bytes(self) -> int:
        """The bound on the bytes stored under :attr:`directory`."""
        return self._store.max_size_bytes

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> MediaCache | None:
        """The cache the environment asks for, or ``None`` when it is off (the default).

        On when ``CACHEROOT_MEDIA_CACHE`` names a directory, or when ``CACHEROOT_OPT_IN`` names
        it and the layout derives it. vLLM's own cache (``VLLM_MEDIA_CACHE``) is another
        directory: the layout refuses one inside the other. The bound and the TTL come from
        ``VLLM_MEDIA_CACHE_MAX_SIZE_MB`` (5120) and ``VLLM_MEDIA_CACHE_TTL_HOURS`` (24);
        ``kwargs`` go to the constructor and win over both.
        """
        env = os.environ if environ is None else environ
        settings = resolve(env).settings
        setting = settings.get(CACHEROOT_MEDIA_CACHE)
        if setting is None or not setting.value or not setting.value.strip():
            return None
        directory = setting.value.strip()
        if setting.source == INVALID:
            # Asked for, but unusable: saying so beats silently running without the cache.
            if path_problem(directory):
                raise ValueError(
                    f"{setting.reason}; set {CACHEROOT_MEDIA_CACHE} to an absolute directory, or "
                    "unset it to run without the media cache"
                )
            raise ValueError(setting.reason)  # the reason already says what to do
        theirs = settings.get(VLLM_MEDIA_CACHE)
        if theirs is not None and theirs.value and theirs.source != INVALID:
            _check_apart(directory, theirs.value)
        mb = _env_number(env, VLLM_MEDIA_CACHE_MAX_SIZE_MB, DEFAULT_MAX_SIZE_MB)
        hours = _env_number(env, VLLM_MEDIA_CACHE_TTL_HOURS, DEFAULT_TTL_HOURS)
        options: dict[str, Any] = {
            "max_size_bytes": int(mb * _MIB),
            "ttl": hours * 3600.0,
            **kwargs,
        }
        return cls(directory, **options)

    # -- public API ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """This cache's counters (see :class:`~cacheroot.mediacache._stats.Counters`)."""
        return self.counters.snapshot()

    def usage(self) -> int:
        """Bytes now stored under :attr:`directory` (every file, locks and sidecars included)."""
        return self._store.usage()

    def handles(self, url: str) -> bool:
        """Whether :meth:`get` would fetch ``url`` (scheme and domain allowed)."""
        try:
            self._check_url(url.strip())
        except (URLRefused, ValueError):
            return False
        return True

    @forgets_locals(*_FAILURES)
    def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = None,
        allow_redirects: bool = True,
        validate: Callable[[bytes], object] | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """The body of ``url``: from disk when fresh, else from the origin (and stored if allowed).

        ``validate`` (for example the media decoder) runs on a downloaded body before it is
        stored; if it raises, nothing is stored and the exception propagates, so undecodable
        responses never occupy the cache. HTTP error statuses raise ``requests.HTTPError`` and
        transport failures the usual ``requests`` exceptions, as without the cache.
        ``max_bytes`` replaces :attr:`max_download_bytes` for this call; a body over the limit
        raises :class:`ResponseTooLarge` whether it comes from the origin or from disk, so a
        caller's limit holds the same with the cache warm or cold.
        """
        url = url.strip()
        where = self._check_url(url)
        limit = self.max_download_bytes if max_bytes is None else max_bytes
        body = self._get(
            url,
            where,
            dict(headers or {}),
            timeout=timeout,
            allow_redirects=allow_redirects,
            validate=validate,
            limit=limit,
        )
        if len(body) > limit:
            raise ResponseTooLarge(url, limit, len(body))
        return body

    async def aget(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = None,
        allow_redirects: bool = True,
        validate: Callable[[bytes], object] | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """:meth:`get` in a worker thread: the same rules, counters and locks."""
        before = sys.exc_info()[1]
        try:
            return await asyncio.to_thread(
                self.get,
                url,
                headers=headers,
                timeout=timeout,
                allow_redirects=allow_redirects,
                validate=validate,
                max_bytes=max_bytes,
            )
        except _FAILURES as exc:
            forget_locals(exc, before)
            del url, headers  # this frame is still running: its copies of the credentials go
            raise

    @forgets_locals(*_FAILURES)
    def fetch_bytes(
        self,
        url: str,
        *,
        fallback: Callable[..., bytes],
        timeout: Timeout = None,
        allow_redirects: bool = True,
        headers: Mapping[str, str] | None = None,
        validate: Callable[[bytes], object] | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """:meth:`get` for the URLs the cache handles, ``fallback(url, ...)`` for the others.

        The adapter for a media connector: ``data:``, ``file:`` or other-domain URLs keep going
        through the connector's own code, exactly as with the cache off.
        """
        if not self.handles(url):
            kwargs: dict[str, Any] = {"timeout": timeout, "allow_redirects": allow_redirects}
            if headers is not None:
                kwargs["headers"] = headers
            if max_bytes is not None:
                kwargs["max_bytes"] = max_bytes
            return fallback(url, **kwargs)
        return self.get(
            url,
            headers=headers,
            timeout=timeout,
            allow_redirects=allow_redirects,
            validate=validate,
            max_bytes=max_bytes,
        )

    # -- internals ----------------------------------------------------------------------------

    def _get(
        self,
        url: str,
        where: Target,
        request_headers: dict[str, str],
        *,
        timeout: Timeout,
        allow_redirects: bool,
        validate: Callable[[bytes], object] | None,
        limit: int,
    ) -> bytes:
        """:meth:`get` once the URL is checked: disk, single flight, then the origin."""
        if _policy.bypass_reason(
            request_headers,
            url_has_userinfo=where.userinfo,
            allow_credentials=self.allow_credentials,
            netrc=not self.allow_credentials and self._netrc_credentials(url),
        ):
            self.counters.add(bypassed=1)
            return self._uncached(
                url,
                request_headers,
                timeout=timeout,
                allow_redirects=allow_redirects,
                limit=limit,
            )
        name = entry_name(url)
        entry = self._fresh(url, name, request_headers, limit)
        if entry is not None:
            return entry.body
        try:
            for patient in (True, False):
                with self._single_flight(name, patient=patient) as held:
                    entry = self._fresh(url, name, request_headers, limit)
                    if entry is not None:
                        return entry.body
                    if not held:
                        continue  # fresh on disk a moment ago, gone or another variant now
                    return self._refresh(
                        url,
                        name=name,
                        request_headers=request_headers,
                        timeout=timeout,
                        allow_redirects=allow_redirects,
                        validate=validate,
                        limit=limit,
                    )
        except _Unwritable as exc:
            # Read-only, another user's, or not creatable: a fresh entry on disk was served
            # above; a miss is downloaded and served as without the cache.
            self._tell("media cache %s cannot be written (%s); fetching without it", exc.error)
            self.counters.add(bypassed=1)
            return self._uncached(
                url,
                request_headers,
                timeout=timeout,
                allow_redirects=allow_redirects,
                limit=limit,
            )
        raise AssertionError("unreachable: the second pass always holds the lock")

    def _uncached(
        self,
        url: str,
        request_headers: dict[str, str],
        *,
        timeout: Timeout,
        allow_redirects: bool,
        limit: int,
    ) -> bytes:
        """The origin's body, the cache left out (credentials, or a directory it cannot use)."""
        response = self._transfer(
            url, request_headers, timeout=timeout, allow_redirects=allow_redirects, limit=limit
        )
        return self._deliver(response)

    def _tell(self, message: str, error: OSError) -> None:
        """Log a storage failure once per cache and kind (errno): a broken disk is one warning."""
        kind = error.errno or 0
        level = logging.DEBUG if kind in self._told else logging.WARNING
        self._told.add(kind)
        log.log(level, message, shown(self.directory), shown(error))

    def _netrc_credentials(self, url: str) -> bool:
        """Whether ``requests`` will add ``~/.netrc`` (or ``$NETRC``) credentials to ``url``.

        The session reads them inside ``Session.request``, out of the caller's sight; asked
        here the same way, so that such a request is neither served from nor stored in the
        cache. Each hop of a transfer is checked again on the request as prepared.
        """
        if not self._session().trust_env:
            return False
        # requests' own search, with one expanduser: a hit pays for it on every call.
        named = os.environ.get("NETRC")
        if named is not None:
            found = os.path.exists(os.path.expanduser(named))
        else:
            home = os.path.expanduser("~")
            found = any(os.path.exists(os.path.join(home, n)) for n in requests.utils.NETRC_FILES)
        return found and requests.utils.get_netrc_auth(url) is not None

    def _check_url(self, url: str) -> Target:
        """Where ``url`` leads, if the cache may fetch it; else :class:`URLRefused`."""
        where = target(url)
        if not where.origin.allowed(self.allowed_domains):
            allowed = ", ".join(self.allowed_domains or ()) or "(none)"
            host = where.origin.host
            raise URLRefused(url, f"host {host!r} is not in allowed_domains ({allowed})")
        return where

    def _fresh(
        self, url: str, name: str, request_headers: Mapping[str, str], limit: int
    ) -> Entry | None:
        """The stored entry for ``name`` if it is fresh and its variant fits the request.

        A body on disk over ``limit`` raises :class:`ResponseTooLarge` without being read, as
        a download of it would.
        """
        now = self.clock()
        try:
            entry = self._store.read(name, now=now, limit=limit)
        except BodyTooLarge as exc:
            raise ResponseTooLarge(url, limit, exc.size) from None
        if (
            entry is None
            or entry.expires_at <= now
            or not _policy.vary_matches(entry.vary, request_headers)
        ):
            return None
        self.counters.add(hits=1, bytes_saved=len(entry.body))
        return entry

    @contextlib.contextmanager
    def _single_flight(self, name: str, *, patient: bool) -> Iterator[bool]:
        """Hold the per-key locks (thread, then file); yield whether the file lock is held.

        With ``patient``, waiting for the file lock ends early, without it, as soon as a fresh
        entry appears on disk: the waiters of one download then read it together instead of
        taking the lock one after another. :class:`_Unwritable` when the lock file cannot be
        made (the directory is read-only, another user's, or cannot be created).
        """
        with self._guard:
            slot = self._key_locks.setdefault(name, [threading.Lock(), 0])
            slot[1] += 1
        try:
            with slot[0]:
                done = (lambda: self._store.fresh_on_disk(name, self.clock())) if patient else None
                try:
                    lock = self._store.key_lock(name)
                    held = lock.acquire(done)
                except LockTimeout:
                    raise
                except OSError as exc:
                    raise _Unwritable(exc) from exc
                try:
                    yield held
                finally:
                    if held:
                        lock.release()
        finally:
            with self._guard:
                slot[1] -= 1
                if slot[1] == 0:
                    del self._key_locks[name]

    def _refresh(
        self,
        url: str,
        *,
        name: str,
        request_headers: dict[str, str],
        timeout: Timeout,
        allow_redirects: bool,
        validate: Callable[[bytes], object] | None,
        limit: int,
    ) -> bytes:
        now = self.clock()
        try:
            stale = self._store.read(name, now=now, limit=limit)
        except BodyTooLarge:
            stale = None  # over the caller's limit: the download says so, or brings less
        if stale is not None and not _policy.vary_matches(stale.vary, request_headers):
            stale = None
        conditional = dict(request_headers)
        if stale is not None:
            conditional.update(_policy.conditional_headers(stale.headers))
        try:
            response = self._transfer(
                url, conditional, timeout=timeout, allow_redirects=allow_redirects, limit=limit
            )
        except requests.RequestException:
            if stale is not None and self._may_serve_stale(stale):
                self.counters.add(stale_served=1, bytes_saved=len(stale.body))
                return stale.body
            raise
        if response.status == 304 and stale is not None:
            return self._revalidated(name, stale, response)
        if response.status >= 500 and stale is not None and self._may_serve_stale(stale):
            self.counters.add(stale_served=1, bytes_saved=len(stale.body))
            return stale.body
        body = self._deliver(response)
        self.counters.add(misses=1)
        reason = self._not_storable(response, request_headers)
        if not reason and validate is not None:
            validate(body)
        if reason:
            self.counters.add(not_stored=1)
            if stale is not None:
                try:
                    self._store.remove(name)
                except OSError as exc:
                    self._tell("media cache %s: a replaced entry stays on disk (%s)", exc)
            return body
        self._keep(url, name, response, request_headers)
        return body

    def _keep(
        self, url: str, name: str, response: _Response, request_headers: Mapping[str, str]
    ) -> None:
        """Store a response the rules allow; a cache disk that fails is told once, not raised."""
        now = self.clock()
        meta = {
            "url": redact(normalise_url(url)),
            "stored_at": now,
            "expires_at": now + _policy.freshness_lifetime(response.headers, now=now, ttl=self.ttl),
            "headers": _policy.kept(response.headers),
            "vary": _policy.vary_record(response.headers, request_headers),
        }
        try:
            evicted = self._store.publish(name, response.body, meta, now=now)
        except OSError as exc:
            # A full or broken cache disk must not fail the caller: serve what we downloaded.
            self._tell("media cache %s: not storing a download (%s)", exc)
            evicted = None
        if evicted is None:
            self.counters.add(not_stored=1)
        else:
            self.counters.add(stored=1, evictions=evicted)

    def _not_storable(self, response: _Response, request_headers: Mapping[str, str]) -> str:
        """Why ``response`` must not be stored, or ``""``: the HTTP rules, then credentials."""
        reason = _policy.not_storable(
            response.status, response.headers, len(response.body), response.wire_size
        )
        if not reason and response.credentialed and not self.allow_credentials:
            reason = "a request of the transfer carried credentials (netrc, user:pass@)"
        if not reason and _policy.varies_on_credentials(response.headers, request_headers):
            reason = "Vary names a credential header the request sent"
        return reason

    def _may_serve_stale(self, stale: Entry) -> bool:
        return self.serve_stale_on_error and _policy.may_serve_stale(stale.headers)

    def _revalidated(self, name: str, stale: Entry, response: _Response) -> bytes:
        now = self.clock()
        headers = _policy.merge_304(stale.headers, response.headers)
        meta = {
            **stale.meta,
            "headers": headers,
            "expires_at": now + _policy.freshness_lifetime(headers, now=now, ttl=self.ttl),
            "revalidated_at": now,
        }
        try:
            self._store.update_meta(name, meta)
        except OSError as exc:
            # The origin vouched for the body: serve it; the next request revalidates again.
            self._tell("media cache %s: a revalidated entry keeps its old expiry (%s)", exc)
        self.counters.add(revalidations=1, bytes_saved=len(stale.body))
        return stale.body

    @staticmethod
    def _deliver(response: _Response) -> bytes:
        """The body the caller gets, raising for error statuses as ``requests`` users expect."""
        try:
            response.response.raise_for_status()
        except requests.HTTPError as exc:
            raise _redacted(exc) from None
        return response.body

    def _session(self) -> requests.Session:
        """A session per thread and per process (pools must not cross a fork).

        Its cookie jar takes no cookies: a shared cache must not send what one origin set for
        one caller with another caller's request (nor stop caching because of it).
        """
        pid = os.getpid()
        owned: tuple[int, requests.Session] | None = getattr(self._local, "session", None)
        if owned is None or owned[0] != pid:
            owned = (pid, requests.Session())
            owned[1].max_redirects = self.max_redirects
            owned[1].cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
            self._local.session = owned
        return owned[1]

    def _transfer(
        self,
        url: str,
        headers: dict[str, str],
        *,
        timeout: Timeout,
        allow_redirects: bool,
        limit: int,
    ) -> _Response:
        """GET ``url``, following redirects ourselves so that each hop is checked.

        Each hop is prepared by the session first, so what it adds on its own (``~/.netrc``
        credentials, a URL's ``user:pass@`` as ``Authorization``) is seen, and sent exactly
        as seen. Credentials the caller gave (``Authorization``, ``Cookie``,
        ``Proxy-Authorization``) go to the first origin only: a redirect to another scheme,
        host or port drops them for the rest of the transfer.
        """
        try:
            return self._hops(
                url, headers, timeout=timeout, allow_redirects=allow_redirects, limit=limit
            )
        except requests.RequestException as exc:
            raise _redacted(exc) from None

    def _hops(
        self,
        url: str,
        headers: dict[str, str],
        *,
        timeout: Timeout,
        allow_redirects: bool,
        limit: int,
    ) -> _Response:
        session = self._session()
        current, here = url, self._check_url(url).origin
        hops = 0
        sent = dict(headers)
        credentialed = False
        said = shown(url)
        while True:
            prepared = session.prepare_request(requests.Request("GET", current, headers=sent))
            credentialed = credentialed or _policy.carries_credentials(prepared.headers)
            settings = session.merge_environment_settings(
                prepared.url, proxies={}, stream=True, verify=None, cert=None
            )
            resp = session.send(
                prepared,
                timeout=self.timeout if timeout is None else timeout,
                allow_redirects=False,
                **settings,
            )
            try:
                location = resp.headers.get("location")
                if allow_redirects and resp.is_redirect and location:
                    hops += 1
                    if hops > self.max_redirects:
                        raise requests.TooManyRedirects(
                            f"{said} redirected more than {self.max_redirects} times "
                            f"(max_redirects); the last hop was to {shown(location)!r}",
                            response=resp,
                        )
                    next_url = urljoin(current, location)
                    there = self._check_url(next_url).origin
                    if there != here:
                        sent = {
                            k: v for k, v in sent.items() if k.lower() not in _policy.ORIGIN_BOUND
                        }
                    current, here = next_url, there
                    continue
                body, wire = read_body(said, resp, limit, (self._store.spool_dir(), None))
                return _Response(resp, body, wire, credentialed=credentialed)
            finally:
                resp.close()


def _redacted(exc: requests.RequestException) -> requests.RequestException:
    """``exc`` with the credentials of any URL in its message redacted (same type, same fields).

    requests puts the URL as prepared, ``user:pass@`` and the query included, in its messages
    (``404 Client Error: Not Found for url: http://alice:secret@host/x?sig=...``, and
    ``Max retries exceeded with url: /x?token=...`` without the scheme).
    """
    text = str(exc)
    said = shown(text)
    if said != text:
        exc.args = (said,)
    return exc


def _check_apart(ours: str, theirs: str) -> None:
    """Raise when the two directories are one, or one holds the other, once links are resolved.

    The layout compares the paths as written (the start-up hook must not touch the disk); here a
    symbolic link that makes them one directory is caught as well.
    """
    a, b = os.path.realpath(ours), os.path.realpath(theirs)
    if a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/"):
        raise ValueError(
            f"{CACHEROOT_MEDIA_CACHE}={ours!r} and {VLLM_MEDIA_CACHE}={theirs!r} share a "
            f"directory once links are resolved ({a!r} and {b!r}), and vLLM's eviction deletes "
            "every file in its own: point them at two separate directories, or turn one of the "
            "caches off"
        )
