"""Media: a model server's media connector downloaded the same image URL on every request.

Here the images go through :class:`cacheroot.mediacache.MediaCache` (opted in by the layout),
and a second request for a URL is served from the cache directory under the root.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .assets import by_namespace
from .conftest import under

if TYPE_CHECKING:
    from collections.abc import Callable

    from .assets import Asset

IMAGES = by_namespace("media")


def decode_png(data: bytes) -> None:
    """What a connector's image decoder checks, enough to refuse a truncated or empty body."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG")
    start = data.index(b"IDAT") + 4
    end = data.index(b"IEND") - 8
    zlib.decompress(data[start:end])


@pytest.mark.parametrize("image", IMAGES, ids=[i.path.rsplit("/", 1)[-1] for i in IMAGES])
def test_media_is_served_from_the_media_cache(
    image: Asset,
    media_cache: Any,
    asset_url: Callable[[str], str],
    isolated_cache: Path,
) -> None:
    assert under(Path(media_cache.directory), isolated_cache)
    url = asset_url(image.path)
    first = media_cache.get(url, validate=decode_png)
    assert hashlib.sha256(first).hexdigest() == image.sha256
    before = media_cache.stats()["hits"]
    again = media_cache.get(url, validate=decode_png)
    assert again == first
    assert media_cache.stats()["hits"] == before + 1
    assert media_cache.usage() >= len(first)
