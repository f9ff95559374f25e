"""The media cache on a volume a co-tenant writes: what it plants is a miss, never followed.

Measured as root with a second uid in the volume's group (``hostile.py``): a ledger written
through links planted for the next pids, an entry linked (symbolically or hard) to a root-only
file under a forged record, a FIFO where an entry belongs, sparse giant records and bodies, a
link in place of the cache directory or its lock folder, an entry of a user the volume does not
trust, and a record whose URL carries control characters. Each must end with nothing outside the
volume read, written or touched (its access time included), no hang, memory bounded, the body
the origin sends served, and every line the cache logs free of raw control characters.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE
from cacheroot.mediacache import MediaCache, entry_name, vllm_plugin

from . import fake_vllm
from .hostile import OLD_ATIME_NS, SECRET, TENANT, Volume, snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from .conftest import Clock
    from .origin import Origin

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
#: Peak memory a miss may add, whatever the volume holds (a sparse giant costs 2 GiB or more).
MEMORY_BOUND = 200 * 1024 * 1024
GIANT = "2G"
#: A raw control character: none may reach a log line.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture(scope="session")
def tenant_ids() -> Iterator[tuple[int, int] | None]:
    """``(uid, gid)`` of the co-tenant, made here and removed after; ``None`` without root."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        yield None
        return
    made = False
    try:
        entry = pwd.getpwnam(TENANT)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--user-group", TENANT], check=True)
        entry, made = pwd.getpwnam(TENANT), True
    yield entry.pw_uid, entry.pw_gid
    if made:
        subprocess.run(["userdel", TENANT], check=False)


@pytest.fixture
def volume(tenant_ids: tuple[int, int] | None) -> Iterator[Volume]:
    """A ``2775`` volume of the co-tenant's group under ``/tmp`` (pytest's own are ``0700``),
    its media cache directory made as an administrator would, and root's files beside it."""
    top = tempfile.mkdtemp(prefix="cacheroot-media-hostile-", dir="/tmp")
    os.chmod(top, 0o755)  # noqa: S103 - the co-tenant must reach the volume
    uid, gid = tenant_ids if tenant_ids is not None else (None, None)
    vol = Volume(top, uid, gid)
    for path in (vol.root, vol.media):
        os.mkdir(path)
        if gid is not None:
            os.chown(path, 0, gid)
        os.chmod(path, 0o2775)  # noqa: S103 - the group shares it, as the how-to prescribes
    os.mkdir(vol.outside)
    os.chmod(vol.outside, 0o755)  # noqa: S103 - anyone may stat what is inside, as in /etc
    with open(vol.secret, "wb") as f:
        f.write(SECRET)
    os.chmod(vol.secret, 0o600)
    os.utime(vol.secret, ns=(OLD_ATIME_NS, os.stat(vol.secret).st_mtime_ns))
    with open(vol.target, "wb") as f:
        f.write(b"keep\n")
    os.chmod(vol.target, 0o644)
    os.mkdir(vol.private)
    os.chmod(vol.private, 0o700)
    yield vol
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def rooted(volume: Volume) -> Volume:
    """The volume, where the tests run as root with a co-tenant (the issue's measurements)."""
    if not volume.as_root:
        pytest.skip("needs root and useradd: the attack is a co-tenant's on a root process")
    return volume


def _cache(volume: Volume, clock: Clock, **kwargs: Any) -> MediaCache:
    return MediaCache(volume.media, max_size_bytes=1 << 20, clock=clock, **kwargs)


def _warm(volume: Volume, origin: Origin, clock: Clock) -> tuple[MediaCache, str, str]:
    """A cache on the volume holding ``/a.png`` (one GET so far): ``(cache, url, entry)``."""
    cache = _cache(volume, clock)
    url = origin.route("/a.png", PNG, headers={"Cache-Control": "max-age=3600"})
    assert cache.get(url) == PNG
    return cache, url, entry_name(url)


def _child(script: str, *args: str, timeout: float = 60) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter (this user); its last line is a JSON report."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the media cache hung for {timeout} s on what the co-tenant planted")
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# -- the ledger --------------------------------------------------------------------------------

LEDGER_CHILD = """
import json, sys
from cacheroot.mediacache import MediaCache
directory, base = sys.argv[1:3]
sys.stdin.readline()  # the co-tenant plants its links meanwhile
cache = MediaCache(directory)
bodies = [len(cache.get(f"{base}/gen/{n}/1000")) for n in range(3)]
print(json.dumps({"bodies": bodies, "stats": cache.stats()}))
"""


def test_links_planted_for_the_ledger_change_nothing(rooted: Volume, origin: Origin) -> None:
    """The ledger's temporary name was ``.usage.<pid>.tmp``: links for the next pids made a root
    process overwrite the file they named."""
    child = subprocess.Popen(
        [sys.executable, "-c", LEDGER_CHILD, rooted.media, origin.base],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    planted = [f".usage.{pid}.tmp" for pid in range(child.pid, child.pid + 16)]
    planted += [".usage.tmp", ".usage.partial"]
    for name in planted:
        rooted.link(rooted.target, os.path.join(rooted.media, name))
    before = snapshot(rooted.outside)
    out, err = child.communicate("go\n", timeout=60)
    assert child.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["bodies"] == [1000, 1000, 1000]
    assert report["stats"]["stored"] == 3
    assert snapshot(rooted.outside) == before
    with open(rooted.target, "rb") as f:
        assert f.read() == b"keep\n"
    assert stat.S_ISREG(os.lstat(os.path.join(rooted.media, ".usage")).st_mode)


# -- entries and records that lead out of the volume -------------------------------------------


@pytest.fixture
def plugin(rooted: Volume, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """vLLM's connector module (the stand-in), the plugin registered on the volume's cache."""
    module = fake_vllm.install(monkeypatch)
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, rooted.media)
    vllm_plugin.unregister()
    vllm_plugin.register()
    yield module
    vllm_plugin.unregister()


def test_an_entry_linked_to_a_root_only_file_is_never_served(
    rooted: Volume, plugin: Any, origin: Origin, caplog: pytest.LogCaptureFixture
) -> None:
    """As vLLM runs it: the entry swapped for a link to a root-only file, its record forged to
    vouch for that file. The cache returned the file as the media body and moved its atime."""
    url = origin.route("/a.png", PNG, headers={"Cache-Control": "max-age=3600"})
    assert plugin.MediaConnector().load_from_url(url) == PNG
    name = entry_name(url)
    rooted.link(rooted.secret, os.path.join(rooted.media, name))
    rooted.forge(name, vouch_for=rooted.secret)
    before = snapshot(rooted.outside)
    with caplog.at_level(logging.WARNING, logger="cacheroot.mediacache"):
        assert plugin.MediaConnector().load_from_url(url) == PNG
    assert origin.gets["/a.png"] == 2
    assert snapshot(rooted.outside) == before
    assert os.stat(rooted.secret).st_atime_ns == OLD_ATIME_NS
    assert "a symbolic link" in caplog.text
    # The cache owns its directory: the link is gone, the download took its place.
    assert stat.S_ISREG(os.lstat(os.path.join(rooted.media, name)).st_mode)


def test_a_hard_linked_entry_is_refused(rooted: Volume, origin: Origin, clock: Clock) -> None:
    """A second name of a root-only file (``protected_hardlinks`` keeps the co-tenant from making
    it, root makes it here) under a record that vouches for it."""
    cache, url, name = _warm(rooted, origin, clock)
    entry = os.path.join(rooted.media, name)
    os.unlink(entry)
    os.link(rooted.secret, entry)
    rooted.forge(name, vouch_for=rooted.secret)
    before = snapshot(rooted.outside)
    assert cache.get(url) == PNG
    assert origin.gets["/a.png"] == 2
    assert snapshot(rooted.outside) == before
    assert os.stat(rooted.secret).st_nlink == 1  # our name for it was removed, nothing else


def test_an_entry_of_a_user_the_volume_does_not_trust_is_refused(
    rooted: Volume, origin: Origin, clock: Clock
) -> None:
    """Owned by a uid outside the volume's group (nobody): not one of the volume's writers."""
    cache, url, name = _warm(rooted, origin, clock)
    nobody = 65534
    os.chown(os.path.join(rooted.media, name), nobody, nobody)
    assert cache.get(url) == PNG
    assert origin.gets["/a.png"] == 2
    assert os.stat(os.path.join(rooted.media, name)).st_uid == 0


def test_an_entry_of_a_co_tenant_is_served(rooted: Volume, origin: Origin, clock: Clock) -> None:
    """The group shares the volume: what a member stored, in the group's directory, is a hit."""
    cache, url, name = _warm(rooted, origin, clock)
    entry = os.path.join(rooted.media, name)
    rooted.write(entry, b"the co-tenant's copy")
    rooted.forge(name, vouch_for=entry)
    assert os.stat(entry).st_uid == rooted.uid
    assert cache.get(url) == b"the co-tenant's copy"
    assert origin.gets["/a.png"] == 1


# -- special files and giants ------------------------------------------------------------------

MISS_CHILD = """
import json, resource, shutil, sys, tempfile
from cacheroot.mediacache import MediaCache
directory, url, warm_url = sys.argv[1:4]
scratch = tempfile.mkdtemp()  # imports, the connection pool, a spooled body: all warm
warm = MediaCache(scratch)
warm.get(warm_url)
warm.get(warm_url)
shutil.rmtree(scratch)
cache = MediaCache(directory, max_size_bytes=64 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
body = cache.get(url)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew": (after - before) * 1024, "body": body.hex(), "stats": cache.stats()}))
"""


def _plant(volume: Volume, path: str, kind: str) -> None:
    """Put a ``kind`` at ``path`` (the co-tenant, except what needs root or a socket's bind)."""
    volume.tenant("rm", "-f", path)
    if kind == "fifo":
        volume.tenant("mkfifo", path)
    elif kind == "giant":
        volume.tenant("truncate", "-s", GIANT, path)
    elif kind == "socket":
        # A socket's path has at most 107 bytes: bound through a descriptor of its directory.
        dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(f"/proc/self/fd/{dfd}/{os.path.basename(path)}")
        finally:
            os.close(dfd)
        if volume.uid is not None and volume.gid is not None:
            os.lchown(path, volume.uid, volume.gid)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    else:  # pragma: no cover - the parameters below name every kind
        raise AssertionError(kind)


@pytest.mark.parametrize(
    ("where", "kind"),
    [
        ("entry", "fifo"),
        ("record", "fifo"),
        ("entry", "socket"),
        ("entry", "giant"),
        ("record", "giant"),
        ("entry", "device"),
    ],
)
def test_a_special_or_giant_file_is_a_miss(
    volume: Volume, origin: Origin, clock: Clock, where: str, kind: str
) -> None:
    """A FIFO as an entry hung the cache forever; a sparse 2 GiB record cost 4.2 GB of memory
    (an 8 GiB one, MemoryError). Each is a miss now, within a timeout and a memory bound."""
    if kind == "device" and os.geteuid() != 0:
        pytest.skip("needs root: only root makes device nodes")
    _, url, name = _warm(volume, origin, clock)
    entry = os.path.join(volume.media, name)
    path = entry if where == "entry" else os.path.join(volume.media, f".{name}.meta.json")
    _plant(volume, path, kind)
    if where == "entry":
        volume.forge(name, vouch_for=entry)
    report = _child(MISS_CHILD, volume.media, url, origin.url("/gen/7/3000000"), timeout=60)
    assert bytes.fromhex(report["body"]) == PNG
    assert report["stats"]["misses"] == 1
    assert report["grew"] < MEMORY_BOUND, report["grew"]
    assert origin.gets["/a.png"] == 2


# -- the directories above the entries ---------------------------------------------------------


@pytest.mark.parametrize("swapped", ["cache directory", "lock folder"])
def test_a_link_in_place_of_a_directory_is_refused(
    rooted: Volume, origin: Origin, clock: Clock, swapped: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The co-tenant swaps the cache directory (its parent is the group's) or the lock folder for
    a link to a root-only directory: nothing is made there, the body is served uncached, and the
    warning says which link was refused."""
    if swapped == "cache directory":
        rooted.tenant("mv", rooted.media, rooted.media + ".old")
        link = rooted.media
    else:
        link = os.path.join(rooted.media, ".locks")
    rooted.link(rooted.private, link)
    cache = _cache(rooted, clock)
    url = origin.route("/a.png", PNG, headers={"Cache-Control": "max-age=3600"})
    with caplog.at_level(logging.WARNING, logger="cacheroot.mediacache"):
        assert cache.get(url) == PNG
        assert cache.get(url) == PNG
    assert os.listdir(rooted.private) == []
    assert cache.stats()["bypassed"] == 2
    (message,) = [r.getMessage() for r in caplog.records if r.name == "cacheroot.mediacache"]
    assert f"{link} is a symbolic link" in message
    assert "refused" in message


def test_a_link_only_its_owner_could_make_is_followed(
    tmp_path: Path, origin: Origin, clock: Clock
) -> None:
    """A link in a directory nobody else may write (an administrator's ``/data`` ->
    ``/mnt/data``) is the operator's own setting: followed, as before."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "media").symlink_to(real)
    cache = MediaCache(tmp_path / "media", clock=clock)
    url = origin.route("/a.png", PNG, headers={"Cache-Control": "max-age=3600"})
    assert cache.get(url) == PNG
    assert cache.get(url) == PNG
    assert entry_name(url) in os.listdir(real)
    assert origin.gets["/a.png"] == 1


def test_links_planted_as_lock_files_change_nothing(
    rooted: Volume, origin: Origin, clock: Clock
) -> None:
    cache, _url, _name = _warm(rooted, origin, clock)
    other = origin.route("/b.png", PNG, headers={"Cache-Control": "max-age=3600"})
    stripe = entry_name(other)[:3]
    rooted.link(rooted.target, os.path.join(rooted.media, ".lock"))
    rooted.link(rooted.target, os.path.join(rooted.media, ".locks", f"{stripe}.lock"))
    before = snapshot(rooted.outside)
    assert cache.get(other) == PNG
    assert cache.get(other) == PNG
    assert origin.gets["/b.png"] == 1
    assert snapshot(rooted.outside) == before


# -- what the cache prints ---------------------------------------------------------------------


def test_control_characters_of_a_record_are_printed_escaped(
    volume: Volume, origin: Origin, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A record is the co-tenant's text: its URL, named in the refusal, cannot forge log lines."""
    cache, url, name = _warm(volume, origin, clock)
    forged = "http://127.0.0.1/\x1b[2J\r\n[cacheroot] all clear\x07\u2028"
    volume.link(volume.target, os.path.join(volume.media, name))
    volume.forge(name, vouch_for=volume.target, url=forged)
    with caplog.at_level(logging.DEBUG, logger="cacheroot.mediacache"):
        assert cache.get(url) == PNG
    messages = [r.getMessage() for r in caplog.records]
    assert messages
    for message in messages:
        assert not CONTROL.search(message), repr(message)
    assert any(
        "http://127.0.0.1/\\x1b[2J\\r\\n[cacheroot] all clear\\x07\\u2028" in m for m in messages
    ), messages
