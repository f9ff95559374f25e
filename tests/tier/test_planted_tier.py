"""The planted-object matrix of the shared tier: ``cacheroot tier up`` (seeding) and ``tier down``,
``tier sync``, and a fetch's read-through and write-through, against every kind of object a
writer of either volume can plant, at every name from the tier's top down to one entry.

The shared tier (L2, ``CACHEROOT_SHARED``) is a group-shared volume (``2775``) as the
documentation sets one up; the host's root (L1, ``CACHEROOT``) holds the same entry at the same
relative path. Each case plants one object (a link to a directory or to a root-only file outside
both volumes, a hard link to that file, a FIFO, a socket, a character device that never ends, a
directory where a file belongs, a file where a directory belongs, a sparse giant) at one
component of the L2 side (the top's subdirectories, the namespace, the entry, its record, its
lease) or, for ``sync`` and ``up`` (which walk both trees), of the L1 side (the same, with the
entry's lock), then runs one operation in this process:

- ``read``: a fetch that misses L1 while L2 holds the entry and its record;
- ``write``: a fetch that misses both, then writes the download through to L2;
- ``sync``: ``cacheroot tier sync`` of L1's entry to an L2 that lacks it;
- ``up``: ``cacheroot tier up --mode seed`` from an L2 that holds the entry into an empty L1,
  then ``cacheroot tier down``.

and checks:

- nothing outside both volumes was read, listed, written, chmod-ed or removed (every name there
  with its access, change and modification times is as before);
- the operation ended within its time and, with a sparse giant, allocated at most a few MiB and
  left no file larger than that on either volume (the giant's record gives the real entry's
  size: nothing may be copied beyond it);
- with a hard link planted under the entry's name on L2, its record is forged to give the
  linked file's size, so that only the link count is left to refuse it;
- the outcome: a fetch returns a regular file of one name holding the origin's bytes, or raises
  :class:`~cacheroot.fetch.FetchError`; a command exits 0 or 1, and 1 comes with a note; where
  nothing was planted on the entry's way, the copy it makes holds the origin's bytes.

The plants are root's (the commands run as root, as the set-up and nightly steps do); what a
member of the group can and cannot plant is covered by the fetch matrices.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import stat
import time
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_SHARED
from cacheroot.envs._cli import GROUP, main
from cacheroot.fetch import Fetcher, FetchError
from cacheroot.fetch._lease import lease_path
from cacheroot.fetch._store import SHARED_DIR, lock_path, meta_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        HANG,
        MEMORY_BOUND,
        bounded,
        group_volume,
        outside_dir,
        plant,
        state,
    )
else:
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        HANG,
        MEMORY_BOUND,
        bounded,
        group_volume,
        outside_dir,
        plant,
        state,
    )

NAMESPACE = "ns"
#: The origin's bytes: a file read through ``file://``.
DATA = b"the origin's bytes\n" * 64
#: The components from each side's top down, and whether each is a directory.
L2_COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "entry": False,
    "record": False,
    "lease": False,
}
L1_COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "entry": False,
    "record": False,
    "lock": False,
}
#: The operations, and the sides each is planted on.
OPERATIONS = {"read": ("l2",), "write": ("l2",), "sync": ("l2", "l1"), "up": ("l2", "l1")}


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is durable is not what the matrix checks: an fsync per copy, record and directory
    costs it most of its time on a disk shared with other jobs."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda _fd: None)


def _cases() -> Iterator[Any]:
    for op, sides in OPERATIONS.items():
        for side in sides:
            components = L2_COMPONENTS if side == "l2" else L1_COMPONENTS
            for component, is_dir in components.items():
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    id_ = f"{op}-{side}-{component}-{kind}"
                    yield pytest.param(op, side, component, kind, id=id_)


def _made(directory: Path, volume: Path) -> None:
    """The directories from ``volume`` down to ``directory``, as cacheroot makes its own in a
    group-shared volume (``2775``)."""
    missing = [p for p in (directory, *directory.parents) if volume in p.parents]
    for path in reversed(missing):
        if not path.exists():
            path.mkdir()
            os.chmod(path, SHARED_DIR)


def _position(top: Path, rel: Path, component: str) -> Path:
    """Where ``component`` of the entry ``rel`` lies under ``top`` (either side)."""
    entry = top / rel
    return {
        "vllm": top / rel.parts[0],
        "test_cache": top / rel.parts[0] / rel.parts[1],
        "namespace": entry.parent,
        "entry": entry,
        "record": Path(meta_path(str(entry))),
        "lease": Path(lease_path(str(entry))),
        "lock": Path(lock_path(str(entry))),
    }[component]


def _forge_size(entry: Path) -> None:
    """Make the record of ``entry`` give the size of the file now there (a hard link to the
    root-only file): only its second name is then left to refuse it."""
    record = Path(meta_path(str(entry)))
    meta = json.loads(record.read_bytes())
    meta["size"] = os.lstat(entry).st_size
    record.write_text(json.dumps(meta), encoding="utf-8")


def _fetch(url: str) -> Path | FetchError:
    fetcher = Fetcher(retries=0, lock_timeout=0.5, allow_file=True)
    try:
        return fetcher.fetch(url, namespace=NAMESPACE)
    except FetchError as exc:
        return exc
    finally:
        fetcher.close()


def _holds(path: Path) -> bool:
    """Whether ``path`` is a regular file of one name holding the origin's bytes (read only
    once ``lstat`` says so: never through a link or from a FIFO)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size != len(DATA):
        return False
    return path.read_bytes() == DATA


def _largest(top: Path) -> int:
    """The most disk any one regular file of ``top`` takes (no link followed)."""
    most = 0
    for here, _dirs, files in os.walk(top):
        for name in files:
            st = os.lstat(os.path.join(here, name))
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                most = max(most, st.st_blocks * 512)
    return most


@functools.cache
def _commands() -> tuple[EntryPoint, ...]:
    """The installed subcommands, looked up once (a lookup per case costs the matrix seconds)."""
    return tuple(entry_points(group=GROUP))


def _command(*argv: str) -> int:
    try:
        return main(["tier", *argv], entries=_commands())
    except SystemExit as exc:  # a usage error, or an L2 that cannot be used at all
        return int(exc.code or 0)


def _prepared(op: str, url: str, l1: Path, l2: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The entry's path relative to either root, once the two tiers are as ``op`` needs them:
    for ``sync`` the entry in L1 only, for ``read`` and ``up`` in L2 only (with its record),
    for ``write`` in neither; the shared tier configured from then on."""
    rel = Fetcher(allow_file=True).path(url, namespace=NAMESPACE).relative_to(l1)
    if op == "sync":
        assert isinstance(_fetch(url), Path)  # L1 holds the entry, L2 nothing yet
    monkeypatch.setenv(CACHEROOT_SHARED, str(l2))
    if op in ("read", "up"):
        assert isinstance(_fetch(url), Path)  # written through: L2 holds it and its record
        shutil.rmtree(l1 / rel.parts[0])  # a new host: L1 is empty
        assert _holds(l2 / rel)
    return rel


def _run(op: str, url: str, merged: Path) -> object:
    """What ``op`` returns: a fetch's path or error, a command's exit status."""
    if op in ("read", "write"):
        return _fetch(url)
    if op == "sync":
        return _command("sync", "--settle", "0")
    status = _command("up", "--mode", "seed", "--merged", str(merged))
    assert _command("down", "--merged", str(merged)) == 0
    assert not os.path.lexists(merged)
    return status


@pytest.mark.parametrize(("op", "side", "component", "kind"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    side: str,
    component: str,
    kind: str,
    isolated_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    l1 = isolated_cache
    l2 = tmp_path / "l2"
    l2.mkdir()
    group_volume(l2, os.getgid())
    outside = outside_dir(tmp_path / "outside")
    source = tmp_path / "origin" / "model.bin"
    source.parent.mkdir()
    source.write_bytes(DATA)
    url = source.as_uri()
    rel = _prepared(op, url, l1, l2, monkeypatch)
    _made((l2 / rel).parent, l2)
    if side == "l1":
        _made((l1 / rel).parent, l1)
    plant(_position(l1 if side == "l1" else l2, rel, component), kind, outside)
    if (side, component, kind) == ("l2", "entry", "hardlink") and op in ("read", "up"):
        _forge_size(l2 / rel)
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    caplog.set_level(logging.INFO, logger="cacheroot")
    started = time.monotonic()
    with bounded(memory=kind == "sparse") as peak:
        outcome = _run(op, url, tmp_path / "merged")
    # The alarm that ends a hung call is a TimeoutError, an OSError a tier may log and go on.
    assert time.monotonic() - started < HANG, f"{op} hung until the alarm ended it"
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
        assert _largest(l1) < MEMORY_BOUND, f"{op} copied a sparse giant into L1"
        assert _largest(l2) < MEMORY_BOUND, f"{op} copied a sparse giant into L2"
    if isinstance(outcome, int):
        noted = capsys.readouterr().err + caplog.text
        assert outcome in (0, 1), noted
        assert outcome == 0 or noted.strip(), "exit status 1 without a note"
        if component not in ("vllm", "test_cache", "namespace", "entry"):
            # Nothing in the entry's way: its copy is made, and right.
            assert _holds((l2 if op == "sync" else l1) / rel), noted
        return
    if not isinstance(outcome, FetchError):
        assert isinstance(outcome, Path), outcome
        assert _holds(outcome), outcome
