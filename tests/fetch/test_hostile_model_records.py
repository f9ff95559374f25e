"""Model snapshot records planted as giant sparse files: never read whole.

The completeness record of a snapshot, its failure record, a Hugging Face ``refs/<branch>``, the
shared tier's copy of a record and huggingface_hub's cached listing (``trees/<commit>.json``)
are all small files on a volume others write. One planted as a sparse file of gigabytes costs
its planter no disk; read whole, it costs every reader that much memory. The code that meets
them runs in a child whose address space is capped below their size, so a whole read fails
there (``MemoryError``) instead of taking the test machine's memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cacheroot.fetch import Model
from cacheroot.fetch._models import hubs
from cacheroot.fetch._models.snapshot import failure_path, record_path

#: A commit, and the size of the planted records: far above what the child may map.
COMMIT = "0123456789abcdef0123456789abcdef01234567"
GIANT = 2 << 30
#: The child's address-space cap: room for the interpreter, not for a record read whole.
CAP = 1 << 30


def sparse(path: Path, size: int = GIANT) -> None:
    """Make ``path`` ``size`` bytes long by a hole (a JSON object at its head)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": 1}')
    os.truncate(path, size)
    assert os.stat(path).st_blocks * 512 < 1 << 20  # no disk


CHILD = """
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from cacheroot.fetch import Model, check_snapshot
from cacheroot.fetch._models import shared
spec = Model("acme/tiny", sys.argv[2], allow_patterns=["*.json"])
branch = Model("acme/tiny", "main", allow_patterns=["*.json"])
hub, record, shared_hub, shared_record, trees, copied = sys.argv[3:9]
out = {}
try:
    out["pinned"] = list(check_snapshot(spec).problems)
    out["branch"] = list(check_snapshot(branch).problems)
    tier = shared.Tiers(hub, record, shared_hub, shared_record)
    out["pull"] = shared.pull(tier, {"hub": "hf", "revision": sys.argv[2]})
    shared._copy_tree_listing(trees, copied, "models--acme--tiny/snapshots/" + sys.argv[2])
    out["copied"] = sorted(os.listdir(copied)) if os.path.isdir(copied) else []
except MemoryError:
    out["error"] = "MemoryError"
print(json.dumps(out))
"""


def test_giant_model_records_are_never_read_whole(tmp_path: Path) -> None:
    spec = Model("acme/tiny", COMMIT, allow_patterns=["*.json"])
    branch = Model("acme/tiny", "main", allow_patterns=["*.json"])
    record = record_path(spec)
    sparse(record)
    sparse(failure_path(spec))
    sparse(failure_path(branch))
    hub_root = hubs.cache_root("hf", os.environ)
    assert hub_root is not None
    ref = Path(hubs.repo_folder(branch, hub_root), "refs", "main")
    sparse(ref)
    shared_hub = tmp_path / "l2" / "hub"
    shared_record = tmp_path / "l2" / "snapshots" / record.name
    sparse(shared_record)
    trees = shared_hub / "models--acme--tiny" / "trees"
    sparse(trees / f"{COMMIT}.json")
    copied = tmp_path / "copied-trees"
    args = [hub_root, str(record), str(shared_hub), str(shared_record), str(trees), str(copied)]

    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(CAP), COMMIT, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out, out
    (problem,) = out["pinned"]
    assert problem.startswith(f"its record {record} is 2147483648 bytes, over the ")
    assert "damaged, not read" in problem
    (problem,) = out["branch"]
    assert problem.startswith("never warmed on this cache (no record at ")
    assert out["pull"] is None
    assert out["copied"] == []
