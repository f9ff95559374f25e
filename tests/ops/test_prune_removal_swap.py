"""A namespace swapped for a link *between* prune's walk and its removals.

``cacheroot cache prune`` lists what may go (abandoned partials, records and locks of missing
entries, empty levels, entries over the budget), then removes it. On a 2775 volume a co-tenant
(another uid of the volume's group) owns a namespace of the test cache; right after one of the
walks prune makes, the co-tenant renames the namespace aside and plants a link to a root-only
directory outside the volume that holds the same names. Every removal must act on what the walk
saw, through held descriptors: nothing behind the link is removed, read or stamped.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch._upkeep import cache as upkeep
from cacheroot.fetch.store import write_meta

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.fetch.test_multiuser import GROUP, UID_A, member, shared_volume
    from tests.ops.test_ops_budget import age, hf_repo
    from tests.ops.test_prune_swap import SWAPPER
else:
    from fetch.test_multiuser import GROUP, UID_A, member, shared_volume

    from ops.test_ops_budget import age, hf_repo
    from ops.test_prune_swap import SWAPPER

NAMESPACE = "models"
#: What the namespace and the root-only directory both hold: the strays prune removes.
STRAYS = (
    ".gone.bin.meta.json",
    ".gone.bin.used",
    ".gone.bin.lock",
    ".old.bin.0a1b2c3d-4194305.deadbeef.partial.old",
)
EMPTY = "empty"


def _fill(directory: Path, long_ago: float) -> None:
    for name in STRAYS:
        (directory / name).write_bytes(b"{}")
        os.utime(directory / name, (long_ago, long_ago))
    (directory / EMPTY).mkdir()
    os.utime(directory / EMPTY, (long_ago, long_ago))


def _state(directory: Path) -> list[tuple[str, int, int, int]]:
    """Names, kinds and times under ``directory``, read without listing it again by name."""
    out = []
    for name in sorted([*STRAYS, EMPTY]):
        st = os.lstat(directory / name)
        out.append((name, stat.S_IFMT(st.st_mode), st.st_atime_ns, st.st_mtime_ns))
    return out


@pytest.fixture
def volume(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """``(test cache, private)``: a co-tenant's namespace with an entry and strays, and a
    root-only directory outside the volume holding the same stray names."""
    with shared_volume() as vol:
        long_ago = time.time() - 10 * 86400
        private = vol.parent / "private"
        private.mkdir(mode=0o700)
        _fill(private, long_ago)
        cache = vol / "test_cache"
        ns = cache / NAMESPACE
        ns.mkdir(parents=True)
        for d in (cache, ns):
            os.chown(d, UID_A, GROUP)
            os.chmod(d, 0o2775)  # noqa: S103 - the volume's directories, as members make them
        (ns / "weights.bin").write_bytes(b"x" * 100)
        _fill(ns, long_ago)
        for name in ("CACHEROOT", "CACHEROOT_ROOT"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
        yield cache, private


def _swap_after_walk(monkeypatch: pytest.MonkeyPatch, ns: Path, link_to: Path, k: int) -> list[int]:
    """Swap ``ns`` for a link to ``link_to`` (as the co-tenant) right after prune's ``k``-th
    walk of the cache ends; the walks made so far are counted in the list returned."""
    walks: list[int] = []
    real = upkeep.levels

    def counted(*args: Any, **kwargs: Any) -> Iterator[upkeep.Level]:
        yield from real(*args, **kwargs)
        walks.append(1)
        if len(walks) == k:
            done = subprocess.run(
                [sys.executable, "-c", SWAPPER, json.dumps(member(UID_A))],
                input=f"link {ns} {link_to}\n",
                capture_output=True,
                text=True,
                check=True,
            )
            assert done.stdout.strip() == "done"

    monkeypatch.setattr(upkeep, "levels", counted)
    return walks


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_removals_after_a_walk_touch_nothing_behind_a_swapped_link(
    volume: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    cache, private = volume
    ns = cache / NAMESPACE
    before = _state(private)
    walks = _swap_after_walk(monkeypatch, ns, private, k)
    report = upkeep.prune(str(cache), max_size=0, grace=0.0)
    assert len(walks) >= k, f"prune walked {len(walks)} times: the swap was never made"
    assert stat.S_ISLNK(os.lstat(ns).st_mode)  # the planted link itself is left alone
    assert _state(private) == before
    # What went was the volume's own (the namespace, or its aside name in later walks).
    assert [s["path"] for s in report["strays"] if not s["path"].startswith(f"{cache}/")] == []


def test_without_a_swap_prune_removes_every_stray(volume: tuple[Path, Path]) -> None:
    cache, _private = volume
    report = upkeep.prune(str(cache), grace=0.0)
    gone = sorted(os.path.relpath(s["path"], cache) for s in report["strays"])
    assert gone == [
        "models/.gone.bin.lock",
        "models/.gone.bin.meta.json",
        "models/.gone.bin.used",
        "models/.old.bin.0a1b2c3d-4194305.deadbeef.partial.old",
        "models/empty",
    ]
    assert sorted(os.listdir(cache / NAMESPACE)) == ["weights.bin"]


def test_verify_quarantines_nothing_from_behind_a_swapped_link(
    volume: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrupt entry is moved to the quarantine after the walk: a swap in between must not
    move the root-only file of the same name into the volume (where the group could read it)."""
    cache, private = volume
    ns = cache / NAMESPACE
    (ns / "weights.bin").write_bytes(b"y" * 100)
    write_meta(str(ns / "weights.bin"), {"sha256": "0" * 64, "size": 100})
    (private / "weights.bin").write_bytes(b"root only")
    os.chmod(private / "weights.bin", 0o600)
    _swap_after_walk(monkeypatch, ns, private, 1)
    listed = sorted(os.listdir(private))
    rows = upkeep.verify(str(cache))
    assert sorted(os.listdir(private)) == listed  # no lock file made there, nothing moved
    assert (private / "weights.bin").read_bytes() == b"root only"
    assert not (cache / ".quarantine").exists()
    assert [(r["name"], r["status"]) for r in rows] == [("weights.bin", "unreadable")]
    assert "cannot be reached without following a link" in rows[0]["detail"]


def test_a_hub_repository_swapped_after_the_scan_loses_nothing_behind_the_link(
    isolated_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub plans which blobs, snapshots and refs a revision's removal deletes; a
    repository swapped for a link between that plan and the removal must not take the same
    names behind the link with it."""
    import huggingface_hub

    from cacheroot.fetch._upkeep.budget import apply, plan

    commit, newer = "a" * 40, "b" * 40
    now = time.time()
    hub = isolated_cache / "huggingface" / "hub"
    revisions = {commit: {"config.json": "b-old"}, newer: {"config.json": "b-new"}}
    repo = hf_repo(hub, "acme/two", revisions, newer)
    outside = hf_repo(tmp_path, "outside/x", revisions, newer)
    for tree in (repo, outside):
        (tree / "blobs").mkdir()
        for blob in ("b-old", "b-new"):
            (tree / "blobs" / blob).write_bytes(b"{}")
        age(tree, 900, now)
        age(tree / "snapshots" / newer, 300, now)
        age(tree / "blobs" / "b-new", 300, now)
    before = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))
    victims = plan(str(isolated_cache), older_than=600)
    assert [(v.cache, v.label) for v in victims] == [("HF_HOME", f"model/acme/two@{commit}")]
    real = huggingface_hub.scan_cache_dir

    def scanned_then_swapped(*args: Any, **kwargs: Any) -> Any:
        info = real(*args, **kwargs)
        repo.rename(repo.with_name(repo.name + ".aside"))
        repo.symlink_to(outside)
        return info

    monkeypatch.setattr(huggingface_hub, "scan_cache_dir", scanned_then_swapped)
    apply(victims)
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == before
    assert (outside / "blobs" / "b-old").read_bytes() == b"{}"


def test_the_hub_survey_lists_nothing_behind_a_linked_lock_or_blob_directory(
    isolated_cache: Path, tmp_path: Path
) -> None:
    """The hub's busy check lists ``.locks/<repo>`` and ``<repo>/blobs``: each is reached from
    the hub cache without following a link, so a link planted there lists nothing of what it
    leads to (a root-only directory's names would show in the reason given)."""
    from cacheroot.fetch._upkeep.in_use import Held
    from cacheroot.fetch._upkeep.survey import hub_busy

    now = time.time()
    hub = isolated_cache / "huggingface" / "hub"
    repo = hf_repo(hub, "acme/two", {"a" * 40: {"c.json": "b-c"}}, "a" * 40)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "secret-name.incomplete").write_bytes(b"x")
    (private / "secret-name.lock").write_bytes(b"")
    for path in (private / "secret-name.incomplete", private / "secret-name.lock", private):
        os.utime(path, (now - 40 * 86400, now - 40 * 86400))
    (hub / ".locks").mkdir()
    (hub / ".locks" / repo.name).symlink_to(private)
    (repo / "blobs").symlink_to(private)
    before = os.lstat(private).st_atime_ns
    assert hub_busy(str(repo), str(hub), Held(), now, 60.0) == ""
    assert os.lstat(private).st_atime_ns == before  # never listed
