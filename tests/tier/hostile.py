"""What the hostile-volume tests share: a directory outside the trees holding sentinel files, and
an ``lstat`` snapshot of it that shows anything created, written, chmod-ed or removed there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_SHARED, TABLE

if TYPE_CHECKING:
    from pathlib import Path

#: Old enough for every criterion the tests give (``--older-than 1s``, ``14d``) and settled.
MONTH_AGO = time.time() - 40 * 86400

Snapshot = dict[str, tuple[int, int, int, int, int, int, int]]


def sentinels(outside: Path) -> Path:
    """Fill ``outside`` with old files an attacker would like root to touch: a cron-like
    directory, a root-only secret, a nested tree."""
    (outside / "cron.d").mkdir(parents=True)
    (outside / "keep" / "deep").mkdir(parents=True)
    files = {
        "cron.d/existing": (b"0 * * * * root true\n", 0o644),
        "secret": (b"root-only secret\n", 0o600),
        "keep/deep/old.bin": (b"old" * 100, 0o644),
        "keep/old.so": (b"\x7fELF", 0o755),
    }
    for rel, (data, mode) in files.items():
        path = outside / rel
        path.write_bytes(data)
        path.chmod(mode)
    for here, dirs, names in os.walk(outside):
        for name in dirs + names:
            os.utime(os.path.join(here, name), (MONTH_AGO, MONTH_AGO))
    os.utime(outside, (MONTH_AGO, MONTH_AGO))
    return outside


def snapshot(top: Path) -> Snapshot:
    """Every name under ``top`` (``top`` included) with what ``lstat`` says of it."""
    found: Snapshot = {}
    for here, dirs, names in os.walk(top):
        for name in ["", *dirs, *names]:
            path = os.path.join(here, name) if name else here
            if not name and here != str(top):
                continue
            st = os.lstat(path)
            found[os.path.relpath(path, top)] = (
                st.st_mode,
                st.st_uid,
                st.st_gid,
                st.st_size,
                st.st_nlink,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
    return found


def put(root: Path, rel: str, data: bytes, mode: int = 0o644) -> Path:
    """A settled file (written a month ago, as are the directories made for it)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    here = path
    while here != root:
        os.utime(here, (MONTH_AGO, MONTH_AGO), follow_symlinks=False)
        here = here.parent
    return path


def cli(l1: Path, l2: Path | None, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``cacheroot ARGV`` with the layout derived from ``CACHEROOT=l1`` (and
    ``CACHEROOT_SHARED=l2``)."""
    derived = {CACHEROOT_APPLIED, *(v.name for v in TABLE)}
    full = {k: v for k, v in os.environ.items() if k not in derived}
    full.update({CACHEROOT: str(l1), **env})
    if l2 is not None:
        full[CACHEROOT_SHARED] = str(l2)
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *argv],
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )
