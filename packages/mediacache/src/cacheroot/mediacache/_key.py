"""Cache keys: the sha256 of the normalised URL, and entry names that carry no URL text.

Normalisation folds only what RFC 3986 says is equivalent for http(s): scheme and host are
case-insensitive, a default port is the same as none, an empty path is ``/``. The fragment never
reaches the server, so it is dropped. The query is kept byte for byte: reordering or decoding
it could merge URLs that a server treats differently.

An entry's file name is ``<64 hex digits>`` plus at most a short lower-case alphanumeric
extension taken from the last path segment (``.jpg``), so nothing a URL contains can make a path
escape the directory or collide with the cache's own dot-files.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit, urlunsplit

#: Schemes the cache fetches, with their default ports.
DEFAULT_PORTS = {"http": 80, "https": 443}
_EXT = re.compile(r"^[a-z0-9]{1,10}$")


def normalise_url(url: str) -> str:
    """The canonical form of ``url`` used as the cache key (see the module docstring).

    Raises ``ValueError`` (from :func:`urllib.parse.urlsplit`) for URLs it cannot parse, such as
    an invalid port.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal: urlsplit strips the brackets
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{netloc}"
    path = parts.path or "/"
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def url_key(url: str) -> str:
    """The hex sha256 of :func:`normalise_url` of ``url``."""
    return hashlib.sha256(normalise_url(url).encode("utf-8", "surrogatepass")).hexdigest()


def extension(url: str) -> str:
    """A sanitised extension of the URL's last path segment (``"jpg"``), or ``""``."""
    segment = urlsplit(url.strip()).path.rsplit("/", 1)[-1]
    _, dot, ext = segment.rpartition(".")
    ext = ext.lower()
    return ext if dot and _EXT.match(ext) else ""


def entry_name(url: str) -> str:
    """The file name of the entry for ``url``: the key, plus a sanitised extension."""
    ext = extension(url)
    key = url_key(url)
    return f"{key}.{ext}" if ext else key
