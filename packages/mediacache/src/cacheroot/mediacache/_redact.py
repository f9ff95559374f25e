"""What the media cache writes down or prints about a URL: no credential, one line.

A URL may carry credentials in its userinfo (``https://user:password@host/``, redacted by
:func:`cacheroot.fetch.redact_url`) and, at least as often, in its query: signed object-store
URLs (``X-Amz-Signature=``, ``X-Goog-Signature=``, Azure's ``sig=``, CloudFront's
``Signature=``/``Policy=``), API keys and tokens (``?token=``, ``access_token=``,
``api_key=``). The value of such a parameter is a password for as long as it is valid, and a
record is read by every user of the volume. :func:`redact` replaces the values (names stay:
they say what was there); the entry's key is still the digest of the full URL, so two signed
URLs remain two entries.

Text that came from the volume (a record's URL, a planted name) is another user's text, and a
control character in it could rewrite a terminal or start a forged line in a log:
:func:`one_line` escapes every control character, line breaks and tabs included.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from cacheroot.fetch.store import redact_url

#: What replaces a secret (as :func:`cacheroot.fetch.redact_url` writes it).
REDACTED = "***"
#: Parameter names (lower case, ``-`` read as ``_``) whose values are credentials.
SECRET_NAMES = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "code",
        "id_token",
        "jwt",
        "key",
        "key_pair_id",
        "pass",
        "passwd",
        "password",
        "policy",
        "pwd",
        "refresh_token",
        "secret",
        "session",
        "sessionid",
        "sig",
        "signature",
        "token",
    }
)
#: Parts of names that make any parameter a credential (``x_amz_security_token``,
#: ``x_goog_credential``, ``client_secret``, ``sas_token``...).
SECRET_PARTS = ("token", "secret", "passw", "signature", "credential", "apikey", "api_key")
#: ``?name=value`` or ``&name=value`` (``;`` too): the value runs to the next separator, a
#: fragment, whitespace or a quote (URLs are quoted in messages).
_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[^=&;#?\s'\"<>]+)=)(?P<value>[^&;#\s'\"<>]*)")
#: C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def secret_name(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a credential."""
    plain = unquote(name).strip().lower().replace("-", "_")
    return plain in SECRET_NAMES or any(part in plain for part in SECRET_PARTS)


def _param(match: re.Match[str]) -> str:
    if not match["value"] or not secret_name(match["name"]):
        return match[0]
    return match["head"] + REDACTED


def redact(text: str) -> str:
    """``text`` with every URL's credentials redacted: userinfo, and the values of the query
    parameters :func:`secret_name` names (``?token=abc&w=1`` -> ``?token=***&w=1``)."""
    text = redact_url(text)
    if "=" not in text:
        return text
    return _PARAM.sub(_param, text)


def one_line(text: str) -> str:
    """``text`` with every control character written as a Python escape (``\\n``, ``\\x1b``,
    ``\\u2028``): it stays one line, and cannot move a terminal's cursor."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: repr(m[0])[1:-1], text)


def shown(text: object) -> str:
    """``text`` as the cache prints it: :func:`redact`-ed, then :func:`one_line`."""
    return one_line(redact(str(text)))
