"""The planted-object matrix of :func:`build_once`: building a tree once per volume, and serving
the tree that is there, against every kind of object a writer of the volume can plant, at every
name they touch.

A built tree lives in the test cache as ``<namespace>/<key>-<fingerprint>`` (with its record
``.<name>.meta.json``, its lock and its ``.used`` stamp); it is built into a private partial
directory (``.<name>.<machine>-<pid>.<uuid>.partial``) published by one rename. Each case plants
one object (a link to a directory or to a root-only file outside the volume, a hard link to that
file, a FIFO, a socket, a character device that never ends, a directory where a file belongs, a
file where a directory belongs, a sparse giant) at one of those names, on the way to them, inside
the published tree, or in the partial directory while the builder runs, then runs one operation
in this process:

- ``build``: :func:`build_once` where no tree is there yet;
- ``hit``: the same call once the tree is there (as in a new process: nothing remembered).

and checks that nothing outside the volume was read, listed, written, chmod-ed or removed, that
the operation ended within its time, that a sparse giant cost no memory, and that the outcome is
clean: the built tree, complete and a real directory, or cacheroot's own
:class:`~cacheroot.fetch.FetchError` with no partial directory left and nothing half published.

As in :mod:`tests.fetch.test_planted_matrix`, the volume is shared by a group (``2775``) and
every case runs twice over, by who plants: root, and a member of the group (a second uid, from
a forked child: :func:`tests.planted.plant_as`) planting the kinds a member can
(``MEMBER_KINDS`` less ``MEMBER_REFUSED``). Where the member may not write the directory (inside
a published tree, which the builder made with its own umask), the kernel's refusal is the
outcome checked. The member variant needs root and skips elsewhere.

One case more swaps the namespace for a link while the builder runs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import FetchError, _build, _used
from cacheroot.fetch._build import build_once, built_path
from cacheroot.fetch._store import meta_path
from cacheroot.fetch._used import used_path
from cacheroot.fetch.store import lock_path

from .test_multiuser import GROUP, UID_A, need_root
from .test_planted_matrix import made

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )
else:
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )

KEY = "tiny"
CONFIG = b'{"hidden_size": 8}'
RUN = b"#!/bin/sh\necho hi\n"

#: The names touched, from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "tree": True,
    "tree-record": False,
    "tree-lock": False,
    "tree-used": False,
    "member-dir": True,
    "member": False,
    "partial": True,
    "partial-dir": True,
    "partial-member": False,
}
#: Names inside a published tree: planted before a hit.
IN_TREE = ("member-dir", "member")
#: The partial directory and names inside it: planted while the builder runs.
IN_PARTIAL = ("partial", "partial-dir", "partial-member")
OPERATIONS = ("build", "hit")


def _cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for op in OPERATIONS:
            for component, is_dir in COMPONENTS.items():
                if (component in IN_TREE and op == "build") or (
                    component in IN_PARTIAL and op != "build"
                ):
                    continue
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    if component == "partial-member" and kind == "sparse":
                        # A file the builder wrote, however large, is hashed whole to record the
                        # tree: that is the builder's cost (seconds for a giant), not a planter's.
                        continue
                    if planter == "member" and (kind not in MEMBER_KINDS or kind in MEMBER_REFUSED):
                        continue  # the root planter covers the rest
                    id_ = f"{op}-{component}-{kind}-{planter}"
                    yield pytest.param(op, component, kind, planter, id=id_)


def _write(out: Path) -> None:
    """What the builder builds: a file and a directory holding an executable."""
    (out / "config.json").write_bytes(CONFIG)
    (out / "bin").mkdir()
    (out / "bin" / "run.sh").write_bytes(RUN)
    os.chmod(out / "bin" / "run.sh", 0o755)  # noqa: S103 - an executable of the tree


def _builder(out: Path) -> None:
    _write(out)


def _partials(ns: Path) -> list[str]:
    """The partial directories left in ``ns`` (not what a planter put there or moved aside)."""
    return sorted(
        n
        for n in os.listdir(ns)
        if n.endswith(".partial") and stat.S_ISDIR(os.lstat(ns / n).st_mode)
    )


def _planting_builder(
    ns: Path, *, component: str, plant_at: Callable[[Path], bool], planted: list[Path]
) -> Callable[[Path], None]:
    """A builder that writes the tree, then plants (``plant_at``) in its partial directory
    (found in the namespace by name): the partial itself, ``bin``, or ``config.json``; the
    list gets the name where it planted, or tried to."""

    def builder(out: Path) -> None:
        _write(out)
        (partial,) = _partials(ns)
        rel = {"partial": "", "partial-dir": "bin", "partial-member": "config.json"}[component]
        where = ns / partial / rel if rel else ns / partial
        planted.append(where)
        plant_at(where)

    return builder


def _position(cache: Path, out: Path, component: str) -> Path:
    return {
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": out.parent,
        "tree": out,
        "tree-record": Path(meta_path(str(out))),
        "tree-lock": Path(lock_path(str(out))),
        "tree-used": Path(used_path(str(out))),
        "member-dir": out / "bin",
        "member": out / "config.json",
    }[component]


def _read(path: Path) -> bytes:
    """A file of the tree, read only once ``lstat`` says it is a regular file (never a FIFO)."""
    assert stat.S_ISREG(os.lstat(path).st_mode), path
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _assert_complete(out: Path) -> None:
    """``out`` is the builder's tree, whole, each member of its own kind."""
    assert stat.S_ISDIR(os.lstat(out).st_mode), f"{out} is no directory"
    assert sorted(os.listdir(out)) == ["bin", "config.json"]
    assert _read(out / "config.json") == CONFIG
    assert stat.S_ISDIR(os.lstat(out / "bin").st_mode)
    assert os.listdir(out / "bin") == ["run.sh"]
    assert _read(out / "bin" / "run.sh") == RUN


def _assert_clean(op: str, component: str, outcome: object, ns: Path, out: Path) -> None:
    """The outcome is the built tree or a refusal, with nothing partial left or published."""
    if component in ("vllm", "test_cache", "namespace"):
        assert isinstance(outcome, FetchError), outcome  # no way to the tree but through them
        return
    assert _partials(ns) == [], "a partial directory was left behind"
    if isinstance(outcome, FetchError):
        # Nothing half published: no tree, the tree that was there, or what was planted there.
        there = os.lstat(out).st_mode if os.path.lexists(out) else 0
        if stat.S_ISDIR(there) and component != "tree" and op != "hit":
            _assert_complete(out)
        return
    assert outcome == out, outcome
    if op == "hit" and component in IN_TREE:
        # A hit trusts the tree, as it trusts a file's record.
        assert stat.S_ISDIR(os.lstat(out).st_mode)
    elif component in ("partial-dir", "partial-member"):
        # Published: what the builder left is the builder's to answer for, but a real directory
        # with no name outside the tree.
        assert stat.S_ISDIR(os.lstat(out).st_mode)
        for name in ("config.json", "bin"):
            st = os.lstat(out / name)
            assert not (stat.S_ISREG(st.st_mode) and st.st_nlink > 1), name
    else:
        _assert_complete(out)


def _planter(planter: str, kind: str, outside: Path, volume: Path) -> Callable[[Path], bool]:
    """How ``planter`` plants ``kind`` at a name: says whether it could. Only the member may
    be refused, and only by the kernel, where the directory is not the group's to write."""

    def plant_at(where: Path) -> bool:
        if planter == "root":
            plant(where, kind, outside)
            return True
        try:
            plant_as(UID_A, GROUP, where, kind, outside, volume=volume)
        except PermissionError:
            assert not os.lstat(where.parent).st_mode & stat.S_IWGRP, f"{where} refused"
            return False
        assert os.lstat(where).st_uid == UID_A
        return True

    return plant_at


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    planter: str,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = outside_dir(tmp_path / "outside")
    out = built_path(KEY, _builder)
    ns = out.parent
    if op == "hit":
        assert build_once(KEY, _builder) == out  # a tree, its record, lock and stamp
    else:
        made(ns, isolated_cache)  # as cacheroot makes its directories in a shared volume
    counted = kind != "hardlink"
    planted: list[Path] = []
    builder: Callable[[Path], None] = _builder
    plant_at = _planter(planter, kind, outside, isolated_cache)
    with pytest.MonkeyPatch.context() as mp:
        # A new process: nothing remembered of the tree or of its stamp.
        mp.setattr(_build, "_seen", {})
        mp.setattr(_used, "_fresh_until", {})
        if component in IN_PARTIAL:
            builder = _planting_builder(ns, component=component, plant_at=plant_at, planted=planted)
            # The same fingerprint as the plain builder's would be another name: look it up.
            out = built_path(KEY, builder)
        elif not plant_at(_position(cache, out, component)):
            return  # the kernel refused the member: nothing planted, nothing to run
        before = state(outside, names_counted=counted)
        outcome: object = None
        with bounded(memory=kind == "sparse") as peak:
            try:
                outcome = build_once(KEY, builder, lock_timeout=2.0)
            except FetchError as exc:
                outcome = exc  # a clear refusal
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if component in IN_PARTIAL:
        assert planted, "the builder never ran: nothing was planted"
    _assert_clean(op, component, outcome, ns, out)


def test_a_namespace_swapped_for_a_link_mid_build_leads_nowhere(
    isolated_cache: Path, tmp_path: Path
) -> None:
    outside = outside_dir(tmp_path / "outside")
    swapped: list[bool] = []
    ns = built_path(KEY, _builder).parent
    ns.mkdir(parents=True)

    def builder(out: Path) -> None:
        _write(out)
        os.rename(ns, ns.with_name(ns.name + ".aside"))
        ns.symlink_to(outside / "keep")
        swapped.append(True)

    out = built_path(KEY, builder)
    before = state(outside)
    outcome: object
    with bounded(memory=False):
        try:
            outcome = build_once(KEY, builder, lock_timeout=2.0)
        except FetchError as exc:
            outcome = exc
    assert swapped, "the builder never ran: nothing was swapped"
    assert stat.S_ISLNK(os.lstat(ns).st_mode)  # the planter's link, left as it is
    assert state(outside) == before, "something was made, read or listed behind the link"
    real_ns = ns.with_name(ns.name + ".aside")
    assert _partials(real_ns) == []
    if not isinstance(outcome, FetchError):
        # Published where the build began: in the namespace the descriptors held.
        _assert_complete(real_ns / out.name)
