"""Model snapshots across a fleet: hosts with their own L1 on one shared tier, the real hub clients.

Every host is its own mount, pid and uts namespace with a private tmpfs as ``CACHEROOT``
(``fleet_host.py``); the shared tier is a directory of the test. The local hub counts every
request, so "each file fetched once" and "no request at all" are read from the hub itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, HF_HUB_OFFLINE

from .conftest import FILES

if TYPE_CHECKING:
    from tests import hosts

    from .hubserver import HubRepo, HubServer
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    import hosts

DRIVER = str(Path(__file__).with_name("fleet_host.py"))


@pytest.fixture(autouse=True)
def _hosts_possible() -> None:
    hosts.need_namespaces()


class Host(hosts.Host):
    """One simulated host warming a snapshot (see ``fleet_host.py``)."""

    def __init__(self, name: str, work: Path, l2: Path, hub: HubServer, **job: Any) -> None:
        env = {
            "HF_ENDPOINT": hub.url,
            "MODELSCOPE_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        if job.get("offline"):
            env |= {CACHEROOT_OFFLINE: "1", HF_HUB_OFFLINE: "1"}
        super().__init__(name, work, DRIVER, l2=str(l2), l1_size="256m", env=env, **job)


def _spec(repo: HubRepo, hub: str = "hf") -> dict[str, Any]:
    return {"repo_id": repo.repo_id, "revision": repo.commit, "hub": hub}


def _expected(repo: HubRepo) -> dict[str, list[Any]]:
    """What a host must report: every file's sha256, its bytes on the host's own L1."""
    return {name: [hashlib.sha256(repo.files[name]).hexdigest(), True] for name in FILES}


def _gets(hub: HubServer, repo: HubRepo, kind: str = "hf") -> dict[str, int]:
    """File downloads per file (HF: GETs on resolve; ModelScope: the file endpoint's total)."""
    counts = hub.counts()
    if kind != "hf":
        return {"*": counts[("GET", f"/api/v1/models/{repo.repo_id}/repo")]}
    prefix = f"/{repo.repo_id}/resolve/{repo.commit}/"
    return {
        p[len(prefix) :]: n for (m, p), n in counts.items() if m == "GET" and p.startswith(prefix)
    }


def _wait_for(path: Path, host: Host, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert host.proc.poll() is None, f"host {host.name} exited before {path.name}"
        assert time.monotonic() < end, f"timed out waiting for {path}"
        time.sleep(0.01)


def _records(l2: Path) -> list[str]:
    return sorted(p.name for p in l2.rglob("snapshots/*.json"))


def _leftovers(l2: Path) -> list[str]:
    return sorted(
        str(p) for p in l2.rglob("*") if ".partial" in p.name or p.name.endswith(".lease")
    )


def test_three_hosts_warming_one_model_fetch_each_file_once(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    gate = tmp_path / "gate"
    hosts = [
        Host(f"host{i}", tmp_path, l2, hub, spec=_spec(tiny_repo), gate=str(gate)) for i in range(3)
    ]
    gate.write_text("go")
    reports = [h.report() for h in hosts]

    assert [r["error"] for r in reports] == [None] * 3
    assert [r["files"] for r in reports] == [_expected(tiny_repo)] * 3
    assert _gets(hub, tiny_repo) == dict.fromkeys(FILES, 1)
    # One host talked to the hub, as a single process does: 1 listing, a HEAD and a GET each.
    assert hub.total() == 7, hub.counts()
    assert sorted(any("from the shared tier" in line for line in r["log"]) for r in reports) == [
        False,
        True,
        True,
    ]
    assert len(_records(l2)) == 1
    assert _leftovers(l2) == []
    blobs = sorted(p.name for p in l2.rglob("blobs/*"))
    assert blobs == sorted(tiny_repo.etag(name) for name in FILES)


@pytest.mark.parametrize("kind", ["hf", "modelscope"])
def test_a_fresh_host_with_a_warm_shared_tier_asks_the_hub_nothing(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path, kind: str
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    first = Host("warm", tmp_path, l2, hub, spec=_spec(tiny_repo, kind)).report()
    assert first["error"] is None
    hub.reset()

    fresh = Host("fresh", tmp_path, l2, hub, spec=_spec(tiny_repo, kind)).report()
    # A cache-only host (and, for Hugging Face, the hub client offline) is served too.
    offline = Host("offline", tmp_path, l2, hub, spec=_spec(tiny_repo, kind), offline=True)
    cache_only = offline.report()

    assert hub.total() == 0, hub.counts()
    assert fresh["error"] is None
    assert fresh["files"] == _expected(tiny_repo)
    # The same layout on every host's own L1.
    assert os.path.relpath(fresh["path"], tmp_path / "fresh" / "l1") == os.path.relpath(
        first["path"], tmp_path / "warm" / "l1"
    )
    assert any("from the shared tier" in line for line in fresh["log"])
    assert cache_only["error"] is None
    assert cache_only["files"] == _expected(tiny_repo)
    if kind == "hf":
        assert cache_only["client"] == cache_only["path"]


def test_a_torn_shared_copy_is_never_used(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    paused = tmp_path / "paused"
    fast = {"stale_after": 1.0, "beat": 0.2}
    writer = Host("writer", tmp_path, l2, hub, spec=_spec(tiny_repo), pause=str(paused), **fast)
    _wait_for(paused, writer)
    writer.kill()  # every blob and link is on L2, the record that completes them is not
    assert len(list(l2.rglob("blobs/*"))) == len(FILES)
    assert _records(l2) == []
    hub.reset()

    cache_only = Host("offline", tmp_path, l2, hub, spec=_spec(tiny_repo), offline=True).report()
    assert cache_only["error"] is not None
    assert cache_only["error"].startswith("CacheMissError: ")
    assert hub.total() == 0

    fresh = Host("fresh", tmp_path, l2, hub, spec=_spec(tiny_repo), **fast).report()
    assert fresh["error"] is None
    assert fresh["files"] == _expected(tiny_repo)
    assert _gets(hub, tiny_repo) == dict.fromkeys(FILES, 1)  # from the hub, not the torn copy
    assert any("took over the lease" in line for line in fresh["log"])
    assert len(_records(l2)) == 1  # the fresh host completed the shared copy
    assert [p for p in _leftovers(l2) if p.endswith(".lease")] == []


def test_a_damaged_shared_blob_is_not_used(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    assert Host("warm", tmp_path, l2, hub, spec=_spec(tiny_repo)).report()["error"] is None
    (blob,) = l2.rglob(f"blobs/{tiny_repo.etag('model.safetensors')}")
    damaged = bytearray(blob.read_bytes())
    damaged[-1] ^= 0xFF
    blob.write_bytes(bytes(damaged))  # same name, same size, other bytes; the record is there
    hub.reset()

    fresh = Host("fresh", tmp_path, l2, hub, spec=_spec(tiny_repo)).report()

    assert fresh["error"] is None
    assert fresh["files"] == _expected(tiny_repo)
    assert _gets(hub, tiny_repo).get("model.safetensors") == 1
    assert any("is not used" in line for line in fresh["log"])


def test_a_shared_record_without_the_revisions_listing_is_not_used(
    hub: HubServer, tiny_repo: HubRepo, tmp_path: Path
) -> None:
    # Older cacheroot versions recorded a snapshot without the hub's listing of its revision,
    # and could so record a partly cached revision complete: such a record is not trusted.
    l2 = tmp_path / "l2"
    l2.mkdir()
    assert Host("warm", tmp_path, l2, hub, spec=_spec(tiny_repo)).report()["error"] is None
    [record] = l2.rglob("snapshots/*.json")
    data = json.loads(record.read_text())
    assert sorted(data.pop("listing")) == sorted(FILES)
    record.chmod(0o644)
    record.write_text(json.dumps(data))
    hub.reset()

    fresh = Host("fresh", tmp_path, l2, hub, spec=_spec(tiny_repo)).report()

    assert fresh["error"] is None
    assert fresh["files"] == _expected(tiny_repo)
    assert _gets(hub, tiny_repo) == dict.fromkeys(FILES, 1)  # from the hub, not the old record
    assert any("no listing of the revision in the record" in line for line in fresh["log"])
