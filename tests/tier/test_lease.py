"""The shared tier's lease: real processes holding it, beating, dying with ``kill -9``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from cacheroot.fetch._lease import Lease, lease_path

from .fleet import wait_for

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

import pytest

HOLDER = """
import sys
from cacheroot.fetch._lease import Lease
lease = Lease(sys.argv[1], beat=float(sys.argv[2]))
print(lease.acquire(), flush=True)
sys.stdin.read()
lease.release()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Another process that holds the lease, beating every 50 ms until its stdin closes."""
    path = lease_path(str(tmp_path / "entry.bin"))
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, path, "0.05"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    yield path, proc
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    proc.wait()
    proc.stdout.close()


def test_a_live_holder_is_waited_for(holder: tuple[str, subprocess.Popen[str]]) -> None:
    path, _proc = holder
    waiter = Lease(path, stale_after=0.5)
    assert waiter.acquire(timeout=1.5) == "timeout"  # three times the staleness: still beating
    assert waiter.taken_over == 0


def test_a_waiter_stops_when_the_work_is_done(holder: tuple[str, subprocess.Popen[str]]) -> None:
    path, _proc = holder
    done = threading.Event()
    threading.Timer(0.2, done.set).start()
    assert Lease(path, stale_after=30.0).acquire(done=done.is_set, timeout=30.0) == "done"


def test_a_released_lease_is_taken_at_once(holder: tuple[str, subprocess.Popen[str]]) -> None:
    path, proc = holder
    waiter = Lease(path, stale_after=30.0)
    threading.Timer(0.2, lambda: proc.stdin.close() if proc.stdin else None).start()
    assert waiter.acquire(timeout=10.0) == "held"
    assert waiter.taken_over == 0
    waiter.release()


def test_a_killed_holder_is_taken_over(holder: tuple[str, subprocess.Popen[str]]) -> None:
    path, proc = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    waiter = Lease(path, stale_after=0.3, beat=0.05)
    assert waiter.acquire(timeout=10.0) == "held"
    assert waiter.taken_over == 1
    with open(path, encoding="utf-8") as f:
        assert json.load(f)["token"] == waiter.token
    waiter.release()
    assert not os.path.lexists(path)  # released: gone


def test_a_holder_taken_over_knows_it_and_leaves_the_new_lease(tmp_path: Path) -> None:
    path = lease_path(str(tmp_path / "entry.bin"))
    first = Lease(path, beat=0.05)
    assert first.acquire() == "held"
    other = {"token": "another-host", "beat": 1}
    with open(path, "w", encoding="utf-8") as f:  # what a takeover leaves there
        json.dump(other, f)
    wait_for(lambda: first.lost, what="the holder's next beat to notice")
    first.release()
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == other


def test_a_directory_planted_as_the_lease_is_waited_out_not_spun_on(tmp_path: Path) -> None:
    path = lease_path(str(tmp_path / "entry"))
    os.mkdir(path)
    assert Lease(path, stale_after=30.0).acquire(timeout=0.3) == "timeout"
    # Watched as a lease that never changes: moved aside once stale, then the lease is ours.
    waiter = Lease(path, stale_after=0.2)
    assert waiter.acquire(timeout=10.0) == "held"
    assert waiter.taken_over == 1
    waiter.release()
    assert not os.path.lexists(path)


def test_a_hard_link_planted_as_the_lease_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only\n")
    os.utime(secret, (1_000_000, 1_000_000))
    path = lease_path(str(tmp_path / "entry"))
    os.link(secret, path)
    waiter = Lease(path, stale_after=0.2)
    assert waiter.acquire(timeout=10.0) == "held"
    waiter.release()
    st = os.stat(secret)
    assert (st.st_atime, st.st_nlink, secret.read_bytes()) == (1_000_000, 1, b"root only\n")


def test_the_lease_stays_in_the_directory_it_was_made_for(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lease = Lease(lease_path(str(d / "entry")), beat=0.05)
    moved = tmp_path / "moved"
    d.rename(moved)
    d.symlink_to(elsewhere)  # the lease's path now leads into ``elsewhere``
    assert lease.acquire(timeout=10.0) == "held"
    assert sorted(os.listdir(moved)) == [".entry.lease"]
    assert os.listdir(elsewhere) == []
    record = moved / ".entry.lease"
    wait_for(lambda: json.loads(record.read_bytes())["beat"] >= 3, what="two beats in moved/")
    assert json.loads(record.read_bytes())["token"] == lease.token
    assert sorted(os.listdir(moved)) == [".entry.lease"]
    assert os.listdir(elsewhere) == []
    lease.release()
    assert os.listdir(moved) == []
    assert os.listdir(elsewhere) == []
    assert os.readlink(d) == str(elsewhere)
