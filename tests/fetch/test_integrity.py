"""Cached bytes that changed after publishing are not served as the real ones.

Two attacks, each done for real against the local origin:

- a byte flipped in place, then the mtime put back with ``touch -d`` (size, mtime and inode as
  recorded): the ctime, which no user can set, gives it away on the hit path, without hashing
  anything until then;
- an entry replaced by another writer of the volume together with a forged sidecar (the
  ``stat`` record rewritten; then the ``ctime_ns`` too): a forged record is believed by the
  stat check, and only ``CACHEROOT_VERIFY=first-use`` with a pinned ``sha256=`` catches it.
  Run by another process of the same user, and (as root) by another uid of the volume's group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, CACHEROOT_VERIFY
from cacheroot.fetch import ChecksumError, Fetcher, FetchError, cache_dir
from cacheroot.fetch.store import read_meta

from .origin import Origin, body, sha256
from .test_multiuser import UID_A, UID_B, member, run_as, said, shared_volume

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths this process hashes from now on (every hash of a cached file is counted)."""
    from cacheroot.fetch import _store

    seen: list[str] = []
    real = _store.sha256_file

    def counting(path: str) -> tuple[str, int]:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(_store, "sha256_file", counting)
    return seen


def _flip_and_restore_mtime(path: Path, offset: int = 1234) -> None:
    """Flip one byte in place, then put the mtime back with ``touch -d`` (as an attacker would)."""
    before = path.stat()
    time.sleep(0.01)  # past the clock tick of the publish (coarse ctime on older kernels)
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))
    ns = before.st_mtime_ns
    subprocess.run(["touch", "-d", f"@{ns // 10**9}.{ns % 10**9:09d}", str(path)], check=True)
    after = path.stat()
    # Everything the record held before ctime was recorded is as it was:
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert after.st_ctime_ns != before.st_ctime_ns


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_a_byte_flipped_in_place_with_the_mtime_put_back_is_downloaded_again(
    origin: Origin, fetcher: Fetcher, name: str, pinned: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    _flip_and_restore_mtime(path)
    # The process that published it, and a new one: neither serves the flipped byte.
    for who in (fetcher, Fetcher()):
        got = who.fetch(url, sha256=digest if pinned else None)
        assert got == path
        assert got.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2  # downloaded again once, then a hit


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_a_cache_only_run_raises_checksum_error_for_a_changed_entry(
    origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch, pinned: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    _flip_and_restore_mtime(path)
    tampered = sha256(path.read_bytes())
    monkeypatch.setenv(CACHEROOT_OFFLINE, "1")
    with pytest.raises(ChecksumError) as info:
        Fetcher().fetch(url, sha256=digest if pinned else None)
    assert (info.value.expected, info.value.actual) == (digest, tampered)
    assert f"the cached entry {path} for {url} is corrupt" in str(info.value)
    assert "run `cacheroot cache verify` to quarantine it" in str(info.value)
    assert "the origin or a proxy" not in str(info.value)
    assert path.exists()  # left where it is, for `cacheroot cache verify` to quarantine
    assert origin.gets[f"/ok/{name}"] == 1


#: A sparse file this large costs no disk, and hashing it whole would take minutes.
GIANT = 1 << 40


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail the test, rather than hang it, when it runs past 30 seconds."""

    def ring(signum: int, frame: object) -> None:
        raise TimeoutError("still running after 30 s: the giant was read")

    before = signal.signal(signal.SIGALRM, ring)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.mark.usefixtures("alarm")
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_a_sparse_giant_in_an_entrys_place_is_judged_by_its_size_unread(
    origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch, pinned: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    os.truncate(path, GIANT)  # another writer of the volume grows the entry, sparse
    monkeypatch.setenv(CACHEROOT_OFFLINE, "1")
    with pytest.raises(ChecksumError) as info:
        Fetcher().fetch(url, sha256=digest if pinned else None)
    assert str(info.value) == (
        f"the cached entry {path} for {url} is corrupt: expected sha256 {digest}, found "
        f"{GIANT} bytes, not the size its record gives (not hashed); it changed after it was "
        "published. This run is cache-only and downloads nothing: run `cacheroot cache verify` "
        "to quarantine it, then warm it again"
    )
    monkeypatch.delenv(CACHEROOT_OFFLINE)
    assert Fetcher().fetch(url, sha256=digest if pinned else None) == path
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 2  # downloaded again, once


def test_a_hit_hashes_nothing_and_a_moved_ctime_costs_one_hash(
    origin: Origin, fetcher: Fetcher, name: str, hashes: list[str]
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = fetcher.fetch(url, sha256=digest)
    for _ in range(3):
        assert Fetcher().fetch(url, sha256=digest) == path
    assert hashes == []  # the sidecar vouches: one stat, no hash
    time.sleep(0.01)
    os.chmod(path, 0o600)  # the ctime moves, the bytes do not
    assert Fetcher().fetch(url) == path
    assert hashes == [str(path)]  # hashed once against the recorded digest, found intact
    meta = read_meta(str(path))
    assert meta is not None
    assert meta["ctime_ns"] == path.stat().st_ctime_ns  # and the record renewed
    assert Fetcher().fetch(url, sha256=digest) == path
    assert hashes == [str(path)]
    assert origin.gets[f"/ok/{name}"] == 1


def test_a_record_without_ctime_is_hashed_once_and_completed(
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    hashes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash between the two sidecar writes of a publish, or a volume from before."""
    from cacheroot.fetch import _store
    from cacheroot.fetch.store import write_meta

    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    meta = read_meta(str(path))
    assert meta is not None
    del meta["ctime_ns"]
    write_meta(str(path), meta)
    sidecar = _store.meta_path(str(path))
    os.utime(sidecar, (time.time() - 3600, time.time() - 3600))  # not a publish under way
    reads: list[str] = []
    real_read = _store.read_meta

    def counting(where: str) -> dict[str, object] | None:
        reads.append(where)
        return real_read(where)

    monkeypatch.setattr(_store, "read_meta", counting)
    assert Fetcher().fetch(url) == path
    assert reads == [str(path)]  # read once, hashed at once: no wait for a second record
    assert Fetcher().fetch(url) == path
    assert hashes == [str(path)]
    renewed = read_meta(str(path))
    assert renewed is not None
    assert renewed["ctime_ns"] == path.stat().st_ctime_ns
    assert origin.gets[f"/ok/{name}"] == 1


def test_a_hit_in_the_middle_of_a_publish_waits_for_the_record_instead_of_hashing(
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    hashes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between a publisher's rename and its second record, a waiter sees a record without the
    ctime; hashing then cost one of 32 waiters two seconds on a 1 GiB entry."""
    from cacheroot.fetch import _store
    from cacheroot.fetch.store import write_meta

    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)
    complete = read_meta(str(path))
    assert complete is not None
    first = {k: v for k, v in complete.items() if k != "ctime_ns"}
    write_meta(str(path), first)  # as the publisher left it just after its rename
    reads: list[bool] = []
    real_read = _store.read_meta

    def publisher_finishes_after_the_first_read(where: str) -> dict[str, object] | None:
        if reads:  # the waiter looks again: by now the publisher wrote its second record
            write_meta(str(path), complete)
        reads.append(True)
        return real_read(where)

    monkeypatch.setattr(_store, "read_meta", publisher_finishes_after_the_first_read)
    assert Fetcher().fetch(url) == path
    assert len(reads) >= 2  # it did see the first record, and looked again
    assert hashes == []
    assert origin.gets[f"/ok/{name}"] == 1


@pytest.fixture(
    params=[
        (None, False),
        ("", False),
        ("   ", False),
        ("first-use", True),
        (" First-Use\n", True),
    ],
    ids=["unset", "empty", "blank", "first-use", "padded"],
)
def verify_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """``CACHEROOT_VERIFY`` unset, empty, blank, set and padded; says whether it is on."""
    value, on = request.param
    if value is None:
        monkeypatch.delenv(CACHEROOT_VERIFY, raising=False)
    else:
        monkeypatch.setenv(CACHEROOT_VERIFY, value)
    return bool(on)


def test_first_use_hashes_each_entry_once_per_process(
    origin: Origin, fetcher: Fetcher, name: str, hashes: list[str], verify_mode: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    path = fetcher.fetch(url)  # hashed while downloaded: first use needs no second hash
    for _ in range(3):
        assert fetcher.fetch(url) == path
    assert hashes == []
    other = Fetcher()  # a process that has not used it yet
    for _ in range(3):
        assert other.fetch(url) == path
    assert hashes == ([str(path)] if verify_mode else [])


def test_an_unknown_verify_mode_is_an_error(
    origin: Origin, fetcher: Fetcher, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = origin.url(f"/ok/{name}")
    fetcher.fetch(url)
    monkeypatch.setenv(CACHEROOT_VERIFY, "always")  # read at call time
    with pytest.raises(FetchError, match=f"{CACHEROOT_VERIFY}='always' is not understood"):
        Fetcher().fetch(url)


# -- substitution by another writer of the volume ------------------------------------------

#: Replace the entry of ``args["url"]`` by other bytes of the same size and forge its sidecar:
#: the ``stat`` record always, the ``ctime_ns`` too when ``args["ctime"]``; the recorded sha256
#: (the victim's pin) is kept. Reports the digest of the substitute.
SUBSTITUTE = """
dest = str(fetcher().path(args["url"]))
meta = read_meta(dest)
evil = os.urandom(os.stat(dest).st_size)
tmp = os.path.join(os.path.dirname(dest), "substitute.tmp")
with open(tmp, "wb") as f:
    f.write(evil)
os.replace(tmp, dest)
st = os.stat(dest)
meta["stat"] = [st.st_size, st.st_mtime_ns, st.st_ino]
if args["ctime"]:
    meta["ctime_ns"] = st.st_ctime_ns
write_meta(dest, meta)
say(sha256=sha256_file(dest)[0])
"""

#: The victim: fetch ``args["url"]`` pinned to ``args["sha256"]`` in each mode of
#: ``args["modes"]`` (a new Fetcher each): ``default``, ``first-use`` cache-only, ``first-use``.
VICTIM = """
out = {}
for mode in args["modes"]:
    os.environ.pop("CACHEROOT_VERIFY", None)
    if mode != "default":
        os.environ["CACHEROOT_VERIFY"] = "first-use"
    try:
        path = fetcher().fetch(args["url"], sha256=args["sha256"], offline=mode == "offline")
        out[mode] = sha256_file(str(path))[0]
    except ChecksumError as exc:
        out[mode] = ["ChecksumError", exc.expected, exc.actual]
say(**out)
"""


def _substitution(
    origin: Origin,
    name: str,
    cache: Path,
    victim: dict[str, object] | None,
    tenant: dict[str, object] | None,
) -> None:
    url = origin.url(f"/ok/{name}")
    pin = sha256(body(name))
    first = said(run_as(victim, cache, VICTIM, {"url": url, "sha256": pin, "modes": ["default"]}))
    assert first == {"default": pin}
    # The attack as reported: the entry replaced and the sidecar's stat record rewritten.
    said(run_as(tenant, cache, SUBSTITUTE, {"url": url, "ctime": False}))
    again = said(run_as(victim, cache, VICTIM, {"url": url, "sha256": pin, "modes": ["default"]}))
    assert again == {"default": pin}  # the recorded ctime gave it away: downloaded again
    assert origin.gets[f"/ok/{name}"] == 2
    # A forger who also rewrites the ctime: the record matches the substitute in every field.
    evil = said(run_as(tenant, cache, SUBSTITUTE, {"url": url, "ctime": True}))["sha256"]
    modes = ["default", "offline", "first-use"]
    last = said(run_as(victim, cache, VICTIM, {"url": url, "sha256": pin, "modes": modes}))
    # Without first-use the forged record is believed (the documented limit of the stat check);
    # with it, the pin is compared with the bytes: never served, downloaded again when allowed.
    assert last == {"default": evil, "offline": ["ChecksumError", pin, evil], "first-use": pin}
    assert origin.gets[f"/ok/{name}"] == 3


def test_a_substitute_under_a_forged_record_by_another_process(origin: Origin, name: str) -> None:
    _substitution(origin, name, Path(cache_dir()), None, None)


@pytest.fixture
def volume() -> Iterator[Path]:
    """A directory shared by the group of :data:`UID_A` and :data:`UID_B` (root only)."""
    with shared_volume() as vol:
        yield vol


def test_a_substitute_under_a_forged_record_by_another_member(
    origin: Origin, name: str, volume: Path
) -> None:
    _substitution(origin, name, volume / "cache", member(UID_A), member(UID_B))
