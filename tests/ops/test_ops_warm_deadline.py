"""``cacheroot warm --deadline``: an origin that stalls costs at most the deadline per asset."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .conftest import cli
from .test_ops_warm import asset

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin


def test_a_stalled_asset_fails_at_the_deadline_and_says_so(origin: Origin, tmp_path: Path) -> None:
    body = b"slow bytes\n" * 4096
    manifest = tmp_path / "suite.toml"
    manifest.write_text(asset(origin.serve("slow.bin", body), body))
    origin.hold("slow.bin")
    try:
        started = time.monotonic()
        done = cli("warm", str(manifest), "--deadline", "2")
        took = time.monotonic() - started
    finally:
        origin.release()
    assert done.returncode == 1, done.stderr
    assert took < 30, took  # the read timeout alone would have waited 60 s
    assert "0 hits, 0 misses (0 B downloaded), 1 failure" in done.stdout
    assert "deadline" in done.stdout + done.stderr


def test_warm_deadline_takes_seconds(tmp_path: Path) -> None:
    done = cli("warm", str(tmp_path / "m.toml"), "--deadline", "soon")
    assert done.returncode == 2
    assert "expected a number of seconds, 0 or more (e.g. 600 or 1.5), found 'soon'" in done.stderr
