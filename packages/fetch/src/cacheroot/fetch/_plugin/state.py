"""What the plugin knows for one session, shared by its hooks and fixtures (``config.stash``)."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import pytest

from .._cachedir import cache_dir
from .._errors import FetchError
from .figures import Figures, Summary, counters

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["STATE", "State", "current_cache", "is_worker"]


def current_cache() -> str | None:
    """``_VLLM_TEST_CACHE`` as the environment has it now, or None where the layout breaks it."""
    try:
        return cache_dir()
    except FetchError:
        return None


@functools.lru_cache(maxsize=256)
def _real(path: str) -> str:
    return os.path.realpath(path)


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (the controller reports for the session)."""
    return hasattr(config, "workerinput")


class State:
    """What the plugin knows for this session, kept in ``config.stash``.

    ``volume_dir`` is the cache directory the session started with. The counters are read as
    every test phase starts and ends (:meth:`settle`), and each growth goes to one side:
    ``volume``, or ``own_roots`` where the test's environment pointed at another cache (the
    isolated root a unit test makes). Reading growth rather than "now minus the start" keeps the
    figures right when a unit test calls ``reset_stats()``.
    """

    def __init__(self, *, offline: bool, no_network: bool, report: str | None) -> None:
        self.offline = offline
        self.no_network = no_network
        self.report = report
        self.volume_dir = current_cache()
        self._volume_real = None if self.volume_dir is None else _real(self.volume_dir)
        self.offline_misses = 0
        self.builds = 0
        self.build_hits = 0
        self.model_hits = 0
        self.model_misses = 0
        #: What this process did in the session's cache / in caches tests made for themselves.
        self.volume = Figures(processes=1)
        self.own_roots = Figures()
        self._last = self.counted()
        #: What the manifest step before the session did (the controller's, added to totals).
        self.warmed = Figures()
        self.manifest: Mapping[str, Any] | None = None
        self.summary: Summary | None = None
        self.workers: list[Summary] = []
        self.saved_connect: Any = None

    def counted(self) -> Figures:
        """Every counter of this process so far: the cache's and the plugin's own."""
        now = counters()
        now.offline_misses = self.offline_misses
        now.builds, now.build_hits = self.builds, self.build_hits
        now.model_hits, now.model_misses = self.model_hits, self.model_misses
        return now

    def settle(self, *, own_root: bool) -> None:
        """Add what the counters grew by since the last reading to one side."""
        now = self.counted()
        (self.own_roots if own_root else self.volume).add(now.since(self._last))
        self._last = now

    def on_volume(self, directory: str | None) -> bool:
        """Whether ``directory`` (a test cache directory, or a path in one) is the volume's."""
        if directory == self.volume_dir:
            return True
        if directory is None or self._volume_real is None:
            return False
        real = _real(directory)
        return real == self._volume_real or real.startswith(self._volume_real + os.sep)


STATE = pytest.StashKey[State]()
