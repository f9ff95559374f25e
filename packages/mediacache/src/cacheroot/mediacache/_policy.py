"""The subset of HTTP caching (RFC 9111) a media cache needs, as pure functions of headers and now.

No I/O and no clock of its own: every function takes ``now`` (seconds, the cache's clock), so the
tests drive time instead of sleeping. Header mappings are looked up case-insensitively by first
passing them through :func:`lower`.

The cache behaves as a *shared* cache (one server caches for many users): responses marked
``private`` are not stored, ``s-maxage`` wins over ``max-age``, and responses to requests that
carry credentials are not stored unless the owner of the cache says they may be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cacheroot.fetch.store import parse_http_date

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Response headers kept with an entry: what freshness, validation and Vary need.
KEPT = (
    "age",
    "cache-control",
    "content-type",
    "date",
    "etag",
    "expires",
    "last-modified",
    "vary",
)
#: Request headers that make the cache step aside: the caller manages validation or ranges.
BYPASS = frozenset(
    {"if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "range"}
)
#: Request headers that carry credentials (RFC 9111 section 3.5; cookies by common practice).
CREDENTIALS = frozenset({"authorization", "cookie"})
#: Request headers that never follow a redirect to another origin (scheme, host and port).
ORIGIN_BOUND = CREDENTIALS | {"proxy-authorization"}
#: Directives that forbid serving a stale response, even when the origin is unreachable.
_NO_STALE = frozenset({"must-revalidate", "proxy-revalidate", "no-cache", "s-maxage"})


def lower(headers: Mapping[str, str] | None) -> dict[str, str]:
    """``headers`` with lower-case names (the last value wins for duplicate names)."""
    return {k.lower(): v for k, v in (headers or {}).items()}


def parse_cache_control(value: str | None) -> dict[str, str | None]:
    """Directives of a ``Cache-Control`` value: ``{"max-age": "60", "no-store": None}``.

    Quoted arguments lose their quotes; an argument list such as ``no-cache="Set-Cookie"`` is
    kept as text (we treat a qualified ``no-cache`` like a plain one, which is conservative).
    """
    out: dict[str, str | None] = {}
    for part in (value or "").split(","):
        name, eq, arg = part.strip().partition("=")
        name = name.strip().lower()
        if name:
            out[name] = arg.strip().strip('"') if eq else None
    return out


def _seconds(value: str | None) -> int | None:
    """A delta-seconds argument, or ``None`` when missing or malformed."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        return None
    return max(n, 0)


def carries_credentials(request_headers: Mapping[str, str]) -> bool:
    """Whether a request sends credentials (see :data:`CREDENTIALS`)."""
    return any(name.lower() in CREDENTIALS for name in request_headers)


def bypass_reason(
    request_headers: Mapping[str, str],
    *,
    url_has_userinfo: bool,
    allow_credentials: bool,
    netrc: bool = False,
) -> str:
    """Why this request must go to the origin untouched by the cache, or ``""`` when it need not.

    Requests with credentials may see a response meant for one user only; serving them from the
    cache, or storing their answer, could leak it to another. ``netrc``: the HTTP client will
    add credentials of its own for this host (``~/.netrc`` or ``$NETRC``).
    """
    names = set(lower(request_headers))
    if not allow_credentials and (url_has_userinfo or netrc or names & CREDENTIALS):
        return "the request carries credentials (Authorization, Cookie, user:pass@ or netrc)"
    managed = sorted(names & BYPASS)
    if managed:
        return f"the caller sends {', '.join(managed)} itself"
    return ""


def not_storable(  # noqa: PLR0911 - one return per rule reads best
    status: int, response_headers: Mapping[str, str], body_size: int, wire_size: int | None
) -> str:
    """Why this response must not be stored, or ``""`` when it may be.

    ``wire_size`` is how many bytes arrived before any content decoding, compared with
    ``Content-Length`` (``None`` when unknown).
    """
    headers = lower(response_headers)
    if status != 200:
        return f"status {status} (only 200 is stored)"
    cc = parse_cache_control(headers.get("cache-control"))
    for directive in ("no-store", "private"):
        if directive in cc:
            return f"Cache-Control: {directive}"
    if headers.get("vary", "").strip() == "*":
        return "Vary: *"
    if body_size == 0:
        return "empty body"
    declared = headers.get("content-length")
    if declared is not None:
        try:
            expected = int(declared)
        except ValueError:
            return f"malformed Content-Length {declared!r}"
        got = body_size if wire_size is None else wire_size
        if got != expected:
            return f"Content-Length says {expected} bytes, {got} arrived"
    return ""


def freshness_lifetime(headers: Mapping[str, str], *, now: float, ttl: float) -> float:
    """How many seconds from ``now`` the response stays fresh, capped by ``ttl``.

    ``s-maxage``, then ``max-age``, then ``Expires - Date`` (RFC 9111 4.2.1), less the ``Age``
    the response already had; ``no-cache`` means zero (store, but revalidate before each use).
    Without any of them the response is fresh for the whole TTL, as upstream vLLM's cache does.
    """
    h = lower(headers)
    cc = parse_cache_control(h.get("cache-control"))
    if "no-cache" in cc:
        return 0.0
    lifetime: float | None = _seconds(cc.get("s-maxage"))
    if lifetime is None:
        lifetime = _seconds(cc.get("max-age"))
    if lifetime is None and "expires" in h:
        expires = parse_http_date(h["expires"])
        date = parse_http_date(h.get("date"))
        # An invalid Expires (such as "0") means already expired (RFC 9111 5.3).
        lifetime = 0.0 if expires is None else expires - (now if date is None else date)
    if lifetime is None:
        return float(ttl)
    age = _seconds(h.get("age")) or 0
    return max(0.0, min(float(lifetime) - age, float(ttl)))


def vary_record(
    response_headers: Mapping[str, str], request_headers: Mapping[str, str]
) -> dict[str, str | None]:
    """The request's values of the headers the response varies on (for :func:`vary_matches`)."""
    names = lower(response_headers).get("vary", "")
    req = lower(request_headers)
    return {n.strip().lower(): req.get(n.strip().lower()) for n in names.split(",") if n.strip()}


def varies_on_credentials(
    response_headers: Mapping[str, str], request_headers: Mapping[str, str]
) -> bool:
    """Whether the stored variant would be recorded by a credential the request sent.

    Such a record (``Vary: Authorization`` with ``allow_credentials``) would write the token
    into the sidecar: the response is served, not stored.
    """
    record = vary_record(response_headers, request_headers)
    return any(record.get(name) is not None for name in ORIGIN_BOUND)


def vary_matches(recorded: Mapping[str, str | None], request_headers: Mapping[str, str]) -> bool:
    """Whether a request selects the stored variant (same values for every Vary header)."""
    req = lower(request_headers)
    return all(req.get(name) == value for name, value in recorded.items())


def conditional_headers(stored: Mapping[str, str]) -> dict[str, str]:
    """Validators to revalidate a stored response with (empty when it has none)."""
    out: dict[str, str] = {}
    if stored.get("etag"):
        out["If-None-Match"] = stored["etag"]
    if stored.get("last-modified"):
        out["If-Modified-Since"] = stored["last-modified"]
    return out


def may_serve_stale(stored: Mapping[str, str]) -> bool:
    """Whether the origin allows serving this response stale when it cannot be reached."""
    return not (_NO_STALE & set(parse_cache_control(stored.get("cache-control"))))


def kept(headers: Mapping[str, str]) -> dict[str, str]:
    """The subset of response headers an entry keeps (see :data:`KEPT`)."""
    h = lower(headers)
    return {name: h[name] for name in KEPT if name in h}


def merge_304(stored: Mapping[str, str], fresh: Mapping[str, str]) -> dict[str, str]:
    """Stored headers updated by a 304's headers (RFC 9111 4.3.4), keeping the body's type."""
    updates = {name: value for name, value in kept(fresh).items() if name != "content-type"}
    # The stored Age described the first response; the 304 is this moment's answer.
    base = {name: value for name, value in stored.items() if name != "age"}
    return {**base, **updates}


def meta_fields(meta: Mapping[str, Any]) -> tuple[float, dict[str, str]]:
    """``(expires_at, kept headers)`` of an entry's sidecar, tolerating malformed ones."""
    expires = meta.get("expires_at")
    headers = meta.get("headers")
    return (
        float(expires) if isinstance(expires, (int, float)) else 0.0,
        {str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {},
    )
