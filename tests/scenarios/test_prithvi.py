"""Prithvi GeoTIFFs: upstream's processor plugin re-downloaded them on every request.

Here each tile is fetched into ``$VLLM_TEST_CACHE/prithvi/`` and opened with tifffile, which
reads the pixels and the GeoTIFF tags as the geospatial processor would.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np
import pytest
import tifffile

from cacheroot.fetch._plugin.fixtures import CachedFile

from .assets import TIFF_SHAPE, by_namespace
from .conftest import under

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .assets import Asset

TILES = by_namespace("prithvi")


@pytest.mark.parametrize("tile", TILES, ids=[t.path.rsplit("/", 1)[-1] for t in TILES])
def test_geotiff_is_fetched_into_the_test_cache_and_opens(
    tile: Asset,
    cached_file: CachedFile,
    asset_url: Callable[[str], str],
    test_cache_dir: Path,
    isolated_cache: Path,
) -> None:
    path = cached_file(asset_url(tile.path), sha256=tile.sha256, namespace="prithvi")
    assert path.parent == test_cache_dir / "prithvi"
    assert path.name.endswith(tile.path.rsplit("/", 1)[-1])
    assert under(path, isolated_cache)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tile.sha256

    with tifffile.TiffFile(path) as tif:
        pixels = tif.asarray()
        geo = tif.geotiff_metadata
    assert pixels.shape == TIFF_SHAPE
    assert pixels.dtype == np.int16
    assert geo is not None
    assert int(geo["ProjectedCSTypeGeoKey"]) == 32633
    assert geo["ModelPixelScale"][:2] == [30.0, 30.0]
    seed = int(tile.path.rsplit(".", 2)[-2][-3:])
    expected = np.random.default_rng(seed).integers(0, 10000, size=TIFF_SHAPE, dtype=np.int16)
    np.testing.assert_array_equal(pixels, expected)
