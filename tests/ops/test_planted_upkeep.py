"""The planted-object matrix of the cache's upkeep: ``cacheroot cache ls``, ``verify``, ``prune``
by age and the root's size budget (``cacheroot cache prune --max-size``), against every kind of
object a writer of the volume can plant, at every name upkeep lists, reads, locks, moves or
removes.

The test cache holds, in the namespace ``models``, a file entry ``secret`` and a directory entry
``keep`` (each with its record, ``.used`` stamp and lock, all long unused, both records wrong so
that ``verify`` moves them aside), and in ``.quarantine/models`` an entry ``verify`` moved there
before. Triton's cache beside it, which only the budget weighs, holds a kernel directory
``keep`` with its record, and what a prune that died left renamed aside. The entries are named
like what the root-only directory outside the volume holds (``secret``, ``keep``): a name
resolved through a link planted above them would reach it.

Each case plants one object (a link to a directory or to a root-only file outside the volume, a
hard link to that file, a FIFO, a socket, a character device that never ends, a directory where
a file belongs, a file where a directory belongs, a sparse giant) at one component, from the
root's sub-directory that holds the test cache down to a quarantined entry, then runs one
operation in this process and checks:

- nothing outside the volume was read, listed, written, chmod-ed or removed (every name there,
  with its access, change and modification times, is as before);
- the operation ended within its time (a FIFO or a device read would block or never end), and
  a sparse giant cost no memory (no record is read whole);
- the operation raised nothing and reported only paths in the volume; where the object was
  planted beside the entries (their stamps, the quarantine), the entries themselves were
  listed, moved aside or removed as asked.

The budget's cases run twice over, by who plants: root (this process), and a member of the
volume's group (a second uid, :func:`tests.planted.plant_as`), whose objects that uid owns.

More cases swap the namespace (or Triton's cache) for a link to the root-only directory while
upkeep walks it, or between the budget's plan and its removals.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import _proc
from cacheroot.fetch._upkeep import budget as _budget
from cacheroot.fetch._upkeep import cache as upkeep
from cacheroot.fetch._upkeep.cache import QUARANTINE
from cacheroot.fetch.store import write_meta

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.fetch.test_multiuser import GROUP, UID_A, need_root
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        LONG_AGO,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )
else:
    from fetch.test_multiuser import GROUP, UID_A, need_root
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        LONG_AGO,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )

NAMESPACE = "models"
#: The quarantined entry's name, as :func:`~cacheroot.fetch._upkeep.cache.quarantine` names one.
MOVED = "old.bin.20260101T000000Z.4242"
SECRET_BYTES = b"weights" * 10
WRONG = "0" * 64
#: Seconds an operation may take with a sparse giant planted (hashing it whole takes longer).
GIANT_TIME = 3.0

#: The names upkeep touches, from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "quarantine": True,
    "quarantine-ns": True,
    "entry": False,
    "record": False,
    "used": False,
    "lock": False,
    "aside": False,
}
#: What only the budget touches: a plain cache of the root (Triton's), its entry ``keep`` (a
#: kernel directory), a file in it, the entry's record, and what a killed prune left renamed
#: aside (its pruner dead).
PLAIN = {
    "triton": True,
    "kernel": True,
    "kernel-file": False,
    "kernel-record": False,
    "leftover": True,
}
#: Where the object is planted beside the entries: they are still listed, moved or removed
#: (``verify`` cannot move them aside where the quarantine's own directory is planted: it
#: leaves them in place and says why).
BESIDE = {
    "ls": ("used", "quarantine", "quarantine-ns", "aside"),
    "verify": ("used", "aside"),
    "prune-age": ("used", "quarantine", "quarantine-ns", "aside"),
    "budget": ("used", "quarantine", "quarantine-ns", "aside", "kernel-record", "leftover"),
}
OPERATIONS = ("ls", "verify", "prune-age", "budget")
#: Run once more over what a member of the volume's group planted (owned by that uid, as a
#: co-tenant's objects are), the kinds the kernel lets a member plant: the budget, which the
#: fetch matrix (``tests/fetch/test_planted_matrix.py``) leaves out; ``ls``, ``verify`` and
#: ``prune`` over a member's objects are that matrix's.
MEMBER_OPS = ("budget",)


def _cases() -> Iterator[Any]:
    for op in OPERATIONS:
        for component, is_dir in (COMPONENTS | PLAIN if op == "budget" else COMPONENTS).items():
            for kind in DIR_KINDS if is_dir else FILE_KINDS:
                yield pytest.param(op, component, kind, "root", id=f"{op}-{component}-{kind}")
                if op in MEMBER_OPS and kind in MEMBER_KINDS and kind not in MEMBER_REFUSED:
                    id_ = f"{op}-{component}-{kind}-member"
                    yield pytest.param(op, component, kind, "member", id=id_)


def _old(path: Path) -> None:
    os.utime(path, (LONG_AGO, LONG_AGO), follow_symlinks=False)


def _gone_pid() -> int:
    """The pid of a process that ran and was reaped: it runs nothing now."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _fill_plain(root: Path) -> None:
    """Triton's cache: a kernel directory ``keep`` with its record, and a leftover."""
    triton = root / "triton"
    (triton / "keep").mkdir(parents=True)
    (triton / "keep" / "old.bin").write_bytes(b"kernel")
    (triton / ".keep.meta.json").write_bytes(b"{}")
    leftover = triton / f".secret.{_proc.machine_tag()}-{_gone_pid()}.pruned"
    leftover.mkdir()
    (leftover / "old.bin").write_bytes(b"kernel")
    for path in sorted(triton.rglob("*"), reverse=True):
        _old(path)


def _fill(cache: Path) -> None:
    """The entries, their dot-files and a quarantined entry, all unused for long."""
    ns = cache / NAMESPACE
    ns.mkdir(parents=True)
    (ns / "secret").write_bytes(SECRET_BYTES)
    write_meta(str(ns / "secret"), {"sha256": WRONG, "size": len(SECRET_BYTES)})
    (ns / "keep").mkdir()
    (ns / "keep" / "old.bin").write_bytes(b"tree")
    write_meta(str(ns / "keep"), {"tree_sha256": WRONG})
    for name in ("secret", "keep"):
        for side in (f".{name}.used", f".{name}.lock"):
            (ns / side).write_bytes(b"")
    moved = cache / QUARANTINE / NAMESPACE
    moved.mkdir(parents=True)
    (moved / MOVED).write_bytes(b"corrupt")
    for top in (ns, moved):
        for path in sorted(top.rglob("*"), reverse=True):
            _old(path)
    _old(cache / QUARANTINE)


def _position(root: Path, cache: Path, component: str) -> Path:
    ns = cache / NAMESPACE
    triton = root / "triton"
    if component == "leftover":
        (found,) = (p for p in triton.iterdir() if p.name.endswith(".pruned"))
        return found
    return {
        "triton": triton,
        "kernel": triton / "keep",
        "kernel-file": triton / "keep" / "old.bin",
        "kernel-record": triton / ".keep.meta.json",
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": ns,
        "quarantine": cache / QUARANTINE,
        "quarantine-ns": cache / QUARANTINE / NAMESPACE,
        "entry": ns / "secret",
        "record": ns / ".secret.meta.json",
        "used": ns / ".secret.used",
        "lock": ns / ".secret.lock",
        "aside": cache / QUARANTINE / NAMESPACE / MOVED,
    }[component]


def _run(op: str, root: Path, cache: Path) -> list[str]:
    """Run ``op``; the paths it reports (listed, checked, moved or removed)."""
    if op == "ls":
        found = upkeep.quarantined(str(cache)) + upkeep.entries(str(cache))
        upkeep.disk_usage(str(cache))
        return [e.path for e in found]
    if op == "verify":
        rows = upkeep.verify(str(cache))
        return [r["path"] for r in rows] + [r["quarantined"] for r in rows if "quarantined" in r]
    if op == "prune-age":
        report = upkeep.prune(str(cache), older_than=3600.0, grace=0.0)
        return [r["path"] for r in (*report["removed"], *report["kept"], *report["strays"])]
    victims = _budget.plan(str(root), max_size=0)
    return [v.path for v in _budget.apply(victims).removed]


def _assert_done(op: str, cache: Path, reported: list[str]) -> None:
    """The entries were handled as ``op`` asks, the planted object beside them notwithstanding."""
    ns = cache / NAMESPACE
    if op == "ls":
        assert {str(ns / "secret"), str(ns / "keep")} <= set(reported)
        return
    # Moved aside (both records are wrong) or removed (both long unused, the budget is 0).
    assert not os.path.lexists(ns / "secret")
    assert not os.path.lexists(ns / "keep")
    if op == "budget":
        assert not os.path.lexists(cache.parent.parent / "triton" / "keep")
    if op == "verify":
        moved = {n.split(".", 1)[0] for n in os.listdir(cache / QUARANTINE / NAMESPACE)}
        assert {"keep", "secret"} <= moved


def _check(
    op: str, root: Path, cache: Path, outside: Path, *, counted: bool, memory: bool
) -> list[str]:
    """Run ``op`` bounded in time (and memory); nothing outside changed, only the volume's
    paths reported."""
    before = state(outside, names_counted=counted)
    start = time.monotonic()
    with bounded(memory=memory) as peak:
        reported = _run(op, root, cache)
    took = time.monotonic() - start
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
        # Reading a giant whole takes seconds, even sparse; judging it by its size, none.
        assert took < GIANT_TIME, f"{op} took {took:.1f} s over a sparse giant: read it whole"
    strays = [p for p in reported if not p.startswith(f"{root}{os.sep}")]
    assert strays == [], f"{op} reported paths outside the volume"
    return reported


def _share(volume: Path) -> None:
    """Every directory of ``volume`` as cacheroot makes its own in a volume a group shares
    (``2775``, the volume's group): a member may plant anywhere in it."""
    for path in [volume, *volume.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            os.chown(path, 0, GROUP)
            os.chmod(path, 0o2775)  # noqa: S103 - a volume shared by a group, as documented


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *, op: str, component: str, kind: str, planter: str, isolated_cache: Path, tmp_path: Path
) -> None:
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = outside_dir(tmp_path / "outside")
    _fill(cache)
    _fill_plain(isolated_cache)
    where = _position(isolated_cache, cache, component)
    if planter == "member":
        _share(isolated_cache)
        plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
        assert os.lstat(where).st_uid == UID_A
    else:
        plant(where, kind, outside)
    reported = _check(
        op,
        isolated_cache,
        cache,
        outside,
        counted=kind != "hardlink",
        memory=kind == "sparse",
    )
    if component in BESIDE[op]:
        _assert_done(op, cache, reported)


def _swap_in_walk(monkeypatch: pytest.MonkeyPatch, ns: Path, outside: Path) -> Callable[[], bool]:
    """Swap ``ns`` for a link to ``outside`` the first time upkeep weighs one of its entries
    (mid-walk: the namespace's directory is held open, its listing taken)."""
    swapped: list[bool] = []
    real = upkeep.tree_size

    def weighed(path: str, *args: Any, **kwargs: Any) -> int:
        if not swapped and path.startswith(f"{ns}{os.sep}"):
            ns.rename(ns.with_name(ns.name + ".aside"))
            ns.symlink_to(outside)
            swapped.append(True)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(upkeep, "tree_size", weighed)
    return lambda: bool(swapped)


def _swap_after_plan(
    monkeypatch: pytest.MonkeyPatch, ns: Path, outside: Path
) -> Callable[[], bool]:
    """Swap ``ns`` for a link to ``outside`` between the budget's plan and its removals."""
    swapped: list[bool] = []
    real = _budget.apply

    def applied(victims: Any) -> Any:
        ns.rename(ns.with_name(ns.name + ".aside"))
        ns.symlink_to(outside)
        swapped.append(True)
        return real(victims)

    monkeypatch.setattr(_budget, "apply", applied)
    return lambda: bool(swapped)


#: ``(operation, when, what)``: the directory swapped for a link to the root-only directory
#: outside the volume (``namespace``: the test cache's; ``triton``: a plain cache of the root),
#: while upkeep walks it (``walk``) or between the budget's plan and its removals (``plan``).
SWAPS = (
    ("ls", "walk", "namespace"),
    ("verify", "walk", "namespace"),
    ("prune-age", "walk", "namespace"),
    ("budget", "walk", "namespace"),
    ("budget", "plan", "namespace"),
    ("budget", "plan", "triton"),
)


@pytest.mark.parametrize(("op", "when", "what"), SWAPS, ids=["-".join(s) for s in SWAPS])
def test_a_directory_swapped_for_a_link_meanwhile_leads_nowhere(
    *,
    op: str,
    when: str,
    what: str,
    isolated_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = isolated_cache / "vllm" / "test_cache"
    outside = outside_dir(tmp_path / "outside")
    _fill(cache)
    _fill_plain(isolated_cache)
    swapped = cache / NAMESPACE if what == "namespace" else isolated_cache / "triton"
    swap = (_swap_after_plan if when == "plan" else _swap_in_walk)(monkeypatch, swapped, outside)
    _check(op, isolated_cache, cache, outside, counted=True, memory=False)
    assert swap(), f"{swapped} was never swapped"
    assert stat.S_ISLNK(os.lstat(swapped).st_mode)  # the planted link itself is left alone
    assert (outside / "secret").read_bytes() == b"root-only secret\n"
