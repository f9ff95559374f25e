"""A root that cannot work, as the downloads say it: what is wrong with the root, said once.

A root that is a file is named "not a directory" (not a read-only or foreign cache), a relative
root is named as the layout names it (not as "its parent VLLM_CACHE_ROOT is unusable"), and
``cacheroot warm`` says either once, not once for each asset.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, TABLE
from cacheroot.fetch import DownloadError, Fetcher, FetchError
from cacheroot.fetch._cli import FAILED
from cacheroot.fetch._warm.warm import NOT_ATTEMPTED

from .origin import Origin, body, sha256
from .procs import cli

if TYPE_CHECKING:
    from pathlib import Path

#: What ``cacheroot fetch`` and the library say of the relative root ``rel``.
RELATIVE = (
    "_VLLM_TEST_CACHE cannot be derived: CACHEROOT='rel' is not an absolute path; set it to an "
    "absolute path (or set _VLLM_TEST_CACHE itself); `cacheroot doctor` explains the layout"
)


def _root(monkeypatch: pytest.MonkeyPatch, root: str) -> None:
    """Point this process (and the commands it starts) at ``root`` alone: the isolating fixture
    set each derived value as a value of its own, which would win over any root."""
    for name in (*(v.name for v in TABLE), CACHEROOT_APPLIED):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CACHEROOT, root)


def _not_a_directory(root: Path, below: str) -> str:
    return (
        f"cannot create {root}/{below}: {root} is not a directory (expected a directory of the "
        "cache, found a file); remove it, or point CACHEROOT (or _VLLM_TEST_CACHE) at a directory"
    )


def _manifest(tmp_path: Path, origin: Origin, names: list[str]) -> Path:
    entries = [
        f'[[asset]]\nurl = "{origin.url(f"/ok/{n}")}"\nsha256 = "{sha256(body(n))}"\n'
        'namespace = "roots"\n'
        for n in names
    ]
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("\n".join(entries))
    return manifest


def test_a_root_that_is_a_file_is_not_a_directory(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.write_text("a file, not a directory\n")
    _root(monkeypatch, str(root))
    url = origin.url(f"/ok/{name}")
    done = cli("fetch", url)
    assert done.returncode == FAILED
    problem = _not_a_directory(root, "vllm/test_cache/downloads")
    assert done.stderr == f"cacheroot fetch: {problem}\n"
    with pytest.raises(DownloadError) as info:
        Fetcher().fetch(url)
    assert str(info.value) == problem
    assert info.value.errno == errno.ENOTDIR
    assert root.read_text() == "a file, not a directory\n"
    assert origin.gets[f"/ok/{name}"] == 0


def test_a_relative_root_is_named(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _root(monkeypatch, "rel")
    url = origin.url(f"/ok/{name}")
    done = cli("fetch", url)
    assert done.returncode == FAILED
    assert done.stderr == f"cacheroot fetch: {RELATIVE}\n"
    with pytest.raises(FetchError) as info:
        Fetcher().fetch(url)
    assert str(info.value) == RELATIVE


def test_warm_says_a_relative_root_once(
    origin: Origin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"rel{i:02}.bin" for i in range(12)]
    manifest = _manifest(tmp_path, origin, names)
    _root(monkeypatch, "rel")
    done = cli("warm", str(manifest))
    assert done.returncode == 1
    assert (done.stdout + done.stderr).count("CACHEROOT='rel'") == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"warning: {RELATIVE}"
    assert lines[1:13] == [
        f"failed: [[asset]] #{i + 1} {origin.url(f'/ok/{n}')}: {NOT_ATTEMPTED}"
        for i, n in enumerate(names)
    ]
    assert sum(origin.gets[f"/ok/{n}"] for n in names) == 0


def test_warm_says_a_root_that_is_a_file_once(
    origin: Origin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"file{i:02}.bin" for i in range(12)]
    manifest = _manifest(tmp_path, origin, names)
    root = tmp_path / "root"
    root.write_text("a file, not a directory\n")
    _root(monkeypatch, str(root))
    done = cli("warm", str(manifest))
    assert done.returncode == 1
    problem = _not_a_directory(root, "vllm/test_cache")
    assert (done.stdout + done.stderr).count("is not a directory") == 1
    assert done.stdout.splitlines()[0] == f"warning: {problem}"
    assert done.stdout.count(NOT_ATTEMPTED) == 12
    assert sum(origin.gets[f"/ok/{n}"] for n in names) == 0
