"""A cache directory that can be read but not written: hits are served, misses are downloaded.

Two real cases, each in a child process that reports as JSON: the directory on a read-only bind
mount (a private mount namespace, ``unshare -m`` as root or ``unshare -rm`` where user namespaces
are allowed, so nothing outside the child sees it), and a directory of another user (mode 0755,
owned by root, the child running as uid 65534). Either way a miss is served uncached, counted
as ``bypassed``, and logged once; nothing raises.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

import pytest

from cacheroot.mediacache import MediaCache

from .origin import gen_body

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .origin import Origin

#: The user the cache runs as when the tests run as root.
OTHER_UID = 65534

CHILD = """
import json, logging, os, shutil, sys, tempfile
from cacheroot.mediacache import MediaCache
directory, base, drop = sys.argv[1], sys.argv[2], sys.argv[3] == "drop"
# Every module the cache imports on any path, imported while the interpreter's own files can
# still be read (they may live where the other user cannot, such as under /root).
scratch = tempfile.mkdtemp()
warm = MediaCache(scratch)
warm.get(base + "/gen/900/3000000")
warm.get(base + "/gen/900/3000000")
shutil.rmtree(scratch)
if drop:
    os.setgroups([])
    os.setgid(int(sys.argv[4]))
    os.setuid(int(sys.argv[4]))

class Count(logging.Handler):
    warnings = []
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            self.warnings.append(record.getMessage())

logging.getLogger("cacheroot.mediacache").addHandler(Count())
before = sorted(os.listdir(directory))
cache = MediaCache(directory)
report = {"uid": os.getuid(), "bodies": []}
try:
    for n, size in ((1, 1000), (2, 1000), (3, 3000000)):
        report["bodies"].append(len(cache.get(f"{base}/gen/{n}/{size}")))
except Exception as exc:
    report["error"] = repr(exc)
report["stats"] = cache.stats()
report["warnings"] = Count.warnings
report["unchanged"] = sorted(os.listdir(directory)) == before
print(json.dumps(report))
"""


def _warmed(directory: str, origin: Origin) -> None:
    """A cache at ``directory`` holding ``/gen/1/1000`` (the child's one hit)."""
    cache = MediaCache(directory)
    assert cache.get(origin.url("/gen/1/1000")) == gen_body(1, 1000)


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _check(report: dict[str, object]) -> None:
    assert "error" not in report, report["error"]
    assert report["bodies"] == [1000, 1000, 3000000]
    stats = report["stats"]
    assert isinstance(stats, dict)
    assert (stats["hits"], stats["bypassed"], stats["stored"]) == (1, 2, 0)
    warnings = report["warnings"]
    assert isinstance(warnings, list)
    assert len(warnings) == 1, warnings
    assert "cannot be written" in warnings[0]
    assert report["unchanged"] is True


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot make a private read-only mount")
    for cmd in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = [*cmd, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return cmd
    pytest.skip("mount namespaces are not permitted here (needs root or user namespaces)")


def test_read_only_mount(tmp_path: Path, origin: Origin) -> None:
    cmd = _unshare()
    directory = str(tmp_path / "media")
    _warmed(directory, origin)
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
        'exec "$2" -c "$3" "$1" "$4" keep'
    )
    done = subprocess.run(
        [*cmd, "sh", "-c", script, "sh", directory, sys.executable, CHILD, origin.base],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    report = _report(done)
    _check(report)
    assert "Read-only file system" in report["warnings"][0]  # type: ignore[index]


def _reachable_by_others(path: str) -> bool:
    """Whether a user other than the owner can read ``path`` and every directory above it."""
    real = os.path.realpath(path)
    if not os.stat(real).st_mode & stat.S_IROTH:
        return False
    parent = os.path.dirname(real)
    while parent != os.path.dirname(parent):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(parent)
    return True


@pytest.fixture
def shared_dir() -> Iterator[str]:
    """A directory under /tmp that another user can reach (pytest's own are 0700)."""
    top = tempfile.mkdtemp(prefix="cacheroot-media-", dir="/tmp")
    os.chmod(top, 0o755)  # noqa: S103 - the other user must reach the cache
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_directory_of_another_user(shared_dir: str, origin: Origin) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the cache must run as a second uid to be refused by mode 0755")
    directory = os.path.join(shared_dir, "media")
    _warmed(directory, origin)
    for path in (directory, os.path.join(directory, ".locks")):
        os.chmod(path, 0o755)  # noqa: S103 - readable by the other user, not writable
    args = [directory, origin.base]
    if _reachable_by_others(sys.executable):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *args, "keep"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            user=OTHER_UID,
            group=OTHER_UID,
            extra_groups=[],
        )
    else:
        # The interpreter lives where that user cannot read it: the child imports first, then
        # drops to the uid for good (setgroups, setgid, setuid) before touching the cache.
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *args, "drop", str(OTHER_UID)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    report = _report(done)
    assert report["uid"] == OTHER_UID
    _check(report)
    assert "Permission denied" in report["warnings"][0]  # type: ignore[index]


def test_directory_that_cannot_be_created(
    tmp_path: Path, origin: Origin, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("not a directory")
    cache = MediaCache(tmp_path / "file" / "media")
    with caplog.at_level("WARNING", logger="cacheroot.mediacache"):
        assert cache.get(origin.url("/gen/1/1000")) == gen_body(1, 1000)
        assert cache.get(origin.url("/gen/2/1000")) == gen_body(2, 1000)
    assert cache.stats()["bypassed"] == 2
    assert len(caplog.records) == 1, caplog.text
    assert "cannot be written" in caplog.records[0].getMessage()
