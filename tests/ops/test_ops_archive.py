"""Archive extraction: good archives unpack and publish once; malicious ones publish nothing."""

from __future__ import annotations

import io
import os
import pickle
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import FetchError
from cacheroot.fetch._archive import (
    ArchiveError,
    archive_kind,
    extract,
    extract_entry,
    extracted_path,
    tree_digest,
    unpack,
)
from cacheroot.fetch._store import read_meta
from cacheroot.fetch._used import used_path

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

TarMember = tuple[tarfile.TarInfo, bytes | None]


def _info(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def make_tar(path: Path, members: Sequence[TarMember], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:  # type: ignore[call-overload]  # a w: mode
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def make_zip(path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for info, data in members:
            zf.writestr(info, data)
    return path


def good_members() -> list[TarMember]:
    return [
        (_info("pkg", tarfile.DIRTYPE, mode=0o755), None),
        (_info("pkg/config.json"), b'{"hidden_size": 8}'),
        (_info("pkg/bin/run.sh", mode=0o755), b"#!/bin/sh\necho hi\n"),
        (_info("pkg/alias.json", tarfile.SYMTYPE, linkname="config.json"), None),
        (_info("pkg/copy.json", tarfile.LNKTYPE, linkname="pkg/config.json"), None),
    ]


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_tar_unpacks_and_publishes_once(tmp_path: Path, mode: str) -> None:
    archive = make_tar(tmp_path / "a.tar", good_members(), mode)
    assert archive_kind(archive) == "tar"
    out = extract(archive)
    assert str(out) == extracted_path(archive)
    assert (out / "pkg/config.json").read_bytes() == b'{"hidden_size": 8}'
    assert os.readlink(out / "pkg/alias.json") == "config.json"
    assert (out / "pkg/alias.json").read_bytes() == b'{"hidden_size": 8}'
    assert (out / "pkg/copy.json").read_bytes() == b'{"hidden_size": 8}'
    assert os.stat(out / "pkg/bin/run.sh").st_mode & stat.S_IXUSR
    meta = read_meta(str(out))
    assert meta is not None
    assert meta["kind"] == "extracted"
    assert meta["tree_sha256"] == tree_digest(out)[0]
    # A second call finds the published tree and unpacks nothing.
    (out / "pkg/marker").write_text("kept")
    assert extract(archive) == out
    assert (out / "pkg/marker").exists()
    assert [p for p in os.listdir(tmp_path) if p.endswith(".partial")] == []


def test_zip_unpacks_with_internal_symlink(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("d/link.txt")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    archive = make_zip(
        tmp_path / "a.zip", [("d/", b""), ("d/f.txt", b"x" * 1000), (link, b"f.txt")]
    )
    assert archive_kind(archive) == "zip"
    out = extract(archive, tmp_path / "out")
    assert (out / "d/f.txt").read_bytes() == b"x" * 1000
    assert os.readlink(out / "d/link.txt") == "f.txt"


def _outside(tmp_path: Path) -> Path:
    return tmp_path / "outside"


MALICIOUS_TAR: dict[str, Callable[[Path], list[TarMember]]] = {
    "dotdot": lambda _: [(_info("ok.txt"), b"ok"), (_info("../outside"), b"pwned")],
    "nested dotdot": lambda _: [(_info("a/b/../../../outside"), b"pwned")],
    "absolute": lambda t: [(_info(str(_outside(t))), b"pwned")],
    "symlink absolute": lambda t: [
        (_info("ln", tarfile.SYMTYPE, linkname=str(t)), None),
        (_info("ln/outside"), b"pwned"),
    ],
    "symlink dotdot": lambda _: [(_info("ln", tarfile.SYMTYPE, linkname="../outside"), None)],
    "symlink chain": lambda _: [
        # Each link looks harmless on its own; together b resolves to the target's parent.
        (_info("a", tarfile.SYMTYPE, linkname="."), None),
        (_info("b", tarfile.SYMTYPE, linkname="a/.."), None),
    ],
    "hardlink outside": lambda t: [(_info("h", tarfile.LNKTYPE, linkname=str(t / "secret")), None)],
    "hardlink dotdot": lambda _: [(_info("h", tarfile.LNKTYPE, linkname="../secret"), None)],
    "hardlink to a link": lambda _: [
        (_info("s", tarfile.SYMTYPE, linkname="x"), None),
        (_info("h", tarfile.LNKTYPE, linkname="s"), None),
    ],
    "char device": lambda _: [(_info("null", tarfile.CHRTYPE, devmajor=1, devminor=3), None)],
    "block device": lambda _: [(_info("sda", tarfile.BLKTYPE, devmajor=8, devminor=0), None)],
    "fifo": lambda _: [(_info("pipe", tarfile.FIFOTYPE), None)],
}


def _assert_nothing_published(tmp_path: Path, dest: Path) -> None:
    assert not dest.exists()
    assert not _outside(tmp_path).exists()
    assert (tmp_path / "secret").read_text() == "secret"
    leftovers = [p for p in os.listdir(dest.parent) if "partial" in p or p.startswith(".dest")]
    assert leftovers == []


@pytest.mark.parametrize("case", sorted(MALICIOUS_TAR))
def test_malicious_tar_is_refused(tmp_path: Path, case: str) -> None:
    (tmp_path / "secret").write_text("secret")
    cache = tmp_path / "cache"
    cache.mkdir()
    archive = make_tar(cache / "evil.tar.gz", MALICIOUS_TAR[case](tmp_path), "w:gz")
    dest = cache / "dest"
    with pytest.raises(ArchiveError) as info:
        extract(archive, dest)
    assert "nothing was published" in str(info.value)
    assert str(archive) in str(info.value)
    _assert_nothing_published(tmp_path, dest)


def _zip_link(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def _zip_fifo() -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo("pipe")
    info.external_attr = (stat.S_IFIFO | 0o644) << 16
    return info, b""


MALICIOUS_ZIP: dict[str, Callable[[Path], list[tuple[zipfile.ZipInfo | str, bytes]]]] = {
    "dotdot": lambda _: [("ok.txt", b"ok"), ("../outside", b"pwned")],
    "backslash dotdot": lambda _: [("a\\..\\..\\outside", b"pwned")],
    "absolute": lambda t: [(str(_outside(t)), b"pwned")],
    "symlink out": lambda _: [_zip_link("ln", "../outside")],
    "symlink absolute": lambda t: [_zip_link("ln", str(t))],
    "fifo": lambda _: [_zip_fifo()],
}


@pytest.mark.parametrize("case", sorted(MALICIOUS_ZIP))
def test_malicious_zip_is_refused(tmp_path: Path, case: str) -> None:
    (tmp_path / "secret").write_text("secret")
    cache = tmp_path / "cache"
    cache.mkdir()
    archive = make_zip(cache / "evil.zip", MALICIOUS_ZIP[case](tmp_path))
    dest = cache / "dest"
    with pytest.raises(ArchiveError):
        extract(archive, dest)
    _assert_nothing_published(tmp_path, dest)


def test_zip_bomb_over_the_cap_is_refused(tmp_path: Path) -> None:
    # 64 MiB of zeros deflate to about 64 KiB: a ratio of 1000, over a 16 MiB cap.
    archive = tmp_path / "bomb.zip"
    with (
        zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        zf.open("zeros.bin", "w", force_zip64=True) as f,
    ):
        for _ in range(64):
            f.write(bytes(1 << 20))
    assert archive.stat().st_size < 1 << 20
    with pytest.raises(ArchiveError, match="bound of 16777216"):
        extract(archive, tmp_path / "dest", max_size=16 << 20)
    assert not (tmp_path / "dest").exists()
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []


def test_tar_bomb_counted_by_bytes_written(tmp_path: Path) -> None:
    # Many members, each under the cap alone, together over it.
    members = [(_info(f"f{i}"), bytes(1 << 20)) for i in range(20)]
    archive = make_tar(tmp_path / "many.tar.xz", members, "w:xz")
    with pytest.raises(ArchiveError, match="bound"):
        extract(archive, tmp_path / "dest", max_size=8 << 20)
    assert not (tmp_path / "dest").exists()


def test_member_count_is_bounded(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "n.zip", [(f"f{i}", b"") for i in range(50)])
    with pytest.raises(ArchiveError, match="40 members"):
        extract(archive, tmp_path / "dest", max_members=40)


def test_damaged_and_foreign_files_are_clear_errors(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", good_members(), "w:gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[:-40])
    with pytest.raises(ArchiveError, match="damaged or truncated"):
        extract(cut, tmp_path / "dest")
    text = tmp_path / "plain.txt"
    text.write_text("not an archive")
    with pytest.raises(ArchiveError, match="not a zip or tar"):
        extract(text, tmp_path / "dest2")
    assert not (tmp_path / "dest").exists()
    assert not (tmp_path / "dest2").exists()


def test_archive_error_is_a_picklable_value_error() -> None:
    exc = ArchiveError("/c/a.zip", "../x", "escapes")
    assert isinstance(exc, FetchError)
    assert isinstance(exc, ValueError)
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    assert (back.archive, back.member, back.reason) == ("/c/a.zip", "../x", "escapes")
    assert str(back) == str(exc)


def test_unpack_into_private_directory(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar", good_members())
    target = tmp_path / "t"
    target.mkdir()
    unpack(archive, target)
    assert sorted(os.listdir(target / "pkg")) == [
        "alias.json",
        "bin",
        "config.json",
        "copy.json",
    ]


def test_extract_entry_unpacks_once_next_to_the_entry(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", good_members(), "w:gz")
    out = extract_entry(archive)
    assert str(out) == extracted_path(archive)
    assert (out / "pkg/config.json").exists()
    assert Path(used_path(str(out))).exists()  # "last used" starts at the unpacking
    (out / "pkg/marker").write_text("kept")
    assert extract_entry(archive) == out
    assert (out / "pkg/marker").exists()
    evil = make_tar(tmp_path / "evil.tar", [(_info("../x"), b"x")])
    with pytest.raises(ArchiveError):
        extract_entry(evil)
    assert not os.path.exists(extracted_path(evil))


@pytest.mark.parametrize(
    "member",
    ["a" * 256 + ".json", "dir/" + "b" * 300, "\u00e9" * 128 + ".txt", "/".join(["d" * 200] * 25)],
    ids=["long-name", "long-nested", "long-in-bytes", "long-path"],
)
@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_member_names_the_file_system_cannot_hold_are_refused(
    tmp_path: Path, member: str, kind: str
) -> None:
    if kind == "tar":
        archive = make_tar(tmp_path / "long.tar", [(_info(member), b"x")])
    else:
        archive = make_zip(tmp_path / "long.zip", [(member, b"x")])
    dest = tmp_path / "cache" / "dest"
    with pytest.raises(ArchiveError) as info:
        extract(archive, dest)
    assert info.value.member == member
    assert "longer than this file system allows" in info.value.reason
    assert "bytes" in info.value.reason
    assert not dest.exists()
    assert [p for p in os.listdir(dest.parent) if "partial" in p] == []


def test_the_unpack_bound_names_the_knob_that_raises_it(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "big.tar", [(_info("f"), bytes(4096))])
    with pytest.raises(ArchiveError) as info:
        extract(archive, tmp_path / "dest", max_size=1000)
    message = str(info.value)
    assert "max_unpacked=" in message  # fetch(..., extract=True)
    assert "max_unpacked =" in message  # a manifest's [[asset]]
    with pytest.raises(ArchiveError) as unsafe:
        extract(make_tar(tmp_path / "evil.tar", [(_info("../x"), b"x")]), tmp_path / "d2")
    assert "max_unpacked" not in str(unsafe.value)  # an unsafe archive is not a large one


def test_a_file_where_the_unpacked_directory_belongs_is_a_clear_error(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar", good_members())
    in_the_way = Path(extracted_path(archive))
    in_the_way.write_bytes(b"a file some other entry put here")
    with pytest.raises(ArchiveError) as info:
        extract_entry(archive)
    assert f"{in_the_way} is a file" in str(info.value)
    assert in_the_way.read_bytes() == b"a file some other entry put here"
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []
