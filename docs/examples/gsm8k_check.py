"""A test that reads its data through the cache: the CI tutorial runs it offline-first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

GSM8K = "https://example.org/gsm8k/test.jsonl"
GSM8K_SHA256 = "c92faa732bba19b5f99970a10a72ea5fcce22979fbad35aa3ec011772bead4cf"


def test_gsm8k_has_every_question(cached_file: Callable[..., Path]) -> None:
    path = cached_file(GSM8K, sha256=GSM8K_SHA256, namespace="gsm8k", filename="test.jsonl")
    assert path.read_text(encoding="utf-8").count('"question"') == 48_000  # noqa: S101
