"""A wrong file planted on the shared tier under the right name: healed by a writer, never
routed around forever.

The shared tier (``CACHEROOT_SHARED``) holds an entry whose record names the URL and its sha256,
but whose bytes are other bytes (a file planted under the entry's name, or damaged there). A
host whose trust tier is ``rw`` reports it once, fetches the file from the origin, verifies it,
and replaces the planted copy with its own (a new name in that directory, then a rename over
it), so the next host is served by the shared tier again. A host on ``ro`` reports it once and
writes nothing there.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    TABLE,
    resolve,
)
from cacheroot.fetch import Fetcher
from cacheroot.fetch._store import meta_path

from .origin import Origin, body, sha256

#: What the report of a shared copy whose bytes fail their record says.
MISMATCH = "on the shared tier does not match its record"


def _become_host(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process another host of the fleet: its own root, the same shared tier."""
    for each in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        monkeypatch.delenv(each, raising=False)
    monkeypatch.setenv(CACHEROOT, str(root))
    for each, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(each, value)


@pytest.fixture
def l2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared tier for this test's hosts, written by them (``rw``)."""
    shared = tmp_path / "l2"
    shared.mkdir()
    monkeypatch.setenv(CACHEROOT_SHARED, str(shared))
    monkeypatch.delenv(CACHEROOT_SHARED_MODE, raising=False)
    return shared


def _planted(origin: Origin, name: str, l2: Path) -> tuple[str, Path, bytes]:
    """Fetch ``name`` once (written through), then replace its shared copy's bytes with others
    of the same size, its record left as it was: ``(url, shared copy, the planted bytes)``."""
    url = origin.url(f"/ok/{name}")
    local = Fetcher().fetch(url, sha256=sha256(body(name)))
    copy = l2 / os.path.relpath(local, os.environ[CACHEROOT])
    assert copy.read_bytes() == body(name)  # written through
    planted = bytes(len(body(name)))
    aside = copy.with_name("planted.tmp")
    aside.write_bytes(planted)
    aside.replace(copy)
    assert origin.gets[f"/ok/{name}"] == 1
    return url, copy, planted


def _reports(caplog: pytest.LogCaptureFixture) -> int:
    return sum(MISMATCH in r.getMessage() for r in caplog.records)


def test_a_writer_replaces_a_planted_shared_copy_with_its_verified_one(
    origin: Origin,
    name: str,
    l2: Path,
    tmp_path: Path,
    *,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, copy, _ = _planted(origin, name, l2)
    record = json.loads(Path(meta_path(str(copy))).read_text())
    _become_host(tmp_path / "second", monkeypatch)
    caplog.set_level(logging.INFO, logger="cacheroot.fetch")

    path = Fetcher().fetch(url)

    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2  # the planted copy was not served
    assert _reports(caplog) == 1
    assert copy.read_bytes() == body(name)  # healed
    healed = json.loads(Path(meta_path(str(copy))).read_text())
    assert healed["sha256"] == sha256(body(name))
    assert healed["url"] == record["url"]
    assert sorted(p.name for p in copy.parent.iterdir() if ".partial" in p.name) == []
    # The next host is served by the shared tier again.
    _become_host(tmp_path / "third", monkeypatch)
    assert Fetcher().fetch(url).read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2


def test_a_reader_reports_a_planted_shared_copy_once_and_writes_nothing(
    origin: Origin,
    name: str,
    l2: Path,
    tmp_path: Path,
    *,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, copy, planted = _planted(origin, name, l2)
    before = os.lstat(copy)
    record = Path(meta_path(str(copy))).read_bytes()
    listing = sorted(os.listdir(copy.parent))
    _become_host(tmp_path / "untrusted", monkeypatch)
    monkeypatch.setenv(CACHEROOT_SHARED_MODE, "ro")
    caplog.set_level(logging.INFO, logger="cacheroot.fetch")

    path = Fetcher().fetch(url)
    path.unlink()  # evicted here: the next fetch looks at the shared tier again
    again = Fetcher().fetch(url)

    assert again.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 3
    assert _reports(caplog) == 1  # once, not at every look
    assert copy.read_bytes() == planted  # nothing written there
    assert os.path.samestat(os.lstat(copy), before)
    assert Path(meta_path(str(copy))).read_bytes() == record
    assert sorted(os.listdir(copy.parent)) == listing
