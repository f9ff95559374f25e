"""The planted-object matrix of model snapshots beyond one Hugging Face cache: ModelScope's
layout, and a revision copied from or written to a shared tier, a directory
(``CACHEROOT_SHARED=<dir>``) or a bucket (``CACHEROOT_SHARED=s3://BUCKET/PREFIX``).

Each case plants one object (:mod:`planted`'s kinds) at one name that the operation reads or
writes, then warms the pinned revision in this process with the real hub clients in front of a
local hub (and moto's S3 server for the bucket):

- ``ms-warm``, ``ms-hit``: a ModelScope revision warmed where nothing was yet, and again once
  it was, the object planted on this host (the repository's directory, ``snapshots/``, the
  revision's directory, a file of it);
- ``fs-pull-hf``, ``fs-pull-ms``: the shared directory holds the revision, this host nothing;
  the object is planted on this host, where the copy is written;
- ``fs-l2-hf``, ``fs-l2-ms``: the same, the object planted on the shared tier, in what the copy
  is read from (its record, its blobs, its links and files, their directories);
- ``fs-push-hf``, ``fs-push-ms``: the shared directory holds nothing of the revision; the
  object is planted where this host writes it through;
- ``s3-pull-hf``: the bucket holds the revision; the object is planted on this host, where the
  copy is written;
- ``fs-late-*``, ``s3-late-*``: the same pulls, the object planted once the warm made this
  host's directories real and cleared them, before the copy is written (a co-tenant racing it);
- ``fs-src-hf``, ``fs-src-ms``: the shared directory holds nothing; the object is planted on
  this host once the hub's client wrote the revision, before it is written through (what the
  push reads). The snapshot the warm returns was damaged after it was made: only a clean
  outcome is asked of it, not a complete snapshot (the next warm's check finds it).

Each checks what :mod:`test_planted_snapshot` checks: nothing outside the volume (a root-only
directory) read, listed, written or removed, no hang, a sparse giant costing no memory, and the
snapshot complete, each name of its own kind, or cacheroot's own
:class:`~cacheroot.fetch.FetchError`.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_SHARED, CACHEROOT_SHARED_MODE
from cacheroot.fetch import FetchError, Model
from cacheroot.fetch._models import hubs, shared, snapshot
from cacheroot.fetch._models.snapshot import record_path, warm_snapshot

from .test_multiuser import GROUP
from .test_planted_snapshot import BLOBS, REPO, REPO_DIR, SPEC, _assert_snapshot, _made, _read

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.bucket.s3server import S3
    from tests.hub.hubserver import HubServer
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMORY_BOUND,
        bounded,
        group_volume,
        load_hub_clients,
        outside_dir,
        plant,
        state,
    )
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubServer
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMORY_BOUND,
        bounded,
        group_volume,
        load_hub_clients,
        outside_dir,
        plant,
        state,
    )

MS_SPEC = Model(REPO.repo_id, REPO.commit, hub="modelscope")
MS_REPO_DIR = "models/acme--tiny"
#: The names an operation reads or writes, and whether each is a directory: on this host
#: relative to the hub cache of the revision's hub; on the shared tier relative to that hub
#: cache's counterpart there, but ``record`` (the revision's completeness record) and
#: ``records`` (its directory), relative to the cache root's counterpart.
HF_L1 = {
    "repo": (REPO_DIR, True),
    "blobs": (f"{REPO_DIR}/blobs", True),
    "snapshot": (f"{REPO_DIR}/snapshots/{REPO.commit}", True),
    "refs": (f"{REPO_DIR}/refs", True),
    "blob": (f"{REPO_DIR}/blobs/{BLOBS['config.json']}", False),
    "link": (f"{REPO_DIR}/snapshots/{REPO.commit}/config.json", False),
}
MS_L1 = {
    "repo": (MS_REPO_DIR, True),
    "snapshots": (f"{MS_REPO_DIR}/snapshots", True),
    "snapshot": (f"{MS_REPO_DIR}/snapshots/{REPO.commit}", True),
    "file": (f"{MS_REPO_DIR}/snapshots/{REPO.commit}/config.json", False),
}
HF_L2 = {
    "record": ("", False),
    "blobs": (f"{REPO_DIR}/blobs", True),
    "blob": (f"{REPO_DIR}/blobs/{BLOBS['config.json']}", False),
    "snapshot": (f"{REPO_DIR}/snapshots/{REPO.commit}", True),
    "link": (f"{REPO_DIR}/snapshots/{REPO.commit}/config.json", False),
}
MS_L2 = {
    "record": ("", False),
    "snapshot": (f"{MS_REPO_DIR}/snapshots/{REPO.commit}", True),
    "file": (f"{MS_REPO_DIR}/snapshots/{REPO.commit}/config.json", False),
}
#: Planted once the warm made this host's directories real, before the copy is written (as a
#: co-tenant racing the warm would): what the copy itself writes, and how.
HF_LATE = {k: HF_L1[k] for k in ("repo", "blobs", "snapshot", "blob", "link")}
MS_LATE = {k: MS_L1[k] for k in ("snapshot", "file")}
HF_PUSH = {"records": ("", True), **HF_L2, "repo": (REPO_DIR, True)}
MS_PUSH = {"records": ("", True), **MS_L2, "repo": (MS_REPO_DIR, True)}


_LIKE_FIFO = ("socket", "device")


class Scenario:
    """One operation: its hub, its shared tier (``None``, ``fs`` or ``s3``), what the shared
    tier holds first (``full``: the revision; ``empty``), whether this host holds the revision
    first, and where the object is planted (``l1``, ``l2``) among ``components``."""

    def __init__(
        self,
        hub: str,
        tier: str | None,
        side: str,
        components: dict[str, tuple[str, bool]],
        *,
        l2: str = "full",
        warmed: bool = False,
        late: bool = False,
        pushed: bool = False,
        every: bool = False,
    ) -> None:
        self.hub, self.tier, self.side, self.components = hub, tier, side, components
        self.l2, self.warmed, self.late, self.pushed = l2, warmed, late, pushed
        #: Every kind planted (``every``), or all but a socket and a device, which every name
        #: of these paths meets as it meets a FIFO (opened non-blocking, refused by ``fstat``).
        self.dir_kinds = DIR_KINDS if every else tuple(k for k in DIR_KINDS if k not in _LIKE_FIFO)
        self.file_kinds = (
            FILE_KINDS if every else tuple(k for k in FILE_KINDS if k not in _LIKE_FIFO)
        )

    @property
    def spec(self) -> Model:
        return SPEC if self.hub == "hf" else MS_SPEC


SCENARIOS = {
    "ms-warm": Scenario("modelscope", None, "l1", MS_L1, every=True),
    "ms-hit": Scenario("modelscope", None, "l1", MS_L1, warmed=True, every=True),
    "fs-pull-hf": Scenario("hf", "fs", "l1", HF_L1),
    "fs-pull-ms": Scenario("modelscope", "fs", "l1", MS_L1),
    "fs-l2-hf": Scenario("hf", "fs", "l2", HF_L2),
    "fs-l2-ms": Scenario("modelscope", "fs", "l2", MS_L2),
    "fs-push-hf": Scenario("hf", "fs", "l2", HF_PUSH, l2="empty"),
    "fs-push-ms": Scenario("modelscope", "fs", "l2", MS_PUSH, l2="empty"),
    "s3-pull-hf": Scenario("hf", "s3", "l1", HF_L1),
    "fs-late-hf": Scenario("hf", "fs", "l1", HF_LATE, late=True, every=True),
    "fs-late-ms": Scenario("modelscope", "fs", "l1", MS_LATE, late=True, every=True),
    "s3-late-hf": Scenario("hf", "s3", "l1", HF_LATE, late=True),
    "s3-late-ms": Scenario("modelscope", "s3", "l1", MS_LATE, late=True),
    "fs-src-hf": Scenario("hf", "fs", "l1", HF_LATE, l2="empty", pushed=True),
    "fs-src-ms": Scenario("modelscope", "fs", "l1", MS_LATE, l2="empty", pushed=True),
}


def _cases() -> Iterator[Any]:
    for name, scenario in SCENARIOS.items():
        for component, (_rel, is_dir) in scenario.components.items():
            for kind in scenario.dir_kinds if is_dir else scenario.file_kinds:
                yield pytest.param(name, component, kind, id=f"{name}-{component}-{kind}")


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    server = HubServer()
    server.add_hf(REPO)
    server.add_modelscope(REPO)
    with server:
        yield server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """One S3 server for the module's bucket cases (each case takes a bucket of its own)."""
    pytest.importorskip("obstore", reason="the bucket tier needs obstore")
    pytest.importorskip("boto3", reason="buckets are filled with boto3 (moto[server])")
    if TYPE_CHECKING:
        from tests.bucket.s3server import serve
    else:
        from bucket.s3server import serve
    yield from serve(tmp_path_factory.mktemp("moto") / "moto.log")


@pytest.fixture
def caches(
    isolated_cache: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Path]:
    """The layout's hub caches (``hf``, ``modelscope``), both clients in this process pointed
    at them and at the local hub (huggingface_hub read its own variables when first imported;
    modelscope_hub's configuration made again from this case's variables)."""
    from huggingface_hub import constants

    load_hub_clients()
    hf, ms = hubs.cache_root("hf", os.environ), hubs.cache_root("modelscope", os.environ)
    assert hf is not None
    assert ms is not None
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    template = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", hf)
    monkeypatch.setattr(constants, "HF_HOME", os.path.dirname(hf))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", hub.url)
    import modelscope_hub.config

    # modelscope_hub keeps one configuration per process, made from the variables when first
    # asked for: this case's is made from this case's.
    monkeypatch.setattr(modelscope_hub.config, "_default_config", None)
    return {"hf": Path(hf), "modelscope": Path(ms)}


#: What one test process prepared once and copies into each case after that: this host's
#: warmed volume (per hub), the shared directory holding a revision (per hub), the objects of
#: a bucket holding one (per hub).
_KEPT: dict[tuple[str, str], Any] = {}


def _clear_volume(volume: Path) -> None:
    """Empty ``volume`` (what a preparing warm left on this host)."""
    for child in volume.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _warm_volume(scenario: Scenario, volume: Path, keep: Path) -> None:
    key = ("volume", scenario.hub)
    if key not in _KEPT:
        warm_snapshot(scenario.spec, attempts=1)
        shutil.copytree(volume, keep, symlinks=True)
        _KEPT[key] = keep
        return
    shutil.copytree(_KEPT[key], volume, symlinks=True, dirs_exist_ok=True)


def _full_l2(scenario: Scenario, volume: Path, l2: Path, keep: Path) -> None:
    """Give the shared directory ``l2`` the revision, this host nothing of it."""
    key = ("fs", scenario.hub)
    if key not in _KEPT:
        warm_snapshot(scenario.spec, attempts=1)
        _clear_volume(volume)
        shutil.copytree(l2, keep, symlinks=True)
        _KEPT[key] = keep
        return
    shutil.copytree(_KEPT[key], l2, symlinks=True, dirs_exist_ok=True)


def _full_bucket(scenario: Scenario, volume: Path, s3: S3, bucket: str) -> None:
    """Give ``bucket`` the revision, this host nothing of it."""
    key = ("s3", scenario.hub)
    if key not in _KEPT:
        warm_snapshot(scenario.spec, attempts=1)
        _clear_volume(volume)
        _KEPT[key] = s3.objects(bucket)
        return
    client = s3.client()
    for name, data in _KEPT[key].items():
        client.put_object(Bucket=bucket, Key=name, Body=data)


def _assert_ms_snapshot(outcome: object, cache: Path) -> None:
    """``outcome`` is the ModelScope revision's directory, each name on the way a real
    directory, each file a regular file with one name holding its bytes."""
    snapshot = cache / MS_REPO_DIR / "snapshots" / REPO.commit
    assert outcome == snapshot, outcome
    for part in (cache, *[p for p in snapshot.parents if cache in p.parents], snapshot):
        assert stat.S_ISDIR(os.lstat(part).st_mode), f"{part} is no directory"
    assert sorted(os.listdir(snapshot)) == sorted(REPO.files)
    for name, data in REPO.files.items():
        assert _read(snapshot / name) == data, name


def _tier_env(
    scenario: Scenario, l2: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> tuple[S3, str] | None:
    """Point this process at the scenario's shared tier; the S3 server and the bucket of a
    bucket's."""
    if scenario.tier == "fs":
        l2.mkdir(mode=0o2775)
        monkeypatch.setenv(CACHEROOT_SHARED, str(l2))
        monkeypatch.setenv(CACHEROOT_SHARED_MODE, "rw")
        return None
    if scenario.tier != "s3":
        return None
    s3: S3 = request.getfixturevalue("s3")
    from cacheroot.fetch._bucket.transfer import BAD

    BAD.clear()  # objects found damaged by an earlier case's bucket are not this one's
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    bucket = s3.new_bucket()
    monkeypatch.setenv(CACHEROOT_SHARED, f"s3://{bucket}/models")
    monkeypatch.setenv(CACHEROOT_SHARED_MODE, "rw")
    return s3, bucket


def _where(
    scenario: Scenario, component: str, cache: Path, volume: Path, l2: Path
) -> tuple[Path, Path]:
    """``(the name planted, the volume or shared directory it lies in)``."""
    rel, _is_dir = scenario.components[component]
    if scenario.side == "l1":
        return cache / rel, volume
    record = record_path(scenario.spec).relative_to(volume)
    if component == "record":
        return l2 / record, l2
    if component == "records":
        return l2 / record.parent, l2
    return l2 / cache.relative_to(volume) / rel, l2


def _plant_after_prepare(
    where: Path, kind: str, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant ``kind`` at ``where`` once the warm made this host's directories real and cleared
    them, the first time only: a co-tenant's one move, racing the warm."""
    real, planted = snapshot._prepare, list[Path]()

    def prepare_then_plant(spec: Model, hub_root: str) -> None:
        real(spec, hub_root)
        if not planted:
            plant(where, kind, outside)
            planted.append(where)

    monkeypatch.setattr(snapshot, "_prepare", prepare_then_plant)


def _plant_before_push(
    where: Path, kind: str, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant ``kind`` at ``where`` on this host once the hub's client wrote the revision, just
    before it is written through to the shared directory."""
    real = shared.push

    def plant_then_push(tier: shared.Tiers, record: Any, identity: Any) -> bool:
        plant(where, kind, outside)
        return real(tier, record, identity)

    monkeypatch.setattr(shared, "push", plant_then_push)


@pytest.mark.parametrize(("name", "component", "kind"), list(_cases()))
def test_planted_object(
    *,
    name: str,
    component: str,
    kind: str,
    isolated_cache: Path,
    caches: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    scenario = SCENARIOS[name]
    cache = caches[scenario.hub]
    group_volume(isolated_cache, GROUP)
    outside = outside_dir(tmp_path / "outside")
    l2 = tmp_path / "l2"
    bucket = _tier_env(scenario, l2, monkeypatch, request)
    if scenario.warmed:
        _warm_volume(scenario, isolated_cache, tmp_path / "kept")
    if scenario.tier == "fs" and scenario.l2 == "full":
        _full_l2(scenario, isolated_cache, l2, tmp_path / "kept")
    if bucket is not None:
        _full_bucket(scenario, isolated_cache, *bucket)
    where, top = _where(scenario, component, cache, isolated_cache, l2)
    _made(where, top)
    if scenario.late:
        _plant_after_prepare(where, kind, outside, monkeypatch)
    elif scenario.pushed:
        _plant_before_push(where, kind, outside, monkeypatch)
    else:
        plant(where, kind, outside)
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    outcome: object = None
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = warm_snapshot(scenario.spec, attempts=1, lock_timeout=5.0)
        except FetchError as exc:
            outcome = exc  # a clear refusal
    assert state(outside, names_counted=counted) == before, f"{name} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{name} allocated {peak[0]} bytes for a sparse giant"
    if isinstance(outcome, FetchError):
        assert str(outcome), "an error that says nothing"
        return
    if scenario.pushed:
        assert isinstance(outcome, Path), outcome
        return
    if scenario.hub == "hf":
        _assert_snapshot(outcome, cache)
    else:
        _assert_ms_snapshot(outcome, cache)
