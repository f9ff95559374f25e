"""Shared fixtures: every test runs with every cache variable isolated into its own tmp_path."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_AUDIT_ALLOW,
    CACHEROOT_AUDIT_REPORT,
    CACHEROOT_AUTH_TOKENS,
    CACHEROOT_DISABLE,
    CACHEROOT_MIRRORS,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_PIN_FILE,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    CACHEROOT_TAG,
    CACHEROOT_VERIFY,
    HF_HUB_OFFLINE,
    HF_TOKEN,
    HUGGING_FACE_HUB_TOKEN,
    TABLE,
    VLLM_TEST_CACHE_LEGACY,
    VLLM_TEST_CACHE_ONLY,
)

if TYPE_CHECKING:
    from pathlib import Path

#: Every variable the layout knows, plus its switches: none may leak in from the outer shell.
#: ``CACHEROOT_AUDIT`` and ``CACHEROOT_AUDIT_DIR`` are kept: a suite run under
#: ``--cacheroot-audit`` passes them to the processes its tests start, which join the audit.
ISOLATED = (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_AUDIT_ALLOW,
    CACHEROOT_AUDIT_REPORT,
    CACHEROOT_AUTH_TOKENS,
    CACHEROOT_DISABLE,
    CACHEROOT_MIRRORS,
    CACHEROOT_OFFLINE,
    CACHEROOT_OPT_IN,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    CACHEROOT_TAG,
    CACHEROOT_VERIFY,
    HF_HUB_OFFLINE,
    HF_TOKEN,
    HUGGING_FACE_HUB_TOKEN,
    VLLM_TEST_CACHE_LEGACY,
    VLLM_TEST_CACHE_ONLY,
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
    # No test (nor a child it starts with this environment) reads a root pinned into the
    # environment under test: `nox -s tests-*` pin the volume there for scrubbed children.
    monkeypatch.setenv(CACHEROOT_PIN_FILE, "")
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    for name, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(name, value)
    return root


def _gpu_missing(vendor: str) -> str:
    """Why the tests of ``vendor`` (``cuda`` or ``rocm``) cannot run here, or ``""``."""
    import importlib.util
    import os

    device = "/dev/nvidia0" if vendor == "cuda" else "/dev/kfd"
    if not os.path.exists(device):
        return f"no {vendor.upper()} GPU on this machine ({device} is missing)"
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed: install a {vendor.upper()} build of torch to run this"
    return ""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked ``cuda`` or ``rocm`` where that vendor's GPU (or torch) is missing."""
    for vendor in ("cuda", "rocm"):
        if item.get_closest_marker(vendor) is not None:
            reason = _gpu_missing(vendor)
            if reason:
                pytest.skip(reason)
