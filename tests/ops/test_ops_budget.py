"""Budgets across the whole root: one least-recently-used order over every cache of the layout.

The root holds a Hugging Face hub cache in the layout huggingface_hub documents (checked with
its own ``scan_cache_dir``), Triton and Inductor trees, and test-cache entries, each last used
at a known time. Sizes are sparse files (apparent sizes, no disk), so the free-space criterion
has megabytes of margin against whatever else the machine writes meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from huggingface_hub import scan_cache_dir

from cacheroot.fetch._upkeep import budget as _budget
from cacheroot.fetch._upkeep import survey as _survey
from cacheroot.fetch._upkeep.budget import apply, plan
from cacheroot.fetch._upkeep.prune_report import prune_root
from cacheroot.fetch._used import used_path

from .conftest import cli, cli_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.hub.hubserver import HubRepo, HubServer, git_blob_sha1
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer, git_blob_sha1

M = 1 << 20
#: Commits of the hub repositories.
OLD = "a" * 40
R1 = "1" * 40
R2 = "2" * 40


def sized(path: Path, size: int) -> Path:
    """A sparse file of ``size`` bytes (its apparent size is what the caches count)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def age(path: Path, seconds: float, now: float) -> None:
    """Set the access and modification times of ``path`` and all under it to ``seconds`` ago."""
    when = (now - seconds, now - seconds)
    for here, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(here, name), when, follow_symlinks=False)
    os.utime(path, when, follow_symlinks=False)


def hf_repo(hub: Path, repo_id: str, revisions: dict[str, dict[str, str]], ref: str) -> Path:
    """``models--org--name/{blobs,snapshots,refs}``: each revision's files link to named blobs."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(ref)
    for commit, files in revisions.items():
        for name, blob in files.items():
            link = repo / "snapshots" / commit / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path("..", "..", "blobs", blob))
    return repo


class Root:
    """The populated root: where each entry lives, for the tests to look at."""

    def __init__(self, root: Path, now: float) -> None:
        self.root = root
        self.now = now
        self.hub = root / "huggingface" / "hub"
        self.triton = root / "triton"
        self.inductor = root / "torchinductor"
        self.test_cache = root / "vllm" / "test_cache"
        old = hf_repo(self.hub, "acme/old", {OLD: {"config.json": "b-old"}}, OLD)
        two = hf_repo(
            self.hub,
            "acme/two",
            {R1: {"w.bin": "b-w1", "c.json": "b-c"}, R2: {"w.bin": "b-w2", "c.json": "b-c"}},
            R2,
        )
        for repo, blob, size, ago in (
            (old, "b-old", 10 * M, 900),
            (two, "b-w1", 40 * M, 700),
            (two, "b-c", 1 * M, 700),
            (two, "b-w2", 40 * M, 100),
        ):
            age(sized(repo / "blobs" / blob, size), ago, now)
        for sub in (old, two):
            for part in ("refs", "snapshots"):
                age(sub / part, 1000, now)
            for part in ("blobs", "."):
                os.utime(sub / part, (now - 1000, now - 1000))
        self.k1 = sized(self.triton / "k1" / "kernel.cubin", 20 * M).parent
        self.k2 = sized(self.triton / "k2" / "kernel.cubin", 3 * M).parent
        self.g1 = sized(self.inductor / "fxgraph" / "g1" / "entry", 5 * M).parent
        self.ab = sized(self.inductor / "ab" / "cab.py", M // 2).parent
        for path, ago in ((self.k1, 800), (self.k2, 50), (self.g1, 600), (self.ab, 400)):
            age(path, ago, now)
        self.e1 = sized(self.test_cache / "ns" / "e1.bin", 15 * M)
        self.e2 = sized(self.test_cache / "ns" / "e2.bin", 2 * M + M // 2)
        for path, ago in ((self.e1, 500), (self.e2, 200)):
            Path(used_path(str(path))).touch()
            os.utime(used_path(str(path)), (now - ago, now - ago))
        for d in (self.triton, self.inductor, self.inductor / "fxgraph"):
            os.utime(d, (now - 1000, now - 1000))


#: Every candidate, least recently used first: (cache, label, bytes it frees alone).
ORDER = [
    ("HF_HOME", f"model/acme/old@{OLD}", 10 * M),
    ("TRITON_CACHE_DIR", "k1", 20 * M),
    ("HF_HOME", f"model/acme/two@{R1}", 40 * M),
    ("TORCHINDUCTOR_CACHE_DIR", "fxgraph/g1", 5 * M),
    ("_VLLM_TEST_CACHE", "ns/e1.bin", 15 * M),
    ("TORCHINDUCTOR_CACHE_DIR", "ab", M // 2),
    ("_VLLM_TEST_CACHE", "ns/e2.bin", 2 * M + M // 2),
    ("HF_HOME", f"model/acme/two@{R2}", 41 * M),
    ("TRITON_CACHE_DIR", "k2", 3 * M),
]
#: What the caches hold: the hub's blobs once each, the kernels, the test entries.
TOTAL = 91 * M + 23 * M + 5 * M + M // 2 + 17 * M + M // 2


@pytest.fixture
def populated(isolated_cache: Path) -> Root:
    return Root(isolated_cache, time.time())


def rows(victims: list[_budget.Victim]) -> list[tuple[str, str, int]]:
    return [(v.cache, v.label, v.size) for v in victims]


def test_the_hub_layout_is_what_huggingface_hub_reads(populated: Root) -> None:
    info = scan_cache_dir(populated.hub)
    assert info.warnings == []
    assert sorted(r.repo_id for r in info.repos) == ["acme/old", "acme/two"]
    two = next(r for r in info.repos if r.repo_id == "acme/two")
    assert sorted(r.commit_hash for r in two.revisions) == [R1, R2]
    assert info.size_on_disk == 91 * M
    found = _survey.survey(str(populated.root))
    assert found.total == TOTAL
    assert [c.busy for c in found.candidates] == [""] * len(ORDER)


def test_max_size_removes_least_recently_used_across_caches(populated: Root) -> None:
    victims = plan(str(populated.root), max_size=50 * M)
    # 137 MiB held: the oldest go until at most 50 MiB is left (47 MiB).
    assert rows(victims) == ORDER[:5]
    summary = apply(victims)
    assert summary.removed_count == 5
    assert summary.removed_bytes == 90 * M
    assert summary.skipped == []
    assert not populated.k1.exists()
    assert not populated.g1.exists()
    assert not populated.e1.exists()
    assert not Path(used_path(str(populated.e1))).exists()
    assert populated.k2.exists()
    assert populated.ab.exists()
    assert populated.e2.exists()
    info = scan_cache_dir(populated.hub)
    assert [(r.repo_id, [v.commit_hash for v in r.revisions]) for r in info.repos] == [
        ("acme/two", [R2])
    ]
    # The blob both revisions linked to stays with the one left; the other revision's goes.
    assert sorted(p.name for p in (populated.hub / "models--acme--two" / "blobs").iterdir()) == [
        "b-c",
        "b-w2",
    ]
    assert _survey.survey(str(populated.root)).total == TOTAL - 90 * M


def test_older_than_removes_everything_unused_for_longer(populated: Root) -> None:
    assert rows(plan(str(populated.root), older_than=650)) == ORDER[:3]
    assert rows(plan(str(populated.root), older_than=450)) == ORDER[:5]


def free_space(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_min_free_removes_until_the_file_system_has_room(populated: Root) -> None:
    root = str(populated.root)
    # 25 MiB more free: 10 MiB is not enough, 30 MiB is. Whatever else writes to this file
    # system meanwhile must not move its free space by 5 MiB, so the plan is taken again
    # until a round sees it still.
    for _ in range(5):
        before = free_space(populated.root)
        victims = plan(root, min_free=before + 25 * M)
        if abs(free_space(populated.root) - before) < 4 * M:
            break
    assert rows(victims) == ORDER[:2]
    # Everything on this file system cannot make 1 PiB free; what is free already needs nothing.
    assert rows(plan(root, min_free=1 << 50)) == ORDER
    assert plan(root, min_free=max(0, free_space(populated.root) - 100 * M)) == []


def test_criteria_combine(populated: Root) -> None:
    # Age takes the oldest two; the size budget then needs one more.
    victims = plan(str(populated.root), older_than=750, max_size=100 * M)
    assert [(v.label, v.reason) for v in victims] == [
        (ORDER[0][1], "unused for longer than the limit"),
        (ORDER[1][1], "unused for longer than the limit"),
        (ORDER[2][1], "over the size budget (least recently used)"),
    ]
    # Both revisions of a repository chosen: the second frees what the two shared as well.
    everything = plan(str(populated.root), max_size=0)
    assert rows(everything) == ORDER
    assert sum(v.size for v in everything) == TOTAL


HOLD = textwrap.dedent(
    """
    import mmap, os, sys
    from cacheroot.fetch._lock import PathLock
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "lock":
        held = PathLock(path)
        held.acquire()
    elif kind == "open":
        held = open(path, "rb")
    else:  # mapped, as safetensors maps weights: the descriptor is closed, the map stays
        with open(path, "rb") as f:
            held = mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ)
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.communicate("done\n", timeout=30)


def hold(holders: list[subprocess.Popen[str]], kind: str, path: Path) -> None:
    """Another process locks, opens or maps ``path`` until the test ends."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, kind, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    holders.append(p)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"


def test_nothing_in_use_is_removed(populated: Root, holders: list[subprocess.Popen[str]]) -> None:
    # A lock beside a kernel directory, held (filelock, as flashinfer and torch take theirs).
    hold(holders, "lock", populated.triton / "k1.lock")
    # A file of an Inductor entry open in another process.
    hold(holders, "open", populated.g1 / "entry")
    # A model revision's weights mapped by another process.
    hold(holders, "map", populated.hub / "models--acme--two" / "blobs" / "b-w1")
    # A test-cache entry being fetched (its own lock held).
    hold(holders, "lock", populated.test_cache / "ns" / ".e1.bin.lock")
    # A download in flight in the old repository, and a kernel being written right now.
    sized(populated.hub / "models--acme--old" / "blobs" / "b-next.incomplete", M)
    sized(populated.triton / "k3" / "kernel.cubin", M)
    report = prune_root(str(populated.root), max_size=0)
    kept = {(k["cache"], k["label"]): k["reason"] for k in report["kept"]}
    assert sorted(kept) == [
        ("HF_HOME", f"model/acme/old@{OLD}"),
        ("HF_HOME", f"model/acme/two@{R1}"),
        ("TORCHINDUCTOR_CACHE_DIR", "fxgraph/g1"),
        ("TRITON_CACHE_DIR", "k1"),
        ("TRITON_CACHE_DIR", "k3"),
        ("_VLLM_TEST_CACHE", "ns/e1.bin"),
    ]
    assert kept[("HF_HOME", f"model/acme/old@{OLD}")].startswith("being downloaded")
    assert kept[("HF_HOME", f"model/acme/two@{R1}")].startswith("in use by pid")
    assert kept[("TORCHINDUCTOR_CACHE_DIR", "fxgraph/g1")].startswith("in use by pid")
    assert kept[("TRITON_CACHE_DIR", "k1")].startswith("locked")
    assert "may be being written" in kept[("TRITON_CACHE_DIR", "k3")]
    assert kept[("_VLLM_TEST_CACHE", "ns/e1.bin")].startswith("locked by pid")
    assert sorted((r["cache"], r["label"]) for r in report["removed"]) == [
        ("HF_HOME", f"model/acme/two@{R2}"),
        ("TORCHINDUCTOR_CACHE_DIR", "ab"),
        ("TRITON_CACHE_DIR", "k2"),
        ("_VLLM_TEST_CACHE", "ns/e2.bin"),
    ]
    for path in (populated.k1, populated.g1 / "entry", populated.e1, populated.triton / "k3"):
        assert path.exists(), path
    info = scan_cache_dir(populated.hub)
    assert sorted((r.repo_id, sorted(v.commit_hash for v in r.revisions)) for r in info.repos) == [
        ("acme/old", [OLD]),
        ("acme/two", [R1]),
    ]
    # The mapped weights are intact, and the blob the kept revision shared stayed with it.
    blobs = populated.hub / "models--acme--two" / "blobs"
    assert sorted(p.name for p in blobs.iterdir()) == ["b-c", "b-w1"]


READER = textwrap.dedent(
    """
    import os, sys
    path, stop = sys.argv[1], sys.argv[2]
    read = 0
    with open(path, "rb") as f:
        print("ready", flush=True)
        while not os.path.exists(stop):  # reads its kernel over and over, as a test run does
            f.seek(0)
            chunk = f.read(1 << 16)
            assert chunk == bytes(len(chunk)) and chunk, "the file changed under the reader"
            read += len(chunk)
    print(read, flush=True)
    """
)


def test_a_concurrent_reader_keeps_its_entry_while_it_reads(
    populated: Root, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(populated.k1 / "kernel.cubin"), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    try:
        assert reader.stdout.readline().strip() == "ready"
        # The whole budget, by the command, while the reader reads.
        report = cli_json("cache", "prune", "--max-size", "0")
        assert [(k["label"], k["reason"].split(" (")[0]) for k in report["kept"]] == [
            ("k1", f"in use by pid {reader.pid}")
        ]
        assert (populated.k1 / "kernel.cubin").stat().st_size == 20 * M
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=30)
    assert reader.returncode == 0
    assert int(out) > 0
    # Once the reader is done, its entry goes too.
    report = prune_root(str(populated.root), max_size=0)
    assert [r["label"] for r in report["removed"]] == ["k1"]
    assert report["kept"] == []
    assert not populated.k1.exists()


def test_the_command_lists_per_cache_and_a_dry_run_removes_nothing(populated: Root) -> None:
    before = sorted(str(p) for p in populated.root.rglob("*"))
    report = cli_json("cache", "prune", "--max-size", "100M", "--dry-run")
    assert sorted(report) == [
        "caches",
        "criteria",
        "dry_run",
        "free",
        "freed",
        "kept",
        "notes",
        "removed",
        "root",
        "strays",
        "total_after",
        "total_before",
    ]
    assert report["dry_run"] is True
    assert report["criteria"] == {"max_size": 100 * M, "min_free": None, "older_than": None}
    assert [(r["cache"], r["label"], r["size"], r["kind"]) for r in report["removed"]] == [
        ("HF_HOME", f"model/acme/old@{OLD}", 10 * M, "hf-revision"),
        ("TRITON_CACHE_DIR", "k1", 20 * M, "entry"),
        ("HF_HOME", f"model/acme/two@{R1}", 40 * M, "hf-revision"),
    ]
    assert report["removed"][1]["path"] == str(populated.k1)
    assert report["removed"][1]["reason"] == "over the size budget (least recently used)"
    assert report["removed"][1]["last_used"] == pytest.approx(populated.now - 800, abs=1)
    assert report["total_before"] == TOTAL
    assert report["total_after"] == TOTAL - 70 * M
    assert report["freed"] == 70 * M
    assert report["caches"]["HF_HOME"] == {
        "path": str(populated.hub),
        "removed": 2,
        "freed": 50 * M,
    }
    assert report["caches"]["TRITON_CACHE_DIR"]["freed"] == 20 * M
    assert report["caches"]["_VLLM_TEST_CACHE"]["removed"] == 0
    assert report["kept"] == []
    assert sorted(str(p) for p in populated.root.rglob("*")) == before

    text = cli("cache", "prune", "--max-size", "100M", "--older-than", "450s", "--dry-run")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"HF_HOME ({populated.hub}):"
    assert f"  would remove model/acme/old@{OLD} (10.0 MiB): unused for longer than the limit" in (
        lines
    )
    assert "  2 entries, 50.0 MiB" in lines
    assert f"TRITON_CACHE_DIR ({populated.triton}):" in lines
    assert "  would remove ns/e1.bin (15.0 MiB): unused for longer than the limit" in lines
    assert lines[-1].startswith("would remove 5 entries and 0 stray files, 90.0 MiB; 47.0 MiB left")
    assert sorted(str(p) for p in populated.root.rglob("*")) == before

    done = cli_json("cache", "prune", "--min-free", "1", "--older-than", "850s")
    assert [r["label"] for r in done["removed"]] == [f"model/acme/old@{OLD}"]
    assert not (populated.hub / "models--acme--old").exists()


def test_without_huggingface_hub_a_repository_is_one_plain_entry(
    populated: Root, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails: not installed
    found = _survey.survey(str(populated.root))
    assert found.notes == [
        (
            f"huggingface_hub is not installed: {populated.hub} is treated as a plain tree "
            "(each repository one entry, all its revisions at once)"
        )
    ]
    victims = plan(str(populated.root), older_than=650)
    assert rows(victims) == [
        # The blob, the ref (40 bytes) and the link "../../blobs/b-old" (17 bytes).
        ("HF_HOME", "models--acme--old", 10 * M + 57),
        ("TRITON_CACHE_DIR", "k1", 20 * M),
    ]
    assert apply(victims).removed_count == 2
    assert not (populated.hub / "models--acme--old").exists()
    assert (populated.hub / "models--acme--two").exists()


def test_revisions_downloaded_by_huggingface_hub_go_oldest_first(
    isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two revisions of one repository fetched by huggingface_hub from a local hub."""
    from huggingface_hub import constants, snapshot_download

    # huggingface_hub reads HF_HUB_OFFLINE once, at import: an offline session (the plugin's
    # offline-first runs set it for every process) must not make this local hub unreachable.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    hub = isolated_cache / "huggingface" / "hub"
    first = HubRepo("acme/real", {"config.json": b"{}", "model.safetensors": bytes(3000)})
    second = HubRepo("acme/real", {"config.json": b"{}", "model.safetensors": bytes(5000)})
    with HubServer() as server:
        for repo in (first, second):
            server.add_hf(repo)
            snapshot_download("acme/real", revision=repo.commit, cache_dir=hub, endpoint=server.url)
    info = scan_cache_dir(hub)
    assert sorted(r.commit_hash for r in next(iter(info.repos)).revisions) == sorted(
        [first.commit, second.commit]
    )
    now = time.time()
    for repo, ago in ((first, 600), (second, 60)):
        for path in (hub / "models--acme--real" / "snapshots" / repo.commit).iterdir():
            os.utime(path.resolve(), (now - ago, now - ago))
    age(hub / "models--acme--real" / "blobs" / git_blob_sha1(b"{}"), 600, now)
    victims = plan(str(isolated_cache), older_than=300)
    # The config both revisions share stays; the first revision's weights go.
    assert rows(victims) == [("HF_HOME", f"model/acme/real@{first.commit}", 3000)]
    assert apply(victims).removed_bytes == 3000
    info = scan_cache_dir(hub)
    assert [r.commit_hash for r in next(iter(info.repos)).revisions] == [second.commit]
