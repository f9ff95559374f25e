"""One volume, two users: a setgid directory shared by a group, used by two real uids.

The volume is set up as the README says (``chgrp GROUP vol && chmod 2775 vol``); the children
run as :data:`UID_A` and :data:`UID_B`, each with its own primary group and :data:`GROUP` as a
supplementary one, under a ``022`` umask, so that only the setgid directory can make what they
create usable by the other. Changing uid needs root: elsewhere these tests skip.

A child imports everything it needs *before* it drops to its uid, because the interpreter may
live where only root can read (a home directory); from then on every file operation is checked
by the kernel against the new uid and groups. The tests that need no second uid (the modes of
what one user creates) run everywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher
from cacheroot.fetch._store import meta_path
from cacheroot.fetch._used import used_path
from cacheroot.fetch.store import lock_path, read_meta

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from collections.abc import Iterator

#: The volume's group and the two members (numeric: no account needs to exist).
GROUP, UID_A, UID_B = 61000, 61001, 61002

#: Prepended to every child program: imports, then the drop to ``argv[1]``'s uid and groups,
#: then ``_VLLM_TEST_CACHE`` = ``argv[2]`` and ``args`` = the JSON of ``argv[3]``.
PREAMBLE = """
import json, os, sys, time
import cacheroot.fetch._upkeep.cache, cacheroot.fetch._http, filelock
import encodings.ascii, encodings.idna, encodings.latin_1, encodings.utf_8
from cacheroot.fetch import ChecksumError, FetchError, Fetcher, stats
from cacheroot.fetch.store import PathLock, lock_path
from cacheroot.fetch.store import read_meta, sha256_file, write_meta
who = json.loads(sys.argv[1])
if who is not None:
    os.setgroups(who["groups"])
    os.setgid(who["gid"])
    os.setuid(who["uid"])
os.umask(0o022)
os.environ["_VLLM_TEST_CACHE"] = sys.argv[2]
args = json.loads(sys.argv[3])
def fetcher(**kw):
    settings = {"read_timeout": 10.0, "retries": 2, "backoff": 0.01, "lock_timeout": 30.0}
    return Fetcher(**{**settings, **kw})
def say(**kw):
    print(json.dumps(kw), flush=True)
"""


def member(uid: int) -> dict[str, object]:
    """The credentials of a volume member: own primary group, :data:`GROUP` besides."""
    return {"uid": uid, "gid": uid, "groups": [uid, GROUP]}


def need_root() -> None:
    """Skip unless this process may change uid (the two users must be real)."""
    if os.geteuid() != 0:
        pytest.skip("two real uids need root (setuid in the children); run the suite as root")


def reachable(path: Path) -> None:
    """Let other users traverse every component of ``path`` (only the search bit is added)."""
    for p in (path, *path.parents):
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(p, stat.S_IMODE(mode) | stat.S_IXOTH)


@contextlib.contextmanager
def shared_volume() -> Iterator[Path]:
    """A directory set up for :data:`GROUP` to share: ``chgrp GROUP && chmod 2775``.

    Not under ``tmp_path``: pytest keeps its base directory private (``0700``) and every new
    pytest session on the machine makes it so again, which would lock the other uid out in the
    middle of a test. It lives in its own directory in the system's temporary directory instead
    (every component made traversable), removed afterwards.
    """
    need_root()
    base = Path(tempfile.gettempdir())
    reachable(base)
    top = Path(tempfile.mkdtemp(prefix="cacheroot-volume-", dir=base))
    try:
        os.chmod(top, 0o755)  # noqa: S103 - the other uid must get in
        vol = top / "vol"
        vol.mkdir()
        os.chown(vol, 0, GROUP)
        os.chmod(vol, 0o2775)  # noqa: S103 - a shared volume, as the README sets one up
        yield vol
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def volume() -> Iterator[Path]:
    """:func:`shared_volume` for one test (skips unless root)."""
    with shared_volume() as vol:
        yield vol


def run_as(
    who: dict[str, object] | None,
    cache: Path,
    code: str,
    args: object = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``code`` (after :data:`PREAMBLE`) as ``who`` (``None``: as this user)."""
    return subprocess.Popen(
        [sys.executable, "-c", PREAMBLE + code, json.dumps(who), str(cache), json.dumps(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def said(proc: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, Any]:
    """The last JSON line the child printed; it must have exited 0."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def line(proc: subprocess.Popen[str]) -> str:
    """The next line the child prints (to wait for one step of it)."""
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def tell(proc: subprocess.Popen[str], text: str = "go") -> None:
    """Send the child a line (to release it from a step)."""
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")
    proc.stdin.flush()


#: Fetch ``args["url"]`` (``sha256``, ``lock_timeout`` optional), after a gate if ``gate``;
#: report the path or the error, and the stats.
FETCH = """
f = fetcher(lock_timeout=args.get("lock_timeout", 30.0))
if args.get("gate"):
    say(ready=True)
    sys.stdin.readline()
try:
    path = str(f.fetch(args["url"], sha256=args.get("sha256")))
except FetchError as exc:
    say(error=type(exc).__name__, message=str(exc), stats=stats())
else:
    say(path=path, stats=stats())
"""


def _mode(path: str | Path) -> tuple[int, int]:
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_gid


def test_a_member_hits_what_another_fetched_and_records_its_use(
    origin: Origin, name: str, volume: Path
) -> None:
    cache = volume / "cache"  # created by the first fetch, inside the shared volume
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    first = said(run_as(member(UID_A), cache, FETCH, {"url": url, "sha256": digest}))
    entry = str(first["path"])
    namespace = os.path.dirname(entry)
    for directory in (str(cache), namespace):
        assert _mode(directory) == (0o2775, GROUP), directory
    for path in (entry, lock_path(entry), used_path(entry), meta_path(entry)):
        assert _mode(path) == (0o664, GROUP), path
        assert os.stat(path).st_uid == UID_A
    long_ago = time.time() - 7200
    os.utime(used_path(entry), (long_ago, long_ago))
    second = said(run_as(member(UID_B), cache, FETCH, {"url": url, "sha256": digest}))
    assert second["path"] == entry
    assert second["stats"]["hits"] == 1
    assert origin.gets[f"/ok/{name}"] == 1
    # B refreshed "last used" of A's entry, so prune sees that B uses it.
    assert os.stat(used_path(entry)).st_mtime > time.time() - 60


HOLD = """
f = fetcher()
f.fetch(args["first"])  # the namespace directory, created as this user
lock = PathLock(lock_path(str(f.path(args["url"]))))
lock.acquire()
say(locked=True)
sys.stdin.readline()
lock.release()
say(released=True)
"""


def test_a_member_waits_on_anothers_lock_then_proceeds(
    origin: Origin, name: str, volume: Path
) -> None:
    cache = volume / "cache"
    url = origin.url(f"/ok/{name}")
    first = origin.url(f"/ok/first{name}")
    holder = run_as(member(UID_A), cache, HOLD, {"first": first, "url": url})
    try:
        assert json.loads(line(holder)) == {"locked": True}
        waiter = run_as(member(UID_B), cache, FETCH, {"url": url, "gate": True})
        assert json.loads(line(waiter)) == {"ready": True}
        tell(waiter)
        time.sleep(1.0)  # long enough for a waiter that could not open the lock to have failed
        assert waiter.poll() is None, waiter.communicate()[1]
        tell(holder)
        report = said(waiter)
        assert said(holder) == {"released": True}
    finally:
        holder.kill()
        holder.communicate()
    stats = report["stats"]
    assert stats["downloads"] == 1
    assert stats["lock_wait_seconds"] >= 0.5
    assert origin.gets[f"/ok/{name}"] == 1
    assert Fetcher().path(url).name == os.path.basename(str(report["path"]))


MAINTAIN = """
from cacheroot.fetch._upkeep.cache import prune, verify
checked = [(row["name"], row["status"]) for row in verify(sys.argv[2])]
report = prune(sys.argv[2], max_size=0, grace=0.0)
say(verified=checked, removed=[r["name"] for r in report["removed"]], kept=report["kept"])
"""


def test_a_member_verifies_and_prunes_anothers_entries(
    origin: Origin, name: str, volume: Path
) -> None:
    cache = volume / "cache"
    urls = [origin.url(f"/ok/{i}{name}") for i in range(2)]
    paths = [str(said(run_as(member(UID_A), cache, FETCH, {"url": url}))["path"]) for url in urls]
    report = said(run_as(member(UID_B), cache, MAINTAIN))
    names = sorted(os.path.basename(p) for p in paths)
    assert sorted(report["verified"]) == [[n, "ok"] for n in names]
    assert report["kept"] == []
    assert sorted(report["removed"]) == names
    for path in paths:
        assert not os.path.exists(path)
        assert read_meta(path) is None
    # And A fetches again where B pruned (the lock file B left is usable by A).
    again = said(run_as(member(UID_A), cache, FETCH, {"url": urls[0]}))
    assert again["path"] == paths[0]
    assert origin.gets[f"/ok/0{name}"] == 2


# -- one user: no root needed ------------------------------------------------------------


@pytest.fixture
def umask_022() -> object:
    """A ``022`` umask for this test (the usual one: files 0644, directories 0755)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("setgid", [False, True], ids=["private", "shared"])
def test_what_one_user_creates_follows_the_directory(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setgid: bool
) -> None:
    """In a setgid directory everything is group-writable; elsewhere the umask decides."""
    root = tmp_path / "vol"
    root.mkdir()
    if setgid:
        os.chmod(root, 0o2775)  # noqa: S103 - shared, with our own group: no root needed
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(root / "cache"))
    url = origin.url(f"/ok/{name}")
    entry = str(Fetcher().fetch(url, sha256=sha256(body(name))))
    files = [entry, lock_path(entry), used_path(entry), meta_path(entry)]
    dirs = [str(root / "cache"), os.path.dirname(entry)]
    want_file, want_dir = (0o664, 0o2775) if setgid else (0o644, 0o755)
    assert {p: stat.S_IMODE(os.stat(p).st_mode) for p in files} == dict.fromkeys(files, want_file)
    assert {p: stat.S_IMODE(os.stat(p).st_mode) for p in dirs} == dict.fromkeys(dirs, want_dir)
