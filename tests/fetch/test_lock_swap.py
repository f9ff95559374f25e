"""A lock named through the directory its caller holds stays in that directory.

Every lock of an entry is named ``/proc/self/fd/N/.<entry>.lock``: a path that no rename or
link above the held directory can redirect. A lock library that resolves such a path to the
directory's current name first (filelock 4 does, with ``realpath``) and opens that name later
can be redirected by a swap in between: root then creates the lock file wherever a co-tenant's
link leads. The swap here is made at the exact moment the lock file is created.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cacheroot.fetch import _lock
from cacheroot.fetch.store import PathLock

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _swap_at_create(
    monkeypatch: pytest.MonkeyPatch, ns: Path, private: Path, name: str
) -> list[str]:
    """Rename ``ns`` aside and plant a link to ``private`` in its place just before the first
    ``open`` that creates ``name``."""
    real_open = os.open
    swapped: list[str] = []

    def swap_then_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if not swapped and flags & os.O_CREAT and os.fspath(path).endswith(name):
            ns.rename(ns.with_name(ns.name + ".aside"))
            ns.symlink_to(private)
            swapped.append(os.fspath(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", swap_then_open)
    return swapped


def test_a_lock_named_through_its_held_directory_is_made_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = tmp_path / "vol" / "ns"
    ns.mkdir(parents=True)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    fd = os.open(ns, os.O_RDONLY | os.O_DIRECTORY)
    try:
        lock = PathLock(f"/proc/self/fd/{fd}/.e.bin.lock", timeout=2.0)
        swapped = _swap_at_create(monkeypatch, ns, private, ".e.bin.lock")
        lock.acquire()
        lock.release()
    finally:
        os.close(fd)
    assert swapped, "the lock file was never created: nothing was swapped"
    assert os.listdir(private) == []
    assert ".e.bin.lock" in os.listdir(tmp_path / "vol" / "ns.aside")


def test_the_lock_is_flock_where_the_system_has_it() -> None:
    assert _lock._FLOCK is (os.name == "posix")
