"""GSM8K: upstream's eval downloaded ``test.jsonl`` into ``/tmp`` with no timeout or checksum.

Here it is fetched into ``$VLLM_TEST_CACHE/gsm8k/`` and parsed as the eval parses it.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from .assets import gsm8k_jsonl

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .assets import Asset

PATH = "/datasets/gsm8k/test.jsonl"


def test_gsm8k_is_fetched_into_the_test_cache_and_parses(
    scenario_file: Callable[[str, str], tuple[Path, Asset]], test_cache_dir: Path
) -> None:
    path, _ = scenario_file(PATH, "gsm8k")  # under the root, with the catalog's sha256
    assert path == test_cache_dir / "gsm8k" / "test.jsonl"
    data = path.read_bytes()
    assert data == gsm8k_jsonl()

    rows = [json.loads(line) for line in data.decode().splitlines() if line]
    assert len(rows) == 24
    answers = [int(re.search(r"#### (-?\d+)", r["answer"]).group(1)) for r in rows]  # type: ignore[union-attr]
    assert answers[:3] == [10, 13, 16]
    assert all("question" in r for r in rows)
