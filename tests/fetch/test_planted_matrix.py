"""The planted-object matrix: every reader and writer of the test cache, against every kind of
object a writer of the volume can plant, at every path component from the root to the entry.

Each case plants one object (a link to a directory or to a root-only file outside the volume, a
hard link to that file, a FIFO, a socket, a character device that never ends, a directory where
a file belongs, a file where a directory belongs, a sparse giant) at one component, then runs
one operation (a fetch that misses, a fetch that hits, ``cache ls``, ``cache verify``,
``cache prune``) in this process, and checks:

- nothing outside the volume was read, listed, written, chmod-ed or removed (every name there,
  with its access, change and modification times, is as before);
- the operation ended within its time (a FIFO or a device read would block or never end);
- a fetch either returned a regular file holding the origin's bytes, or raised cacheroot's own
  :class:`~cacheroot.fetch.FetchError`; the upkeep commands raised nothing;
- with a sparse giant, at most a few MiB were allocated while the operation ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher, FetchError
from cacheroot.fetch._upkeep.cache import disk_usage as du
from cacheroot.fetch._upkeep.cache import entries, prune, verify
from cacheroot.fetch.store import lock_path

from .origin import body

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .origin import Origin

NAMESPACE = "ns"
#: Old enough that a read (relatime) or any listing stamps a new access time.
LONG_AGO = time.time() - 40 * 86400
#: A sparse giant: no disk, but reading it whole would take this much memory.
GIANT = 2 << 30
#: Allocated while one operation runs, at most (a record is a few hundred bytes).
MEMORY_BOUND = 16 << 20
#: How long one operation may take before it counts as hung.
HANG = 20

#: The components from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "entry": False,
    "record": False,
    "lock": False,
    "used": False,
}
DIR_KINDS = ("link-dir", "link-file", "fifo", "socket", "device", "file")
FILE_KINDS = ("link-dir", "link-file", "hardlink", "fifo", "socket", "device", "dir", "sparse")
OPERATIONS = ("fetch-miss", "fetch-hit", "ls", "verify", "prune")


def _cases() -> Iterator[Any]:
    for op in OPERATIONS:
        for component, is_dir in COMPONENTS.items():
            for kind in DIR_KINDS if is_dir else FILE_KINDS:
                yield pytest.param(op, component, kind, id=f"{op}-{component}-{kind}")


def _outside(top: Path) -> Path:
    """A root-only directory outside the volume with a secret file and a subdirectory."""
    top.mkdir(mode=0o700)
    (top / "keep").mkdir()
    (top / "keep" / "old.bin").write_bytes(b"old" * 100)
    (top / "secret").write_bytes(b"root-only secret\n")
    os.chmod(top / "secret", 0o600)
    for path in (top / "keep" / "old.bin", top / "secret", top / "keep", top):
        os.utime(path, (LONG_AGO, LONG_AGO))
    return top


def _state(top: Path, *, names_counted: bool = True) -> dict[str, tuple[int, ...]]:
    """Every name under ``top`` with its mode, owner, size, access and modification times, and
    (``names_counted``) its link count and change time (``lstat`` only: taking the state must
    not change it, so no listing of ``top``'s directories).

    A hard link planted in the volume is the volume's name: removing or replacing it lowers
    the file's link count and stamps its change time, and that is allowed; reading, writing,
    chmod-ing or chown-ing the file is not.
    """
    names = ["", "keep", "keep/old.bin", "secret"]
    out: dict[str, tuple[int, ...]] = {}
    for rel in names:
        st = os.lstat(top / rel if rel else top)
        out[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_atime_ns, st.st_mtime_ns)
        if names_counted:
            out[rel] += (st.st_nlink, st.st_ctime_ns)
    return out


def _socket_at(path: Path) -> None:
    """A listening UNIX socket bound at ``path`` (through its held directory: a socket path
    is limited to 108 bytes)."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(f"/proc/self/fd/{fd}/{path.name}")
        s.close()  # the socket file stays
    finally:
        os.close(fd)


def plant(path: Path, kind: str, outside: Path) -> None:
    """Replace whatever is at ``path`` with an object of ``kind``."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        path.rename(path.with_name(path.name + ".aside"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-dir":
        path.symlink_to(outside / "keep")
    elif kind == "link-file":
        path.symlink_to(outside / "secret")
    elif kind == "hardlink":
        os.link(outside / "secret", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        _socket_at(path)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero: never ends
    elif kind == "dir":
        path.mkdir()
    elif kind == "file":
        path.write_bytes(b"a file where a directory belongs")
    elif kind == "sparse":
        with path.open("wb") as f:
            f.truncate(GIANT)
    else:  # pragma: no cover - the parameters name the kinds above
        raise AssertionError(kind)
    # The planted object is settled: old enough for prune's and the lock's grace.
    os.utime(path, (LONG_AGO, LONG_AGO), follow_symlinks=False)


@contextlib.contextmanager
def _bounded(*, memory: bool) -> Iterator[list[int]]:
    """Fail the operation after :data:`HANG` seconds (a blocked open or read is interrupted);
    with ``memory``, trace allocations and yield their peak afterwards."""

    def hung(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"still running after {HANG} s: hung")

    peak: list[int] = []
    old = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, HANG)
    if memory:
        tracemalloc.start()
    try:
        yield peak
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if memory:
            peak.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()


def _position(cache: Path, dest: Path, component: str) -> Path:
    return {
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": cache / NAMESPACE,
        "entry": dest,
        "record": dest.with_name(f".{dest.name}.meta.json"),
        "lock": Path(lock_path(str(dest))),
        "used": dest.with_name(f".{dest.name}.used"),
    }[component]


def _run(op: str, fetcher: Fetcher, url: str, cache: Path) -> Callable[[], object]:
    if op.startswith("fetch"):
        return lambda: fetcher.fetch(url, namespace=NAMESPACE)
    if op == "ls":
        return lambda: (entries(str(cache)), du(str(cache)))
    if op == "verify":
        return lambda: verify(str(cache))
    return lambda: prune(str(cache), max_size=0, grace=0.0)


@pytest.mark.parametrize(("op", "component", "kind"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    origin: Origin,
    name: str,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = _outside(tmp_path / "outside")
    url = origin.url(f"/ok/{name}")
    fetcher = Fetcher(retries=0, connect_timeout=5.0, read_timeout=5.0, lock_timeout=2.0)
    dest = fetcher.path(url, namespace=NAMESPACE)
    if op != "fetch-miss":
        fetcher.fetch(url, namespace=NAMESPACE)  # a real entry, record, lock and stamp
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
    plant(_position(cache, dest, component), kind, outside)
    counted = kind != "hardlink"
    before = _state(outside, names_counted=counted)
    run = _run(op, fetcher, url, cache)
    outcome: object = None
    with _bounded(memory=kind == "sparse") as peak:
        try:
            outcome = run()
        except FetchError as exc:
            outcome = exc  # a clear refusal: allowed of a fetch only
        finally:
            fetcher.close()
    assert op.startswith("fetch") or not isinstance(outcome, FetchError), outcome
    assert _state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if op.startswith("fetch") and not isinstance(outcome, FetchError):
        assert isinstance(outcome, Path), outcome
        got = os.fspath(outcome)
        assert stat.S_ISREG(os.lstat(got).st_mode)
        assert os.lstat(got).st_nlink == 1
        with open(got, "rb") as f:
            assert f.read() == body(name)
