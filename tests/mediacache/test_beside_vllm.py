"""Our cache beside vLLM's own (``VLLM_MEDIA_CACHE``): never one directory, and apart, safe.

vLLM 0.33's eviction (``MediaConnector._maybe_evict``) lists its directory and deletes files
whose names do not start with a dot, expired ones and then the least recently modified, until
it is under its bound. A directory shared with it would lose our bodies (and vLLM would trip
over our ``.locks`` folder), so the layout refuses it and ``from_env`` says how to fix it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE
from cacheroot.mediacache import MediaCache, entry_name

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import Clock
    from .origin import Origin

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def vllm_style_evict(directory: str) -> list[str]:
    """What vLLM 0.33's eviction can delete at worst: every regular file not named ``.*``."""
    gone = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if not name.startswith(".") and os.path.isfile(path):
            os.unlink(path)
            gone.append(name)
    return gone


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("media", "media"),
        ("media", "media/"),
        ("media/./", "media"),
        ("media/ours", "media"),
        ("media", "media/vllm"),
    ],
)
def test_one_directory_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ours: str, theirs: str
) -> None:
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, f"{tmp_path}/{ours}")
    monkeypatch.setenv(VLLM_MEDIA_CACHE, f"{tmp_path}/{theirs}")
    with pytest.raises(ValueError, match="separate directories") as info:
        MediaCache.from_env()
    message = str(info.value)
    assert CACHEROOT_MEDIA_CACHE in message
    assert VLLM_MEDIA_CACHE in message
    assert "turn one of the caches off" in message
    assert "absolute" not in message  # both are absolute: that hint would mislead
    assert not os.path.exists(tmp_path / "media")  # refused before anything was created


def test_one_directory_through_a_link_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "media")
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, str(tmp_path / "link" / "ours"))
    monkeypatch.setenv(VLLM_MEDIA_CACHE, str(tmp_path / "media"))
    with pytest.raises(ValueError, match="once links are resolved") as info:
        MediaCache.from_env()
    assert CACHEROOT_MEDIA_CACHE in str(info.value)
    assert VLLM_MEDIA_CACHE in str(info.value)


def test_a_relative_directory_still_gets_the_absolute_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, "media")
    with pytest.raises(ValueError, match=f"set {CACHEROOT_MEDIA_CACHE} to an absolute"):
        MediaCache.from_env()


def test_side_by_side_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, str(tmp_path / "media"))
    monkeypatch.setenv(VLLM_MEDIA_CACHE, str(tmp_path / "media-vllm"))  # a prefix, not a parent
    cache = MediaCache.from_env()
    assert cache is not None
    assert cache.directory == str(tmp_path / "media")


def test_both_opted_in_are_apart(monkeypatch: pytest.MonkeyPatch, isolated_cache: Path) -> None:
    monkeypatch.setenv("CACHEROOT_OPT_IN", f"{CACHEROOT_MEDIA_CACHE},{VLLM_MEDIA_CACHE}")
    cache = MediaCache.from_env()
    assert cache is not None
    assert cache.directory == str(isolated_cache / "mediacache")


def test_vllm_eviction_next_door_leaves_ours_alone(
    tmp_path: Path, origin: Origin, clock: Clock
) -> None:
    theirs = tmp_path / "vllm-media"
    theirs.mkdir()
    (theirs / "0123456789abcdef0123.png").write_bytes(PNG)  # an entry of vLLM's own
    cache = MediaCache(tmp_path / "mediacache", clock=clock)
    url = origin.route("/a.png", PNG)
    cache.get(url)
    assert vllm_style_evict(str(theirs)) == ["0123456789abcdef0123.png"]
    assert cache.get(url) == PNG
    assert origin.gets["/a.png"] == 1
    assert entry_name(url) in os.listdir(cache.directory)


def test_why_they_must_not_share(tmp_path: Path, origin: Origin, clock: Clock) -> None:
    """In one directory, vLLM's eviction takes our bodies: every use becomes a download."""
    shared = tmp_path / "shared"
    cache = MediaCache(shared, clock=clock)  # built directly: from_env would refuse this
    url = origin.route("/a.png", PNG)
    cache.get(url)
    assert vllm_style_evict(str(shared)) == [entry_name(url)]
    assert cache.get(url) == PNG
    assert origin.gets["/a.png"] == 2
