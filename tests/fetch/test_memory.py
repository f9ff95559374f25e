"""Streaming: memory does not grow with the file."""

from __future__ import annotations

import json
import subprocess
import sys

from .origin import Origin, body, sha256

CHILD = """
import json, resource, sys
from cacheroot.fetch import Fetcher
f = Fetcher()
f.fetch(sys.argv[1])  # warm up imports and the connection pool
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
f.fetch(sys.argv[2], sha256=sys.argv[3])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before}))
"""


def test_peak_rss_does_not_follow_size(origin: Origin, name: str) -> None:
    size = 48 << 20
    big = origin.url(f"/ok/{name}?size={size}")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            origin.url(f"/ok/small{name}"),
            big,
            sha256(body(name, size)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    grew = json.loads(out.stdout)["grew_kib"]
    assert grew < 16 * 1024, f"peak RSS grew by {grew} KiB while fetching 48 MiB"
