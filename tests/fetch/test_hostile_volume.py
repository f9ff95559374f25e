"""A volume another job prepared: planted links, FIFOs and devices under cacheroot's own names.

Every test plants the attack for real (``os.symlink``, ``os.mkfifo``, ``/dev/zero``) where a job
that can write the volume would, then runs the fetch that a later job runs, and checks that
nothing outside the cache was created or written, nothing was read through a link, and nothing
hung. A call that could hang runs on a helper thread with a bound (:func:`promptly`); a FIFO it
is stuck on is opened for writing afterwards, so a failing test ends instead of hanging.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE
from cacheroot.fetch import CacheMissError, DownloadError, Fetcher, LockTimeout, _proc, _used
from cacheroot.fetch._lease import Lease
from cacheroot.fetch._lock import PathLock
from cacheroot.fetch._store import meta_path
from cacheroot.fetch._used import used_path
from cacheroot.fetch.store import lock_path

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from collections.abc import Callable

#: How long a call that must not hang may take (seconds): generous for a loaded machine.
BOUND = 15.0


def promptly(call: Callable[[], Any], *fifos: Path, bound: float = BOUND) -> Any:
    """``call()``'s result, or a failure if it is still running after ``bound`` seconds."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    if t.is_alive():
        for fifo in fifos:  # let a reader blocked on it go, so the process can end
            if fifo.exists() and stat.S_ISFIFO(os.lstat(fifo).st_mode):
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
        pytest.fail(f"still running after {bound:g} s: it hangs on a planted file")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def dead_pid() -> int:
    """The pid of a process of this machine that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def planted_partial(dest: Path) -> Path:
    """The name of an abandoned partial of ``dest``: a dead writer of this machine."""
    return dest.parent / f".{dest.name}.{_proc.machine_tag()}-{dead_pid()}.0badcafe.partial"


def test_a_partial_planted_as_a_link_is_removed_not_written_through(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/ok/{name}")
    data = body(name)
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    victim = tmp_path / "victim.conf"
    victim.write_bytes(b"precious\n")
    link = planted_partial(dest)
    link.symlink_to(victim)
    path = fetcher.fetch(url, sha256=sha256(data))
    assert victim.read_bytes() == b"precious\n"  # not truncated, not overwritten
    assert not os.path.islink(path)
    assert path.read_bytes() == data
    assert not os.path.lexists(link)


def test_a_partial_planted_as_a_link_to_dev_zero_does_not_hang(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    link = planted_partial(dest)
    link.symlink_to("/dev/zero")
    path = promptly(lambda: fetcher.fetch(url))
    assert path.read_bytes() == body(name)
    assert not os.path.lexists(link)


def test_a_partial_planted_as_a_fifo_does_not_hang(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    data = body(name)
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    fifo = planted_partial(dest)
    os.mkfifo(fifo)
    path = promptly(lambda: fetcher.fetch(url, sha256=sha256(data)), fifo)
    assert path.read_bytes() == data
    assert not os.path.lexists(fifo)


def test_a_dangling_used_link_creates_nothing_elsewhere(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    record = Path(used_path(str(path)))
    record.unlink()
    elsewhere = tmp_path / "cron.d" / "planted"
    elsewhere.parent.mkdir()
    record.symlink_to(elsewhere)
    _used.forget(str(path))  # as a fresh process would: nothing remembered
    assert Fetcher().fetch(url) == path
    assert not os.path.lexists(elsewhere)
    assert stat.S_ISREG(os.lstat(record).st_mode)  # replaced by a record of our own


def test_a_used_link_to_a_file_does_not_touch_it(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    target = tmp_path / "old"
    target.write_bytes(b"")
    os.utime(target, (1_000_000_000, 1_000_000_000))
    record = Path(used_path(str(path)))
    record.unlink()
    record.symlink_to(target)
    _used.forget(str(path))
    Fetcher().fetch(url)
    assert target.stat().st_mtime == 1_000_000_000


@pytest.mark.parametrize("pinned", [True, False])
def test_an_entry_planted_as_a_fifo_is_replaced_promptly(
    origin: Origin, fetcher: Fetcher, name: str, pinned: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    data = body(name)
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    os.mkfifo(dest)
    digest = sha256(data) if pinned else None
    path = promptly(lambda: fetcher.fetch(url, sha256=digest), dest)
    assert stat.S_ISREG(os.lstat(path).st_mode)
    assert path.read_bytes() == data


def test_an_entry_linked_to_dev_zero_is_not_read(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    data = body(name)
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    dest.symlink_to("/dev/zero")
    path = promptly(lambda: fetcher.fetch(url, sha256=sha256(data)))
    assert not os.path.islink(path)
    assert path.read_bytes() == data


def test_an_entry_linked_to_a_private_file_never_shows_its_digest(
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    tmp_path: Path,
    *,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$salt$hash:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    private_digest = "f7639832e4745a4b79e4b894644155d285eec2f85f0310c9e804e508588fe33b"
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    dest.symlink_to(secret)
    monkeypatch.setenv(CACHEROOT_OFFLINE, "1")
    with pytest.raises(CacheMissError) as info:
        Fetcher().fetch(url, sha256=digest)
    message = str(info.value)
    assert f"{dest} is a symbolic link, not a cached file: refused, not followed" in message
    assert private_digest not in message
    assert private_digest not in caplog.text


def test_a_record_planted_as_a_fifo_does_not_hang(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/ok/{name}")
    data = body(name)
    path = fetcher.fetch(url, sha256=sha256(data))
    record = Path(meta_path(str(path)))
    record.unlink()
    os.mkfifo(record)
    assert promptly(lambda: Fetcher().fetch(url, sha256=sha256(data)), record) == path
    assert stat.S_ISREG(os.lstat(record).st_mode)  # renewed by a record of our own


def test_a_lease_planted_as_a_fifo_is_removed_promptly(tmp_path: Path) -> None:
    fifo = tmp_path / ".entry.bin.lease"
    os.mkfifo(fifo)
    lease = Lease(str(fifo), stale_after=60.0)
    assert promptly(lambda: lease.acquire(timeout=2.0), fifo) == "held"
    lease.release()
    assert not os.path.lexists(fifo)


def test_a_lease_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    link = tmp_path / ".entry.bin.lease"
    link.symlink_to(victim)
    lease = Lease(str(link), stale_after=60.0)
    assert promptly(lambda: lease.acquire(timeout=2.0)) == "held"
    lease.release()
    assert victim.read_bytes() == b"precious\n"


def test_a_holder_record_planted_as_a_fifo_keeps_the_lock_timeout(tmp_path: Path) -> None:
    path = str(tmp_path / ".entry.bin.lock")
    first = PathLock(path, timeout=5.0)
    assert first.acquire()
    holder = Path(path + ".holder")
    holder.unlink()
    os.mkfifo(holder)
    waiter = PathLock(path, timeout=1.0)
    try:
        with pytest.raises(LockTimeout, match="waited 1 s for the lock"):
            promptly(waiter.acquire, holder)
    finally:
        first.release()


def test_a_lock_file_planted_as_a_link_is_not_truncated(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/ok/{name}")
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    Path(lock_path(str(dest))).symlink_to(victim)
    assert fetcher.fetch(url).read_bytes() == body(name)
    assert victim.read_bytes() == b"precious\n"


def test_a_namespace_planted_as_a_link_is_not_written_through(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    url = origin.url(f"/ok/{name}")
    dest = fetcher.path(url)
    elsewhere = tmp_path / "cron.d"
    elsewhere.mkdir()
    dest.parent.parent.mkdir(parents=True, exist_ok=True)
    dest.parent.symlink_to(elsewhere)
    with pytest.raises(DownloadError, match=r"is a symbolic link, to .*: cacheroot does not write"):
        fetcher.fetch(url)
    assert sorted(os.listdir(elsewhere)) == []
