"""Credentials in URLs: used for the request, never written down or shown.

A URL may carry credentials in its userinfo (``https://user:password@host/...``); requests sends
them as HTTP basic auth, and that is all they are for. Everything cacheroot records or prints
about a URL goes through :func:`redact_url` first: the sidecar's ``url``, ``cacheroot cache ls``,
log lines, exception messages, the warm summary and the pytest report. The password becomes
``***`` and the user name stays (it says whose entry it is); a userinfo without a password is
most often a token (``https://<token>@host/``), so all of it becomes ``***``.

The userinfo is what the HTTP client takes it to be: everything before the last ``@`` of the
authority (the text up to the first ``/``, ``?`` or ``#`` after ``scheme://``). The function
works on any text, so a message that quotes several URLs (a redirect's source and target) is
redacted whole. Sibling distributions import it as ``cacheroot.fetch.redact_url``.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "Secret", "printable", "redact_url"]

#: What replaces a secret.
REDACTED = "***"
#: ``scheme://userinfo@``: greedy up to the last ``@`` before the authority ends.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#\s]*)@")


def _redacted(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    if not userinfo:
        return match.group(0)
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{user}:{REDACTED}@" if colon else f"{scheme}{REDACTED}@"


def redact_url(text: str) -> str:
    """``text`` with the credentials of every URL in it redacted (see the module docstring).

    ``https://alice:s3cret@host/x`` becomes ``https://alice:***@host/x``, ``https://tok@host/x``
    becomes ``https://***@host/x``; text without credentials is returned as it is.
    """
    if "@" not in text:
        return text
    return _USERINFO.sub(_redacted, text)


class Secret(str):
    """A string whose ``repr`` is :data:`REDACTED`: a header value that carries a token.

    It is the token for everything that sends it (requests and http.client take it as the
    string it is), but a traceback that shows local variables (``pytest -l``, ``rich``,
    ``better_exceptions``) and any ``repr`` of a dict that holds it show ``'***'``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(REDACTED)


#: C0 and C1 control characters and DEL, except tab and line feed.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character (an escape sequence's ESC, a carriage return, a
    bell) written as a Python escape (``\\x1b``), so that a file name or a record planted on the
    volume cannot rewrite the terminal or the CI log that shows it. Tab and line feed stay."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: repr(m.group(0))[1:-1], text)
