"""A prune killed between renaming an entry aside and deleting it: the next prune or ``tier evict``
removes what it left, once the pruner is certainly dead, and never while it still runs.

The pruner is a real process stopped (by a patched step, waiting forever) right after its
renames, then killed with ``SIGKILL``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED
from cacheroot.envs._cli import main as cli
from cacheroot.fetch import _proc
from cacheroot.fetch._upkeep.budget import LEFTOVER, plan
from cacheroot.fetch._upkeep.prune_report import prune_root

M = 1 << 20
#: Prunes ``argv[1]`` to nothing, stopping for good after its renames (``argv[2]`` names them).
PRUNER = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from cacheroot.fetch._upkeep import budget as _budget

    def stop(aside, done):
        Path(sys.argv[2] + ".tmp").write_text("\\n".join(moved for _, moved in aside))
        Path(sys.argv[2] + ".tmp").rename(sys.argv[2])
        threading.Event().wait()

    _budget._settle_aside = stop
    _budget.apply(_budget.plan(sys.argv[1], max_size=0))
    """
)


@pytest.fixture(autouse=True)
def _liveness_visible() -> None:
    why = _proc.blind_spot()
    if why:
        pytest.skip(f"a dead pruner cannot be told from a live one here: {why}")


def _entries(root: Path) -> dict[str, Path]:
    """A Triton kernel and an Inductor graph (in its ``fxgraph`` sub-directory), unused for
    1000 s, the kernel with a record beside it."""
    made = {}
    for label, rel in (("k1", "triton/k1"), ("g1", "torchinductor/fxgraph/g1")):
        entry = root / rel
        entry.mkdir(parents=True)
        with (entry / "blob").open("wb") as f:
            f.truncate(M)
        made[label] = entry
    record = root / "triton" / ".k1.meta.json"
    record.write_text("{}")
    old = time.time() - 1000
    for path in [record, *made.values(), *(p / "blob" for p in made.values())]:
        os.utime(path, (old, old))
    return made


def _stopped_pruner(root: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """A pruner of ``root`` stopped between its renames and its deletions."""
    moved = tmp_path / "moved"
    proc = subprocess.Popen([sys.executable, "-c", PRUNER, str(root), str(moved)])
    end = time.monotonic() + 60
    while not moved.exists():
        if proc.poll() is not None or time.monotonic() > end:
            _kill(proc)
            pytest.fail("the pruner never stopped after its renames")
        time.sleep(0.01)
    return proc, sorted(Path(p) for p in moved.read_text().splitlines())


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()  # reaped: its pid runs nothing now


def test_the_next_prune_removes_what_a_killed_prune_left(
    isolated_cache: Path, tmp_path: Path
) -> None:
    entries = _entries(isolated_cache)
    proc, moved = _stopped_pruner(isolated_cache, tmp_path)
    try:
        pattern = rf"^\.(k1|g1)\.{_proc.machine_tag()}-{proc.pid}\.pruned$"
        assert [bool(re.match(pattern, p.name)) for p in moved] == [True, True]
        assert not any(e.exists() for e in entries.values())
        # While the pruner lives, what it set aside is its own business.
        alive = plan(str(isolated_cache), max_size=1 << 40)
        assert [v for v in alive if v.kind == LEFTOVER] == []
    finally:
        _kill(proc)

    dry = prune_root(str(isolated_cache), max_size=1 << 40, dry_run=True)
    assert sorted(r["path"] for r in dry["removed"]) == [str(p) for p in moved]
    assert all(p.exists() for p in moved)
    with (next(p for p in moved if ".g1." in p.name) / "blob").open("rb"):
        held = prune_root(str(isolated_cache), max_size=1 << 40)
    assert [(r["label"], r["kind"]) for r in held["removed"]] == [
        (f"{moved[1].name}", LEFTOVER)  # k1's: g1's is open
    ]
    assert [k["reason"].startswith("in use by pid") for k in held["kept"]] == [True]
    assert not (isolated_cache / "triton" / ".k1.meta.json").exists()  # its record went too

    done = prune_root(str(isolated_cache), max_size=1 << 40)
    assert [r["label"] for r in done["removed"]] == [f"fxgraph/{moved[0].name}"]
    assert [p for p in moved if p.exists()] == []
    assert done["freed"] == M


def test_tier_evict_removes_what_a_killed_eviction_left_on_the_shared_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    l2 = tmp_path / "l2"
    _entries(l2)
    proc, moved = _stopped_pruner(l2, tmp_path)
    _kill(proc)
    monkeypatch.setenv(CACHEROOT_SHARED, str(l2))
    assert os.environ[CACHEROOT] != str(l2)

    assert cli(["tier", "evict", "--l2-max-size", "1T"]) == 0

    assert capsys.readouterr().out == "L2: removed 2 (2.0 MiB); 0 in use, 0 refused\n"
    assert [p for p in moved if p.exists()] == []
    assert sorted(p.name for p in l2.rglob("*") if p.is_file()) == []
