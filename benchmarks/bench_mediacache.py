"""Time per ``get`` on a cache hit of a 1 MiB body: cacheroot.mediacache vs requests-cache, hishel.

Not a test: it prints figures for docs/explanation/benchmarks.md. Run from the repository root::

    .venv/bin/python benchmarks/bench_mediacache.py          # 7 rounds of 150 calls per arm
    .venv/bin/python benchmarks/bench_mediacache.py --quick  # smoke test: 5 rounds of 20

A local origin in its own process (so that it does not share the client's GIL) serves a 1 MiB
body with ``Cache-Control: max-age=3600`` and an ``ETag``, and counts the requests it gets. Each
arm is warmed (the first call downloads and stores), then the arms run in interleaved rounds,
the order rotated each round (``benchmarks/_rounds.py``): in a round each arm makes ``--calls``
calls, each timed alone (``perf_counter_ns``), and the round's sample is their median. Per arm
the median and min-max of the round samples are printed, with the ratio to mediacache taken
round by round. The origin's count shows that a hit made no request. Target for mediacache:
<= 0.5 ms per hit.

Arms (a missing package is skipped with a note; neither is a dependency of cacheroot, install
them into the dev venv with ``uv pip install requests-cache hishel``):

- ``mediacache``: ``MediaCache.get`` (sidecar read, ``open``, one ``read``, ``utime``);
- ``mediacache aget``: the same through ``asyncio.to_thread``, one event loop, awaited in turn;
- ``requests-cache fs json``: ``CachedSession`` with the filesystem backend and
  ``cache_control=True``, its default serializer for that backend (JSON: binary bodies are
  base64-encoded);
- ``requests-cache fs pickle``: the same with ``serializer="pickle"``;
- ``requests-cache sqlite``: its default backend (SQLite, pickle serializer);
- ``hishel sqlite``: hishel's ``requests`` ``CacheAdapter``, RFC 9111 rules, SQLite storage;
- ``no cache``: plain ``requests.Session.get`` over loopback, for scale.

requests-cache's other serializers (``orjson``, ``ujson``, ``bson``, ``yaml``) need extra
packages; JSON and pickle are the two it ships with, and the fastest of its arms here is the
one the headline ratio is taken against.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._rounds import MIN_ROUNDS, Conditions, Summary, run_rounds, table
from cacheroot.mediacache import MediaCache
from tests.origin import Server, static

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.origin import Exchange

#: Where the origin serves the body, and where it reports how many requests it got for it.
BODY_PATH, COUNT_PATH = "/image.jpg", "/count"
#: The arms' names, in the order of the first round.
MEDIACACHE, REQUESTS_CACHE, NO_CACHE = "mediacache", "requests-cache", "no cache"


def serve(body_file: str) -> None:
    """The origin (``--serve FILE``): print the port, serve until killed.

    The body with freshness headers at :data:`BODY_PATH`; :data:`COUNT_PATH`, the number of
    requests for the body (the toolkit's record, ``tests/origin``).
    """
    body = Path(body_file).read_bytes()
    fresh = {"Cache-Control": "max-age=3600"}
    with Server(methods=("GET",)) as server:
        server.route(BODY_PATH, static(body, etag='"v1"', content_type="image/jpeg", headers=fresh))

        def count(ex: Exchange) -> None:
            payload = str(server.count(BODY_PATH)).encode()
            ex.respond(200, payload, {"Content-Type": "text/plain", "Cache-Control": "no-store"})

        server.route(COUNT_PATH, count)
        print(server.port, flush=True)
        threading.Event().wait()


def start_origin(body_file: str) -> tuple[subprocess.Popen[str], str]:
    """The origin in its own process; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", body_file], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def arms_for(url: str, root: str) -> tuple[dict[str, Callable[[], bytes]], list[str]]:
    """Each arm's call (returns the body), and notes on those skipped."""
    arms: dict[str, Callable[[], bytes]] = {}
    notes: list[str] = []
    cache = MediaCache(os.path.join(root, "mediacache"))
    arms[MEDIACACHE] = lambda: cache.get(url)
    loop = asyncio.new_event_loop()
    arms[f"{MEDIACACHE} aget"] = lambda: loop.run_until_complete(cache.aget(url))
    try:
        import requests_cache  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        notes.append("requests-cache not installed: `uv pip install requests-cache` to compare")
    else:
        fs_json = requests_cache.CachedSession(
            os.path.join(root, "rc-fs-json"), backend="filesystem", cache_control=True
        )
        arms[f"{REQUESTS_CACHE} fs json"] = lambda: fs_json.get(url).content
        fs_pickle = requests_cache.CachedSession(
            os.path.join(root, "rc-fs-pickle"),
            backend="filesystem",
            serializer="pickle",
            cache_control=True,
        )
        arms[f"{REQUESTS_CACHE} fs pickle"] = lambda: fs_pickle.get(url).content
        sqlite = requests_cache.CachedSession(
            os.path.join(root, "rc-sqlite"), backend="sqlite", cache_control=True
        )
        arms[f"{REQUESTS_CACHE} sqlite"] = lambda: sqlite.get(url).content
    try:
        from hishel import SqliteStorage  # type: ignore[import-not-found,unused-ignore]
        from hishel.requests import (  # type: ignore[import-not-found,unused-ignore]
            CacheAdapter,
        )
    except ImportError:
        notes.append("hishel not installed: `uv pip install hishel` to compare")
    else:
        hs = requests.Session()
        storage = SqliteStorage(database_path=os.path.join(root, "hishel.db"))
        hs.mount("http://", CacheAdapter(storage=storage, rfc=True))
        arms["hishel sqlite"] = lambda: hs.get(url).content
    plain = requests.Session()
    arms[NO_CACHE] = lambda: plain.get(url).content
    return arms, notes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with what was not given taken from the --quick or the full preset."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 5 rounds of 20 calls")
    parser.add_argument("--calls", type=int, help="timed calls per arm per round (default 150)")
    parser.add_argument("--rounds", type=int, help="rounds (default: one per arm)")
    parser.add_argument("--serve", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.calls is None:
        args.calls = 20 if args.quick else 150
    return args


def main(argv: list[str] | None = None) -> int:
    """Warm every arm, time them in rotated rounds, print the figures."""
    args = parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    conditions = Conditions.now()
    print(conditions.header())
    with tempfile.TemporaryDirectory(prefix="bench-mediacache-") as root:
        body = os.urandom(1 << 20)
        body_file = os.path.join(root, "body")
        Path(body_file).write_bytes(body)
        origin, base = start_origin(body_file)
        url = base + BODY_PATH
        try:
            arms, notes = arms_for(url, root)
            for name, call in arms.items():  # warm: the first call downloads and stores
                if call() != body or call() != body:
                    print(f"{name}: wrong body", file=sys.stderr)
                    return 1
            rounds = args.rounds or (MIN_ROUNDS if args.quick else max(MIN_ROUNDS, len(arms)))
            mode = "quick (a smoke test, not figures to report)" if args.quick else "full"
            print(f"mode: {mode}; {rounds} rounds of {args.calls} calls per arm, rotated")
            requests_seen = dict.fromkeys(arms, 0)

            def timed(name: str, call: Callable[[], bytes]) -> Callable[[], float]:
                def run() -> float:
                    before = requests.get(base + COUNT_PATH, timeout=10).text
                    each = []
                    for _ in range(args.calls):
                        t0 = time.perf_counter_ns()
                        call()
                        each.append((time.perf_counter_ns() - t0) / 1e6)
                    after = requests.get(base + COUNT_PATH, timeout=10).text
                    requests_seen[name] += int(after) - int(before)
                    return statistics.median(each)

                return run

            result = run_rounds(
                {name: timed(name, call) for name, call in arms.items()},
                rounds,
                each=lambda r: print(f"  {r.last()} ms", flush=True),
            )
        finally:
            origin.kill()
            origin.wait()

    rows = {name: result.summary(name) for name in arms}
    ratios = {name: Summary.of(result.ratios(name, MEDIACACHE)) for name in arms}
    print(f"\n1 MiB body, cache hit; per arm, the median per-call time of each of {rounds} rounds")
    for line in table(rows, unit="ms", fmt=".3f", ratios=ratios, ratio_title="x mediacache"):
        print(line)
    print("requests to the origin during the timed calls (0: every call was a hit):")
    print("  " + ", ".join(f"{name} {n}" for name, n in requests_seen.items()))
    for note in notes:
        print(f"note: {note}")
    others = [n for n in arms if n.startswith(REQUESTS_CACHE)]
    if others:
        fastest = min(others, key=lambda n: rows[n].median)
        print(
            f"fastest requests-cache arm here: {fastest}; it takes {ratios[fastest].text()} "
            "times mediacache's time (median, min-max over rounds)"
        )
    base_ms = rows[MEDIACACHE].median
    verdict = "meets" if base_ms <= 0.5 else "misses"
    print(f"mediacache hit: {base_ms:.3f} ms ({verdict} the 0.5 ms target)")
    print(conditions.footer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
