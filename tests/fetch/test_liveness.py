"""A live lock holder that the waiter cannot see is waited for, never taken for dead.

Two ways a live process disappears from a waiter's ``/proc``, each built for real:

- ``/proc`` mounted with ``hidepid=2`` and two users: the waiter (uid B) sees no
  ``/proc/<pid>`` of the holder (uid A). Needs root (a private mount namespace, two uids).
- ``unshare --pid --fork`` without ``--mount-proc``: both run in a new pid namespace but
  ``/proc`` is still the parent namespace's, where the holder's pid names another process or
  none. Root, or user namespaces.

In each, a driver inside the namespace starts the waiter, then the holder (in the pid namespace
on a pid that the outer ``/proc`` does not show, so a waiter that believed ``/proc`` would
conclude "dead"), lets the holder take the lock and start a slow download, then lets the waiter
in. The waiter must wait for the download: exactly one GET, the holder's download published,
the waiter served from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher
from cacheroot.fetch.store import partials, read_meta

from .origin import Origin, body, sha256, wait_until
from .test_multiuser import (
    FETCH,
    PREAMBLE,
    UID_A,
    UID_B,
    line,
    member,
    run_as,
    said,
    shared_volume,
    tell,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: Size and rate of the holder's download: about 2.7 s, while a waiter that took the holder for
#: dead would break its lock after about 1 s (two checks half a second apart).
SIZE, RATE = 1 << 20, 384 << 10

#: Take the lock of ``args["url"]``'s entry and keep it until told (or killed).
LOCK = """
dest = str(fetcher().path(args["url"]))
os.makedirs(os.path.dirname(dest), exist_ok=True)
say(ready=True)
sys.stdin.readline()
lock = PathLock(lock_path(dest))
lock.acquire()
sys.stdin.readline()
"""

#: Runs inside the namespace: the waiter, then the holder, each behind a gate; the holder goes
#: first and the waiter is let in once the holder's lock record exists. Prints one JSON line.
DRIVER = """
import json, os, subprocess, sys, time
spec = json.loads(sys.argv[1])
os.environ["_VLLM_TEST_CACHE"] = spec["cache"]
from cacheroot.fetch import Fetcher
from cacheroot.fetch.store import lock_path
record = lock_path(str(Fetcher().path(spec["url"]))) + ".holder"

def start(who, code, args):
    return subprocess.Popen(
        [sys.executable, "-c", spec["preamble"] + code, json.dumps(who), spec["cache"],
         json.dumps(args)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def ready(proc):
    line = proc.stdout.readline()
    assert json.loads(line or "null") == {"ready": True}, proc.stderr.read()

def tell(proc):
    proc.stdin.write("go\\n")
    proc.stdin.flush()

def result(proc):
    out, err = proc.communicate(timeout=60)
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"exit": proc.returncode, "stderr": err}

waiter = start(spec["waiter"], spec["fetch"], {**spec["waiter_args"], "gate": True})
ready(waiter)
if spec["bump"]:
    # The holder gets the next pid: make it one that /proc here does not show.
    while True:
        spare = subprocess.Popen(["true"])
        spare.wait()
        if not os.path.exists(f"/proc/{spare.pid + 1}"):
            break
holder = start(spec["holder"], spec["holder_code"], {"url": spec["url"], "gate": True})
ready(holder)
tell(holder)
deadline = time.monotonic() + 20
while not os.path.exists(record) and time.monotonic() < deadline:
    time.sleep(0.01)
assert os.path.exists(record), "the holder never took the lock"
tell(waiter)
report = {"waiter": result(waiter), "holder_pid": holder.pid}
report["proc_shows_holder_pid"] = os.path.exists(f"/proc/{holder.pid}")
if spec["holder_code"] == spec["fetch"]:
    report["holder"] = result(holder)
else:
    holder.kill()
    holder.communicate()
print(json.dumps(report))
"""


@pytest.fixture
def volume() -> Iterator[Path]:
    """A directory shared by the group of :data:`UID_A` and :data:`UID_B` (root only)."""
    with shared_volume() as vol:
        yield vol


def _drive(
    prefix: list[str],
    origin: Origin,
    name: str,
    cache: Path,
    *,
    holder: dict[str, object] | None = None,
    waiter: dict[str, object] | None = None,
    bump: bool = False,
    hold_only: bool = False,
    lock_timeout: float = 30.0,
) -> dict[str, Any]:
    url = origin.url(f"/slow/{name}?size={SIZE}&rate={RATE}")
    spec = {
        "url": url,
        "cache": str(cache),
        "preamble": PREAMBLE,
        "fetch": FETCH,
        "holder_code": LOCK if hold_only else FETCH,
        "holder": holder,
        "waiter": waiter,
        "waiter_args": {"url": url, "lock_timeout": lock_timeout},
        "bump": bump,
    }
    out = subprocess.run(
        [*prefix, sys.executable, "-c", DRIVER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def _single_flight(report: dict[str, Any], origin: Origin, name: str) -> None:
    """One GET; the holder published it; the waiter waited for it and was served from it."""
    holder, waiter = report["holder"], report["waiter"]
    assert isinstance(holder, dict)
    assert isinstance(waiter, dict)
    assert "error" not in holder, holder
    assert "error" not in waiter, waiter
    assert holder["stats"]["downloads"] == 1
    assert waiter["stats"]["downloads"] == 0  # the lock was never broken
    assert waiter["stats"]["lock_wait_seconds"] > 1.5  # it waited for the whole download
    assert waiter["path"] == holder["path"]
    assert origin.gets[f"/slow/{name}"] == 1
    with open(str(holder["path"]), "rb") as f:
        assert sha256(f.read()) == sha256(body(name, SIZE))


def _unshare_pid() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot make a pid namespace")
    for cmd in (["unshare", "--pid", "--fork"], ["unshare", "-r", "--pid", "--fork"]):
        if subprocess.run([*cmd, "true"], capture_output=True, check=False).returncode == 0:
            return cmd
    pytest.skip("pid namespaces are not permitted here (needs root or user namespaces)")


def test_pid_namespace_without_its_own_proc(origin: Origin, name: str, tmp_path: Path) -> None:
    report = _drive(_unshare_pid(), origin, name, tmp_path / "cache", bump=True)
    assert report["proc_shows_holder_pid"] is False  # to a believer in /proc, the holder is dead
    _single_flight(report, origin, name)


def test_unknown_holder_is_waited_for_until_the_timeout_that_names_it(
    origin: Origin, name: str, tmp_path: Path
) -> None:
    report = _drive(
        _unshare_pid(),
        origin,
        name,
        tmp_path / "cache",
        bump=True,
        hold_only=True,
        lock_timeout=1.5,
    )
    assert report["proc_shows_holder_pid"] is False
    waiter = report["waiter"]
    assert isinstance(waiter, dict)
    assert waiter.get("error") == "LockTimeout", waiter
    message = str(waiter["message"])
    assert f"held by pid {report['holder_pid']} " in message
    assert "another pid namespace" in message  # why it could not be judged
    assert waiter["stats"]["downloads"] == 0
    assert origin.gets[f"/slow/{name}"] == 0


def test_hidepid_proc_with_two_users(origin: Origin, name: str, volume: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot mount a private /proc")
    mount = "mount -t proc -o hidepid=2 proc /proc"
    probe = ["unshare", "--mount", "--fork", "sh", "-c", mount]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a procfs with hidepid=2 in a private mount namespace")
    prefix = ["unshare", "--mount", "--fork", "sh", "-c", f'{mount} && exec "$0" "$@"']
    report = _drive(
        prefix, origin, name, volume / "cache", holder=member(UID_A), waiter=member(UID_B)
    )
    _single_flight(report, origin, name)


def test_a_holder_whose_partial_was_removed_says_so(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process deletes the partial mid-download: the error says so, not "free space"."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
    url = origin.url(f"/slow/{name}?size={SIZE}&rate={RATE}")
    dest = str(Fetcher().path(url))
    holder = run_as(None, cache, FETCH, {"url": url, "gate": True})
    assert json.loads(line(holder)) == {"ready": True}
    tell(holder)
    assert wait_until(lambda: partials(dest))
    for path in partials(dest):
        os.unlink(path)
    report = said(holder)
    assert report.get("error") == "DownloadError", report
    assert "removed by another process" in report["message"]
    assert "free space" not in report["message"]
    assert not os.path.exists(dest)
    assert read_meta(dest) is None  # no record of bytes that were never published


def test_a_holder_record_is_judged_by_pid_start_time_and_machine() -> None:
    """Dead: its pid runs nothing, or runs a process that started at another time (pid reuse).
    Unknown: another machine (host or boot) or another pid namespace."""
    from cacheroot.fetch import _proc

    if _proc.blind_spot():
        pytest.skip(f"this process cannot see its whole pid space: {_proc.blind_spot()}")
    host, boot, pidns = _proc.machine().split("|")
    me = _proc.me()
    assert _proc.alive(me) is True
    reused = {**me, "start": int(str(me["start"])) - 1}
    assert _proc.alive(reused) is False
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    exited = {"pid": int(child.stdout), "machine": _proc.machine(), "start": 1}
    assert _proc.alive(exited) is False
    elsewhere = {**me, "machine": f"{host}-other|{boot}|{pidns}"}
    assert _proc.alive(elsewhere) is None
    assert _proc.unknown_reason(elsewhere) == "it runs on another machine (or before a reboot)"
    rebooted = {**me, "machine": f"{host}|00000000-0000-0000-0000-000000000000|{pidns}"}
    assert _proc.alive(rebooted) is None
    other_ns = {**me, "machine": f"{host}|{boot}|pid:[1]"}
    assert _proc.alive(other_ns) is None
    assert _proc.unknown_reason(other_ns) == "it runs in another pid namespace"
