"""The planted-object matrix of the model snapshot writer: warming a pinned Hugging Face revision
into the hub cache on the volume, against every kind of object a writer of the volume can plant,
at every name on the way and every name the warm writes.

A warmed revision lives in the hub cache as ``models--acme--tiny/{blobs,snapshots,refs}``:
``blobs/<etag>`` holds each file's bytes, ``snapshots/<commit>/<path>`` links to its blob and
``refs/main`` names the commit (the entry names its branch). Each case plants one object (a link
to a directory or to a root-only file outside the volume, a hard link to that file, a FIFO, a
socket, a character device that never ends, a directory where a file belongs, a file where a
directory belongs, a sparse giant) at one of those names, then runs one operation in this
process, huggingface_hub itself downloading from a local hub on 127.0.0.1:

- ``warm``: :func:`warm_snapshot` where nothing was warmed yet;
- ``hit``: the same call once the revision was warmed (as in a new process).

and checks that nothing outside the volume was read, listed, written, chmod-ed or removed, that
the warm ended within its time, that a sparse giant cost no memory, and that the outcome is
clean: the snapshot, complete, each name of its own kind, or cacheroot's own
:class:`~cacheroot.fetch.FetchError`.

As in the other matrices, the volume is shared by a group (``2775``), and a member of the group
(a second uid) plants the kinds a member can in the directories the group may write; that
variant needs root and skips elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import FetchError, Model
from cacheroot.fetch._models import hubs
from cacheroot.fetch._models.snapshot import warm_snapshot

from .test_multiuser import GROUP, UID_A, need_root

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.hub.hubserver import HubRepo, HubServer
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        load_hub_clients,
        outside_dir,
        plant,
        plant_as,
        state,
    )
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        load_hub_clients,
        outside_dir,
        plant,
        plant_as,
        state,
    )

CONFIG = b'{"model_type": "llama", "hidden_size": 8}\n'
WEIGHTS = bytes(range(256)) * 16
REPO = HubRepo("acme/tiny", {"config.json": CONFIG, "model.safetensors": WEIGHTS})
#: Each file's blob name, as the Hub names it: the git blob sha1 of a small file, the sha256 of
#: an LFS one (hashlib on the literal bytes above).
BLOBS = {
    "config.json": hashlib.sha1(
        b"blob %d\x00" % len(CONFIG) + CONFIG, usedforsecurity=False
    ).hexdigest(),
    "model.safetensors": hashlib.sha256(WEIGHTS).hexdigest(),
}
REPO_DIR = "models--acme--tiny"

#: The names from the hub cache down, relative to the hub cache, and whether each is a directory.
COMPONENTS = {
    "hub": ("", True),
    "repo": (REPO_DIR, True),
    "blobs": (f"{REPO_DIR}/blobs", True),
    "snapshots": (f"{REPO_DIR}/snapshots", True),
    "snapshot": (f"{REPO_DIR}/snapshots/{REPO.commit}", True),
    "refs": (f"{REPO_DIR}/refs", True),
    "blob": (f"{REPO_DIR}/blobs/{BLOBS['config.json']}", False),
    "link": (f"{REPO_DIR}/snapshots/{REPO.commit}/config.json", False),
    "ref": (f"{REPO_DIR}/refs/main", False),
}
#: What runs once the object is planted: a warm where nothing was warmed yet (the directories on
#: the way made first, as a co-tenant would make them), and a warm of a warmed revision.
OPERATIONS = ("warm", "hit")
#: Where the member plants, in a warmed revision only (fewer cases, the suite's time): the
#: directories cacheroot makes group-writable in the setgid volume, and the snapshot directory,
#: which the client makes with its own umask, so that the kernel refuses the member there.
MEMBER_COMPONENTS = ("repo", "blobs", "snapshot", "blob", "link", "ref")


def _cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for op in OPERATIONS:
            for component, (_rel, is_dir) in COMPONENTS.items():
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    if planter == "member" and (
                        op != "hit"
                        or component not in MEMBER_COMPONENTS
                        or kind not in MEMBER_KINDS
                        or kind in MEMBER_REFUSED
                    ):
                        continue
                    yield pytest.param(
                        op, component, kind, planter, id=f"{op}-{component}-{kind}-{planter}"
                    )


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    server = HubServer()
    server.add_hf(REPO)
    with server:
        yield server


@pytest.fixture
def hub_cache(isolated_cache: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The layout's Hugging Face cache, and huggingface_hub in this process pointed at it and at
    the local hub (it read its own variables when first imported)."""
    from huggingface_hub import constants

    load_hub_clients()
    root = hubs.cache_root("hf", os.environ)
    assert root is not None
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", root)
    monkeypatch.setattr(constants, "HF_HOME", os.path.dirname(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    return Path(root)


SPEC = Model(REPO.repo_id, REPO.commit, branch="main")
#: A warmed volume, copied into each ``hit`` case's root (one real warm per test process).
_WARMED: list[Path] = []


def _warmed_volume(volume: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Give ``volume`` a warmed revision: warm it once per process, copy it after that."""
    if _WARMED:
        shutil.copytree(_WARMED[0], volume, symlinks=True, dirs_exist_ok=True)
        return
    warm_snapshot(SPEC, attempts=1)
    keep = tmp_path_factory.mktemp("warmed") / "volume"
    shutil.copytree(volume, keep, symlinks=True)
    _WARMED.append(keep)


def _made(path: Path, volume: Path) -> None:
    """The directories from ``volume`` down to ``path``'s, as cacheroot makes them in a setgid
    volume (``2775``: the group may write them)."""
    for parent in reversed([p for p in path.parents if volume in p.parents]):
        if not parent.exists():
            parent.mkdir()
            os.chmod(parent, 0o2775)  # noqa: S103 - a volume shared by a group


def _read(path: Path) -> bytes:
    """A file read only once ``lstat`` says it is a regular file with one name."""
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode), f"{path} is no regular file"
    assert st.st_nlink == 1, f"{path} has {st.st_nlink} names"
    assert st.st_size < 1 << 20, f"{path} is {st.st_size} bytes"
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def _assert_snapshot(outcome: object, cache: Path) -> None:
    """``outcome`` is the revision's snapshot, each name on the way a real directory, each file
    a link to its own blob holding its bytes, and ``refs/main`` naming the commit."""
    snapshot = cache / REPO_DIR / "snapshots" / REPO.commit
    assert outcome == snapshot, outcome
    for part in (cache, *[p for p in snapshot.parents if cache in p.parents], snapshot):
        assert stat.S_ISDIR(os.lstat(part).st_mode), f"{part} is no directory"
    assert sorted(os.listdir(snapshot)) == sorted(REPO.files)
    for name, data in REPO.files.items():
        link = snapshot / name
        assert stat.S_ISLNK(os.lstat(link).st_mode), f"{link} is no link"
        assert os.readlink(link) == f"../../blobs/{BLOBS[name]}", os.readlink(link)
        assert _read(cache / REPO_DIR / "blobs" / BLOBS[name]) == data, name
    assert _read(cache / REPO_DIR / "refs" / "main").decode() == REPO.commit


def _plant_at(planter: str, where: Path, kind: str, outside: Path, volume: Path) -> bool:
    """Plant ``kind`` at ``where``; whether it could (only the kernel may refuse the member)."""
    if planter == "root":
        plant(where, kind, outside)
        return True
    try:
        plant_as(UID_A, GROUP, where, kind, outside, volume=volume)
    except PermissionError:
        assert not os.lstat(where.parent).st_mode & stat.S_IWGRP, f"{where} refused"
        return False
    return True


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    planter: str,
    isolated_cache: Path,
    hub_cache: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    outside = outside_dir(tmp_path / "outside")
    if op == "hit":
        _warmed_volume(isolated_cache, tmp_path_factory)
    where = hub_cache / COMPONENTS[component][0]
    _made(where, isolated_cache)
    if not _plant_at(planter, where, kind, outside, isolated_cache):
        return  # the kernel refused the member: nothing planted, nothing to run
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    outcome: object = None
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = warm_snapshot(SPEC, attempts=1, lock_timeout=5.0)
        except FetchError as exc:
            outcome = exc  # a clear refusal
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if isinstance(outcome, FetchError):
        assert str(outcome), "an error that says nothing"
        return
    _assert_snapshot(outcome, hub_cache)


def test_a_snapshot_swapped_for_a_link_after_the_client_wrote_it_is_never_read_through(
    isolated_cache: Path, hub_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = outside_dir(tmp_path / "outside")
    real = hubs.download
    swapped: list[Path] = []

    def download_then_swap(spec: Model) -> tuple[str, str | None]:
        found, error = real(spec)
        snapshot = Path(found)
        snapshot.rename(snapshot.with_name(snapshot.name + ".aside"))
        snapshot.symlink_to(outside / "keep")
        swapped.append(snapshot)
        return found, error

    monkeypatch.setattr(hubs, "download", download_then_swap)
    before = state(outside)
    outcome: object
    with bounded(memory=False):
        try:
            outcome = warm_snapshot(SPEC, attempts=1, lock_timeout=5.0)
        except FetchError as exc:
            outcome = exc
    assert swapped, "the client never ran: nothing was swapped"
    assert state(outside) == before, "something was read, listed or written behind the link"
    assert isinstance(outcome, FetchError), outcome
    assert str(swapped[0]) in str(outcome)
    assert stat.S_ISLNK(os.lstat(swapped[0]).st_mode)  # the planter's link, left as it is
