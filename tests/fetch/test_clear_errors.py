"""What a user is told instead of a traceback: what was expected, what was found, what to do.

Each case is a real fault: an entry replaced by a directory on disk, an origin that sends a
header no parser should take (``Content-Length: ²``, which ``str.isdigit`` accepts), and the
command line's exit status for each.
"""

from __future__ import annotations

import errno
import time
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import CacheMissError, DownloadError, Fetcher
from cacheroot.fetch._cli import FAILED
from cacheroot.fetch.store import partials, retry_after

from .origin import Origin, body, sha256
from .procs import cli

if TYPE_CHECKING:
    from pathlib import Path


def _replace_with_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("someone's files")


@pytest.mark.parametrize("pinned", [True, False])
def test_an_entry_replaced_by_a_directory_is_named_not_a_traceback(
    origin: Origin, fetcher: Fetcher, name: str, pinned: bool
) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name)) if pinned else None
    path = fetcher.fetch(url, sha256=digest)
    _replace_with_directory(path)
    for f in (fetcher, Fetcher()):  # one that remembers the file, one that never saw it
        with pytest.raises(DownloadError) as info:
            f.fetch(url, sha256=digest)
        message = str(info.value)
        assert info.value.errno == errno.EISDIR
        assert f"{path} is a directory" in message
        assert "cacheroot cache verify" in message
    with pytest.raises(DownloadError, match="is a directory"):
        fetcher.fetch(url, sha256=digest, offline=True)
    assert (path / "inside.txt").read_text() == "someone's files"  # nothing of it was touched
    assert partials(str(path)) == []
    assert origin.gets[f"/ok/{name}"] == 1  # nothing downloaded for it


def test_the_command_line_says_so_too(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = Fetcher().fetch(url)
    _replace_with_directory(path)
    done = cli("fetch", url)
    assert done.returncode == FAILED
    assert "Traceback" not in done.stderr
    assert f"{path} is a directory" in done.stderr


def test_content_length_that_is_not_ascii_digits(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/badlength/{name}")
    with pytest.raises(DownloadError) as info:
        fetcher.fetch(url)
    message = str(info.value)
    assert "Content-Length" in message
    assert "'\u00b2'" in message
    assert "expected a decimal number" in message
    assert not fetcher.path(url).exists()
    assert origin.gets[f"/badlength/{name}"] == 1  # a broken origin, not a busy one


@pytest.mark.parametrize("value", ["\u00b2", "\u00b9\u00b3", "1\u00b2", "+3", " 3 x", "-1", "3.5"])
def test_retry_after_accepts_ascii_digits_only(value: str) -> None:
    assert retry_after(value) is None


def test_a_garbled_retry_after_falls_back_to_backoff(
    origin: Origin, fetcher: Fetcher, name: str
) -> None:
    url = origin.url(f"/status/503/1/{name}?retry_after=\u00b2")
    started = time.monotonic()
    assert fetcher.fetch(url, sha256=sha256(body(name))).read_bytes() == body(name)
    assert time.monotonic() - started < 1.0  # the fixture's backoff, not a parsed wait
    assert origin.gets[f"/status/503/1/{name}"] == 2


def test_offline_miss_is_still_a_miss(origin: Origin, fetcher: Fetcher, name: str) -> None:
    with pytest.raises(CacheMissError):
        fetcher.fetch(origin.url(f"/ok/{name}"), offline=True)


def test_a_file_name_that_would_collide_with_an_unpacked_archive_is_refused(
    origin: Origin, fetcher: Fetcher, name: str, tmp_path: Path
) -> None:
    import io
    import tarfile

    from cacheroot.fetch import ManifestError, parse_manifest

    archive = tmp_path / "data.tar"
    with tarfile.open(archive, "w") as tf:
        info = tarfile.TarInfo("a.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"a"))
    local = Fetcher(allow_file=True)
    unpacked = local.fetch(archive.as_uri(), filename="data.tar", extract=True)
    assert unpacked.name == "data.tar.extracted"
    with pytest.raises(ValueError, match=r"'data\.tar\.extracted'.*reserved for unpacked archives"):
        fetcher.fetch(origin.url(f"/ok/{name}"), filename="data.tar.extracted")
    assert origin.gets[f"/ok/{name}"] == 0
    assert (unpacked / "a.txt").read_bytes() == b"a"
    with pytest.raises(ManifestError, match=r"field 'filename'.*reserved for unpacked archives"):
        parse_manifest(
            f'[[asset]]\nurl = "http://h/x"\nsha256 = "{"0" * 64}"\nnamespace = "n"\n'
            'filename = "x.extracted"\n'
        )
