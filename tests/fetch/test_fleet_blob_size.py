"""The hub cache's blobs on the shared tier are copied only at the size the Hub gave them.

A blob there is named by its sha256, so a copy is verified in the end; but a giant sparse file
planted under that name (no disk for its planter) would be copied to its full size before its
hash fails, filling the disk it is copied to. Given the size the Hub announced, a blob of
another size is not copied at all: not a byte is written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED, CACHEROOT_SHARED_MODE
from cacheroot.fetch._hub import fleet

DATA = b"weights of a tiny model\n" * 64
DIGEST = hashlib.sha256(DATA).hexdigest()
#: The size of the planted blob: a hole far larger than the blob.
GIANT = 1 << 30


@pytest.fixture
def l2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared tier this process may write (``rw``)."""
    shared = tmp_path / "l2"
    shared.mkdir()
    monkeypatch.setenv(CACHEROOT_SHARED, str(shared))
    monkeypatch.delenv(CACHEROOT_SHARED_MODE, raising=False)
    return shared


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes every ``os.write`` and ``os.copy_file_range`` of the test wrote."""
    counts: list[int] = []
    write = os.write

    def counted_write(fd: int, data: bytes | memoryview) -> int:
        n = write(fd, data)
        counts.append(n)
        return n

    monkeypatch.setattr(os, "write", counted_write)
    if hasattr(os, "copy_file_range"):
        copy = os.copy_file_range

        def counted_copy(src: int, dst: int, count: int, *args: int | None) -> int:
            n = copy(src, dst, count, *args)
            counts.append(n)
            return n

        monkeypatch.setattr(os, "copy_file_range", counted_copy)
    return counts


def _blobs() -> Path:
    """This node's hub store's blobs directory (under the root, so it has a shared twin)."""
    blobs = Path(os.environ[CACHEROOT]) / "hub" / "blobs"
    blobs.mkdir(parents=True)
    return blobs


def test_a_shared_blob_of_another_size_is_not_copied(l2: Path, written: list[int]) -> None:
    blobs = _blobs()
    planted = l2 / "hub" / "blobs" / DIGEST
    planted.parent.mkdir(parents=True)
    planted.write_bytes(DATA)
    os.truncate(planted, GIANT)
    before = os.lstat(planted)

    assert fleet.pull_blob(str(blobs / DIGEST), size=len(DATA)) is False

    assert sum(written) == 0
    assert sorted(os.listdir(blobs)) == []
    assert os.path.samestat(os.lstat(planted), before)
    assert os.lstat(planted).st_size == GIANT


def test_a_shared_blob_of_its_size_is_copied(l2: Path) -> None:
    blobs = _blobs()
    shared = l2 / "hub" / "blobs" / DIGEST
    shared.parent.mkdir(parents=True)
    shared.write_bytes(DATA)

    assert fleet.pull_blob(str(blobs / DIGEST), size=len(DATA)) is True

    assert (blobs / DIGEST).read_bytes() == DATA


def test_a_local_blob_of_another_size_is_not_written_through(l2: Path, written: list[int]) -> None:
    blobs = _blobs()
    local = blobs / DIGEST
    local.write_bytes(DATA)
    os.truncate(local, GIANT)
    written.clear()

    assert fleet.push_blob(str(local), size=len(DATA)) is False

    assert sum(written) == 0
    shared = l2 / "hub" / "blobs"
    assert not shared.exists() or sorted(os.listdir(shared)) == []


def test_a_local_blob_of_its_size_is_written_through(l2: Path) -> None:
    local = _blobs() / DIGEST
    local.write_bytes(DATA)

    assert fleet.push_blob(str(local), size=len(DATA)) is True

    assert (l2 / "hub" / "blobs" / DIGEST).read_bytes() == DATA
