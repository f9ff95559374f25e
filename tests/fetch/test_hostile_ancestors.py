"""Links planted above an entry's directory: between the cache root and the namespace.

A job that can write the volume (a member of its group, on a ``2775`` volume) replaces a
directory above an entry (``vllm``, ``vllm/test_cache``, a parent of a nested namespace) with a
symbolic link to a directory outside the volume. A fetch that runs later (as root, say) must
refuse it and create nothing there: no entry, no record, no ``.lock``, no ``.used``, no
directory. Each test plants the link for real, fetches from the loopback origin, and checks the
outside directory stays empty, the error names the link on the volume (not a descriptor's
``/proc/self/fd`` path), nothing was asked of the origin, and nothing hung.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, TABLE, resolve
from cacheroot.fetch import DownloadError, Fetcher, LockTimeout, cache_dir
from cacheroot.fetch.store import PathLock, lock_path
from cacheroot.fetch.vllm_compat import download_to_vllm_test_cache

from .origin import Origin, body, sha256
from .test_hostile_volume import promptly
from .test_multiuser import UID_A, member, run_as, said, shared_volume

#: What a refusal starts with, after the link's path and its target.
REFUSED = "cacheroot does not write through a link inside the cache"


def _everything_under(top: Path) -> list[str]:
    """Every name below ``top`` (files, directories, links), relative, sorted."""
    found = []
    for here, dirs, files in os.walk(top):
        found += [os.path.relpath(os.path.join(here, n), top) for n in dirs + files]
    return sorted(found)


def _use_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``root`` this process's cache root, its layout derived as the start-up hook does."""
    for each in (CACHEROOT_APPLIED, *(v.name for v in TABLE)):
        monkeypatch.delenv(each, raising=False)
    monkeypatch.setenv(CACHEROOT, str(root))
    for each, value in resolve(os.environ).applied().items():
        monkeypatch.setenv(each, value)


@pytest.mark.parametrize(
    ("planted", "namespace"),
    [
        ("vllm", "downloads"),
        ("vllm/test_cache", "downloads"),
        ("vllm/test_cache/gpt_oss", "gpt_oss/tiktoken"),
        ("vllm/test_cache/gpt_oss/tiktoken", "gpt_oss/tiktoken"),
    ],
)
def test_a_link_above_the_entry_is_refused_and_nothing_is_made_outside(
    origin: Origin, name: str, tmp_path: Path, planted: str, namespace: str
) -> None:
    root = Path(os.environ[CACHEROOT])
    assert cache_dir() == str(root / "vllm" / "test_cache")  # the levels named above
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    link = root / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    url = origin.url(f"/ok/{name}")

    with pytest.raises(DownloadError) as info:
        promptly(lambda: Fetcher().fetch(url, namespace=namespace))

    message = str(info.value)
    assert message.startswith(f"{link} is a symbolic link, to {str(outside)!r}: {REFUSED}")
    assert "/proc/self/fd" not in message
    assert info.value.errno == errno.ELOOP
    assert _everything_under(outside) == []
    assert origin.gets[f"/ok/{name}"] == 0
    assert os.readlink(link) == str(outside)  # refused, not removed: it may be someone's


def test_a_fifo_above_the_entry_is_refused_promptly(
    origin: Origin, name: str, tmp_path: Path
) -> None:
    root = Path(os.environ[CACHEROOT])
    (root / "vllm").mkdir(parents=True)
    fifo = root / "vllm" / "test_cache"
    os.mkfifo(fifo)
    url = origin.url(f"/ok/{name}")

    with pytest.raises(DownloadError) as info:
        promptly(lambda: Fetcher().fetch(url), fifo)

    assert "/proc/self/fd" not in str(info.value)
    assert str(fifo) in str(info.value)
    assert origin.gets[f"/ok/{name}"] == 0


def test_a_cache_directory_set_outside_the_root_is_walked_from_there(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache directory set by hand, outside the root, is the operator's own: reached as set,
    everything below it without following a link."""
    cache = tmp_path / "elsewhere" / "cache"
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
    url = origin.url(f"/ok/{name}")
    data = body(name)
    path = Fetcher().fetch(url, sha256=sha256(data), namespace="a/b")
    assert path.parent == cache / "a" / "b"
    assert path.read_bytes() == data
    outside = tmp_path / "outside"
    outside.mkdir()
    (cache / "c").symlink_to(outside)
    with pytest.raises(DownloadError, match=REFUSED):
        promptly(lambda: Fetcher().fetch(url, namespace="c/d"))
    assert _everything_under(outside) == []


#: Plant ``args["link"]`` -> ``args["target"]`` as a member of the volume would: the directory
#: there (made by an earlier fetch) is renamed aside first, as the volume's modes allow.
PLANT = """
link = args["link"]
if os.path.lexists(link):
    os.rename(link, link + ".aside")
os.symlink(args["target"], link)
say(planted=os.readlink(link))
"""


@pytest.mark.parametrize("planted", ["vllm", "vllm/test_cache"])
def test_a_member_of_the_volume_cannot_redirect_a_root_fetch(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    with shared_volume() as vol:
        private = vol.parent / "private"  # root's alone: the member can neither read nor write
        private.mkdir(mode=0o700)
        _use_root(vol, monkeypatch)
        first = Fetcher().fetch(origin.url(f"/ok/first{name}"))  # the tree, made by root
        assert first.parent == vol / "vllm" / "test_cache" / "downloads"
        link = vol / planted
        plant = run_as(member(UID_A), vol, PLANT, {"link": str(link), "target": str(private)})
        assert said(plant) == {"planted": str(private)}
        url = origin.url(f"/ok/{name}")

        with pytest.raises(DownloadError) as info:
            promptly(lambda: Fetcher().fetch(url, sha256=sha256(body(name))))

        assert str(info.value).startswith(
            f"{link} is a symbolic link, to {str(private)!r}: {REFUSED}"
        )
        assert _everything_under(private) == []
        assert origin.gets[f"/ok/{name}"] == 0


def test_a_lock_timeout_names_the_lock_on_the_volume(origin: Origin, name: str) -> None:
    """The lock is taken through the held directory; its timeout still names its real path."""
    url = origin.url(f"/ok/{name}")
    fetcher = Fetcher(lock_timeout=0.3)
    dest = str(fetcher.path(url))
    os.makedirs(os.path.dirname(dest))
    with PathLock(lock_path(dest), timeout=1.0), pytest.raises(LockTimeout) as info:
        promptly(lambda: fetcher.fetch(url))
    assert info.value.path == lock_path(dest)
    assert str(info.value).startswith(f"waited 0.3 s for the lock on {lock_path(dest)}")
    assert origin.gets[f"/ok/{name}"] == 0


def test_vllms_own_helper_refuses_a_link_above_its_entry_too(
    origin: Origin, name: str, tmp_path: Path
) -> None:
    root = Path(os.environ[CACHEROOT])
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    link = root / "vllm"
    link.symlink_to(outside)
    url = origin.url(f"/ok/{name}")

    with pytest.raises(OSError, match=REFUSED) as info:
        promptly(lambda: download_to_vllm_test_cache(url, "gsm8k", local_only=False))

    assert str(info.value).startswith(f"{link} is a symbolic link, to {str(outside)!r}")
    assert _everything_under(outside) == []
    assert origin.gets[f"/ok/{name}"] == 0
