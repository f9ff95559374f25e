"""``Authorization`` headers from the environment, one origin at a time; never stored or shown.

Read at every download (a hit never asks), from two places:

- ``CACHEROOT_AUTH_TOKENS``: whitespace-separated ``HOST=TOKEN`` or ``HOST:PORT=TOKEN`` entries.
  A download from that host (on any port, or on that port) sends ``Authorization: Bearer
  TOKEN``. The first entry that matches wins.
- ``HF_TOKEN`` (else ``HUGGING_FACE_HUB_TOKEN``), the token huggingface_hub reads, for the Hub's
  own origins: ``https://huggingface.co``, ``https://hf.co`` and the origin of ``HF_ENDPOINT``.
  huggingface_hub (2.x, ``_HUB_ORIGINS`` in ``huggingface_hub/utils/_http.py``) keeps the token
  on a redirect only to the same origin or another of those, and drops it for the CDN hosts
  (``cdn-lfs.hf.co``, ``cas-bridge.xethub.hf.co``) whose signed URLs need none. Here it is
  stricter still: like every header of a download, it goes to the origin the download starts
  at and to no other, whatever a redirect names (see :mod:`._http`).

``Fetcher(headers=...)`` wins over both, and a ``~/.netrc`` entry for the host is applied by
requests after them. Tokens are never recorded, logged or put into an error: a malformed entry
is named by its number and host, never by its token.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_AUTH_TOKENS, HF_ENDPOINT, HF_TOKEN, HUGGING_FACE_HUB_TOKEN

from ._errors import FetchError
from ._http import origin
from ._redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The Hub's own origins, where ``HF_TOKEN`` goes (``HF_ENDPOINT`` adds its own).
HUB_ORIGINS = (("https", "huggingface.co", 443), ("https", "hf.co", 443))
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::(\d{1,5}))?")
#: What a header value may hold: visible ASCII (a space or a line break would end or split it).
_TOKEN = re.compile(r"[\x21-\x7e]+")
_FORM = (
    f"expected whitespace-separated HOST=TOKEN or HOST:PORT=TOKEN entries, e.g. "
    f"{CACHEROOT_AUTH_TOKENS}='hf-mirror.internal=hf_xxx artifacts.internal:8443=xxx'"
)


def _entries(value: str) -> list[tuple[str, int | None, str]]:
    """``(host, port or None, token)`` per entry of ``CACHEROOT_AUTH_TOKENS``."""
    found: list[tuple[str, int | None, str]] = []
    for n, entry in enumerate(value.split(), 1):
        where, eq, token = entry.partition("=")
        if not eq:
            raise FetchError(
                f"{CACHEROOT_AUTH_TOKENS}: entry {n} has no '=' (its text is not shown: it may "
                f"be a token); {_FORM}"
            )
        m = _HOST.fullmatch(where)
        if m is None:
            raise FetchError(
                f"{CACHEROOT_AUTH_TOKENS}: entry {n}: {redact_url(where)!r} is not a host name "
                f"(give the host alone: no scheme, user or path); {_FORM}"
            )
        if not _TOKEN.fullmatch(token):
            raise FetchError(
                f"{CACHEROOT_AUTH_TOKENS}: entry {n} (host {where!r}) has an empty token, or one "
                f"with characters a header cannot carry (it is not shown); {_FORM}"
            )
        port = int(m[2]) if m[2] else None
        found.append((m[1].lower().strip("[]"), port, token))
    return found


def _hub_token(env: Mapping[str, str], where: tuple[str, str | None, int | None]) -> str | None:
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
            raise FetchError(
                f"{name} holds characters an HTTP header cannot carry (it is not shown): set it "
                "to the token as huggingface.co shows it (hf_...), or unset it"
            )
        return token
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
    value = env.get(CACHEROOT_AUTH_TOKENS) or ""
    for name, at, token in _entries(value) if value.strip() else ():
        if name == host.strip("[]") and at in (None, port):
            return {"Authorization": f"Bearer {token}"}
    hub = _hub_token(env, where)
    return {} if hub is None else {"Authorization": f"Bearer {hub}"}
