"""The values of HTTP header fields that cacheroot reads: numbers, dates and ``Retry-After``.

One parser each, shared by the downloads (``Content-Length``, ``Content-Range``, ``Retry-After``),
the model snapshots (a hub client's ``Retry-After``) and the media cache (``Date``, ``Expires``),
so a value means the same thing to all three. No I/O and no HTTP library: the media cache and
the hub code import this without pulling in the download machinery.

HTTP numbers are ``1*DIGIT`` (RFC 9110): ASCII digits only, so ``²`` or ``+3`` are not numbers
here even though Python's ``int()`` would read them. HTTP dates are GMT; a date without a zone
is read as GMT too, never as the local time.
"""

from __future__ import annotations

import email.utils
import re
import time
from datetime import timezone

#: ASCII digits only (``str.isdigit`` also takes ``²``, ``int`` also takes other scripts' digits,
#: ``+``, ``_`` and spaces).
_DIGITS = re.compile(r"[0-9]+")


def decimal(value: str | None) -> int | None:
    """The non-negative integer a header field holds, or ``None`` unless it is ASCII digits.

    Surrounding spaces and tabs are allowed, nothing else.
    """
    if value is None:
        return None
    value = value.strip(" \t")
    return int(value) if _DIGITS.fullmatch(value) else None


def parse_http_date(value: str | None) -> float | None:
    """An HTTP date (``Wed, 21 Oct 2015 07:28:00 GMT``) as a POSIX timestamp; ``None`` when
    missing or invalid."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:  # RFC 9110 dates are always GMT
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def retry_after(value: object, now: float | None = None) -> float | None:
    """Seconds to wait that a ``Retry-After`` value asks for; ``None`` if absent or garbled.

    ``value`` is the header's text (delay-seconds or an HTTP date, which counts from ``now``,
    default the current time), or a number some clients hand over already parsed (a negative
    one waits 0). A garbled value is ``None`` so the caller falls back to its own backoff.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value))
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    seconds = decimal(text)
    if seconds is not None:
        return float(seconds)
    if text[:1].isdigit() or text[:1] in "+-":
        return None  # a number, but not one HTTP allows
    when = parse_http_date(text)
    if when is None:
        return None
    return max(0.0, when - (time.time() if now is None else now))
