"""The planted-object matrix of the media cache, as the vLLM process runs it.

The cache comes from the environment (``CACHEROOT_MEDIA_CACHE``, as the vLLM plugin takes it) in
this process, running as root, on a root shared by a group (``chgrp GROUP && chmod 2775``).
One object is planted at one component (the cache directory, an entry's body, its record, the
directory lock, the ledger, the striped locks' directory, an entry's striped lock), then a get
runs: a miss (nothing cached for the URL), a hit, or a miss that must evict another entry to
stay under the bound. Each case checks that nothing outside the volume was read, listed,
written, chmod-ed or removed, that the get ended in time, with a sparse giant that little
memory was allocated, and that the get returned the origin's bytes or raised a clear error (the
cache's own, or the ``OSError`` saying the directory is unusable).

Every case runs twice over, by who plants: root (this process), and a member of the group, a
second uid (:func:`tests.planted.plant_as`), whose objects are that uid's, as a co-tenant's
are; the get always runs as root. What the cache decides by owner (a link followed only where
only root could have made it, a file of a user the volume trusts) sees both. The member plants
the kinds in ``MEMBER_KINDS``, not a device node or a hard link to a root-only file, which the
kernel refuses it (see ``tests/fetch/test_planted_matrix.py``); it needs root to change uid and
skips elsewhere.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_MEDIA_CACHE
from cacheroot.mediacache import MediaCache, MediaCacheError, entry_name

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.fetch.test_multiuser import GROUP, UID_A, need_root
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )

    from .origin import Origin
else:
    from fetch.test_multiuser import GROUP, UID_A, need_root
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
OTHER = b"\x89PNG\r\n\x1a\n" + bytes(range(255, -1, -1)) * 8

#: The components, and whether each is a directory.
COMPONENTS = {
    "directory": True,
    "entry": False,
    "record": False,
    "dir-lock": False,
    "usage": False,
    "locks": True,
    "key-lock": False,
}
OPERATIONS = ("get-miss", "get-hit", "get-evict")


def _cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for op in OPERATIONS:
            for component, is_dir in COMPONENTS.items():
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    if planter == "member" and (kind not in MEMBER_KINDS or kind in MEMBER_REFUSED):
                        continue  # the root planter covers the rest (see the module docstring)
                    id_ = f"{op}-{component}-{kind}-{planter}"
                    yield pytest.param(op, component, kind, planter, id=id_)


def _position(directory: Path, url: str, component: str) -> Path:
    name = entry_name(url)
    if component == "key-lock":
        (found,) = os.listdir(directory / ".locks")  # one key fetched: one striped lock
        return directory / ".locks" / found
    return {
        "directory": directory,
        "entry": directory / name,
        "record": directory / f".{name}.meta.json",
        "dir-lock": directory / ".lock",
        "usage": directory / ".usage",
        "locks": directory / ".locks",
    }[component]


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    planter: str,
    origin: Origin,
    isolated_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if planter == "member":
        need_root()
    group_volume(isolated_cache, GROUP)
    directory = isolated_cache / "mediacache"
    monkeypatch.setenv(CACHEROOT_MEDIA_CACHE, str(directory))
    outside = outside_dir(tmp_path / "outside")
    url = origin.route("/picture.png", PNG, headers={"Cache-Control": "max-age=3600"})
    other = origin.route("/other.png", OTHER, headers={"Cache-Control": "max-age=3600"})
    bound = len(PNG) + len(OTHER) // 2 if op == "get-evict" else 1 << 20
    cache = MediaCache.from_env(max_size_bytes=bound)
    assert cache is not None
    assert cache.get(url) == PNG  # a real entry, record, ledger and locks
    if op == "get-miss":
        for name in (entry_name(url), f".{entry_name(url)}.meta.json"):
            os.unlink(directory / name)
    where = _position(directory, url, component)
    if planter == "member":
        plant_as(UID_A, GROUP, where, kind, outside, volume=isolated_cache)
        assert os.lstat(where).st_uid == UID_A
    else:
        plant(where, kind, outside)
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    wanted = OTHER if op == "get-evict" else PNG
    outcome: object = None
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = MediaCache.from_env(max_size_bytes=bound).get(  # type: ignore[union-attr]
                other if op == "get-evict" else url
            )
        except (OSError, MediaCacheError) as exc:
            outcome = exc
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if not isinstance(outcome, BaseException):
        assert outcome == wanted
    else:
        # Only an unusable cache directory may fail a get: anything planted inside it is a miss.
        assert component == "directory", repr(outcome)
        assert str(directory) in str(outcome), str(outcome)
