"""The planted-object matrix: every reader and writer of the test cache, against every kind of
object a writer of the volume can plant, at every path component from the root to the entry.

Each case plants one object (a link to a directory or to a root-only file outside the volume, a
hard link to that file, a FIFO, a socket, a character device that never ends, a directory where
a file belongs, a file where a directory belongs, a sparse giant) at one component, then runs
one operation (a fetch that misses, a fetch that hits, ``cache ls``, ``cache verify``,
``cache prune``) in this process, and checks:

- nothing outside the volume was read, listed, written, chmod-ed or removed (every name there,
  with its access, change and modification times, is as before);
- the operation ended within its time (a FIFO or a device read would block or never end);
- a fetch either returned a regular file holding the origin's bytes, or raised cacheroot's own
  :class:`~cacheroot.fetch.FetchError`; the upkeep commands raised nothing;
- with a sparse giant, at most a few MiB were allocated while the operation ran.

The volume is shared as the documentation says (``chgrp GROUP && chmod 2775``) and every case
runs twice over, by who plants: root (this process), and a member of the group, a second uid
(:data:`~tests.fetch.test_multiuser.UID_A`, from a forked child: see
:func:`tests.planted.plant_as`), whose objects are owned by that uid, as a co-tenant's are; the
operations always run as root. The member plants the links, a FIFO, the wrong kind of object
and a sparse giant (``MEMBER_KINDS``) at every component, not every kind root plants, to keep
the suite's time: a socket is refused as a FIFO is, and a device node or a hard link to a
root-only file the kernel refuses a member (``MEMBER_REFUSED``: no ``CAP_MKNOD``;
``fs.protected_hardlinks``), which :func:`test_what_a_member_cannot_plant` checks. The member
variant needs root (to change uid) and skips elsewhere.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher, FetchError, _proc, _store
from cacheroot.fetch._upkeep.cache import disk_usage as du
from cacheroot.fetch._upkeep.cache import entries, prune, verify
from cacheroot.fetch.store import SHARED_DIR, lock_path

from .origin import body, sha256
from .test_multiuser import GROUP, UID_A, need_root

if TYPE_CHECKING:
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        HANG,
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
        HANG,
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

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .origin import Origin

NAMESPACE = "ns"

#: The components from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "entry": False,
    "record": False,
    "lock": False,
    "used": False,
}
OPERATIONS = ("fetch-miss", "fetch-hit", "ls", "verify", "prune")


def _cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for op in OPERATIONS:
            for component, is_dir in COMPONENTS.items():
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    if planter == "member" and (kind not in MEMBER_KINDS or kind in MEMBER_REFUSED):
                        continue  # the root planter covers the rest (see the module docstring)
                    id_ = f"{op}-{component}-{kind}-{planter}"
                    yield pytest.param(op, component, kind, planter, id=id_)


def made(directory: Path, volume: Path) -> None:
    """Make the directories from ``volume`` down to ``directory`` as cacheroot makes its own in
    a setgid volume (``2775``: the group may write them)."""
    missing = [p for p in (directory, *directory.parents) if volume in p.parents]
    for path in reversed(missing):
        if not path.exists():
            path.mkdir()
            os.chmod(path, SHARED_DIR)


def _position(cache: Path, dest: Path, component: str) -> Path:
    return {
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": cache / NAMESPACE,
        "entry": dest,
        "record": dest.with_name(f".{dest.name}.meta.json"),
        "lock": Path(lock_path(str(dest))),
        "used": dest.with_name(f".{dest.name}.used"),
    }[component]


def _run(op: str, fetcher: Fetcher, url: str, cache: Path) -> Callable[[], object]:
    if op.startswith("fetch"):
        return lambda: fetcher.fetch(url, namespace=NAMESPACE)
    if op == "ls":
        return lambda: (entries(str(cache)), du(str(cache)))
    if op == "verify":
        return lambda: verify(str(cache))
    return lambda: prune(str(cache), max_size=0, grace=0.0)


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    planter: str,
    origin: Origin,
    name: str,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = outside_dir(tmp_path / "outside")
    url = origin.url(f"/ok/{name}")
    fetcher = Fetcher(retries=0, connect_timeout=5.0, read_timeout=5.0, lock_timeout=2.0)
    dest = fetcher.path(url, namespace=NAMESPACE)
    if op != "fetch-miss":
        fetcher.fetch(url, namespace=NAMESPACE)  # a real entry, record, lock and stamp
    else:
        made(dest.parent, isolated_cache)
    where = _position(cache, dest, component)
    if planter == "member":
        plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
        assert os.lstat(where).st_uid == UID_A
    else:
        plant(where, kind, outside)
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    run = _run(op, fetcher, url, cache)
    outcome: object = None
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = run()
        except FetchError as exc:
            outcome = exc  # a clear refusal: allowed of a fetch only
        finally:
            fetcher.close()
    assert op.startswith("fetch") or not isinstance(outcome, FetchError), outcome
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if op.startswith("fetch") and not isinstance(outcome, FetchError):
        assert isinstance(outcome, Path), outcome
        got = os.fspath(outcome)
        assert stat.S_ISREG(os.lstat(got).st_mode)
        assert os.lstat(got).st_nlink == 1
        with open(got, "rb") as f:
            assert f.read() == body(name)


@pytest.mark.parametrize("kind", ["device", "hardlink"])
def test_what_a_member_cannot_plant(kind: str, isolated_cache: Path, tmp_path: Path) -> None:
    """The kinds the member planter leaves out are the ones the kernel refuses it, for the
    reason given in ``MEMBER_REFUSED`` (a hard link is tried on a file the member has reached,
    so the refusal is the kernel's link rule, not a directory it could not search)."""
    need_root()
    group_volume(isolated_cache, GROUP)
    outside = outside_dir(tmp_path / "outside")
    where = isolated_cache / "planted"
    if kind not in MEMBER_REFUSED:  # fs.protected_hardlinks off: a member can link anything
        plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
        assert os.path.samestat(os.lstat(where), os.lstat(outside / "secret"))
        return
    with pytest.raises(PermissionError) as refused:
        plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
    assert refused.value.errno == errno.EPERM, refused.value
    assert not os.path.lexists(where)


# -- a download's partial file ------------------------------------------------------------------

#: Where a fetch writes its partial, by the name a planter gives it: a partial it would take over
#: (of a process of this machine that is gone; of another machine, untouched for an hour), the
#: fresh name it creates for its own, and the fresh name of its record's partial.
PARTIALS = ("partial-dead", "partial-stale", "partial-fresh", "partial-record")
#: A machine tag no host here has (``_proc.machine_tag`` is eight hex digits).
OTHER_MACHINE = "0badc0de"


def _partial_cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for component in PARTIALS:
            # Only a pinned fetch resumes a partial; an unpinned one must still refuse to.
            pins = (True, False) if component in ("partial-dead", "partial-stale") else (True,)
            for pinned in pins:
                for kind in FILE_KINDS:
                    if planter == "member" and (kind not in MEMBER_KINDS or kind in MEMBER_REFUSED):
                        continue
                    op = "pinned" if pinned else "unpinned"
                    id_ = f"{op}-{component}-{kind}-{planter}"
                    yield pytest.param(pinned, component, kind, planter, id=id_)


def _gone_pid() -> int:
    """The pid of a process of this machine that has exited (and been reaped)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child exits at once
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _left_partial(dest: Path, component: str) -> Path:
    """The name of a partial of ``dest`` whose writer is gone, as a fetch lists it."""
    if component == "partial-dead":
        writer = f"{_proc.machine_tag()}-{_gone_pid()}"
    else:
        writer = f"{OTHER_MACHINE}-{os.getpid()}"
    return dest.with_name(f".{dest.name}.{writer}.5eed5eed.partial")


def _plant_fresh(
    monkeypatch: pytest.MonkeyPatch, prefix: str, plant_there: Callable[[Path], None]
) -> list[Path]:
    """Plant, through ``plant_there``, at the first fresh partial name the fetch draws whose
    base name starts with ``prefix`` (just before the fetch uses it: a name drawn at random
    cannot be planted sooner); the list gets the name."""
    draw = _store.partial_path
    planted: list[Path] = []

    def drawn(dest: str) -> str:
        path = draw(dest)
        if not planted and os.path.basename(path).startswith(prefix):
            planted.append(Path(path))
            plant_there(Path(path))
        return path

    monkeypatch.setattr(_store, "partial_path", drawn)
    return planted


@pytest.mark.parametrize(("pinned", "component", "kind", "planter"), list(_partial_cases()))
def test_planted_partial(
    *,
    pinned: bool,
    component: str,
    kind: str,
    planter: str,
    origin: Origin,
    name: str,
    isolated_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fetch meets an object planted at a partial's name: one it would take over, or the one
    it creates. It never writes into a hard-linked file nor publishes one, never adopts another
    uid's bytes (nor asks the origin for the rest of them), never follows a link or blocks on a
    FIFO; it ends with the origin's bytes in a file of its own, or a clear :class:`FetchError`."""
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    outside = outside_dir(tmp_path / "outside")
    url = origin.url(f"/ok/{name}")
    fetcher = Fetcher(retries=0, connect_timeout=5.0, read_timeout=5.0, lock_timeout=2.0)
    dest = fetcher.path(url, namespace=NAMESPACE)
    made(dest.parent, isolated_cache)

    def plant_there(where: Path) -> None:
        if planter == "member":
            plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
        else:
            plant(where, kind, outside)

    counted = kind != "hardlink"
    planted: list[Path] = []
    if component in ("partial-dead", "partial-stale"):
        planted.append(_left_partial(dest, component))
        plant_there(planted[0])
    else:
        prefix = f".{dest.name}." if component == "partial-fresh" else f"..{dest.name}.meta.json."
        planted = _plant_fresh(monkeypatch, prefix, plant_there)
    before = state(outside, names_counted=counted)
    outcome: object = None
    started = time.monotonic()
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = fetcher.fetch(
                url, namespace=NAMESPACE, sha256=sha256(body(name)) if pinned else None
            )
        except FetchError as exc:
            outcome = exc
        finally:
            fetcher.close()
    assert planted, "the fetch drew no partial name to plant at"
    # The alarm that ends a hung call is a TimeoutError: an OSError the fetch may handle.
    assert time.monotonic() - started < HANG, "the fetch hung until the alarm ended it"
    assert state(outside, names_counted=counted) == before, "the fetch touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"the fetch allocated {peak[0]} bytes for a sparse giant"
    if planter == "member":
        # Another uid's partial is refused, not resumed: no Range asked of the origin.
        assert origin.ranges[f"/ok/{name}"] in ([], [None]), origin.ranges
    if isinstance(outcome, FetchError):
        # Nothing here fills the volume: the advice must not be to free space.
        assert "free space" not in str(outcome), outcome
        return
    assert isinstance(outcome, Path), outcome
    got = os.lstat(outcome)
    assert stat.S_ISREG(got.st_mode)
    assert got.st_nlink == 1
    assert got.st_uid == os.geteuid(), "published a file another uid wrote"
    assert not os.path.samestat(got, os.lstat(outside / "secret"))
    with open(outcome, "rb") as f:
        assert f.read() == body(name)
