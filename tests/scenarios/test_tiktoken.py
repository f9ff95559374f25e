"""tiktoken data: upstream's gpt-oss eval cached encoding files in ad-hoc places.

Here the file is fetched into ``$VLLM_TEST_CACHE/tiktoken/`` and loaded from there by the real
tiktoken library, which checks the hash once more and builds a working encoding from it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import tiktoken
import tiktoken.load

from cacheroot.fetch._plugin.fixtures import CachedFile

from .assets import N_RANKS, PAT_STR, catalog
from .conftest import under

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PATH = "/encodings/scenario_bpe.tiktoken"


def test_tiktoken_loads_the_encoding_from_the_test_cache(
    cached_file: CachedFile,
    asset_url: Callable[[str], str],
    test_cache_dir: Path,
    isolated_cache: Path,
) -> None:
    expected = catalog()[PATH]
    path = cached_file(
        asset_url(PATH),
        sha256=expected.sha256,
        namespace="tiktoken",
        filename=expected.filename,
    )
    assert path.parent == test_cache_dir / "tiktoken"
    assert under(path, isolated_cache)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == expected.sha256

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
