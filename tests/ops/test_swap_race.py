"""The long race: a co-tenant swaps the test cache's directories for links while root works.

On a 2775 volume a member of the group (another uid) owns the test cache and a namespace in it.
For :data:`SECONDS`, a child running as that member swaps each of the two, again and again, for
a link to a root-only directory outside the volume that holds the names a fetch, ``verify`` and
``prune`` would use, and back. Meanwhile this process, as root, fetches new entries into the
namespace and runs ``ls``, ``verify`` and ``prune`` over the cache in a loop; in a second race
it unpacks archives (``fetch(..., extract=True)``) and builds trees (``build_once``) there. At
the end nothing in the root-only directory was read, listed, written, chmod-ed or removed, no
operation raised anything but a fetch's own clear :class:`~cacheroot.fetch.FetchError`, and
some of them went through (the race is not one of refusals only).

A stress run (``nox -s stress``): the default run has the same swaps at fixed moments
(``test_prune_removal_swap.py``, ``test_cache_walk_swap.py``) and the planted-object matrices.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import time
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import Fetcher, FetchError, build_once
from cacheroot.fetch._upkeep.cache import entries, prune, verify

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.fetch.test_multiuser import GROUP, UID_A, member, shared_volume

    from .origin import Origin
else:
    from fetch.test_multiuser import GROUP, UID_A, member, shared_volume

pytestmark = pytest.mark.slow

#: How long the race runs.
SECONDS = 60.0
NAMESPACE = "models"

#: The co-tenant: drop to ``argv[1]``, then swap each directory of ``argv[2]`` for a link to
#: ``argv[3]`` and back until ``argv[4]`` (a deadline) passes; print how many swaps were made.
SWAPPER = """
import json, os, sys, time
who = json.loads(sys.argv[1])
os.setgroups(who["groups"]); os.setgid(who["gid"]); os.setuid(who["uid"])
targets, private, deadline = json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
swaps = 0
while time.time() < deadline:
    for here in targets:
        try:
            os.rename(here, here + ".aside")
            os.symlink(private, here)
            swaps += 1
        except OSError:
            continue  # root made or pruned a directory meanwhile: the race goes on
        time.sleep(0.0005)
        for step in (lambda: os.unlink(here), lambda: os.rename(here + ".aside", here)):
            try:
                step()
            except OSError:
                pass
print(swaps, flush=True)
"""


def _state(private: Path, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The ``lstat`` of ``private`` and of ``names`` in it (never a listing: that stamps it)."""
    out: dict[str, tuple[int, ...]] = {}
    for name in ["", *names]:
        st = os.lstat(private / name if name else private)
        out[name] = (
            st.st_mode,
            st.st_uid,
            st.st_size,
            st.st_nlink,
            st.st_atime_ns,
            st.st_mtime_ns,
            st.st_ctime_ns,
        )
    return out


@contextlib.contextmanager
def _race(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, float]]:
    """The race around the ``with`` body: yields the test cache and the deadline; the body
    works as root until then. Afterwards nothing outside the volume changed."""
    with shared_volume() as vol:
        private = vol.parent / "private"
        private.mkdir(mode=0o700)
        long_ago = time.time() - 40 * 86400
        names = [
            "weights.bin",
            ".weights.bin.meta.json",
            ".weights.bin.lock",
            ".weights.bin.used",
            NAMESPACE,
        ]
        for name in names[:-1]:
            (private / name).write_bytes(b"root only\n")
        (private / NAMESPACE).mkdir()
        for name in names:
            os.utime(private / name, (long_ago, long_ago))
        os.utime(private, (long_ago, long_ago))
        cache = vol / "test_cache"
        ns = cache / NAMESPACE
        ns.mkdir(parents=True)
        for d in (cache, ns):
            os.chown(d, UID_A, GROUP)
            os.chmod(d, 0o2775)  # noqa: S103 - the volume's directories, as members make them
        # The volume is the operator's root (taken as given); everything below it is walked.
        monkeypatch.setenv("CACHEROOT", str(vol))
        monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
        before = _state(private, names)
        deadline = time.time() + SECONDS
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SWAPPER,
                json.dumps(member(UID_A)),
                json.dumps([str(ns), str(cache)]),
                str(private),
                str(deadline),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            yield cache, deadline
        finally:
            out, _ = child.communicate(timeout=60)
        swaps = int(out.strip())
        assert swaps > 1000, f"only {swaps} swaps were made: the race was not run"
        after = _state(private, names)
        assert after == before, sorted(os.listdir(private)) + sorted(
            os.listdir(private / NAMESPACE)
        )
        assert not stat.S_ISLNK(os.lstat(cache).st_mode)


def test_a_minute_of_swaps_reaches_nothing_outside_the_volume(
    origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = fetched = 0
    fetcher = Fetcher(retries=0, lock_timeout=5.0)
    try:
        with _race(monkeypatch) as (cache, deadline):
            while time.time() < deadline:
                rounds += 1
                url = origin.serve(f"e{rounds}.bin", os.urandom(4096))
                with contextlib.suppress(FetchError):  # refused: a link on the way, said so
                    fetcher.fetch(url, namespace=NAMESPACE)
                    fetched += 1
                entries(str(cache))
                verify(str(cache))
                prune(str(cache), max_size=8192, grace=0.0)
    finally:
        fetcher.close()
    assert rounds > 20, f"only {rounds} rounds of fetch, ls, verify and prune ran"
    assert fetched > 0, "no fetch went through: the race tested refusals only"


def _tar(name: str) -> bytes:
    """A small tar archive: a directory, a file and a link inside it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for member, data in ((f"{name}/weights.bin", os.urandom(2048)), ("config.json", b"{}")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("latest")
        link.type, link.linkname = tarfile.SYMTYPE, f"{name}/weights.bin"
        tar.addfile(link)
    return buf.getvalue()


def _builder(out: Path) -> None:
    (out / "sub").mkdir()
    (out / "sub" / "kernel.bin").write_bytes(os.urandom(2048))
    (out / "latest").symlink_to("sub/kernel.bin")


def test_a_minute_of_swaps_reaches_nothing_outside_while_trees_are_made(
    origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = made = 0
    fetcher = Fetcher(retries=0, lock_timeout=5.0)
    try:
        with _race(monkeypatch) as (cache, deadline):
            while time.time() < deadline:
                rounds += 1
                url = origin.serve(f"a{rounds}.tar", _tar(f"a{rounds}"))
                with contextlib.suppress(FetchError):  # refused: a link on the way, said so
                    fetcher.fetch(url, namespace=NAMESPACE, extract=True)
                    made += 1
                with contextlib.suppress(FetchError):
                    build_once(f"tree{rounds}", _builder, namespace=NAMESPACE)
                    made += 1
                verify(str(cache))
                prune(str(cache), max_size=8192, grace=0.0)
    finally:
        fetcher.close()
    assert rounds > 20, f"only {rounds} rounds of extract, build_once, verify and prune ran"
    assert made > 0, "no tree was made: the race tested refusals only"
