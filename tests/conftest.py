"""Shared fixtures: every test runs with every cache variable isolated into its own tmp_path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    HF_HUB_OFFLINE,
    TABLE,
)

if TYPE_CHECKING:
    from pathlib import Path

#: Every variable the layout knows, plus its switches: none may leak in from the outer shell.
ISOLATED = (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_DISABLE,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    HF_HUB_OFFLINE,
    *(v.name for v in TABLE),
)


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point the whole layout at a fresh root so no test writes into a real home.

    Every cache variable is removed and ``CACHEROOT`` set to a new directory; the layout is then
    applied, as the start-up hook would have done, so library code under test sees the same
    environment a hooked process sees.
    """
    import os

    from cacheroot.envs import resolve

    root = tmp_path_factory.mktemp("cacheroot")
    for name in ISOLATED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CACHEROOT, str(root))
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    for name, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(name, value)
    return root
