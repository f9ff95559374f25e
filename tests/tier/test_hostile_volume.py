"""Every maintenance command, run as root over a volume and a shared tier that another user
prepared: links to a directory outside both, a hub revision whose file links out of its blobs.
Nothing outside the volume and the shared tier may be created, written, chmod-ed or removed."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from .hostile import MONTH_AGO, cli, put, sentinels, snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ATTACKER = "cacheroot-attacker"


@pytest.fixture(scope="module")
def attacker() -> Iterator[int]:
    """The uid of a second user (made here, removed after)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the attack is on what root's maintenance steps do")
    if shutil.which("useradd") is None:
        pytest.skip("useradd(8) is not installed: no second user can be made")
    made = False
    try:
        uid = pwd.getpwnam(ATTACKER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", ATTACKER], check=True)
        uid, made = pwd.getpwnam(ATTACKER).pw_uid, True
    yield uid
    if made:
        subprocess.run(["userdel", ATTACKER], check=False)


def _plant(top: Path, rel: str, target: Path | str, uid: int) -> None:
    link = top / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    os.utime(link, (MONTH_AGO, MONTH_AGO), follow_symlinks=False)


def _hub_revision_linking_out(l2: Path, target: Path, uid: int) -> None:
    repo = l2 / "huggingface" / "hub" / "models--org--m"
    put(repo, "refs/main", b"0" * 40)
    put(repo, "blobs/aaaa", b"weights")
    _plant(repo, f"snapshots/{'0' * 40}/model.bin", "../../blobs/aaaa", uid)
    _plant(repo, f"snapshots/{'0' * 40}/old.so", target, uid)
    for here, dirs, names in os.walk(repo):
        for name in dirs + names:
            os.lchown(os.path.join(here, name), uid, uid)
            os.utime(os.path.join(here, name), (MONTH_AGO, MONTH_AGO), follow_symlinks=False)


def test_no_command_reaches_outside_a_prepared_volume(tmp_path: Path, attacker: int) -> None:
    l1, l2 = tmp_path / "volume", tmp_path / "shared"
    outside = sentinels(tmp_path / "outside")
    # The volume: cache directories and a namespace swapped for links, a link to a secret.
    _plant(l1, "triton", outside / "keep", attacker)
    _plant(l1, "vllm/test_cache/gsm8k", outside / "keep", attacker)
    _plant(l1, "tiktoken/secret", outside / "secret", attacker)
    put(l1, "torch/hub/checkpoints/w.pt", b"weights", mode=0o600)
    put(l1, "torchinductor/fxgraph/ab/graph.py", b"old graph")
    # The shared tier: the directories sync and seeding write into swapped for links, a link
    # to root's secret to seed, an old cache behind a link for the nightly eviction, and a hub
    # revision whose file huggingface_hub would delete as a blob.
    _plant(l2, "torch", outside / "cron.d", attacker)
    _plant(l2, "torchinductor", outside / "keep", attacker)
    _plant(l2, "numba/secret", outside / "secret", attacker)
    _plant(l2, "tilelang", outside, attacker)
    _hub_revision_linking_out(l2, outside / "keep" / "old.so", attacker)
    os.chmod(l2, 0o777)  # noqa: S103 - a volume every job writes
    before = snapshot(outside)
    runs = [
        cli(l1, None, "cache", "prune", "--older-than", "1s"),
        cli(l1, l2, "tier", "sync"),
        cli(l1, l2, "tier", "evict", "--l2-older-than", "14d", "--l1-max-size", "0"),
        cli(l1, l2, "tier", "up", "--mode", "seed", "--merged", str(tmp_path / "merged")),
        cli(l1, l2, "cache", "prune", "--strays"),
    ]
    assert snapshot(outside) == before, [(r.args[-4:], r.stdout, r.stderr) for r in runs]
    assert [r.returncode for r in runs] == [0, 1, 0, 0, 0], [(r.stdout, r.stderr) for r in runs]
    assert "links out of" in runs[2].stdout  # the hub revision was skipped, and said so
    assert not os.path.lexists(l1 / "numba" / "secret")  # a link out of the tree is not seeded
