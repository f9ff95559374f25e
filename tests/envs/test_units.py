"""Sizes and ages as every cacheroot command reads and prints them (``cacheroot.envs.units``)."""

from __future__ import annotations

import pytest

from cacheroot.envs.units import format_age, format_size, parse_age, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("123", 123),
        ("0", 0),
        ("10B", 10),
        ("2K", 2048),
        ("500M", 524_288_000),
        ("500m", 524_288_000),
        ("1.5G", 1_610_612_736),
        ("10GiB", 10_737_418_240),
        ("10gib", 10_737_418_240),
        ("1T", 1_099_511_627_776),
        ("10MB", 10_000_000),
        ("2kb", 2000),
        (" 7 K ", 7168),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text", ["", "abc", "-1", "1e3", "10iB", "5X", "1.5.2G", "\u0663", "10 G B", "G"]
)
def test_parse_size_refuses_with_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected a number of bytes") as info:
        parse_size(text)
    assert "e.g. 123, 500M, 1.5G, 10GiB" in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("45m", 2700.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1.5h", 5400.0),
        ("7d", 604_800.0),
        ("7D", 604_800.0),
        ("2w", 1_209_600.0),
        ("1w2d3h4m5s", 788_645.0),
        (" 15m ", 900.0),
    ],
)
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "soon", "-1", "1h1h", "30m1h", "1h30", "5x", "h", "\u0663", "1 hour"]
)
def test_parse_age_refuses_with_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected a number of seconds") as info:
        parse_age(text)
    assert "e.g. 90, 90s, 45m, 1h30m, 7d, 2w" in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (None, "?"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (3 * 1024**3, "3.0 GiB"),
        (5 << 40, "5.0 TiB"),
        (3 << 50, "3072.0 TiB"),
    ],
)
def test_format_size(size: int | None, text: str) -> None:
    assert format_size(size) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.6, "1m"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"), (691_201, "1w1d1s")],
)
def test_format_age(seconds: float, text: str) -> None:
    assert format_age(seconds) == text
