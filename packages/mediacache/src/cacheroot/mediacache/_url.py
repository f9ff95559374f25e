"""Where a URL leads: the origin the HTTP client connects to, and the URLs that are refused.

``urllib.parse.urlsplit`` and urllib3 (which ``requests`` connects with) do not read every URL
alike. In ``http://127.0.0.1:8080\\@example.com/x.png`` urlsplit's authority runs to the first
``/``, so its host is ``example.com`` and ``127.0.0.1:8080\\`` is userinfo; urllib3 ends the
authority at the backslash and connects to 127.0.0.1:8080. A domain check made on one reading and
a connection made on the other is a way around ``allowed_domains``, and around every rule tied to
an origin (whose credentials go where). So the cache reads the origin the way the transport does
(:func:`target`), and refuses a URL

- with a control character anywhere (urlsplit drops tabs and newlines that requests sends
  percent-encoded, so the entry's key and the request would name different resources);
- with a backslash or whitespace in its authority (no well-formed URL has one there, and parsers
  differ on where such an authority ends);
- whose host or port urlsplit and urllib3 read differently.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple
from urllib.parse import urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from ._errors import URLRefused
from ._key import DEFAULT_PORTS

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Origin(NamedTuple):
    """``(scheme, host, port)`` as the transport connects: lower case, the port made explicit."""

    scheme: str
    host: str
    port: int

    def allowed(self, domains: tuple[str, ...] | None) -> bool:
        """Whether the host is one of ``domains`` or below one (``None`` allows every host)."""
        if domains is None:
            return True
        host = self.host.strip("[]")
        return any(host == d or host.endswith("." + d) for d in domains)


class Target(NamedTuple):
    """Where a URL leads, and whether it has ``user[:password]@`` (sent as ``Authorization``)."""

    origin: Origin
    userinfo: bool


@functools.lru_cache(maxsize=1024)
def target(url: str) -> Target:
    """Where ``url`` connects to; :class:`URLRefused` for the URLs the module refuses.

    Also refused: schemes other than http and https, and URLs that name no host. Answers are
    remembered for the last 1024 URLs (every call of a hit asks, and hits repeat URLs).
    """
    if _CONTROL.search(url):
        raise URLRefused(url, "it contains a control character (tab, newline, NUL, ...)")
    try:
        parts = urlsplit(url)
        split_port = parts.port
    except ValueError as exc:
        raise URLRefused(url, f"it does not parse ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise URLRefused(url, f"scheme {parts.scheme!r} is not http or https")
    if "\\" in parts.netloc or any(c.isspace() for c in parts.netloc):
        raise URLRefused(
            url,
            "its authority (the part after '//') contains a backslash or whitespace, which URL "
            "parsers split differently; write the URL without it",
        )
    try:
        wire = parse_url(url)
        ours = _transport_host(parts.hostname or "")
    except LocationParseError as exc:
        raise URLRefused(url, f"it does not parse ({exc})") from None
    host = (wire.host or "").lower()
    if not host:
        raise URLRefused(url, "it names no host")
    default = DEFAULT_PORTS[scheme]
    port = wire.port or default
    if ours != host or (split_port or default) != port:
        raise URLRefused(
            url,
            f"URL parsers disagree on where it leads ({ours!r} port {split_port or default} "
            f"or {host!r} port {port}); write the URL without ambiguous characters",
        )
    return Target(Origin(scheme, host, port), userinfo=wire.auth is not None)


def _transport_host(host: str) -> str:
    """``host`` in the form urllib3 gives it (IDNA-encoded, lower case, IPv6 in brackets)."""
    if not host:
        return ""
    if host.isascii() and not any(c in host for c in "%:[]"):
        return host.lower()
    literal = f"[{host}]" if ":" in host else host
    return (parse_url(f"http://{literal}/").host or "").lower()


def domain(name: str) -> str:
    """An ``allowed_domains`` entry in the form :attr:`Origin.host` has (IDNA, lower case)."""
    name = name.strip().lower().lstrip(".")
    if not name or name.isascii():
        return name
    try:
        return _transport_host(name).strip("[]")
    except LocationParseError:
        return name
