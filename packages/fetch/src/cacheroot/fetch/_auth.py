"""``Authorization`` headers from the environment, one origin at a time; never stored or shown.

Read at every download (a hit never asks), from two places:

- ``CACHEROOT_AUTH_TOKENS``: whitespace-separated ``HOST=TOKEN`` entries, the host optionally
  with a port (``HOST:PORT=TOKEN``) and a scheme (``http://HOST=TOKEN``). A download from that
  origin sends ``Authorization: Bearer TOKEN``: over https unless the entry says ``http://``,
  and to the port given, else to the scheme's own (443, 80) only. The first entry that matches
  wins.
- ``HF_TOKEN`` (else ``HUGGING_FACE_HUB_TOKEN``), the token huggingface_hub reads, for the Hub's
  own origins: ``https://huggingface.co``, ``https://hf.co`` and the origin of ``HF_ENDPOINT``.
  huggingface_hub (2.x, ``_HUB_ORIGINS`` in ``huggingface_hub/utils/_http.py``) keeps the token
  on a redirect only to the same origin or another of those, and drops it for the CDN hosts
  (``cdn-lfs.hf.co``, ``cas-bridge.xethub.hf.co``) whose signed URLs need none. Here it is
  stricter still: like every header of a download, it goes to the origin the download starts
  at and to no other, whatever a redirect names (see :mod:`._http`).

``Fetcher(headers=...)`` wins over both, and a ``~/.netrc`` entry for the host is applied by
requests after them. Tokens are never recorded, logged or put into an error: a malformed entry
is named by its position, never by its text (a reversed ``TOKEN=HOST`` puts the token where the
host goes). The header value is a :class:`~._redact.Secret`, whose ``repr`` is redacted, so a
traceback that shows local variables (``pytest -l``) does not show it either; the bytes that
http.client builds from it are cleared from the frames of a request that fails
(:func:`._http._request`).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_AUTH_TOKENS, HF_ENDPOINT, HF_TOKEN, HUGGING_FACE_HUB_TOKEN

from ._errors import FetchError
from ._http import origin
from ._redact import Secret

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The Hub's own origins, where ``HF_TOKEN`` goes (``HF_ENDPOINT`` adds its own).
HUB_ORIGINS = (("https", "huggingface.co", 443), ("https", "hf.co", 443))
_HOST = re.compile(
    r"(?:(https?)://)?"
    r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::(\d{1,5}))?",
    re.IGNORECASE,
)
_DEFAULT_PORT = {"http": 80, "https": 443}
#: What a header value may hold: visible ASCII (a space or a line break would end or split it).
_TOKEN = re.compile(r"[\x21-\x7e]+")
_FORM = (
    "expected whitespace-separated HOST=TOKEN, HOST:PORT=TOKEN or http://HOST:PORT=TOKEN "
    f"entries (https unless http:// is given), e.g. {CACHEROOT_AUTH_TOKENS}="
    "'hf-mirror.internal=hf_xxx artifacts.internal:8443=xxx'"
)


def _entries(value: str) -> list[tuple[tuple[str, str, int], Secret]]:
    """``((scheme, host, port), token)`` per entry of ``CACHEROOT_AUTH_TOKENS``.

    A malformed entry raises :class:`FetchError` naming its position only; the error is raised
    from a frame that holds no part of the value (see the module docstring).
    """
    found: list[tuple[tuple[str, str, int], Secret]] = []
    problem = ""
    for n, entry in enumerate(value.split(), 1):
        where, eq, token = entry.partition("=")
        m = _HOST.fullmatch(where)
        if not eq:
            problem = f"entry {n} has no '='"
        elif m is None:
            problem = (
                f"entry {n} does not start with a host name (an optional http:// or https://, "
                "a host, an optional :PORT; no user or path), or it is the wrong way round"
            )
        elif not _TOKEN.fullmatch(token):
            problem = f"entry {n} has an empty token, or one with characters a header cannot carry"
        elif m[3] and not 1 <= int(m[3]) <= 65535:
            # No URL can name such a port: the entry would never match, its token never sent.
            problem = f"entry {n} names port {int(m[3])}, outside 1..65535"
        else:
            scheme = (m[1] or "https").lower()
            port = int(m[3]) if m[3] else _DEFAULT_PORT[scheme]
            found.append(((scheme, m[2].lower().strip("[]"), port), Secret(token)))
            continue
        break
    if problem:
        del value, entry, where, token, m  # nothing of the value in the traceback's frame
        raise FetchError(
            f"{CACHEROOT_AUTH_TOKENS}: {problem} (its text is not shown: it may hold a token); "
            f"{_FORM}"
        )
    return found


def _hub_token(env: Mapping[str, str], where: tuple[str, str | None, int | None]) -> Secret | None:
    hubs: list[tuple[str, str | None, int | None]] = list(HUB_ORIGINS)
    endpoint = (env.get(HF_ENDPOINT) or "").strip()
    if endpoint:
        hubs.append(origin(endpoint))
    if where not in hubs:
        return None
    for name in (HF_TOKEN, HUGGING_FACE_HUB_TOKEN):
        # huggingface_hub strips line breaks and spaces; a blank value counts as unset.
        token = (env.get(name) or "").replace("\r", "").replace("\n", "").strip()
        if not token:
            continue
        if not _TOKEN.fullmatch(token):
            del token  # nothing of the value in the traceback's frame
            raise FetchError(
                f"{name} holds characters an HTTP header cannot carry (it is not shown): set it "
                "to the token as huggingface.co shows it (hf_...), or unset it"
            )
        return Secret(token)
    return None


def auth_headers(url: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``Authorization`` header the environment holds for ``url``'s origin, or ``{}``.

    Raises :class:`FetchError` naming the variable (not the token) when it is malformed.
    """
    env = os.environ if environ is None else environ
    where = origin(url)
    host, port = where[1], where[2]
    if host is None:
        return {}
    try:
        found = _entries(env.get(CACHEROOT_AUTH_TOKENS) or "")
        hub = _hub_token(env, where)
    except FetchError:
        del env, environ  # the environment's tokens stay out of the traceback's frame
        raise
    here = (where[0], host.strip("[]"), port)
    for at, token in found:
        if at == here:
            return {"Authorization": Secret(f"Bearer {token}")}
    return {} if hub is None else {"Authorization": Secret(f"Bearer {hub}")}
