"""Issue 31: a directory swapped during prune's walk. While the survey walks a 2775 volume, a
co-tenant (another uid of the volume's group) renames a directory aside and plants a link (or a
directory of their own) in its place. The survey must list nothing the link leads to (a
root-only directory outside the volume), touch nothing there, and say once that it met a link.

The swap is made at one exact moment: the first time this process opens or lists the container
directory ``torchinductor/fxgraph`` (after its parent was listed, before it is listed itself),
a child running as the co-tenant swaps it, and the walk goes on only once the child is done.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch._upkeep.prune_report import prune_root, render
from cacheroot.fetch._upkeep.survey import survey

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.fetch.test_multiuser import GROUP, UID_A, member, shared_volume
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from fetch.test_multiuser import GROUP, UID_A, member, shared_volume

SECRET = "secret-name"  # noqa: S105 - a file name, no password
CONTAINER = "fxgraph"

#: The co-tenant: drop to ``argv[1]``, then on each line ``<mode> <dir> <target>`` swap ``dir``
#: for a link to ``target`` (``link``) or for a directory of its own (``dir``), and say ``done``.
SWAPPER = """
import json, os, sys
who = json.loads(sys.argv[1])
os.setgroups(who["groups"]); os.setgid(who["gid"]); os.setuid(who["uid"])
os.umask(0o022)
for line in sys.stdin:
    mode, here, target = line.split()
    os.rename(here, here + ".aside")
    if mode == "link":
        os.symlink(target, here)
    else:
        os.mkdir(here)
        with open(os.path.join(here, "theirs.bin"), "wb") as f:
            f.write(b"planted")
    print("done", flush=True)
"""


def _old(path: Path, when: float) -> None:
    os.utime(path, (when, when), follow_symlinks=False)


@pytest.fixture
def volume() -> Iterator[tuple[Path, Path]]:
    """``(root, secret)``: a 2775 volume whose inductor cache holds old entries in ``fxgraph``
    (made by the co-tenant), and a root-only directory outside it with ``secret-name`` in it."""
    with shared_volume() as vol:
        secret = vol.parent / "private"
        secret.mkdir(mode=0o700)
        (secret / SECRET).write_bytes(b"root only")
        root = vol / "root"
        fx = root / "torchinductor" / CONTAINER
        fx.mkdir(parents=True)
        long_ago = time.time() - 10 * 86400
        for d in (root, root / "torchinductor", fx):
            os.chown(d, UID_A, GROUP)
            os.chmod(d, 0o2775)  # noqa: S103 - the volume's directories, as members make them
        for name in ("kernel-a", "kernel-b"):
            (fx / name).write_bytes(b"x" * 100)
            _old(fx / name, long_ago)
        _old(secret / SECRET, long_ago)
        st = os.stat(secret)
        os.utime(secret, ns=(st.st_mtime_ns - 10**12, st.st_mtime_ns))  # a listing would stamp it
        yield root, secret


def _secret_state(secret: Path) -> tuple[int, int, int, int]:
    """The times of the root-only directory and its file (not its listing: that stamps it)."""
    st, inner = os.lstat(secret), os.lstat(secret / SECRET)
    return st.st_atime_ns, st.st_mtime_ns, inner.st_atime_ns, inner.st_mtime_ns


def _untouched(secret: Path, before: tuple[int, int, int, int]) -> None:
    assert _secret_state(secret) == before  # not listed (its atime), not read, not written
    assert os.listdir(secret) == [SECRET]  # nothing removed


def _swap_when_reached(
    monkeypatch: pytest.MonkeyPatch, target: Path, mode: str, link_to: Path
) -> Callable[[], bool]:
    """Swap ``target`` (by the co-tenant) the first time this process opens or lists it."""
    child = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, json.dumps(member(UID_A))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    swapped: list[bool] = []
    real_open, real_listdir, real_scandir = os.open, os.listdir, os.scandir

    def reached(path: Any, dir_fd: int | None = None) -> None:
        if swapped or isinstance(path, int):
            return
        name = os.fsdecode(path)
        if dir_fd is not None:
            here = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        else:
            here = os.path.abspath(name)
        if here != str(target):
            return
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(f"{mode} {target} {link_to}\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        swapped.append(True)

    def fake_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        reached(path, dir_fd)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def fake_listdir(path: Any = ".") -> list[str]:
        reached(path)
        return real_listdir(path)

    def fake_scandir(path: Any = ".") -> Any:
        reached(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "listdir", fake_listdir)
    monkeypatch.setattr(os, "scandir", fake_scandir)

    def done() -> bool:
        monkeypatch.undo()
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
        return bool(swapped)

    return done


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "prune"])
def test_a_container_swapped_for_a_link_mid_walk_lists_nothing_behind_it(
    volume: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, *, dry_run: bool
) -> None:
    root, secret = volume
    fx = root / "torchinductor" / CONTAINER
    before = _secret_state(secret)
    done = _swap_when_reached(monkeypatch, fx, "link", secret)
    try:
        report = prune_root(str(root), older_than=3600.0, dry_run=dry_run, environ={})
    finally:
        assert done(), "the walk never reached the container: the swap was not made"
    text, as_json = render(report), json.dumps(report)
    assert SECRET not in as_json, as_json
    assert SECRET not in text, text
    _untouched(secret, before)
    assert stat.S_ISLNK(os.lstat(fx).st_mode)  # the planted link itself is left alone
    planted = [n for n in report["notes"] if str(fx) in n and "symbolic link" in n]
    assert len(planted) == 1, report["notes"]
    assert sorted(os.listdir(fx.with_name(CONTAINER + ".aside"))) == ["kernel-a", "kernel-b"]


def test_a_container_swapped_for_another_directory_lists_only_the_held_one(
    volume: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, secret = volume
    fx = root / "torchinductor" / CONTAINER
    before = _secret_state(secret)
    done = _swap_when_reached(monkeypatch, fx, "dir", secret)
    try:
        found = survey(str(root), environ={})
    finally:
        assert done(), "the walk never reached the container: the swap was not made"
    labels = sorted(c.victim.label for c in found.candidates)
    # What the walk holds (the directory renamed aside) or nothing of it: never the planted
    # directory's file, which no path is resolved again to reach.
    assert "fxgraph/theirs.bin" not in labels, labels
    replaced = [n for n in found.notes if str(fx) in n and "replaced" in n]
    assert len(replaced) == 1, found.notes
    _untouched(secret, before)
