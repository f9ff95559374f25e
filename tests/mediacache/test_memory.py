"""Memory: a downloaded body is held once, however it was encoded and however large it is.

A gzip-encoded body of zeros (64 MiB decoded from about 64 KiB on the wire; 400 MiB in the slow
run) is fetched and stored by a child process, whose peak RSS (``ru_maxrss``) is compared with
what it was before. The body the caller gets is one copy: the growth must stay well under two.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.mediacache import MediaCache, ResponseTooLarge, entry_name

#: How many decoded bytes the transport is asked for at a time.
CHUNK = 1 << 20

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin

CHILD = """
import json, os, resource, sys
from cacheroot.mediacache import MediaCache, entry_name
directory, small, big = sys.argv[1:4]
cache = MediaCache(directory, max_size_bytes=1 << 30, max_download_bytes=1 << 30)
cache.get(small)  # imports, the connection pool, a spooled body: all warm
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
body = cache.get(big)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stored = os.path.getsize(os.path.join(directory, entry_name(big)))
print(json.dumps({"grew": (after - before) * 1024, "size": len(body), "stored": stored,
                  "zeros": body.count(0)}))
"""


def _peak_growth(tmp_path: Path, origin: Origin, size: int) -> dict[str, int]:
    encoded = {"Content-Encoding": "gzip", "Cache-Control": "max-age=60"}
    small = origin.route("/small.bin", gzip.compress(bytes(3 << 20), 1), headers=encoded)
    big = origin.route("/zeros.bin", gzip.compress(bytes(size), 1), headers=encoded)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "media"), small, big],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, int] = json.loads(done.stdout)
    assert report["size"] == report["stored"] == report["zeros"] == size
    return report


def test_peak_rss_is_one_copy_of_a_gzip_body(tmp_path: Path, origin: Origin) -> None:
    size = 64 << 20
    grew = _peak_growth(tmp_path, origin, size)["grew"]
    assert grew < 1.3 * size, f"peak RSS grew by {grew / size:.2f}x a {size >> 20} MiB body"


@pytest.mark.slow
def test_peak_rss_is_one_copy_of_a_400_mib_gzip_body(tmp_path: Path, origin: Origin) -> None:
    size = 400 << 20
    grew = _peak_growth(tmp_path, origin, size)["grew"]
    assert grew < 1.15 * size, f"peak RSS grew by {grew / size:.2f}x a {size >> 20} MiB body"


def test_decoded_bytes_are_limited_while_streaming(tmp_path: Path, origin: Origin) -> None:
    """64 MiB of zeros in about 64 KiB of gzip: the transfer stops one chunk past the limit."""
    limit = 1 << 20
    url = origin.route(
        "/bomb.bin", gzip.compress(bytes(64 << 20), 1), headers={"Content-Encoding": "gzip"}
    )
    cache = MediaCache(tmp_path / "media", max_download_bytes=limit)
    with pytest.raises(ResponseTooLarge) as info:
        cache.get(url)
    assert limit < info.value.size <= limit + CHUNK
    assert not os.path.exists(os.path.join(cache.directory, entry_name(url)))


@pytest.mark.parametrize("content", [b"tiny", b""], ids=["short", "empty"])
def test_bytes_on_the_wire_are_limited_too(tmp_path: Path, origin: Origin, content: bytes) -> None:
    """A gzip member, then 3 MiB the decoder swallows, with no Content-Length."""
    limit = 1 << 20
    body = gzip.compress(content) + bytes(range(256)) * (3 << 12)
    url = origin.route("/padded.bin", body, headers={"Content-Encoding": "gzip"}, length=False)
    cache = MediaCache(tmp_path / "media", max_download_bytes=limit)
    with pytest.raises(ResponseTooLarge) as info:
        cache.get(url)
    assert info.value.size > limit
    assert not os.path.exists(os.path.join(cache.directory, entry_name(url)))
