"""What the media cache writes down or prints about a URL: no credential, one line.

A URL may carry credentials in its userinfo (``https://user:password@host/``, redacted by
:func:`cacheroot.fetch.redact_url`) and, at least as often, in its query: signed object-store
URLs (``X-Amz-Signature=``, ``X-Goog-Signature=``, Azure's ``sig=``, CloudFront's
``Signature=``/``Policy=``), API keys and tokens (``?token=``, ``access_token=``,
``api_key=``). The value of such a parameter is a password for as long as it is valid, and a
record is read by every user of the volume. :func:`redact` replaces the values (names stay:
they say what was there), through the download core's own redaction
(:func:`cacheroot.fetch.store.redact_url`, userinfo and query credentials alike); the entry's
key is still the digest of the full URL, so two signed URLs remain two entries.

Text that came from the volume (a record's URL, a planted name) is another user's text, and a
control character in it could rewrite a terminal or start a forged line in a log:
:func:`one_line` escapes every control character, line breaks and tabs included (the core's
:func:`cacheroot.fetch.store.printable`).
"""

from __future__ import annotations

from cacheroot.fetch.store import printable, redact_url


def redact(text: str) -> str:
    """``text`` with every URL's credentials redacted: userinfo, and the values of the query
    parameters that carry one (``?token=abc&w=1`` -> ``?token=***&w=1``)."""
    return redact_url(text)


def one_line(text: str) -> str:
    """``text`` with every control character written as a Python escape (``\\n``, ``\\x1b``,
    ``\\u2028``): it stays one line, and cannot move a terminal's cursor."""
    return printable(text)


def shown(text: object) -> str:
    """``text`` as the cache prints it: :func:`redact`-ed, then :func:`one_line`."""
    return printable(redact_url(str(text)))
