"""``cacheroot cache prune`` and ``tier evict`` over a volume where a cache directory or a
namespace was swapped for a link to elsewhere: nothing outside the root is ever removed, and the
directory is skipped with a line saying so (these run as root in nightly steps)."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch._upkeep.budget import apply, plan
from cacheroot.fetch._upkeep.cache import prune
from cacheroot.fetch._upkeep.in_use import lock_held

from .hostile import cli, put, sentinels, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(l1, l2, outside)``: the host's root, the shared tier, and a directory beside them
    holding old sentinel files."""
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l1.mkdir()
    l2.mkdir()
    return l1, l2, sentinels(tmp_path / "outside")


def test_prune_skips_a_cache_directory_that_is_a_link(trees: tuple[Path, Path, Path]) -> None:
    l1, _l2, outside = trees
    (l1 / "triton").symlink_to(outside / "keep")
    put(l1, "tiktoken/old.bin", b"old")
    before = snapshot(outside)
    done = cli(l1, None, "cache", "prune", "--older-than", "1s")
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before
    assert not (l1 / "tiktoken" / "old.bin").exists()  # the real caches are still pruned
    assert (
        f"note: skipped TRITON_CACHE_DIR ({l1}/triton): {l1}/triton is a symbolic link; "
        "never followed (remove it, or point the variable at the directory itself)\n"
    ) in done.stdout


def test_prune_skips_a_namespace_that_is_a_link(trees: tuple[Path, Path, Path]) -> None:
    l1, _l2, outside = trees
    (l1 / "vllm" / "test_cache").mkdir(parents=True)
    (l1 / "vllm" / "test_cache" / "gsm8k").symlink_to(outside / "keep")
    put(l1, "vllm/test_cache/real/old.bin", b"old")
    before = snapshot(outside)
    done = cli(l1, None, "cache", "prune", "--older-than", "1s")
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before
    assert not (l1 / "vllm" / "test_cache" / "real" / "old.bin").exists()


def test_prune_skips_a_test_cache_that_is_a_link(trees: tuple[Path, Path, Path]) -> None:
    l1, _l2, outside = trees
    (l1 / "vllm").mkdir()
    (l1 / "vllm" / "test_cache").symlink_to(outside)
    put(outside, "ns/.gone.bin.meta.json", b"{}")  # a record of a missing entry: a stray
    before = snapshot(outside)
    done = cli(l1, None, "cache", "prune", "--strays")
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before


def test_nightly_evict_never_follows_a_linked_shared_cache(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, l2, outside = trees
    (l2 / "triton").symlink_to(outside / "keep")
    (l2 / "huggingface").symlink_to(outside)
    put(l2, "torchinductor/fxgraph/old/graph.py", b"old")
    before = snapshot(outside)
    done = cli(l1, l2, "tier", "evict", "--l2-older-than", "14d")
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before
    assert not (l2 / "torchinductor" / "fxgraph" / "old").exists()
    assert f"skipped TRITON_CACHE_DIR ({l2}/triton): {l2}/triton is a symbolic link" in done.stdout


def test_a_cache_directory_swapped_for_a_link_after_the_survey_is_refused(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, _l2, outside = trees
    put(l1, "tiktoken/old.so", b"old")
    victims = plan(str(l1), older_than=1.0)
    assert [v.label for v in victims] == ["old.so"]
    (l1 / "tiktoken").rename(l1 / "moved")  # the survey saw a directory; now it is a link
    (l1 / "tiktoken").symlink_to(outside / "keep")
    before = snapshot(outside)
    done = apply(victims)
    assert snapshot(outside) == before
    assert (done.removed_count, len(done.refused)) == (0, 1)
    assert "is a symbolic link or not a directory: not followed (refused)" in done.refused[0][1]


def _returns_within(seconds: float, fifo: Path, call: Callable[[], object]) -> bool:
    """Whether ``call()`` returns within ``seconds``; a reader blocked on ``fifo`` is then
    released (a writer opens it) so that no thread is left hanging."""
    done = threading.Event()

    def run() -> None:
        call()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    finished = done.wait(seconds)
    if not finished:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    return finished


def test_prune_never_blocks_on_a_fifo_planted_as_a_lock_file(tmp_path: Path) -> None:
    (tmp_path / "ns").mkdir()
    fifo = tmp_path / "ns" / ".gone.bin.lock"
    os.mkfifo(fifo)
    assert _returns_within(5.0, fifo, lambda: prune(str(tmp_path), grace=0.0))
    assert fifo.is_fifo()  # refused, not opened


def test_lock_held_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / ".x.lock"
    os.mkfifo(fifo)
    held: list[bool] = []
    assert _returns_within(5.0, fifo, lambda: held.append(lock_held(str(fifo))))
    assert held == [False]
