"""The planted-object matrix of archives: unpacking a cached archive, serving its unpacked tree,
and checking that tree, against every kind of object a writer of the volume can plant, at every
name they touch.

An archive fetched with ``extract=True`` lives in the test cache as ``<entry>`` (with its record
``.<entry>.meta.json``), and is unpacked next to it: into a private partial directory
(``.<entry>.extracted.<machine>-<pid>.<uuid>.partial``) published as ``<entry>.extracted`` by one
rename, with its own record, lock and ``.used`` stamp. Each case plants one object (a link to a
directory or to a root-only file outside the volume, a hard link to that file, a FIFO, a socket,
a character device that never ends, a directory where a file belongs, a file where a directory
belongs, a sparse giant) at one of those names, on the way to them, inside the published tree,
or inside the partial while it is being unpacked, then runs one operation in this process:

- ``unpack``: :func:`extract_entry` of a cached archive that has no tree yet;
- ``hit``: the same call once the tree is there (in a new process: nothing remembered);
- ``verify``: the hit under ``CACHEROOT_VERIFY=first-use``, which hashes the tree once.

and checks that nothing outside the volume was read, listed, written, chmod-ed or removed, that
the operation ended within its time, that a sparse giant cost no memory, and that the outcome is
clean: the unpacked tree, complete and a real directory, or cacheroot's own
:class:`~cacheroot.fetch.FetchError` with no partial directory left and nothing half published.

Two cases more run a real second uid of the volume's group, which plants a link where the tree
belongs, or swaps the namespace for a link in the middle of an unpacking.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher, FetchError, _archive, _used
from cacheroot.fetch._archive import extract_entry, extracted_path
from cacheroot.fetch._store import meta_path
from cacheroot.fetch._used import used_path
from cacheroot.fetch.store import lock_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fetch.test_multiuser import GROUP, UID_A, member, shared_volume
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMORY_BOUND,
        bounded,
        outside_dir,
        plant,
        state,
    )
else:
    from planted import DIR_KINDS, FILE_KINDS, MEMORY_BOUND, bounded, outside_dir, plant, state

    from .test_multiuser import GROUP, UID_A, member, shared_volume

NAMESPACE = "ns"
CONFIG = b'{"hidden_size": 8}'
RUN = b"#!/bin/sh\necho hi\n"

#: The names touched, from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "archive": False,
    "archive-record": False,
    "tree": True,
    "tree-record": False,
    "tree-lock": False,
    "tree-used": False,
    "member-dir": True,
    "member": False,
    "partial-dir": True,
    "partial-member": False,
}
#: Names inside a published tree: planted before a hit.
IN_TREE = ("member-dir", "member")
#: Names inside the partial directory: planted while it is being unpacked.
IN_PARTIAL = ("partial-dir", "partial-member")
OPERATIONS = ("unpack", "hit", "verify")


def _cases() -> Iterator[Any]:
    for op in OPERATIONS:
        for component, is_dir in COMPONENTS.items():
            if (component in IN_TREE and op == "unpack") or (
                component in IN_PARTIAL and op != "unpack"
            ):
                continue
            for kind in DIR_KINDS if is_dir else FILE_KINDS:
                yield pytest.param(op, component, kind, id=f"{op}-{component}-{kind}")


def _tar(path: Path) -> Path:
    """An ordinary archive: a directory, two files, a link and a hard link, in that order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tf:
        for name, kind, data, link in (
            ("pkg", tarfile.DIRTYPE, None, ""),
            ("pkg/config.json", tarfile.REGTYPE, CONFIG, ""),
            ("pkg/bin/run.sh", tarfile.REGTYPE, RUN, ""),
            ("pkg/alias.json", tarfile.SYMTYPE, None, "config.json"),
            ("pkg/copy.json", tarfile.LNKTYPE, None, "pkg/config.json"),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.mode = 0o755 if kind == tarfile.DIRTYPE or name.endswith(".sh") else 0o644
            if data is None:
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def _position(cache: Path, entry: Path, component: str) -> Path:
    out = Path(extracted_path(entry))
    return {
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": cache / NAMESPACE,
        "archive": entry,
        "archive-record": Path(meta_path(str(entry))),
        "tree": out,
        "tree-record": Path(meta_path(str(out))),
        "tree-lock": Path(lock_path(str(out))),
        "tree-used": Path(used_path(str(out))),
        "member-dir": out / "pkg",
        "member": out / "pkg" / "config.json",
    }[component]


def _partials(ns: Path, entry: Path) -> list[str]:
    """The partial directories of ``entry``'s tree in ``ns`` (a listing of the volume's own
    directory: the namespace is a real one whenever this is asked)."""
    prefix = f".{entry.name}{'.extracted'}."
    return sorted(n for n in os.listdir(ns) if n.startswith(prefix) and ".partial" in n)


def _plant_in_partial(
    monkeypatch: pytest.MonkeyPatch,
    ns: Path,
    entry: Path,
    *,
    component: str,
    kind: str,
    outside: Path,
) -> list[Path]:
    """Plant ``kind`` inside the partial directory just before the archive's second file is
    read: ``pkg`` (which the second file and the links go in) or ``pkg/config.json`` (which the
    hard link names). Returns where it was planted, once it was."""
    planted: list[Path] = []
    real = tarfile.TarFile.extractfile

    def extractfile(self: tarfile.TarFile, which: str | tarfile.TarInfo) -> IO[bytes] | None:
        name = which if isinstance(which, str) else which.name
        if not planted and name == "pkg/bin/run.sh":
            (partial,) = _partials(ns, entry)
            rel = "pkg" if component == "partial-dir" else "pkg/config.json"
            where = ns / partial / rel
            plant(where, kind, outside)
            planted.append(where)
        return real(self, which)

    monkeypatch.setattr(tarfile.TarFile, "extractfile", extractfile)
    return planted


def _read(path: Path) -> bytes:
    """A file of the tree, read only once ``lstat`` says it is a regular file (never a FIFO)."""
    assert stat.S_ISREG(os.lstat(path).st_mode), path
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def _assert_complete(out: Path) -> None:
    """``out`` is the archive's tree, whole, each member of its own kind."""
    assert stat.S_ISDIR(os.lstat(out).st_mode), f"{out} is no directory"
    assert sorted(os.listdir(out)) == ["pkg"]
    pkg = out / "pkg"
    assert stat.S_ISDIR(os.lstat(pkg).st_mode)
    assert sorted(os.listdir(pkg)) == ["alias.json", "bin", "config.json", "copy.json"]
    assert _read(pkg / "config.json") == CONFIG
    assert os.path.samestat(os.lstat(pkg / "config.json"), os.lstat(pkg / "copy.json"))
    assert os.lstat(pkg / "config.json").st_nlink == 2
    assert os.readlink(pkg / "alias.json") == "config.json"
    assert _read(pkg / "bin" / "run.sh") == RUN
    assert os.lstat(pkg / "bin" / "run.sh").st_mode & stat.S_IXUSR


@pytest.mark.parametrize(("op", "component", "kind"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    os.chmod(isolated_cache, 0o2775)  # noqa: S103 - a volume shared by a group, as documented
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = outside_dir(tmp_path / "outside")
    url = _tar(tmp_path / "src" / "data.tar").as_uri()
    fetcher = Fetcher(allow_file=True, retries=0, lock_timeout=2.0)
    entry = Path(fetcher.fetch(url, namespace=NAMESPACE))  # the archive and its record
    fetcher.close()
    ns, out = cache / NAMESPACE, Path(extracted_path(entry))
    if op != "unpack":
        extract_entry(entry)  # a tree, its record, lock and stamp
    counted = kind != "hardlink"
    with pytest.MonkeyPatch.context() as mp:  # the hook, if any, goes before anything is checked
        # A new process: nothing remembered of the tree or of its stamp.
        mp.setattr(_archive, "_seen", {})
        mp.setattr(_used, "_fresh_until", {})
        planted: list[Path] = []
        if component in IN_PARTIAL:
            planted = _plant_in_partial(
                mp, ns, entry, component=component, kind=kind, outside=outside
            )
        else:
            plant(_position(cache, entry, component), kind, outside)
        before = state(outside, names_counted=counted)
        outcome: object = None
        with bounded(memory=kind == "sparse") as peak:
            try:
                outcome = extract_entry(entry, lock_timeout=2.0, verify=op == "verify")
            except FetchError as exc:
                outcome = exc  # a clear refusal
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if component in IN_PARTIAL:
        assert planted, "the archive was never read: nothing was planted"
    if component in ("vllm", "test_cache", "namespace"):
        assert isinstance(outcome, FetchError), outcome  # no way to the entry but through it
        return
    assert _partials(ns, entry) == [], "a partial directory was left behind"
    if isinstance(outcome, FetchError):
        # Nothing half published: no tree, the tree that was there, or what was planted there.
        there = os.lstat(out).st_mode if os.path.lexists(out) else 0
        trusted = component == "tree" or (op == "hit" and component in IN_TREE)
        if stat.S_ISDIR(there) and not trusted:
            _assert_complete(out)
        return
    assert outcome == out, outcome
    if op == "hit" and component in IN_TREE:
        # A hit trusts the tree, as it trusts a file's record (first-use verification does not).
        assert stat.S_ISDIR(os.lstat(out).st_mode)
    else:
        _assert_complete(out)


# -- a second uid --------------------------------------------------------------------------------

#: A co-tenant (``argv[1]``: its uid, gid and groups) that reads ``op path target`` lines and
#: answers ``done`` to each: ``swap`` renames ``path`` aside and plants a link to ``target``,
#: ``link`` plants that link where nothing is.
COTENANT = """
import json, os, sys
who = json.loads(sys.argv[1])
os.setgroups(who["groups"]); os.setgid(who["gid"]); os.setuid(who["uid"])
for line in sys.stdin:
    op, path, target = line.split()
    if op == "swap":
        os.rename(path, path + ".aside")
    os.symlink(target, path)
    print("done", flush=True)
"""


def _cotenant() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", COTENANT, json.dumps(member(UID_A))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ask(child: subprocess.Popen[str], op: str, path: Path, target: Path) -> None:
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(f"{op} {path} {target}\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"


@pytest.fixture
def volume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path, Path]]:
    """``(namespace, entry, private)``: a 2775 volume whose namespace a co-tenant owns, an
    archive cached in it by root, and a root-only directory outside the volume."""
    with shared_volume() as vol:
        private = vol.parent / "private"
        private.mkdir(mode=0o700)
        (private / "secret").write_bytes(b"root only")
        long_ago = time.time() - 40 * 86400
        os.utime(private / "secret", (long_ago, long_ago))
        cache = vol / "test_cache"
        ns = cache / NAMESPACE
        ns.mkdir(parents=True)
        for d in (cache, ns):
            os.chown(d, UID_A, GROUP)
            os.chmod(d, 0o2775)  # noqa: S103 - the volume's directories, as members make them
        for name in ("CACHEROOT", "CACHEROOT_ROOT"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
        fetcher = Fetcher(allow_file=True, retries=0, lock_timeout=2.0)
        entry = Path(
            fetcher.fetch(_tar(tmp_path / "src" / "data.tar").as_uri(), namespace=NAMESPACE)
        )
        fetcher.close()
        os.utime(private, (long_ago, long_ago))
        yield ns, entry, private


def _private_state(private: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The private directory's mode and times (a name made or removed in it moves its mtime, a
    listing its atime) and its secret's: ``lstat`` only, so taking it changes nothing."""
    top, secret = os.lstat(private), os.lstat(private / "secret")
    return (
        (top.st_mode, top.st_atime_ns, top.st_mtime_ns),
        (secret.st_mode, secret.st_size, secret.st_atime_ns, secret.st_mtime_ns),
    )


def test_a_cotenants_link_where_the_tree_belongs_is_not_followed(
    volume: tuple[Path, Path, Path],
) -> None:
    ns, entry, private = volume
    out = Path(extracted_path(entry))
    child = _cotenant()
    try:
        _ask(child, "link", out, private)
    finally:
        child.communicate(timeout=30)  # end of its input: it exits
    assert os.lstat(out).st_uid == UID_A
    before = _private_state(private)
    outcome: object
    with bounded(memory=False):
        try:
            outcome = extract_entry(entry, lock_timeout=2.0)
        except FetchError as exc:
            outcome = exc
    assert _private_state(private) == before, "something was made, read or listed behind the link"
    assert _partials(ns, entry) == []
    if not isinstance(outcome, FetchError):
        assert outcome == out
        _assert_complete(out)  # the link, the co-tenant's, was taken away: the name is ours


def test_a_namespace_swapped_for_a_link_mid_unpack_leads_nowhere(
    volume: tuple[Path, Path, Path],
) -> None:
    ns, entry, private = volume
    before = _private_state(private)
    child = _cotenant()
    real = tarfile.TarFile.extractfile
    swapped: list[bool] = []

    def extractfile(self: tarfile.TarFile, which: str | tarfile.TarInfo) -> IO[bytes] | None:
        if not swapped:
            _ask(child, "swap", ns, private)
            swapped.append(True)
        return real(self, which)

    outcome: object
    try:
        with pytest.MonkeyPatch.context() as mp, bounded(memory=False):
            mp.setattr(tarfile.TarFile, "extractfile", extractfile)
            try:
                outcome = extract_entry(entry, lock_timeout=2.0)
            except FetchError as exc:
                outcome = exc
    finally:
        child.communicate(timeout=30)  # end of its input: it exits
    assert swapped, "the archive was never read: nothing was swapped"
    assert stat.S_ISLNK(os.lstat(ns).st_mode)  # the co-tenant's link, left as it is
    assert _private_state(private) == before, "something was made, read or listed behind the link"
    real_ns = ns.with_name(ns.name + ".aside")
    assert _partials(real_ns, entry) == []
    if not isinstance(outcome, FetchError):
        # Published where the unpacking began: in the namespace the descriptors held.
        _assert_complete(real_ns / os.path.basename(extracted_path(entry)))
