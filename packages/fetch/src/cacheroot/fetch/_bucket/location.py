"""Where the bucket tier is (``s3://BUCKET/PREFIX``) and the client opened on it.

The value is parsed here, strictly, before any client is built: a bucket URL that carries a
query, a fragment or a user name and password (credentials pasted into a variable that CI logs
print) is refused with a message that repeats none of them. The client's configuration
(endpoint, region, credentials, session token) is the ecosystem's usual one, read from the
environment by the client itself (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...), so a job
configured for the AWS tools is configured for this; a named profile, which the client does not
read, is read by :mod:`.profile`.

Two clients share one configuration: a *control* client for the small objects (records,
leases, probes), whose every request is over within seconds, and a *data* client for the
blobs, whose whole-request limit is long (a large blob takes minutes) but which gives up on a
connection that stalls. Both connect within seconds and retry twice at most, within seconds:
a bucket that is down must cost a fetch a few seconds, not the client's default of minutes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cacheroot.envs import CACHEROOT_SHARED
from cacheroot.envs._shared_tier import BUCKET_SCHEMES

from .profile import ENDPOINTS, first_set, profile_settings

if TYPE_CHECKING:
    from collections.abc import Mapping

    from obstore.store import ObjectStore

__all__ = ["INSTALL", "ClientMissingError", "Clients", "Location", "open_clients", "parse"]

#: What to install for a bucket tier (said when the client is missing).
INSTALL = "pip install 'cacheroot-fetch[s3]'"
#: The client's limits (seconds): connecting, one small request, a stalled read, retries.
CONNECT_TIMEOUT = 2.0
CONTROL_TIMEOUT = 10.0
READ_TIMEOUT = 20.0
DATA_TIMEOUT = 3600.0
RETRIES = 2
RETRY_TIMEOUT = 5.0


class ClientMissingError(ImportError):
    """The object-store client (``obstore``, the extra ``cacheroot-fetch[s3]``) is missing."""


@dataclass(frozen=True)
class Location:
    """A parsed bucket URL: ``scheme://bucket/prefix`` (the prefix without slashes around it)."""

    scheme: str
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        """The URL as the client reads it, and as messages show it (it holds no secret)."""
        tail = f"/{self.prefix}" if self.prefix else ""
        return f"{self.scheme}://{self.bucket}{tail}"


def _shown(value: str) -> str:
    """``value`` as a message may show it: scheme, bucket and path only, never a user name,
    password, query or fragment (where credentials would sit)."""
    scheme, _sep, rest = value.partition("://")
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    host, slash, path = rest.partition("/")
    host = host.rpartition("@")[2]
    return f"{scheme}://{host}{slash}{path}"


def parse(value: str) -> Location:
    """The :class:`Location` of the bucket URL ``value``; :class:`ValueError` naming what is
    wrong (never repeating a credential it found) and the form expected."""
    scheme, sep, rest = value.strip().partition("://")
    why = ""
    if not sep or scheme.lower() not in BUCKET_SCHEMES:
        why = f"the scheme is not one of {', '.join(BUCKET_SCHEMES)}"
    elif any(c in rest for c in "?#"):
        why = "it has a query or fragment (credentials belong in the environment, not the URL)"
    elif "@" in rest.partition("/")[0]:
        why = "it names a user (credentials belong in the environment, not the URL)"
    elif any(ord(c) < 0x21 or c == "\x7f" for c in rest):
        why = "it contains a blank or control character"
    if not why:
        bucket, _slash, path = rest.partition("/")
        parts = [p for p in path.split("/") if p]
        if not bucket:
            why = "it names no bucket"
        elif any(p in (".", "..") for p in parts):
            why = "its prefix has a '.' or '..' segment"
        else:
            return Location(scheme.lower(), bucket, "/".join(parts))
    raise ValueError(
        f"{CACHEROOT_SHARED}={_shown(value.strip())!r} is not a bucket URL: {why}; expected "
        "s3://BUCKET/PREFIX (or gs://, az://), with the endpoint and credentials in the "
        "environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)"
    )


@dataclass(frozen=True)
class Clients:
    """The two clients of one bucket: :attr:`control` for small objects, :attr:`data` for
    blobs (see the module docstring)."""

    location: Location
    control: ObjectStore
    data: ObjectStore


def _options(
    location: Location, environ: Mapping[str, str], timeout: float, profiled: str = ""
) -> dict[str, Any]:
    """The client options; ``profiled``: the endpoint a profile names (the environment's wins)."""
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT),
        "timeout": timedelta(seconds=timeout),
        "read_timeout": timedelta(seconds=READ_TIMEOUT),
    }
    if location.scheme in ("s3", "s3a"):
        named = first_set(environ, ENDPOINTS)
        endpoint = environ[named] if named else profiled
        if endpoint.strip().lower().startswith("http://"):
            options["allow_http"] = True  # an endpoint the operator named without TLS
    return options


def _retries() -> dict[str, Any]:
    return {
        "max_retries": RETRIES,
        "retry_timeout": timedelta(seconds=RETRY_TIMEOUT),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=1),
            "base": 2,
        },
    }


def open_clients(location: Location, environ: Mapping[str, str] | None = None) -> Clients:
    """The clients of ``location``; :class:`ClientMissingError` without ``obstore``,
    :class:`.profile.ProfileError` for an AWS profile that cannot be used, and what the client
    raises for a configuration it refuses (a :class:`ValueError` or one of its own)."""
    env = os.environ if environ is None else environ
    try:
        from obstore.store import from_url  # noqa: PLC0415 - only a bucket tier loads it
    except ImportError as exc:
        raise ClientMissingError(
            f"{CACHEROOT_SHARED}={location.url} needs the object-store client obstore, which "
            f"is not installed: {INSTALL}"
        ) from exc
    config, provider = profile_settings(location, env)
    extra: dict[str, Any] = {}
    if config:
        extra["config"] = config
    if provider is not None:
        extra["credential_provider"] = provider  # one for both clients: one refresh

    def build(timeout: float) -> ObjectStore:
        options = _options(location, env, timeout, config.get("endpoint", ""))
        try:
            return from_url(location.url, client_options=options, retry_config=_retries(), **extra)  # type: ignore[call-overload,no-any-return]
        except Exception:  # noqa: BLE001 - an older client without read_timeout: without it
            del options["read_timeout"]
            return from_url(location.url, client_options=options, retry_config=_retries(), **extra)  # type: ignore[call-overload,no-any-return]

    return Clients(location, build(CONTROL_TIMEOUT), build(DATA_TIMEOUT))
