"""The run's tag (``CACHEROOT_TAG``, set by ``nox -s tests-cuda`` / ``tests-rocm``) picks the
vendor JIT caches: the tagged vendor's variables are set under the root, the other's are not
(and an untagged run sets neither). Rows the layout never sets stay unset under every tag.
"""

from __future__ import annotations

import os
from pathlib import Path

from _cacheroot_layout import DEFAULT, NEVER

from cacheroot.envs import CACHEROOT_TAG, TABLE, TAGS

from .conftest import under


def test_vendor_caches_follow_the_tag(isolated_cache: Path) -> None:
    tag = (os.environ.get(CACHEROOT_TAG) or "").strip().lower()
    for row in TABLE:
        if set(row.tags) == set(TAGS):
            continue
        value = os.environ.get(row.name)
        if row.mode == NEVER:  # documented, never set, whatever the tag
            assert value is None, (row.name, value)
            continue
        if row.mode != DEFAULT:  # opt-in rows: tests/envs/test_layout.py checks them per tag
            continue
        if tag in row.tags:
            assert value is not None, row.name
            assert under(Path(value), isolated_cache), (row.name, value)
        else:
            assert value is None, (row.name, value)
