"""tiktoken data: upstream's gpt-oss eval cached encoding files in ad-hoc places.

Here the file is fetched into ``$VLLM_TEST_CACHE/tiktoken/`` and loaded from there by the real
tiktoken library, which checks the hash once more and builds a working encoding from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tiktoken
import tiktoken.load

from .assets import N_RANKS, PAT_STR

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .assets import Asset

PATH = "/encodings/scenario_bpe.tiktoken"


def test_tiktoken_loads_the_encoding_from_the_test_cache(
    scenario_file: Callable[[str, str], tuple[Path, Asset]], test_cache_dir: Path
) -> None:
    path, expected = scenario_file(PATH, "tiktoken")  # under the root, with its sha256
    assert path.parent == test_cache_dir / "tiktoken"

    ranks = tiktoken.load.load_tiktoken_bpe(str(path), expected_hash=expected.sha256)
    assert len(ranks) == N_RANKS
    enc = tiktoken.Encoding(
        name="scenario_bpe", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={}
    )
    text = "the quick brown fox jumps over the lazy dog!"
    tokens = enc.encode(text)
    assert enc.decode(tokens) == text
    assert len(tokens) < len(text.encode())  # merges applied, not byte-level fallback
    assert enc.encode(" quick brown") == [ranks[b" quick"], ranks[b" brown"]]
