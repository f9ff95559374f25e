"""Where an entry lives: ``<cache>/<namespace>/<name>``, with no way out of the cache.

A name is ``<16 hex digits of sha256(url)>-<sanitised basename>``: deterministic, different for
different URLs (64 bits of digest), recognisable (``3f9c...-test.jsonl``) and short (at most
:data:`~._store.MAX_NAME` bytes, so partial and sidecar names stay within NAME_MAX). Only
``[A-Za-z0-9._-]`` survive sanitising and the name never starts with a dot, so it cannot be
``..``, absolute, contain a separator or NUL, or collide with the store's dot-files.

Namespaces and caller-chosen file names are *checked* rather than sanitised: silently mapping
``../x`` to something else would hide a bug in the caller. A namespace may be nested
(``gpt_oss/tiktoken``, as vLLM's own tests name theirs): a relative path of up to
:data:`MAX_DEPTH` names, each one checked as a file name is. None of its names below the first
may end in ``.extracted``, so a namespace never runs into an unpacked archive of the level above
it (and ``cacheroot cache`` can tell the two apart by name).

Credentials in a URL (``https://user:password@host/...``) are part of what the name digests, as
they always were: an entry keeps its name across versions, and two users of one URL get one
entry each. The record beside the entry names the URL by :func:`record_key`, whose password is
redacted, so no secret is written down (see :mod:`._redact`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from urllib.parse import unquote

from ._redact import redact_url
from ._store import MAX_NAME

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_BASENAME = 100
_MAX_NAMESPACE = 64
#: The most names a nested namespace may have (``a/b/c`` has 3): bounds how deep
#: ``cacheroot cache`` looks for entries.
MAX_DEPTH = 8
#: Suffix of the directory an archive entry ``X`` is unpacked into (``X.extracted``, see
#: :mod:`._archive`): a caller-chosen file name may not end with it.
EXTRACTED_SUFFIX = ".extracted"
#: Names Windows reserves in every directory (the cache may be an SMB share).
_RESERVED = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"COM{i}" for i in range(1, 10)]
    + [f"LPT{i}" for i in range(1, 10)]
)


def _sanitise(basename: str) -> str:
    clean = _UNSAFE.sub("_", basename).lstrip("._-")
    if len(clean) > _MAX_BASENAME:
        stem, ext = os.path.splitext(clean)
        ext = ext[:20]
        clean = stem[: _MAX_BASENAME - len(ext)] + ext
    return clean or "index"


def url_key(url: str) -> str:
    """The URL as it identifies an entry: without its fragment, which no server ever sees."""
    return url.split("#", 1)[0]


def record_key(url: str) -> str:
    """The URL as an entry's record names (and a hit compares) it: :func:`url_key`, redacted."""
    return redact_url(url_key(url))


def entry_name(url: str) -> str:
    """The file name of ``url``'s entry (see the module docstring)."""
    key = url_key(url)
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    # Split by hand: urlsplit rejects some malformed hosts, and a name must exist for any URL.
    rest = key.split("://", 1)[1].partition("/")[2] if "://" in key else key
    path = rest.split("?", 1)[0]
    return f"{digest}-{_sanitise(unquote(path.rsplit('/', 1)[-1]))}"


def _refusal(value: str, limit: int) -> str:
    """Why ``value`` is not one safe name (``""``: it is)."""
    if not _VALID.fullmatch(value):
        return (
            "expected letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(no separators, no '..', no NUL)"
        )
    if len(value) > limit:
        return f"longer than {limit} characters"
    if value.split(".", 1)[0].upper() in _RESERVED:
        return "a reserved device name on Windows file systems"
    return ""


def _check(kind: str, value: str, limit: int) -> str:
    why = _refusal(value, limit) if isinstance(value, str) else "expected a string"
    if why:
        raise ValueError(f"{kind} {value!r} is not allowed: {why}")
    return value


def check_namespace(namespace: str) -> str:
    """``namespace`` if it is a safe relative directory path, else ``ValueError`` saying why.

    One name (``gsm8k``) or up to :data:`MAX_DEPTH` names joined by ``/`` (``gpt_oss/tiktoken``),
    each checked as :func:`check_filename` checks a name: so no ``..``, no absolute path, no empty
    or dot-leading part, no backslash.
    """
    shape = (
        "expected one name (e.g. gsm8k) or several joined by '/' (e.g. gpt_oss/tiktoken), each "
        "of letters, digits, '.', '_' or '-' and starting with a letter or digit"
    )
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace {namespace!r} is not allowed: {shape}")
    if namespace.startswith("/"):
        raise ValueError(
            f"namespace {namespace!r} is not allowed: it is absolute; {shape}, relative to "
            "the test cache"
        )
    parts = namespace.split("/")
    if len(parts) > MAX_DEPTH:
        raise ValueError(
            f"namespace {namespace!r} is not allowed: {len(parts)} levels, at most {MAX_DEPTH}"
        )
    for depth, part in enumerate(parts):
        if not part:
            raise ValueError(
                f"namespace {namespace!r} is not allowed: it has an empty part (a leading, "
                f"trailing or doubled '/'); {shape}"
            )
        why = _refusal(part, _MAX_NAMESPACE)
        if why:
            where = "" if len(parts) == 1 else f"its part {part!r}: "
            raise ValueError(f"namespace {namespace!r} is not allowed: {where}{why}")
        if depth and part.endswith(EXTRACTED_SUFFIX):
            raise ValueError(
                f"namespace {namespace!r} is not allowed: its part {part!r} ends in "
                f"{EXTRACTED_SUFFIX!r}, which names the unpacked archive of an entry of "
                f"{'/'.join(parts[:depth])!r}; choose another name"
            )
    return namespace


def check_filename(filename: str) -> str:
    """``filename`` if it is one safe file name, else ``ValueError`` saying why.

    A name ending in ``.extracted`` is refused too: ``X.extracted`` is where the entry ``X`` of
    the namespace is unpacked. (A name derived from a URL starts with its own digest, so it can
    never be another derived entry's unpacked directory.)
    """
    _check("filename", filename, MAX_NAME)
    if filename.endswith(EXTRACTED_SUFFIX):
        raise ValueError(
            f"filename {filename!r} is not allowed: names ending in {EXTRACTED_SUFFIX!r} are "
            f"reserved for unpacked archives (the entry {filename[: -len(EXTRACTED_SUFFIX)]!r} "
            f"is unpacked into {filename!r}); choose another name"
        )
    return filename


@functools.lru_cache(maxsize=4096)
def entry_path(cache_dir: str, namespace: str, url: str, filename: str | None = None) -> str:
    """``<cache_dir>/<namespace>/<name>`` for ``url`` (``filename`` replaces the derived name).

    Pure, so memoised: the hit path computes it on every call.
    """
    name = entry_name(url) if filename is None else check_filename(filename)
    return os.path.join(cache_dir, check_namespace(namespace), name)
