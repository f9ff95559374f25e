"""``cacheroot tier sync``: complete files only, never replacing, resumable, many at once."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED
from cacheroot.fetch._tier.layers import sync

from .fleet import hidden_partials, visible_files, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator

HOUR_AGO = time.time() - 3600


def put(root: Path, rel: str, data: bytes, mode: int = 0o644) -> Path:
    """A file written an hour ago (settled)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    return path


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Path]:
    """A file that another process holds open for writing (with an old mtime)."""
    path = tmp_path / "l1" / "torchinductor" / "fxgraph" / "open.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    code = "import sys; f = open(sys.argv[1], 'ab'); print('open', flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"open\n"
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    yield path
    proc.communicate(b"")


def test_only_complete_files_are_copied(tmp_path: Path, writer: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l2.mkdir()
    hub = "huggingface/hub/models--org--m"
    put(l1, f"{hub}/blobs/abc", b"weights")
    put(l1, f"{hub}/blobs/def.incomplete", b"half")
    put(l1, "huggingface/hub/.locks/models--org--m/abc.lock", b"")
    put(l1, "triton/K1/kernel.so", b"\x7fELF", mode=0o755)
    put(l1, "triton/K1/kernel.json.tmp.pid_12_345", b"{")
    put(l1, "vllm/test_cache/downloads/.a.bin.0123abcd-99.deadbeef.partial", b"part")
    put(l1, "vllm/test_cache/downloads/.a.bin.lock", b"")
    (l1 / "fresh.bin").write_bytes(b"just written")  # changed now: not settled
    snap = l1 / hub / "snapshots" / "rev1"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to("../../blobs/abc")
    os.utime(snap / "model.safetensors", (HOUR_AGO, HOUR_AGO), follow_symlinks=False)
    os.mknod(l1 / "deleted-in-overlay", stat.S_IFCHR, os.makedev(0, 0))  # a whiteout
    report = sync(str(l1), str(l2))
    assert visible_files(str(l2)) == {
        f"{hub}/blobs/abc": b"weights",
        f"{hub}/snapshots/rev1/model.safetensors": b"weights",
        "triton/K1/kernel.so": b"\x7fELF",
    }
    assert os.readlink(l2 / hub / "snapshots/rev1/model.safetensors") == "../../blobs/abc"
    assert stat.S_IMODE(os.stat(l2 / "triton/K1/kernel.so").st_mode) == 0o755
    assert os.stat(l2 / hub / "blobs/abc").st_mtime == pytest.approx(HOUR_AGO, abs=1e-3)
    assert (report.copied, report.unsettled, report.skipped) == (3, 2, 6)
    assert not os.path.lexists(l2 / "deleted-in-overlay")
    assert not os.path.lexists(l2 / "torchinductor" / "fxgraph" / "open.bin")
    assert hidden_partials(str(l2)) == []


def test_a_file_another_host_published_is_never_replaced(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    put(l2, "triton/K/kernel.so", b"theirs")
    put(l1, "triton/K/kernel.so", b"ours, also complete")
    put(l1, "triton/K/other.so", b"new")
    report = sync(str(l1), str(l2))
    assert visible_files(str(l2)) == {"triton/K/kernel.so": b"theirs", "triton/K/other.so": b"new"}
    assert (report.copied, report.present) == (1, 1)


def test_a_file_with_several_names_is_counted_not_copied_nor_failed(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l2.mkdir()
    put(l1, "uv/archive/a/lib.py", b"linked into an environment")
    os.link(l1 / "uv/archive/a/lib.py", tmp_path / "venv-lib.py")  # a second name, elsewhere
    put(l1, "uv/archive/a/other.py", b"one name")
    report = sync(str(l1), str(l2))
    assert visible_files(str(l2)) == {"uv/archive/a/other.py": b"one name"}
    assert (report.copied, report.linked, report.failed) == (1, 1, 0)
    assert str(report).endswith(
        "0 failed; 1 file with several names not copied (a hard link may lead to anyone's file)"
    )


def _tree(root: Path, files: int, size: int) -> dict[str, bytes]:
    made = {}
    for i in range(files):
        rel = f"hub/d{i % 7}/f{i:04d}.bin"
        data = (i.to_bytes(4, "big") * (size // 4 + 1))[:size]
        put(root, rel, data)
        made[rel] = data
    return made


def _cli_sync(l1: Path, l2: Path) -> subprocess.Popen[str]:
    env = {**os.environ, CACHEROOT: str(l1), CACHEROOT_SHARED: str(l2)}
    argv = [sys.executable, "-m", "cacheroot.envs._cli", "tier", "sync", "--settle", "0"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)


def _copied(out: str) -> int:
    m = re.search(r"copied (\d+) files?\b", out)
    assert m is not None, out
    return int(m[1])


def test_a_partial_left_beside_its_published_copy_is_removed_by_the_next_sync(
    tmp_path: Path,
) -> None:
    """A sync killed after publishing a copy and before removing its partial leaves a complete
    directory with a hidden partial in it: the next sync, with nothing to copy there, removes
    it."""
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    tree = _tree(l1, 7, 1024)
    _tree(l2, 7, 1024)
    dead = subprocess.run(  # a writer that made its partial and is gone
        [
            sys.executable,
            "-c",
            (
                "import sys; from cacheroot.fetch import _store; "
                "p = _store.partial_path(sys.argv[1]); open(p, 'wb').close(); print(p)"
            ),
            str(l2 / "hub" / "d0" / "f0000.bin"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert hidden_partials(str(l2)) == [dead]
    again = _cli_sync(l1, l2)
    out, _ = again.communicate()
    assert again.returncode == 0
    assert _copied(out) == 0
    assert visible_files(str(l2)) == tree
    assert hidden_partials(str(l2)) == []


def test_a_sync_killed_mid_copy_is_finished_by_the_next(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l2.mkdir()
    tree = _tree(l1, 300, 96 * 1024)
    proc = _cli_sync(l1, l2)
    wait_for(lambda: len(list(l2.rglob("f*.bin"))) >= 30, what="the sync to get going")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    published = visible_files(str(l2))
    assert 30 <= len(published) < len(tree)
    assert all(tree[rel] == data for rel, data in published.items())  # nothing torn
    again = _cli_sync(l1, l2)
    out, _ = again.communicate()
    assert again.returncode == 0
    assert _copied(out) == len(tree) - len(published)
    assert visible_files(str(l2)) == tree
    assert hidden_partials(str(l2)) == []  # the killed sync's partial was removed


def test_two_hosts_syncing_one_tree_publish_each_file_once(tmp_path: Path) -> None:
    a, b, l2 = tmp_path / "a", tmp_path / "b", tmp_path / "l2"
    l2.mkdir()
    tree = _tree(a, 200, 32 * 1024)
    assert _tree(b, 200, 32 * 1024) == tree
    procs = [_cli_sync(a, l2), _cli_sync(b, l2)]
    outs = [p.communicate()[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sum(_copied(o) for o in outs) == len(tree)  # each name published by one of them
    assert visible_files(str(l2)) == tree
    assert hidden_partials(str(l2)) == []
