"""Benchmark of cacheroot.fetch against curl, pooch and tiktoken on a local static server.

Not a test: it prints figures (medians, ratios) for the README. Run from the repository root::

    .venv/bin/python benchmarks/bench_fetch.py --size 1024 --repeat 3

Measured side by side in one run, on the same file and server (``benchmarks/fetch_server.py``,
``sendfile`` from the page cache):

1. cold verified download: ``fetch(url, sha256=...)`` vs ``curl -o FILE`` and vs
   ``curl -o FILE && sha256sum FILE`` (targets: >= 0.9 of curl's speed, faster than curl+sha256sum),
   and, for reference, vs ``curl -o FILE && sync FILE`` (fetch fsyncs; plain curl does not);
2. peak RSS of a cold fetch in a fresh process (target <= 64 MiB), next to the seed's
   ``urlopen(url).read()`` pattern;
3. time per call on a hit vs ``pooch.retrieve`` with a known hash and tiktoken's
   ``read_file_cached`` with an expected hash (target < 0.1 ms); a missing package is skipped
   with a note (``uv pip install pooch`` adds it to the dev venv; it is not a dependency);
4. 32 processes asking for one URL at once vs one process alone (wall time; target <= 1.2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Everything a fetch needs is imported before the gate; the child reports the moment it has
# the file (CLOCK_MONOTONIC is system-wide), so interpreter teardown is not counted.
CHILD_GATED = """
import sys, time
import filelock
from cacheroot.fetch import fetch
import cacheroot.fetch._http
print("ready", flush=True)
sys.stdin.readline()
fetch(sys.argv[1], sha256=sys.argv[2])
print(time.monotonic(), flush=True)
"""

CHILD_RSS = """
import json, resource, sys
from cacheroot.fetch import fetch
import cacheroot.fetch._http
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fetch(sys.argv[1], sha256=sys.argv[2])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before": before, "after": after}))
"""

CHILD_NAIVE = """
import json, resource, sys, urllib.request
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
data = urllib.request.urlopen(sys.argv[1]).read()
with open(sys.argv[2], "wb") as f:
    f.write(data)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before": before, "after": after}))
"""


def make_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes to ``path``; return their sha256."""
    h = hashlib.sha256()
    with path.open("wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 16 << 20))
            h.update(block)
            f.write(block)
            left -= len(block)
        # Written back now rather than by the kernel half a minute later, in the middle of
        # whichever download is being timed then.
        f.flush()
        os.fsync(f.fileno())
    return h.hexdigest()


def start_server(root: Path) -> tuple[subprocess.Popen[str], str]:
    """The static server in its own process (it must not share our GIL)."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fetch_server.py"), str(root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def env_with(cache: Path) -> dict[str, str]:
    """The environment of a child that fetches into ``cache``."""
    return {**os.environ, "VLLM_TEST_CACHE": str(cache)}


def cold(url: str, digest: str, work: Path, repeat: int) -> dict[str, list[float]]:
    """Cold verified download vs curl (with and without fsync) and curl + sha256sum.

    Interleaved run by run, fetch first in even runs and last in odd ones. ``curl -o`` leaves
    its file dirty in the page cache, where it is deleted before the kernel writes it back:
    it never pays for the disk, while fetch must fsync. ``curl -o FILE && sync FILE`` is the
    like-for-like figure for durability; the targets are against plain curl all the same.
    """
    from cacheroot.fetch import Fetcher

    times: dict[str, list[float]] = {
        "fetch": [],
        "curl": [],
        "curl+sha256sum": [],
        "curl+fsync": [],
    }
    # Warm up: the miss path's imports (requests, filelock) are paid once per process, not
    # per download; curl's start-up, by contrast, stays in its figures.
    os.environ["VLLM_TEST_CACHE"] = str(work / "warmup")
    Fetcher().fetch(url.rsplit("/", 1)[0] + "/small.bin", progress=False)
    out = work / "curl.bin"
    curl = ["curl", "-sS", "-o", str(out), url]

    def timed(name: str, *commands: list[str]) -> str:
        t = time.perf_counter()
        for command in commands:
            got = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        times[name].append(time.perf_counter() - t)
        out.unlink()
        return got

    def with_curl() -> None:
        timed("curl", curl)
        digest_out = timed("curl+sha256sum", curl, ["sha256sum", str(out)])
        assert digest_out.split()[0] == digest
        timed("curl+fsync", curl, ["sync", str(out)])

    have_curl = shutil.which("curl") is not None
    for run in range(repeat):
        if have_curl and run % 2:
            with_curl()
        cache = work / f"cold{run}"
        os.environ["VLLM_TEST_CACHE"] = str(cache)
        fetcher = Fetcher()
        t = time.perf_counter()
        path = fetcher.fetch(url, sha256=digest, progress=False)
        times["fetch"].append(time.perf_counter() - t)
        fetcher.close()
        path.unlink()
        if have_curl and not run % 2:
            with_curl()
    return times


def rss(url: str, digest: str, work: Path) -> dict[str, float]:
    """Peak RSS (MiB) of a cold fetch and of the read-it-all pattern, each in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD_RSS, url, digest],
        env=env_with(work / "rss"),
        capture_output=True,
        text=True,
        check=True,
    )
    mine = json.loads(out.stdout)
    shutil.rmtree(work / "rss")
    naive_out = work / "naive.bin"
    out = subprocess.run(
        [sys.executable, "-c", CHILD_NAIVE, url, str(naive_out)],
        capture_output=True,
        text=True,
        check=True,
    )
    naive = json.loads(out.stdout)
    naive_out.unlink()
    return {
        "fetch_peak_mib": mine["after"] / 1024,
        "fetch_growth_mib": (mine["after"] - mine["before"]) / 1024,
        "naive_peak_mib": naive["after"] / 1024,
    }


def hits(url: str, digest: str, work: Path, calls: int, slow_calls: int) -> dict[str, object]:
    """Seconds per call on a hit: fetch vs pooch.retrieve and tiktoken's read_file_cached."""
    from cacheroot.fetch import Fetcher

    os.environ["VLLM_TEST_CACHE"] = str(work / "hits")
    fetcher = Fetcher()
    fetcher.fetch(url, sha256=digest, progress=False)
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            fetcher.fetch(url, sha256=digest)
        batches.append((time.perf_counter() - t) / calls)
    result: dict[str, object] = {"fetch": statistics.median(batches)}
    shutil.rmtree(work / "hits")

    try:
        import pooch  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        result["pooch"] = "skipped: pooch is not installed (uv pip install pooch)"
    else:
        pooch.get_logger().setLevel("WARNING")
        kwargs = {"known_hash": f"sha256:{digest}", "path": str(work / "pooch"), "fname": "d.bin"}
        pooch.retrieve(url, progressbar=False, **kwargs)
        each = []
        for _ in range(slow_calls):
            t = time.perf_counter()
            pooch.retrieve(url, progressbar=False, **kwargs)
            each.append(time.perf_counter() - t)
        result["pooch"] = statistics.median(each)
        shutil.rmtree(work / "pooch")

    try:
        import tiktoken.load
    except ImportError:
        result["tiktoken"] = "skipped: tiktoken is not installed"
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(work / "tiktoken")
        tiktoken.load.read_file_cached(url, digest)
        each = []
        for _ in range(slow_calls):
            t = time.perf_counter()
            tiktoken.load.read_file_cached(url, digest)
            each.append(time.perf_counter() - t)
        result["tiktoken"] = statistics.median(each)
        shutil.rmtree(work / "tiktoken")
    return result


def crowd(url: str, digest: str, work: Path, procs: int, repeat: int) -> dict[str, float]:
    """Wall time from the start gate until every process has the file: 1 vs ``procs``."""
    if procs < 1:
        return {"one": float("nan"), "many": float("nan")}

    def once(n: int, cache: Path) -> float:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD_GATED, url, digest],
                env=env_with(cache),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        t = time.monotonic()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        done = []
        for child in children:
            out, _ = child.communicate()
            assert child.returncode == 0
            done.append(float(out.split()[-1]))
        shutil.rmtree(cache)
        return max(done) - t

    solo = [once(1, work / f"solo{i}") for i in range(repeat)]
    many = [once(procs, work / f"many{i}") for i in range(repeat)]
    return {"one": statistics.median(solo), "many": statistics.median(many)}


def main() -> None:
    """Run every comparison and print the figures."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", type=int, default=1024, help="file size in MiB (default 1024)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cold measurement (median)")
    p.add_argument("--procs", type=int, default=32, help="processes in the crowd (default 32)")
    p.add_argument("--hit-calls", type=int, default=20000, help="fetch hits per batch")
    p.add_argument("--slow-calls", type=int, default=3, help="pooch/tiktoken hits measured")
    p.add_argument("--dir", default=None, help="where files go (default: the temp directory)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-fetch-", dir=args.dir))
    size = args.size << 20
    src = work / "src"
    src.mkdir()
    digest = make_file(src / "data.bin", size)
    make_file(src / "small.bin", 1024)
    server, base = start_server(src)
    url = f"{base}/data.bin"
    figures: dict[str, object] = {"size_mib": args.size, "dir": str(work)}
    try:
        print_cold(figures, cold(url, digest, work, args.repeat), size, args.repeat, work)
        print_rss(figures, rss(url, digest, work))
        print_hits(figures, hits(url, digest, work, args.hit_calls, args.slow_calls), args.size)
        w = crowd(url, digest, work, args.procs, args.repeat)
        figures["crowd_s"] = w
        print(
            f"{args.procs} processes at once: {w['many']:.2f} s vs one alone {w['one']:.2f} s "
            f"(ratio {w['many'] / w['one']:.2f}; target <= 1.2)"
        )
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def print_cold(
    figures: dict[str, object], c: dict[str, list[float]], size: int, repeat: int, work: Path
) -> None:
    """Cold download figures and their ratios."""
    med = {k: statistics.median(v) for k, v in c.items() if v}
    figures["cold_s"] = med
    print(f"cold verified download of {size >> 20} MiB in {work} (median of {repeat}):")
    for k, t in med.items():
        print(f"  {k:<16} {t:8.3f} s  {size / t / 1e6:8.0f} MB/s")
    if "curl" not in med:
        print("  curl: skipped (not installed)")
        return
    speed = med["curl"] / med["fetch"]
    vs_sha = med["curl+sha256sum"] / med["fetch"]
    figures["speed_vs_curl"] = speed
    figures["speedup_vs_curl_sha256sum"] = vs_sha
    vs_fsync = med["curl+fsync"] / med["fetch"]
    figures["speed_vs_curl_fsync"] = vs_fsync
    print(f"  fetch speed / curl speed             {speed:.2f}  (target >= 0.9)")
    print(f"  (curl + sha256sum time) / fetch time {vs_sha:.2f}  (target > 1)")
    print(f"  fetch speed / (curl + fsync) speed   {vs_fsync:.2f}  (like for like on durability)")


def print_rss(figures: dict[str, object], r: dict[str, float]) -> None:
    """Peak memory figures."""
    figures["rss"] = r
    print(
        f"peak RSS: fetch {r['fetch_peak_mib']:.1f} MiB "
        f"(+{r['fetch_growth_mib']:.1f} MiB during the download; target <= 64), "
        f"urlopen().read() {r['naive_peak_mib']:.1f} MiB"
    )


def print_hits(figures: dict[str, object], h: dict[str, object], size_mib: int) -> None:
    """Hit-path figures."""
    figures["hit_s"] = h
    mine = h["fetch"]
    assert isinstance(mine, float)
    print(f"time per call on a hit ({size_mib} MiB file):")
    print(f"  fetch     {mine * 1e6:10.1f} us  (target < 100 us)")
    for other in ("pooch", "tiktoken"):
        value = h[other]
        if isinstance(value, float):
            print(f"  {other:<9} {value * 1e6:10.1f} us  ({value / mine:,.0f}x fetch)")
        else:
            print(f"  {other:<9} {value}")


if __name__ == "__main__":
    main()
