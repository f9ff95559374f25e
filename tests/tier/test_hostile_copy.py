"""A shared-tier entry bigger than its record says: a 20 GiB sparse file with a forged record.

The copy into L1 runs in a private mount namespace (``unshare -m``) whose L1 is an 8 MiB tmpfs,
so a copy that does not stop fills that tmpfs (``ENOSPC``), never this machine's disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import _shared
from cacheroot.fetch._store import Partial, write_meta

if TYPE_CHECKING:
    from pathlib import Path

GIANT = 20 << 30

CHILD = """
import json, os, sys
from cacheroot.fetch import _shared
dest, l2, key = sys.argv[1:4]
out = {}
try:
    out["pulled"] = _shared.pull_file(dest, l2, key, None)
except OSError as exc:
    out["error"] = exc.strerror
vfs = os.statvfs(os.path.dirname(os.path.dirname(dest)))
out["used"] = (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
out["left"] = sorted(os.listdir(os.path.dirname(dest)))
print(json.dumps(out))
"""
SCRIPT = (
    'mount -t tmpfs -o size=8m tmpfs "$1" && mkdir "$1/vllm" && exec "$2" -c "$3" "$4" "$5" "$6"'
)


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot mount a private tmpfs")
    for cmd in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = [*cmd, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return cmd
    pytest.skip("mount namespaces are not permitted here (needs root or user namespaces)")


def _giant_with_record(l2: Path, key: str, record_size: int) -> Path:
    entry = l2 / "vllm" / "weights.bin"
    entry.parent.mkdir(parents=True)
    with open(entry, "wb") as f:
        f.truncate(GIANT)  # no disk: a hole
    write_meta(str(entry), {"url": key, "sha256": "0" * 64, "size": record_size})
    return entry


def test_a_shared_copy_never_outgrows_its_record(tmp_path: Path) -> None:
    """A record that understates the size is caught by ``fstat`` before a byte is copied."""
    cmd = _unshare()
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    l1.mkdir()
    key = "https://example.invalid/weights.bin"
    entry = _giant_with_record(l2, key, 1000)
    dest = l1 / "vllm" / "weights.bin"
    argv = [str(l1), sys.executable, CHILD, str(dest), str(entry), key]
    done = subprocess.run(
        [*cmd, "sh", "-c", SCRIPT, "sh", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"pulled": False, "used": 0, "left": []}, done.stderr
    assert "holds 21474836480 bytes, its record says 1000: not copied" in done.stderr


def test_the_copy_stops_at_the_first_byte_past_the_size(tmp_path: Path) -> None:
    """A file that grew after its size was compared: no more than the size is ever written."""
    src = tmp_path / "grown"
    with open(src, "wb") as f:
        f.truncate(64 << 20)  # sparse; a copy that ignored its bound would write all of it here
    fd = os.open(src, os.O_RDONLY)
    part = Partial(str(tmp_path / "dest"))
    try:
        assert _shared._copy(fd, part, 3 << 20) is False
        assert part.size == 3 << 20
        assert os.path.getsize(part.path) == 3 << 20
    finally:
        part.discard()
        os.close(fd)


def test_a_shared_copy_that_matches_its_record_is_pulled(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    entry = l2 / "vllm" / "weights.bin"
    entry.parent.mkdir(parents=True)
    data = b"weights" * 1000
    entry.write_bytes(data)
    key = "https://example.invalid/weights.bin"
    digest = hashlib.sha256(data).hexdigest()
    write_meta(str(entry), {"url": key, "sha256": digest, "size": len(data)})
    dest = l1 / "vllm" / "weights.bin"
    assert _shared.pull_file(str(dest), str(entry), key, digest) is True
    assert dest.read_bytes() == data


def test_copy_new_refuses_a_source_of_another_size_before_copying(tmp_path: Path) -> None:
    """What the hub's blobs on L2 use: the upstream's size, compared with ``fstat`` first."""
    src = tmp_path / "blob"
    with open(src, "wb") as f:
        f.write(b"x")
        f.truncate(GIANT)
    out = tmp_path / "out"
    out.mkdir()
    dfd = os.open(out, os.O_RDONLY)
    try:
        copied = _shared.copy_new(str(src), "blob", sha256="0" * 64, size=1, dst_dir_fd=dfd)
    finally:
        os.close(dfd)
    assert copied is None
    assert os.listdir(out) == []


def test_a_shared_copy_without_a_recorded_size_is_not_pulled(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    entry = l2 / "vllm" / "weights.bin"
    entry.parent.mkdir(parents=True)
    data = b"weights"
    entry.write_bytes(data)
    key = "https://example.invalid/weights.bin"
    write_meta(str(entry), {"url": key, "sha256": hashlib.sha256(data).hexdigest()})
    dest = l1 / "vllm" / "weights.bin"
    assert _shared.pull_file(str(dest), str(entry), key, None) is False
    assert not dest.exists()
