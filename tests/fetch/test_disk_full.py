"""A full disk (and a read-only one): a clear error, nothing partial published, the lock released.

The cache lives on a 512 KiB tmpfs mounted in a private mount namespace (``unshare -m`` as
root, ``unshare -rm`` as a user where user namespaces are allowed), so nothing outside the
test process sees it. The check runs inside that namespace and reports as JSON.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from .origin import Origin

if TYPE_CHECKING:
    from pathlib import Path

CHILD = """
import json, os, sys
from cacheroot.fetch import DownloadError, Fetcher
from cacheroot.fetch.store import PathLock, lock_path, partials
url, cache = sys.argv[1], sys.argv[2]
os.environ["_VLLM_TEST_CACHE"] = cache
f = Fetcher(retries=1, backoff=0.01)
dest = f.path(url)
report = {}
try:
    f.fetch(url)
except DownloadError as exc:
    report = {"errno": exc.errno, "message": str(exc), "type": type(exc).__name__}
lock = PathLock(lock_path(str(dest)), timeout=1.0)
lock.acquire()
lock.release()
report["published"] = dest.exists()
report["partials"] = partials(str(dest))
report["files"] = sorted(os.listdir(dest.parent))
print(json.dumps(report))
"""


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot mount a private tmpfs")
    for cmd in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = [*cmd, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return cmd
    pytest.skip("mount namespaces are not permitted here (needs root or user namespaces)")


def test_disk_full(origin: Origin, name: str, tmp_path: Path) -> None:
    cmd = _unshare()
    cache = tmp_path / "small"
    cache.mkdir()
    url = origin.url(f"/ok/{name}?size={2 << 20}")
    script = 'mount -t tmpfs -o size=512k tmpfs "$1" && exec "$2" -c "$3" "$4" "$1"'
    out = subprocess.run(
        [*cmd, "sh", "-c", script, "sh", str(cache), sys.executable, CHILD, url],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["type"] == "DownloadError"
    assert report["errno"] == errno.ENOSPC
    assert "free space" in report["message"]
    assert report["published"] is False
    assert report["partials"] == []
    assert not [f for f in report["files"] if not f.startswith(".") or f.endswith(".partial")]


READ_ONLY = """
import json, os, sys
from cacheroot.fetch import DownloadError, Fetcher
os.environ["_VLLM_TEST_CACHE"] = sys.argv[2]
f = Fetcher(retries=0)
hit = str(f.fetch(sys.argv[1]))  # warmed before the volume turned read-only
try:
    f.fetch(sys.argv[1] + "&other=1")
    miss = None
except DownloadError as exc:
    miss = [exc.errno, str(exc)]
print(json.dumps({"hit": hit, "miss": miss}))
"""


def test_read_only_cache_serves_hits_and_says_why_misses_fail(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cacheroot.fetch import Fetcher

    cmd = _unshare()
    cache = tmp_path / "ro"
    url = origin.url(f"/ok/{name}?size=1000")
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
    warm = Fetcher().fetch(url)
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -c "$3" "$4" "$1"'
    )
    out = subprocess.run(
        [*cmd, "sh", "-c", script, "sh", str(cache), sys.executable, READ_ONLY, url],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["hit"] == str(warm)
    assert report["miss"][0] == errno.EROFS
    assert "read-only" in report["miss"][1]


UNPACK = """
import json, os, sys
from cacheroot.fetch import DownloadError, Fetcher
from cacheroot.fetch.store import PathLock, lock_path
src, cache = sys.argv[1], sys.argv[2]
os.environ["_VLLM_TEST_CACHE"] = cache
f = Fetcher(allow_file=True, retries=0)
report = {}
try:
    f.fetch("file://" + src, extract=True)
except DownloadError as exc:
    report = {"errno": exc.errno, "message": str(exc), "type": type(exc).__name__}
entry = str(f.path("file://" + src))
lock = PathLock(lock_path(entry + ".extracted"), timeout=1.0)
lock.acquire()
lock.release()
report["archive"] = os.path.isfile(entry)
report["unpacked"] = os.path.exists(entry + ".extracted")
report["files"] = sorted(os.listdir(os.path.dirname(entry)))
print(json.dumps(report))
"""


def test_disk_full_while_unpacking(tmp_path: Path) -> None:
    import io
    import tarfile

    cmd = _unshare()
    src = tmp_path / "zeros.tar.gz"
    with tarfile.open(src, "w:gz") as tf:
        info = tarfile.TarInfo("weights.bin")
        info.size = 2 << 20  # 2 MiB of zeros: about 2 KiB packed, too much for 512 KiB
        tf.addfile(info, io.BytesIO(bytes(info.size)))
    cache = tmp_path / "small"
    cache.mkdir()
    script = 'mount -t tmpfs -o size=512k tmpfs "$1" && exec "$2" -c "$3" "$4" "$1"'
    out = subprocess.run(
        [*cmd, "sh", "-c", script, "sh", str(cache), sys.executable, UNPACK, str(src)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report.get("type") == "DownloadError", report
    assert report["errno"] == errno.ENOSPC
    assert ".extracted" in report["message"]
    assert "weights.bin" in report["message"]
    assert "Free space on the volume" in report["message"]
    assert report["archive"] is True  # the download itself is kept
    assert report["unpacked"] is False
    assert [f for f in report["files"] if "partial" in f] == []
