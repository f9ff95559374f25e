"""Credentials in URLs: used for the request, never written down or shown.

A URL may carry credentials in its userinfo (``https://user:password@host/...``); requests sends
them as HTTP basic auth, and that is all they are for. Everything cacheroot records or prints
about a URL goes through :func:`redact_url` first: the sidecar's ``url``, ``cacheroot cache ls``,
log lines, exception messages, the warm summary and the pytest report. The password becomes
``***`` and the user name stays (it says whose entry it is); a userinfo without a password is
most often a token (``https://<token>@host/``), so all of it becomes ``***``.

A URL's query carries credentials at least as often: signed object-store URLs
(``X-Amz-Signature=``, ``X-Goog-Signature=``, Azure's ``sig=``, CloudFront's
``Signature=``/``Policy=``), API keys and tokens (``?token=``, ``access_token=``, ``api_key=``).
Such a value is a password for as long as it is valid, and a record on a shared volume is read by
every user of it (and copied to the shared tier). The values of the parameters
:func:`secret_name` names become ``***`` (the names stay: they say what was there). Only what is
written down or shown is redacted: an entry's name is still derived from the full URL, so two
signed URLs stay two entries.

The userinfo is what the HTTP client takes it to be: everything before the last ``@`` of the
authority (the text up to the first ``/``, ``?`` or ``#`` after ``scheme://``). The function
works on any text, so a message that quotes several URLs (a redirect's source and target) is
redacted whole. Sibling distributions import it as ``cacheroot.fetch.redact_url``.
"""

from __future__ import annotations

import functools
import re
import sys
import traceback
from typing import TYPE_CHECKING, ParamSpec, TypeVar
from urllib.parse import unquote

from cacheroot.envs import SECRET_NAMES, SECRET_PARTS
from cacheroot.envs import secret_name as _secret_name

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "REDACTED",
    "SECRET_NAMES",
    "SECRET_PARTS",
    "Secret",
    "forget_locals",
    "forgets_locals",
    "printable",
    "redact_url",
    "secret_name",
]

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


#: ``?name=value`` or ``&name=value`` (``;`` too): the value runs to the next separator, a
#: fragment, whitespace or a quote (URLs are quoted in messages); a colon that ends it before
#: whitespace is the message's own (``could not fetch URL: why``) and stays.
_PARAM = re.compile(
    r"(?P<head>[?&;](?P<name>[^=&;#?\s'\"<>]+)=)(?P<value>[^&;#\s'\"<>]*?)"
    r"(?=[&;#\s'\"<>]|:\s|:$|$)"
)


#: What every name :func:`secret_name` accepts contains (or a ``%``, which may encode one):
#: text without any of them has no credential in its query, found by one scan instead of a
#: parse of each parameter (a fetch that hits redacts its URL on every call).
_HINT = re.compile(r"key|sig|code|auth|pass|pwd|jwt|polic|session|secret|token|credential|%")


def secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` (percent-encoded as in the URL) carries a
    credential: :data:`SECRET_NAMES`, or a name containing one of :data:`SECRET_PARTS`. The
    names are the layout's (:func:`cacheroot.envs.secret_name`), which the run-time audit
    judges command lines by as well."""
    return _secret_name(unquote(name))


def _param(match: re.Match[str]) -> str:
    if not match["value"] or not secret_name(match["name"]):
        return match[0]
    return match["head"] + REDACTED


def redact_url(text: str) -> str:
    """``text`` with the credentials of every URL in it redacted (see the module docstring).

    ``https://alice:s3cret@host/x`` becomes ``https://alice:***@host/x``, ``https://tok@host/x``
    becomes ``https://***@host/x``, ``https://host/x?sig=abc&v=1`` becomes
    ``https://host/x?sig=***&v=1``; text without credentials is returned as it is.
    """
    if "@" in text:
        text = _USERINFO.sub(_redacted, text)
    query = text.find("?")  # every query starts with one: none, no query credential
    if query >= 0 and "=" in text and _HINT.search(text[query:].lower()):
        text = _PARAM.sub(_param, text)
    return text


class Secret(str):
    """A string whose ``repr`` is :data:`REDACTED`: a header value that carries a token.

    It is the token for everything that sends it (requests and http.client take it as the
    string it is), but a traceback that shows local variables (``pytest -l``, ``rich``,
    ``better_exceptions``) and any ``repr`` of a dict that holds it show ``'***'``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(REDACTED)


#: C0 and C1 control characters and DEL, tab and line feed included; and the Unicode line and
#: paragraph separators, which some terminals and log viewers also break lines at.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with every control character (an escape sequence's ESC, a carriage return, a
    bell, a line feed, a tab) written as a Python escape (``\\x1b``, ``\\n``), so that a file name
    or a record planted on the volume cannot rewrite the terminal or the CI log that shows it,
    nor start a line of its own that passes for one of cacheroot's (a line feed in a name would
    forge a row of ``cacheroot cache ls``). Apply it to each value, not to a whole multi-line
    text: the line feeds cacheroot writes itself must stay."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: repr(m.group(0))[1:-1], text)


def forget_locals(exc: BaseException, before: BaseException | None = None) -> None:
    """Clear the locals of every finished frame in the tracebacks of ``exc`` and of the
    exceptions it chains or wraps, stopping at ``before`` (what the caller was handling: its
    frames are not ours to clear). A frame still running cannot be cleared, and is left as it
    is; the frames' code and lines still show where it broke, their variables are gone. The
    chained exceptions' messages are redacted (:func:`redact_url`) too: requests and urllib3
    quote the URL with its query.

    A request that breaks raises through frames that hold its credentials in clear: http.client's
    header block as bytes, urllib3's and requests' URL with its query, cacheroot's own
    ``url`` and ``headers``. ``pytest -l`` and every other traceback that shows locals would
    print them.
    """
    todo: list[BaseException] = [exc]
    seen: list[BaseException] = []
    while todo:
        e = todo.pop()
        if e is before or any(e is s for s in seen):
            continue
        seen.append(e)
        traceback.clear_frames(e.__traceback__)
        if any(isinstance(a, str) for a in e.args):  # urllib3: "Max retries ... url: /x?sig=…"
            e.args = tuple(redact_url(a) if isinstance(a, str) else a for a in e.args)
        reason = getattr(e, "reason", None)  # urllib3's MaxRetryError keeps its cause here
        todo += [a for a in (*e.args, reason) if isinstance(a, BaseException)]
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]


_P = ParamSpec("_P")
_R = TypeVar("_R")


def forgets_locals(
    *kinds: type[BaseException],
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A decorator for a public entry point that is handed credentials (a URL with a signed
    query, an ``Authorization`` header): when it raises one of ``kinds``, the locals of its own
    frame and of every frame below it are cleared (:func:`forget_locals`) before the exception
    leaves, so the traceback a caller prints shows where it broke, not the credentials. The
    caller's own frames are the caller's.
    """

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def entry(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            before = sys.exc_info()[1]  # what the caller is handling stays as it is
            try:
                return fn(*args, **kwargs)
            except kinds as exc:
                forget_locals(exc, before)
                del args, kwargs  # this frame's own copy of the arguments
                raise

        return entry

    return decorate
