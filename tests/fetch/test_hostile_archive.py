"""Archives that try to reach past their target, and unpacked trees that go stale or change.

The archives are built with :mod:`tarfile` member by member, as an attacker would write them;
the tests unpack them for real and look at what exists outside the target afterwards.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_VERIFY
from cacheroot.fetch import Fetcher
from cacheroot.fetch._archive import ArchiveError, extract

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin


def _tar(path: Path, members: list[tuple[str, str, bytes]]) -> Path:
    """Write ``path``: ``(kind, name, data)`` members, kind ``"file"``, ``"dir"`` or ``"link"``
    (``data`` is then the link's target)."""
    with tarfile.open(path, "w") as tf:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tf.addfile(info)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def test_a_chain_of_links_creates_nothing_outside_the_target(tmp_path: Path) -> None:
    # Each passes the lexical check: a -> . stays inside, a/a/b -> .. names "a"; but with a
    # being the target itself, b is the target's parent, and b/evil/c would be made there.
    archive = _tar(
        tmp_path / "chain.tar",
        [("link", "a", b"."), ("link", "a/a/b", b".."), ("link", "b/evil/c", b"x")],
    )
    box = tmp_path / "box"
    box.mkdir()
    with pytest.raises(ArchiveError, match="nothing was published"):
        extract(archive, box / "out")
    assert sorted(os.listdir(box)) == []
    assert sorted(os.listdir(tmp_path)) == ["box", "chain.tar"]


def test_a_deep_chain_past_the_lexical_check_creates_nothing_outside(tmp_path: Path) -> None:
    # d/e/up -> .. is d; k -> d/e/up/../.. reads as "d" but is the target's parent, through up.
    archive = _tar(
        tmp_path / "deep.tar",
        [
            ("dir", "d/e", b""),
            ("link", "d/e/up", b".."),
            ("link", "k", b"d/e/up/../.."),
            ("link", "k/evil/c", b"x"),
        ],
    )
    box = tmp_path / "box"
    box.mkdir()
    with pytest.raises(ArchiveError, match="nothing was published"):
        extract(archive, box / "out")
    assert sorted(os.listdir(box)) == []
    assert sorted(os.listdir(tmp_path)) == ["box", "deep.tar"]


def test_a_link_to_the_target_itself_is_refused(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "self.tar", [("file", "f", b"x"), ("link", "sub/up", b"..")])
    with pytest.raises(ArchiveError, match=r"member 'sub/up' is a symbolic link '\.\.' to the"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_ordinary_link_inside_the_target_still_works(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "ok.tar",
        [("file", "lib/real.so", b"elf"), ("link", "lib/alias.so", b"real.so")],
    )
    out = extract(archive, tmp_path / "out")
    assert (out / "lib" / "alias.so").read_bytes() == b"elf"
    assert os.readlink(out / "lib" / "alias.so") == "real.so"


def test_a_new_archive_under_the_same_entry_is_unpacked_again(
    tmp_path: Path, origin: Origin
) -> None:
    src = tmp_path / "data.tar"
    _tar(src, [("file", "v", b"one")])
    local = Fetcher(allow_file=True)
    first = local.fetch(src.as_uri(), extract=True)
    assert (first / "v").read_bytes() == b"one"
    _tar(src, [("file", "v", b"two")])
    entry = local.path(src.as_uri())
    os.unlink(entry)  # as a changed pin would: the entry is fetched again
    again = Fetcher(allow_file=True).fetch(src.as_uri(), extract=True)
    assert again == first
    assert (again / "v").read_bytes() == b"two"


def test_first_use_catches_a_tree_changed_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "data.tar"
    _tar(src, [("file", "v", b"one")])
    tree = Fetcher(allow_file=True).fetch(src.as_uri(), extract=True)
    (tree / "v").write_bytes(b"evil")
    assert (Fetcher(allow_file=True).fetch(src.as_uri(), extract=True) / "v").read_bytes() == (
        b"evil"
    )  # without verification a hit trusts the tree, as it trusts a file's record
    monkeypatch.setenv(CACHEROOT_VERIFY, "first-use")
    tree = Fetcher(allow_file=True).fetch(src.as_uri(), extract=True)
    assert (tree / "v").read_bytes() == b"one"
