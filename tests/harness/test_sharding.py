"""Sharding across CI jobs: every test in exactly one shard, chosen by options or by Buildkite.

Each shard is collected by a real pytest process (``--collect-only -q`` prints the selected test
ids); the shards are balanced by the durations recorded in ``tests/scenarios/.test_durations``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import BUILDKITE_PARALLEL_JOB, BUILDKITE_PARALLEL_JOB_COUNT

from .runner import TESTS, clean_env, plugin_args, run_pytest

if TYPE_CHECKING:
    import subprocess

DURATIONS = TESTS / "scenarios" / ".test_durations"
SHARDS = 3


def _collect(extra: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    args = ["tests/scenarios", "--collect-only", "-q", *plugin_args()]
    return run_pytest([*args, "--durations-path", str(DURATIONS), *extra], env=clean_env(**env))


def _ids(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("tests/") and "::" in line]


def test_shards_partition_the_suite() -> None:
    runs: list[tuple[list[str], dict[str, str]]] = [([], {})]
    runs += [(["--shard-id", str(i), "--num-shards", str(SHARDS)], {}) for i in range(SHARDS)]
    runs.append(([], {BUILDKITE_PARALLEL_JOB: "2", BUILDKITE_PARALLEL_JOB_COUNT: "3"}))
    with ThreadPoolExecutor(max_workers=2) as pool:
        outs = list(pool.map(lambda run: _collect(run[0], **run[1]), runs))
    whole, *shards, buildkite = (_ids(out) for out in outs)

    assert len(whole) >= 10
    assert len(set(whole)) == len(whole)
    everything = [test for shard in shards for test in shard]
    assert sorted(everything) == sorted(whole)  # the union is the suite, nothing twice
    assert all(shards), [len(s) for s in shards]
    assert buildkite == shards[2]  # BUILDKITE_PARALLEL_JOB counts from 0, pytest-split from 1
    for i, out in enumerate(outs[1 : 1 + SHARDS]):
        assert f"Running group {i + 1}/{SHARDS} (estimated duration" in out.stdout
        assert "No test durations found" not in out.stdout


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        (["--shard-id", "3", "--num-shards", "3"], {}, "expected 0 <= shard < count"),
        (["--shard-id", "0"], {}, "give both"),
        ([], {BUILDKITE_PARALLEL_JOB: "x", BUILDKITE_PARALLEL_JOB_COUNT: "2"}, "integers"),
        (
            ["--shard-id", "0", "--num-shards", "2", "--splits", "3", "--group", "1"],
            {},
            "disagrees",
        ),
    ],
    ids=["out-of-range", "half-given", "not-a-number", "conflicts-with-splits"],
)
def test_bad_shard_settings_are_usage_errors(
    extra: list[str], env: dict[str, str], message: str
) -> None:
    out = _collect(extra, **env)
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert message in out.stderr
