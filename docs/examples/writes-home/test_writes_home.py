"""A test that writes into HOME: the run-time audit's worked example (docs/explanation/audit.md)."""

from __future__ import annotations

import os


def test_numba_cache_in_home() -> None:
    os.mkdir(os.path.expanduser("~/.numba-cache"))
