"""A failed fetch leaves its namespace directory behind; ``cache prune --strays`` removes it."""

from __future__ import annotations

import os

from cacheroot.fetch import cache_dir

from .conftest import cli, cli_json


def test_an_empty_namespace_left_by_a_failed_fetch_is_a_stray() -> None:
    failed = cli("fetch", "http://127.0.0.1:9/x.bin", "--namespace", "gone/deeper")
    assert failed.returncode != 0
    cache = cache_dir()
    assert os.path.isdir(os.path.join(cache, "gone", "deeper"))
    os.makedirs(os.path.join(cache, "kept"))
    keep = os.path.join(cache, "kept", "file.bin")
    with open(keep, "w") as f:
        f.write("entry")

    report = cli_json("cache", "prune", "--strays", "--grace", "0")
    gone = sorted(s["path"] for s in report["strays"] if s["reason"] == "empty namespace")
    # Deepest first: the parent, emptied by its child's removal, goes in the same pass.
    assert gone == [os.path.join(cache, "gone"), os.path.join(cache, "gone", "deeper")]
    assert not os.path.exists(os.path.join(cache, "gone"))
    assert os.path.exists(keep)
