"""GSM8K: upstream's eval downloaded ``test.jsonl`` into ``/tmp`` with no timeout or checksum.

Here it is fetched into ``$VLLM_TEST_CACHE/gsm8k/`` and parsed as the eval parses it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from cacheroot.fetch._plugin.fixtures import CachedFile

from .assets import catalog, gsm8k_jsonl
from .conftest import under

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

PATH = "/datasets/gsm8k/test.jsonl"


def test_gsm8k_is_fetched_into_the_test_cache_and_parses(
    cached_file: CachedFile,
    asset_url: Callable[[str], str],
    test_cache_dir: Path,
    isolated_cache: Path,
) -> None:
    expected = catalog()[PATH]
    path = cached_file(
        asset_url(PATH), sha256=expected.sha256, namespace="gsm8k", filename=expected.filename
    )
    assert path == test_cache_dir / "gsm8k" / "test.jsonl"
    assert under(path, isolated_cache)
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == expected.sha256
    assert data == gsm8k_jsonl()

    rows = [json.loads(line) for line in data.decode().splitlines() if line]
    assert len(rows) == 24
    answers = [int(re.search(r"#### (-?\d+)", r["answer"]).group(1)) for r in rows]  # type: ignore[union-attr]
    assert answers[:3] == [10, 13, 16]
    assert all("question" in r for r in rows)
