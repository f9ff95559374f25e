"""The shared tier and the volume as an attacker left them: directories swapped for links, links
out of the tree, private files and credentials, a source swapped after the walk. ``tier sync``,
fetch's write-through and ``tier up`` seeding must never write through a link, widen a mode or
publish a secret (these tests run as root, as the set-up and nightly steps do)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch._tier import layers as _tier

from .hostile import cli, put, sentinels, snapshot

if TYPE_CHECKING:
    from pathlib import Path

LINK_REFUSED = "is a symbolic link or not a directory: not followed (refused)"


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(l1, l2, outside)``: the host's root, the shared tier, and a directory beside them
    holding sentinel files."""
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l1.mkdir()
    l2.mkdir()
    return l1, l2, sentinels(tmp_path / "outside")


def test_sync_never_writes_into_a_shared_directory_swapped_for_a_link(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, l2, outside = trees
    put(l1, "triton/cron.d/evil", b"* * * * * root sh -c 'id > /tmp/pwned'\n")
    put(l1, "triton/K1/kernel.so", b"\x7fELF")
    (l2 / "triton").mkdir()
    (l2 / "triton" / "cron.d").symlink_to(outside / "cron.d")
    before = snapshot(outside)
    done = cli(l1, l2, "tier", "sync")
    assert snapshot(outside) == before
    assert done.returncode == 1, done.stderr
    assert f"tier sync: {l2}/triton/cron.d not used: {LINK_REFUSED}\n" in done.stderr
    assert (l2 / "triton" / "K1" / "kernel.so").read_bytes() == b"\x7fELF"  # the rest is synced


def test_write_through_never_follows_a_linked_shared_directory(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, l2, outside = trees
    src = put(l1.parent, "origin/a.bin", b"alpha")
    (l2 / "vllm").symlink_to(outside / "keep")
    before = snapshot(outside)
    done = cli(l1, l2, "fetch", "--allow-file", "-q", src.as_uri())
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before
    assert LINK_REFUSED in done.stderr
    assert os.listdir(l2) == ["vllm"]


def test_seeding_never_writes_into_a_local_directory_swapped_for_a_link(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, l2, outside = trees
    put(l2, "keep/deep/planted.bin", b"planted")
    put(l2, "triton/K1/kernel.so", b"\x7fELF")
    (l1 / "keep").symlink_to(outside / "keep")
    before = snapshot(outside)
    done = cli(l1, l2, "tier", "up", "--mode", "seed", "--merged", str(l1.parent / "merged"))
    assert done.returncode == 0, done.stderr
    assert snapshot(outside) == before
    assert (l1 / "triton" / "K1" / "kernel.so").read_bytes() == b"\x7fELF"


def test_links_out_of_the_tree_are_never_copied(trees: tuple[Path, Path, Path]) -> None:
    l1, l2, outside = trees
    (l2 / "hub").symlink_to(outside)  # seeding would hand the job root's secret
    (l2 / "blob").symlink_to(outside / "secret")
    put(l2, "m/blobs/abc", b"weights")
    (l2 / "m" / "snapshots").mkdir()
    (l2 / "m" / "snapshots" / "w").symlink_to("../blobs/abc")  # inside: copied
    done = cli(l1, l2, "tier", "up", "--mode", "seed", "--merged", str(l1.parent / "merged"))
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(l1)) == ["m"]
    assert os.readlink(l1 / "m" / "snapshots" / "w") == "../blobs/abc"
    (l1 / "triton").mkdir()
    (l1 / "triton" / "evil").symlink_to(outside / "secret")
    os.utime(l1 / "triton" / "evil", (0, 0), follow_symlinks=False)
    done = cli(l1, l2, "tier", "sync")
    assert done.returncode == 1
    assert not os.path.lexists(l2 / "triton" / "evil")
    assert f"a link out of its tree ({outside}/secret): not copied" in done.stderr


def test_modes_never_widen_on_either_tier(trees: tuple[Path, Path, Path]) -> None:
    l1, l2, _outside = trees
    put(l1, "triton/private.bin", b"mine", mode=0o600)
    put(l1, "triton/group.bin", b"ours", mode=0o640)
    put(l1, "triton/open.bin", b"anyone's", mode=0o666)  # never world-writable on the tier
    put(l2, "tiktoken/private.json", b"theirs", mode=0o600)
    assert cli(l1, l2, "tier", "sync").returncode == 0
    synced = l2 / "triton"
    modes = {n: stat.S_IMODE(os.lstat(synced / n).st_mode) for n in os.listdir(synced)}
    assert modes == {"private.bin": 0o600, "group.bin": 0o640, "open.bin": 0o664}
    done = cli(l1, l2, "tier", "up", "--mode", "seed", "--merged", str(l1.parent / "merged"))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.lstat(l1 / "tiktoken" / "private.json").st_mode) == 0o600


def test_credentials_and_quarantined_entries_never_reach_the_shared_tier(
    trees: tuple[Path, Path, Path],
) -> None:
    l1, l2, _outside = trees
    put(l1, "huggingface/token", b"hf_secret", mode=0o600)
    put(l1, "huggingface/stored_tokens", b"[ci]\nhf_token = hf_secret\n", mode=0o600)
    put(l1, "modelscope/credentials/git_token", b"ms_secret", mode=0o600)
    put(l1, ".netrc", b"machine h login u password p\n", mode=0o600)
    put(l1, "vllm/test_cache/.quarantine/ns/bad.bin.20260101T000000Z.7", b"corrupt")
    put(l1, "huggingface/hub/models--o--m/blobs/abc", b"weights")
    done = cli(l1, l2, "tier", "sync")
    assert done.returncode == 0, done.stderr
    found = sorted(
        os.path.relpath(os.path.join(here, n), l2) for here, _d, ns in os.walk(l2) for n in ns
    )
    assert found == ["huggingface/hub/models--o--m/blobs/abc"]


def test_a_source_swapped_for_a_link_after_the_walk_is_refused(
    trees: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    l1, l2, outside = trees
    victim = put(l1, "triton/K1/a.bin", b"harmless")
    real = _tier._Pass.candidate

    def swap_after_the_look(self: _tier._Pass, *args: object) -> os.stat_result | None:
        st = real(self, *args)  # type: ignore[arg-type]
        if victim.exists() and not victim.is_symlink():
            victim.unlink()
            victim.symlink_to(outside / "secret")
        return st

    monkeypatch.setattr(_tier._Pass, "candidate", swap_after_the_look)
    report = _tier.sync(str(l1), str(l2))
    assert (report.copied, report.failed) == (0, 1)
    assert not os.path.lexists(l2 / "triton" / "K1" / "a.bin")
