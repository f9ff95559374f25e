"""Sizes and ages as people write them on a command line: one parser and one formatter each.

Every cacheroot command that takes or shows a size or an age uses these (``cacheroot doctor``,
``cacheroot cache``, a manifest's ``max_unpacked``, the pytest plugin's report), so ``500M``
means the same thing everywhere and ``1.5 GiB`` is printed the same way everywhere. They live
in ``cacheroot.envs`` because every other distribution depends on it and it depends on nothing.

Sizes: a number of bytes, optionally with a unit. ``K``, ``M``, ``G``, ``T``, ``P`` (alone or
with ``iB``) are powers of 1024; with a bare ``B`` (``KB``, ``MB``, ...) powers of 1000, as the
SI prefixes say. Ages: a number of seconds, or numbers with units ``w``, ``d``, ``h``, ``m``,
``s`` (largest first, each at most once): ``90``, ``90s``, ``45m``, ``1h30m``, ``7d``, ``2w``.
A part of this public submodule's API: its ``__all__`` follows the same promise as
``cacheroot.envs``.
"""

from __future__ import annotations

import re

__all__ = ["format_age", "format_size", "parse_age", "parse_size"]

_SIZE_FORM = "bytes, or a number with K, M, G or T (1024-based; KB, MB, GB: 1000-based)"
_SIZE_EXAMPLES = "123, 500M, 1.5G, 10GiB"
_AGE_FORM = "seconds, or numbers with w, d, h, m, s (each once, largest first)"
_AGE_EXAMPLES = "90, 90s, 45m, 1h30m, 7d, 2w"

_NUMBER = r"\d+(?:\.\d+)?"
_SIZE = re.compile(rf"\s*({_NUMBER})\s*(?:([KMGTP])(i?B)?|(B))?\s*", re.IGNORECASE | re.ASCII)
_AGE_PART = re.compile(rf"\s*({_NUMBER})\s*([wdhms])", re.IGNORECASE | re.ASCII)
_AGE_PLAIN = re.compile(rf"\s*({_NUMBER})\s*", re.ASCII)
#: Seconds per age unit, largest first (the order parts must come in).
_AGE_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB")


def parse_size(text: str) -> int:
    """``"500M"`` -> 524288000 bytes; ``"10GB"`` -> 10000000000; ``"123"`` -> 123.

    Raises :class:`ValueError` naming the accepted form, with examples.
    """
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"size {text!r}: expected a number of {_SIZE_FORM}, e.g. {_SIZE_EXAMPLES}")
    number, prefix, tail = float(m[1]), (m[2] or "").upper(), (m[3] or "").upper()
    if not prefix:
        return int(number)
    base = 1000 if tail == "B" else 1024
    return int(number * base ** "_KMGTP".index(prefix))


def parse_age(text: str) -> float:
    """``"1h30m"`` -> 5400.0 seconds; ``"90"`` -> 90.0; ``"2w"`` -> 1209600.0.

    Raises :class:`ValueError` naming the accepted form, with examples.
    """
    plain = _AGE_PLAIN.fullmatch(text)
    if plain is not None:
        return float(plain[1])
    problem = f"age {text!r}: expected a number of {_AGE_FORM}, e.g. {_AGE_EXAMPLES}"
    total, end, order = 0.0, 0, list(_AGE_UNITS)
    last = -1
    for m in _AGE_PART.finditer(text):
        if m.start() != end:
            raise ValueError(problem)
        rank = order.index(m[2].lower())
        if rank <= last:
            raise ValueError(problem)  # a unit repeated, or a smaller one first
        last, end = rank, m.end()
        total += float(m[1]) * _AGE_UNITS[m[2].lower()]
    if last < 0 or text[end:].strip():
        raise ValueError(problem)
    return total


def format_size(size: float | None) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units; whole bytes below 1 KiB; ``None`` -> ``"?"``)."""
    if size is None:
        return "?"
    value = float(size)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in _BINARY[1:]:
        value /= 1024
        if abs(value) < 1024 or unit == _BINARY[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError  # pragma: no cover - the loop returns at TiB


def format_age(seconds: float) -> str:
    """``5400`` -> ``"1h30m"``; ``90`` -> ``"1m30s"``; ``0`` -> ``"0s"`` (as :func:`parse_age`
    reads it back; whole seconds)."""
    left = round(seconds)
    if left < 0:
        return "-" + format_age(-seconds)
    parts = []
    for unit, length in _AGE_UNITS.items():
        count, left = divmod(left, length)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
