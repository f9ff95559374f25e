"""Where a download may come from: mirrors first, then the origin, then fallback URLs.

``CACHEROOT_MIRRORS`` holds whitespace-separated ``ORIGIN_PREFIX=MIRROR_PREFIX`` pairs, read at
every download (a hit never asks). A URL that starts with an origin prefix is tried at the
mirror first (the prefix replaced), in the order the pairs are written, then at the URL itself;
a manifest's ``urls = [...]`` (``fetch(..., fallbacks=...)``) come after that. The entry is
always named by the canonical URL (its file name is a digest of it), so bytes that came from a
mirror are a hit for the origin's URL, and its record names the canonical URL (plus, under
``mirror``, where they came from).

A prefix that is a bare ``scheme://host[:port]`` gets its ``/`` (``https://huggingface.co``
must not match ``https://huggingface.co.example/``). A value that cannot be read is an error
naming the variable, the entry and the expected form, rather than a mirror silently skipped.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_MIRRORS

from ._errors import FetchError
from ._redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_SCHEMES = ("http://", "https://")
_FORM = (
    "expected whitespace-separated ORIGIN_PREFIX=MIRROR_PREFIX pairs of http(s) URL prefixes, "
    f"tried in order before the origin, e.g. {CACHEROOT_MIRRORS}='https://huggingface.co/="
    "https://hf-mirror.internal/ https://github.com/=https://mirror.internal/github/'"
)


def _prefix(text: str, n: int, side: str) -> str:
    if not text.lower().startswith(_SCHEMES):
        problem = "is empty" if not text else f"{redact_url(text)!r} is not an http(s) URL"
    elif any(c in text for c in "?#="):
        problem = (
            f"{redact_url(text)!r} holds '?', '#' or '=' (a prefix is a scheme, host and path; "
            "entries are separated by whitespace)"
        )
    else:
        scheme, _, rest = text.partition("://")
        if not rest.strip("/"):
            problem = f"{redact_url(text)!r} has no host"
        else:
            return f"{scheme.lower()}://{rest}" + ("" if "/" in rest else "/")
    raise FetchError(f"{CACHEROOT_MIRRORS}: entry {n}, the {side} prefix: {problem}; {_FORM}")


def rules(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(origin prefix, mirror prefix)`` pairs of ``CACHEROOT_MIRRORS``, in order."""
    env = os.environ if environ is None else environ
    found: list[tuple[str, str]] = []
    for n, entry in enumerate((env.get(CACHEROOT_MIRRORS) or "").split(), 1):
        origin, eq, mirror = entry.partition("=")
        if not eq:
            raise FetchError(
                f"{CACHEROOT_MIRRORS}: entry {n} ({redact_url(entry)!r}) has no '='; {_FORM}"
            )
        found.append((_prefix(origin, n, "origin"), _prefix(mirror, n, "mirror")))
    return found


def candidates(
    url: str, fallbacks: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> list[str]:
    """The URLs to try for ``url``, in order: its mirrors, itself, then ``fallbacks``."""
    found = [m + url[len(o) :] for o, m in rules(environ) if url.startswith(o)]
    found.append(url)
    found.extend(fallbacks)
    return list(dict.fromkeys(found))
