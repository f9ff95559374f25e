"""What the planted-object matrices share: a root-only directory outside the volume, the objects
a writer of the volume can plant, the state that shows whether anything outside was touched, and
a bound on an operation's time and memory."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import time
import tracemalloc
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: Old enough that a read (relatime) or any listing stamps a new access time.
LONG_AGO = time.time() - 40 * 86400
#: A sparse giant: no disk, but reading it whole would take this much memory.
GIANT = 2 << 30
#: Allocated while one operation runs, at most (a record is a few hundred bytes).
MEMORY_BOUND = 16 << 20
#: How long one operation may take before it counts as hung.
HANG = 20
#: What may be planted where a directory belongs, and where a file belongs.
DIR_KINDS = ("link-dir", "link-file", "fifo", "socket", "device", "file")
FILE_KINDS = ("link-dir", "link-file", "hardlink", "fifo", "socket", "device", "dir", "sparse")


def outside_dir(top: Path) -> Path:
    """A root-only directory outside the volume with a secret file and a subdirectory."""
    top.mkdir(mode=0o700)
    (top / "keep").mkdir()
    (top / "keep" / "old.bin").write_bytes(b"old" * 100)
    (top / "secret").write_bytes(b"root-only secret\n")
    os.chmod(top / "secret", 0o600)
    for path in (top / "keep" / "old.bin", top / "secret", top / "keep", top):
        os.utime(path, (LONG_AGO, LONG_AGO))
    return top


def state(top: Path, *, names_counted: bool = True) -> dict[str, tuple[int, ...]]:
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
def bounded(*, memory: bool) -> Iterator[list[int]]:
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


def load_hub_clients() -> None:
    """Import the hub clients' entry points that a model warm imports on first use, before a
    case bounds its memory: a first import of huggingface_hub's API allocates about 24 MB on
    CPython 3.12 (8 MB on 3.11), the interpreter's cost, not what the warm reads. Which case
    of a process came first decided whether it paid it."""
    from huggingface_hub import errors, get_cached_repo_tree, snapshot_download, utils

    try:
        from modelscope.hub.snapshot_download import snapshot_download as ms_snapshot
    except ImportError:  # only huggingface_hub in this environment
        ms_snapshot = None
    del errors, get_cached_repo_tree, snapshot_download, utils, ms_snapshot


# -- a second uid: a member of the volume's group plants ----------------------------------------


def _protected_hardlinks() -> bool:
    """Whether the kernel refuses a hard link to a file the linker may not read and write
    (``fs.protected_hardlinks``, on by default on most distributions)."""
    try:
        with open("/proc/sys/fs/protected_hardlinks", encoding="ascii") as f:
            return f.read().strip() != "0"
    except OSError:
        return False


#: The kinds a member of the volume's group cannot plant, and why: the kernel refuses them to a
#: uid other than root (the matrices check that it does, rather than assume it).
MEMBER_REFUSED: dict[str, str] = {
    "device": "a member has no CAP_MKNOD: mknod of a character device is refused (EPERM)",
}
if _protected_hardlinks():
    MEMBER_REFUSED["hardlink"] = (
        "fs.protected_hardlinks is on: a member may not hard-link a root-only file (EPERM)"
    )


#: Who plants in the matrices: root (the test process), or a member of the volume's group.
PLANTERS = ("root", "member")
#: What the member plants in the matrices (fewer kinds than root, to keep the suite's time): the
#: links, a FIFO, the wrong kind of object and a sparse giant, each owned by the member. A socket
#: is opened and refused as a FIFO is; a device or a hard link are in :data:`MEMBER_REFUSED`.
MEMBER_KINDS = ("link-dir", "link-file", "fifo", "file", "dir", "sparse")


def group_volume(volume: Path, gid: int) -> None:
    """Set ``volume`` up as the documentation says a group shares one: ``chgrp`` to ``gid``
    (where this process may give it away) and ``chmod 2775``."""
    if os.geteuid() == 0:
        os.chown(volume, 0, gid)
    os.chmod(volume, 0o2775)  # noqa: S103 - a volume shared by a group, as documented


def plant_as(uid: int, gid: int, path: Path, kind: str, outside: Path, *, volume: Path) -> None:
    """:func:`plant`, but by a member of the volume's group: a forked child that drops to
    ``uid`` with ``gid`` as its only group, then plants ``kind`` at ``path``.

    The child enters ``volume`` (which ``path`` lies under) while still root, so the member
    needs no way through the directories above it (pytest keeps its base directory ``0700``);
    from there on the kernel checks every component against the member, and whatever it
    creates is the member's. A hard link is made to the root-only file the parent opened
    (``O_PATH``), as if the member had reached it: the kernel's own link rules decide.

    :class:`OSError` with the child's ``errno`` when the member could not plant it.
    """
    rel = path.relative_to(volume)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # The test process runs the origin's threads; the child only makes system calls.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child exits without returning to pytest
        code = 1
        try:
            os.close(read_end)
            os.chdir(volume)
            target = os.open(outside / "secret", os.O_PATH) if kind == "hardlink" else -1
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o022)
            if kind == "hardlink":
                _link_open(target, rel)
            else:
                plant(rel, kind, outside)
            code = 0
        except BaseException as exc:  # everything goes back to the parent
            failed = exc.errno if isinstance(exc, OSError) and exc.errno else 0
            with contextlib.suppress(BaseException):
                os.write(write_end, f"{failed} {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        said = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        number, _, text = said.partition(" ")
        raise OSError(
            int(number) if number.isdigit() and number != "0" else None,
            f"uid {uid} could not plant {kind} at {path}: {text or 'the child died'}",
        )


def _link_open(fd: int, path: Path) -> None:
    """Replace whatever is at ``path`` with a hard link to the file open at ``fd`` (its times
    are the file's owner's to set, not the linker's)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        path.rename(path.with_name(path.name + ".aside"))
    path.parent.mkdir(parents=True, exist_ok=True)
    # linkat with AT_SYMLINK_FOLLOW (os.link calls plain link, which does not follow, unless a
    # directory descriptor is given): the magic link leads to the open file itself.
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=here, follow_symlinks=True)
    finally:
        os.close(here)
