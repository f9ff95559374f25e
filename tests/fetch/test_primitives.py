"""The building blocks: errors, the lock and atomic publishing."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import CacheMissError, ChecksumError, DownloadError, FetchError, LockTimeout
from cacheroot.fetch.store import (
    Partial,
    PathLock,
    atomic_write,
    current_meta,
    holder,
    partials,
    publish_dir,
    read_meta,
    remove_abandoned,
    sha256_file,
    staged_dir,
)

if TYPE_CHECKING:
    from pathlib import Path

ERRORS = [
    (ChecksumError("http://h/x", "aa", "bb", 3), ValueError),
    (ChecksumError("http://h/x", "aa", "bb", 3, cached="/c/x"), ValueError),
    (CacheMissError("http://h/x", "/c/x"), FileNotFoundError),
    (DownloadError("http://h/x", "gone", status=503), OSError),
    (DownloadError("http://h/x", "disk full", err=28), OSError),
    (LockTimeout("/c/.x.lock", 1.5, "pid 1 on h"), TimeoutError),
]


@pytest.mark.parametrize(("exc", "builtin"), ERRORS)
def test_errors_are_builtins_and_pickle(exc: FetchError, builtin: type[Exception]) -> None:
    assert isinstance(exc, FetchError)
    assert isinstance(exc, builtin)
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.__reduce__() == exc.__reduce__()


def test_error_messages_name_what_matters() -> None:
    c = ChecksumError("http://h/x", "aa", "bb", 3)
    assert (c.url, c.expected, c.actual, c.size) == ("http://h/x", "aa", "bb", 3)
    assert "aa" in str(c)
    assert "bb" in str(c)
    m = CacheMissError("http://h/x", "/c/x")
    assert "cacheroot fetch http://h/x" in str(m)
    assert "/c/x" in str(m)
    d = DownloadError("http://h/x", "disk full", err=28)
    assert d.errno == 28
    assert d.status is None
    assert DownloadError("u", "m", status=503).status == 503


def test_a_miss_keeps_what_the_fetch_asked_for_through_pickling() -> None:
    """The plugin spells the manifest entry from these, also for a miss raised in an xdist
    worker."""
    sha = "ab" * 32
    miss = CacheMissError(
        "https://u:p@h/x.bin", "/c/gsm8k/x.bin", sha256=sha, namespace="gsm8k", filename="x.bin"
    )
    assert str(miss) == (
        "offline and https://u:***@h/x.bin is not cached at /c/gsm8k/x.bin: warm it first with "
        "`cacheroot fetch https://u:***@h/x.bin --namespace gsm8k --filename x.bin` "
        "(or `cacheroot warm MANIFEST`)"
    )
    back = pickle.loads(pickle.dumps(miss))  # noqa: S301 - our own bytes
    assert (back.sha256, back.namespace, back.filename) == (sha, "gsm8k", "x.bin")
    assert str(back) == str(miss)


def test_lock_excludes_and_times_out(tmp_path: Path) -> None:
    path = str(tmp_path / "e.lock")
    with PathLock(path) as first:
        rec = holder(path)
        assert rec is not None
        assert rec["pid"] == os.getpid()
        second = PathLock(path, timeout=0.2)
        with pytest.raises(LockTimeout, match="held by pid") as info:
            second.acquire()
        assert info.value.timeout == 0.2
        assert first.held
    assert holder(path) is None
    with PathLock(path, timeout=0.2) as again:
        assert again.waited < 0.2


def test_dead_holder_is_reclaimed(tmp_path: Path) -> None:
    """A lock kept by a descriptor leaked into an orphan is broken once its holder is dead."""
    path = str(tmp_path / "e.lock")
    ready = tmp_path / "ready"
    # The holder takes the lock, then starts a child that inherits the lock's descriptor and
    # outlives it: the kernel keeps the lock, only the holder record shows it is stale.
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from cacheroot.fetch.store import PathLock
        lock = PathLock({path!r}); lock.acquire()
        fd = lock._lock.fd  # the flock the kernel keeps while any copy of it is open
        os.set_inheritable(fd, True)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 pass_fds=(fd,))
        open({str(ready)!r}, "w").close()
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    orphan = int(proc.stdout.readline())
    try:
        assert ready.exists()
        with pytest.raises(LockTimeout):
            PathLock(path, timeout=0.2).acquire()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lock = PathLock(path, timeout=5)
        lock.acquire()
        assert lock.waited < 5
        lock.release()
    finally:
        os.kill(orphan, signal.SIGKILL)
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_partial_commit_and_meta(tmp_path: Path) -> None:
    dest = str(tmp_path / "entry.bin")
    part = Partial(dest)
    assert partials(dest) == [part.path]
    part.write(b"hello ")
    part.write(memoryview(b"world"))
    meta = part.commit({"url": "http://h/entry.bin"})
    assert (tmp_path / "entry.bin").read_bytes() == b"hello world"
    assert meta["sha256"] == sha256_file(dest)[0]
    assert read_meta(dest) == json.loads(json.dumps(meta))
    assert current_meta(dest) is not None
    assert partials(dest) == []
    # Any change to the file (new inode, size or mtime) makes the record stale.
    atomic_write(str(tmp_path / "other"), b"x")
    os.replace(tmp_path / "other", dest)
    assert current_meta(dest) is None


def test_adopt_abandoned_partial(tmp_path: Path) -> None:
    dest = str(tmp_path / "entry.bin")
    code = (
        f"from cacheroot.fetch.store import Partial; p = Partial({dest!r}); p.write(b'abc'); "
        "print(p.path)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    left = out.stdout.strip()
    assert partials(dest) == [left]
    part = Partial.adopt(dest, stale_after=3600)
    assert part is not None
    assert part.size == 3
    part.write(b"def")
    part.commit()
    assert (tmp_path / "entry.bin").read_bytes() == b"abcdef"
    assert Partial.adopt(dest) is None
    live = Partial(dest)
    assert Partial.adopt(dest) is None  # a live writer's partial is never taken
    assert remove_abandoned(str(tmp_path)) == []
    live.discard()
    assert partials(dest) == []


def test_staged_dir_first_publisher_wins(tmp_path: Path) -> None:
    dest = str(tmp_path / "tree")
    with staged_dir(dest) as first:
        (tmp_path / first.path / "a").write_text("1")
    assert first.published is True
    with staged_dir(dest) as second:
        (tmp_path / second.path / "a").write_text("2")
    assert second.published is False
    assert (tmp_path / "tree" / "a").read_text() == "1"
    with staged_dir(dest, replace=True) as third:
        (tmp_path / third.path / "a").write_text("3")
    assert third.published is True
    assert (tmp_path / "tree" / "a").read_text() == "3"

    def build_and_fail() -> None:
        with staged_dir(str(tmp_path / "never")) as broken:
            (tmp_path / broken.path / "a").write_text("x")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        build_and_fail()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]
    assert publish_dir(str(tmp_path / "tree"), str(tmp_path / "moved"), sync=False)


def test_hasher_overlaps_and_copies_reused_buffers() -> None:
    import hashlib
    import random

    from cacheroot.fetch._store import Hasher

    data = random.Random(7).randbytes(Hasher.THRESHOLD + (3 << 20) + 17)  # noqa: S311
    h = Hasher()
    buf = bytearray(1 << 20)
    for i in range(0, len(data), len(buf)):
        piece = data[i : i + len(buf)]
        buf[: len(piece)] = piece
        h.update(memoryview(buf)[: len(piece)])  # the caller reuses its buffer at once
    states = [h.threaded]  # past the threshold the helper thread hashes
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    states.append(h.threaded)
    assert states == [True, False]
    h.close()


def test_wait_ends_when_the_work_is_done(tmp_path: Path) -> None:
    path = str(tmp_path / "e.lock")
    calls: list[int] = []

    def done() -> bool:
        calls.append(1)
        return len(calls) >= 3

    with PathLock(path):
        other = PathLock(path, timeout=5.0)
        assert other.acquire(done=done) is False
        assert not other.held
        assert len(calls) == 3
    assert other.acquire(done=done) is True
    other.release()


def test_write_behind_flushes_while_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib
    import threading

    from cacheroot.fetch import _store

    monkeypatch.setattr(_store, "FLUSH_EVERY", 1 << 20)
    started: list[str] = []
    real = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        started.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", spy)
    dest = str(tmp_path / "big")
    part = Partial(dest)
    block = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(5):
        part.write(block)
    meta = part.commit()
    assert "cacheroot-flush" in started
    assert meta["sha256"] == hashlib.sha256(block * 5).hexdigest()
    assert (tmp_path / "big").read_bytes() == block * 5
