"""Sharding across CI jobs: ``--shard-id``/``--num-shards`` (or Buildkite's) mapped to pytest-split.

Each job runs its share of the tests, balanced by recorded durations; the options themselves are
declared with the plugin's others (:mod:`.options`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import BUILDKITE_PARALLEL_JOB, BUILDKITE_PARALLEL_JOB_COUNT

if TYPE_CHECKING:
    from collections.abc import Generator

__all__ = ["pytest_cmdline_main", "shard"]


def shard(config: pytest.Config) -> tuple[int, int] | None:
    """``(shard_id, num_shards)`` from the options or Buildkite's variables, or None."""
    shard_id = config.getoption("cacheroot_shard_id", default=None)
    count = config.getoption("cacheroot_num_shards", default=None)
    source = "--shard-id/--num-shards"
    if shard_id is None and count is None:
        raw_shard = os.environ.get(BUILDKITE_PARALLEL_JOB, "").strip()
        raw_count = os.environ.get(BUILDKITE_PARALLEL_JOB_COUNT, "").strip()
        if not raw_shard and not raw_count:
            return None
        source = f"{BUILDKITE_PARALLEL_JOB}/{BUILDKITE_PARALLEL_JOB_COUNT}"
        try:
            shard_id, count = int(raw_shard), int(raw_count)
        except ValueError:
            raise pytest.UsageError(
                f"{source} must both be integers: found {raw_shard!r} and {raw_count!r}"
            ) from None
    if shard_id is None or count is None:
        raise pytest.UsageError(f"{source}: give both, found shard {shard_id} of {count}")
    if count < 1 or not 0 <= shard_id < count:
        raise pytest.UsageError(
            f"{source}: expected 0 <= shard < count, found shard {shard_id} of {count}"
        )
    return shard_id, count


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, object, object]:
    """Map the shard to pytest-split's ``--splits``/``--group`` before anything reads them."""
    found = shard(config)
    if found is not None:
        shard_id, count = found
        if not config.pluginmanager.has_plugin("pytest_split.plugin") and not hasattr(
            config.option, "splits"
        ):
            raise pytest.UsageError("sharding needs pytest-split: `pip install pytest-split`")
        splits, group = config.option.splits, config.option.group
        if (splits, group) not in ((None, None), (count, shard_id + 1)):
            raise pytest.UsageError(
                f"shard {shard_id} of {count} disagrees with --splits {splits} --group {group}; "
                "give one or the other"
            )
        config.option.splits, config.option.group = count, shard_id + 1
    return (yield)
