"""Time per ``get`` on a cache hit of a 1 MiB body: cacheroot.mediacache vs requests-cache.

Not a test: it prints figures (medians, ratios) for the README. Run from the repository root::

    .venv/bin/python benchmarks/bench_mediacache.py            # 2000 hits per arm
    .venv/bin/python benchmarks/bench_mediacache.py --hits 300 # quicker

One local origin (``http.server`` on 127.0.0.1) serves a 1 MiB body with
``Cache-Control: max-age=3600`` and an ``ETag``. Each arm is warmed with one request, then timed
call by call (``perf_counter_ns``); the arms are interleaved in rounds so that drift in machine
load hits each alike, and medians are reported. Target for mediacache: <= 0.5 ms per hit.

Arms (a missing package is skipped with a note; neither is a dependency of cacheroot, install
them into the dev venv with ``uv pip install requests-cache hishel``):

- ``mediacache``: ``MediaCache.get`` (sidecar read, ``open``, one ``read``, ``utime``);
- ``mediacache aget``: the same through ``asyncio.to_thread`` (one event loop, awaited in turn);
- ``requests-cache fs``: ``CachedSession`` with the filesystem backend, ``cache_control=True``
  (its default JSON serializer, which base64-encodes binary bodies);
- ``requests-cache fs pickle``: the same with ``serializer="pickle"`` (its fastest option);
- ``requests-cache fs lru``: the same with ``max_cache_bytes`` (its size-bounded LRU variant);
- ``hishel sqlite``: hishel's ``requests`` ``CacheAdapter``, RFC 9111 rules, SQLite storage;
- ``no cache``: plain ``requests.Session.get`` over loopback, for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import requests

from cacheroot.mediacache import MediaCache

if TYPE_CHECKING:
    from collections.abc import Callable

BODY = os.urandom(1 << 20)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Quiet."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Cache-Control", "max-age=3600")
        self.send_header("ETag", '"v1"')
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)


def _arms(url: str, root: str) -> tuple[dict[str, Callable[[], bytes]], list[str]]:
    arms: dict[str, Callable[[], bytes]] = {}
    notes: list[str] = []
    cache = MediaCache(os.path.join(root, "mediacache"))
    arms["mediacache"] = lambda: cache.get(url)
    loop = asyncio.new_event_loop()
    arms["mediacache aget"] = lambda: loop.run_until_complete(cache.aget(url))
    try:
        import requests_cache  # type: ignore[import-not-found,unused-ignore]
        from requests_cache.backends.filesystem import (  # type: ignore[import-not-found,unused-ignore]
            FileCache,
        )

        fs = requests_cache.CachedSession(
            os.path.join(root, "rc-fs"), backend="filesystem", cache_control=True
        )
        arms["requests-cache fs"] = lambda: fs.get(url).content
        fsp = requests_cache.CachedSession(
            os.path.join(root, "rc-fsp"),
            backend="filesystem",
            serializer="pickle",
            cache_control=True,
        )
        arms["requests-cache fs pickle"] = lambda: fsp.get(url).content
        lru_backend = FileCache(os.path.join(root, "rc-lru"), max_cache_bytes=64 << 20)
        lru = requests_cache.CachedSession(backend=lru_backend, cache_control=True)
        arms["requests-cache fs lru"] = lambda: lru.get(url).content
    except ImportError:
        notes.append("requests-cache not installed: `uv pip install requests-cache` to compare")
    try:
        from hishel import SqliteStorage  # type: ignore[import-not-found,unused-ignore]
        from hishel.requests import (  # type: ignore[import-not-found,unused-ignore]
            CacheAdapter,
        )

        hs = requests.Session()
        storage = SqliteStorage(database_path=os.path.join(root, "hishel.db"))
        hs.mount("http://", CacheAdapter(storage=storage, rfc=True))
        arms["hishel sqlite"] = lambda: hs.get(url).content
    except ImportError:
        notes.append("hishel not installed: `uv pip install hishel` to compare")
    plain = requests.Session()
    arms["no cache"] = lambda: plain.get(url).content
    return arms, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=2000, help="timed hits per arm")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/image.jpg"
    with tempfile.TemporaryDirectory(prefix="bench-mediacache-") as root:
        arms, notes = _arms(url, root)
        for name, call in arms.items():  # warm: the first call downloads and stores
            if call() != BODY or call() != BODY:
                print(f"{name}: wrong body", file=sys.stderr)
                return 1
        times: dict[str, list[float]] = {name: [] for name in arms}
        per_round = max(1, args.hits // args.rounds)
        for _ in range(args.rounds):
            for name, call in arms.items():
                n = per_round if name != "no cache" else max(1, per_round // 10)
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    call()
                    times[name].append((time.perf_counter_ns() - t0) / 1e6)
    server.shutdown()

    base = statistics.median(times["mediacache"])
    print(f"1 MiB body, cache hit, {per_round * args.rounds} calls per arm, median / p90 (ms)")
    print(f"{'arm':<24}{'median':>9}{'p90':>9}{'vs mediacache':>15}")
    for name, samples in times.items():
        med = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:<24}{med:>9.3f}{p90:>9.3f}{med / base:>14.1f}x")
    for note in notes:
        print(f"note: {note}")
    verdict = "meets" if base <= 0.5 else "misses"
    print(f"mediacache hit: {base:.3f} ms ({verdict} the 0.5 ms target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
