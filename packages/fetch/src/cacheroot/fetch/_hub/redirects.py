"""Where a file's redirect may send the hub cache: decided on the address, before connecting.

The upstream answers a file's ``GET`` with a redirect to its CDN, and the hub follows it from
inside the network it runs in. A redirect is the upstream's (or a mirror's, or whoever answers
for it) to write, so an unchecked one would make the hub fetch from the cloud's metadata
service (``169.254.169.254``), a loopback service of the host, or a private address of the
network, and hand the answer to the client as a file. So a redirect is followed only:

- to ``http`` or ``https`` on the upstream's scheme (an ``http`` upstream may also be sent to
  ``https``, never the reverse: a redirect never drops TLS);
- to the upstream's own host or a host the operator allowed by name
  (``--allow-redirect-host``), at whatever address that name has;
- else to a host whose every address is a public one: never link-local (``169.254/16``,
  ``fe80::/10``), loopback, private (``10/8``, ``172.16/12``, ``192.168/16``, ``fc00::/7``),
  shared (``100.64/10``), reserved, unspecified or multicast.

The name is resolved here, with the loop's ``getaddrinfo``, and the request then connects to
the address that was checked (:class:`Hop`: the URL carries the address, ``Host`` and the TLS
server name carry the name), so a name that resolves to another address a moment later (DNS
rebinding) cannot move the connection after the check. A refused target is never connected to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

__all__ = ["Hop", "RedirectPolicy", "RedirectRefusedError", "refused_address"]

#: ``(family, type, proto, canonname, sockaddr)`` rows, as ``getaddrinfo`` gives them.
AddrInfo = list[tuple[int, int, int, str, tuple[object, ...]]]

_SHARED = ipaddress.ip_network("100.64.0.0/10")


class RedirectRefusedError(Exception):
    """A redirect the hub cache does not follow (nothing was sent to its target)."""


def refused_address(address: str) -> str | None:
    """Why the hub cache never connects to ``address`` on a redirect, or ``None`` if it may.

    A v4 address mapped into v6 (``::ffff:a.b.c.d``) is judged as the v4 address it is.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    checks = (
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_private, "private"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED, "shared (carrier-grade NAT)"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not public"),
    )
    for hit, why in checks:
        if hit:
            return f"{why} address {ip}"
    return None


@dataclass(frozen=True)
class Hop:
    """Where one request goes: ``url`` (its host an address that was checked, or a name the
    operator trusts), the ``Host`` header and the TLS server name to send with it."""

    url: str
    host_header: str | None = None
    server_hostname: str | None = None


def _host_only(host: str) -> str:
    return host.strip().lower().strip("[]").rstrip(".")


class RedirectPolicy:
    """Which redirect targets the hub cache follows (see the module docstring)."""

    def __init__(self, upstream: str, allowed: Iterable[str] = ()) -> None:
        parts = urlsplit(upstream)
        self.scheme = parts.scheme.lower()
        #: Hosts trusted by name: the upstream's own and the operator's.
        self.hosts = frozenset(
            {_host_only(parts.hostname or "")} | {_host_only(h) for h in allowed}
        )

    async def hop(self, url: str, resolve: Callable[[str, int], Awaitable[AddrInfo]]) -> Hop:
        """The :class:`Hop` that fetches the redirect target ``url``; raises
        :class:`RedirectRefusedError` (before anything is sent) when it is not followed."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise RedirectRefusedError(
                f"the file was redirected to a {scheme}: URL, which the hub cache never follows"
            )
        if scheme != self.scheme and not (self.scheme == "http" and scheme == "https"):
            raise RedirectRefusedError(
                f"the file was redirected from {self.scheme} to {scheme}, which the hub cache "
                "never follows"
            )
        host = _host_only(parts.hostname or "")
        if not host:
            raise RedirectRefusedError("the file was redirected to a URL without a host")
        if host in self.hosts:
            return Hop(url)
        port = parts.port or (443 if scheme == "https" else 80)
        address = self._literal(host)
        if address is None:
            try:
                infos = await resolve(host, port)
            except OSError as exc:
                raise RedirectRefusedError(
                    f"the file was redirected to {host}, which does not resolve: {exc}"
                ) from None
            addresses = [str(info[4][0]) for info in infos]
            if not addresses:
                raise RedirectRefusedError(f"the file was redirected to {host}, no address")
            for found in addresses:
                self._judge(host, found)
            address = addresses[0]
        else:
            self._judge(host, address)
            return Hop(url)
        shown = f"[{address}]" if ":" in address else address
        netloc = f"{shown}:{port}"
        pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        host_header = parts.netloc.rpartition("@")[2]
        return Hop(pinned, host_header, host if scheme == "https" else None)

    @staticmethod
    def _literal(host: str) -> str | None:
        try:
            return str(ipaddress.ip_address(host.split("%", 1)[0]))
        except ValueError:
            return None

    def _judge(self, host: str, address: str) -> None:
        why = refused_address(address)
        if why is not None:
            shown = host if host == address else f"{host} ({address})"
            raise RedirectRefusedError(
                f"the file was redirected to {shown}: a {why}, which the hub cache never "
                "connects to (allow a host by name with --allow-redirect-host)"
            )


async def resolve(host: str, port: int) -> AddrInfo:
    """``host``'s TCP addresses, from the running loop's resolver."""
    loop = asyncio.get_running_loop()
    rows = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(f, t, p, c, tuple(a)) for f, t, p, c, a in rows]
