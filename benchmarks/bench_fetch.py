"""Benchmark of cacheroot.fetch against curl, pooch and tiktoken on a local static server.

Not a test: it prints figures for docs/explanation/benchmarks.md. Run from the repository root::

    .venv/bin/python benchmarks/bench_fetch.py              # 1 GiB, 6 rounds
    .venv/bin/python benchmarks/bench_fetch.py --size 256   # 256 MiB
    .venv/bin/python benchmarks/bench_fetch.py --quick      # smoke test: 8 MiB, 5 rounds

Every comparison runs its arms in interleaved rounds, the order rotated each round (see
``benchmarks/_rounds.py``), on the same file and server (``benchmarks/fetch_server.py``,
``sendfile`` from the page cache); per arm the median and min-max over the rounds are printed,
and ratios are taken round by round. The Python, nproc and the load average before and after
are printed with the figures.

1. Cold verified download. ``fetch(url, sha256=...)`` runs in this process (imports already
   paid); each shell arm is one ``bash -c`` of the command line a user would type:

   - ``curl -o FILE``: no verification, for speed;
   - ``curl URL | tee FILE | openssl dgst -sha256``: the fairest "download and verify": the hash
     runs in parallel with the write (the same work as ``tee >(openssl dgst -sha256) > FILE``,
     but the shell waits for the hash);
   - the same followed by ``sync FILE``: like for like on durability;
   - ``curl -o FILE && openssl dgst -sha256 FILE``: hash after the download;
   - ``curl -o FILE && sha256sum FILE``: the same with coreutils' slower sha256, for reference.

   fetch fsyncs the file (and its directory) before returning; of the shell arms only the one
   with ``sync FILE`` does: the others leave the file dirty in the page cache, where it is
   deleted before the kernel writes it back.
2. Peak RSS of a cold fetch in a fresh process, next to ``urlopen(url).read()`` (one run each).
3. Time per call on a hit: fetch (a ``stat`` compared with the record made at download; no
   re-hash) vs ``pooch.retrieve`` without a hash (an ``exists``; no re-hash), pooch with the
   hash (re-hashes the whole file every call) and tiktoken's ``read_file_cached`` with the hash
   (reads the whole file into memory and re-hashes it every call; it returns the bytes, not a
   path). A missing package is skipped with a note (``uv pip install pooch``; neither is a
   dependency).
4. ``--procs`` processes asking for one URL at once vs one process alone (wall time from a start
   gate until the last has the file; interpreter start-up excluded): solo and crowd rounds
   alternate, and each round's ratio is printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._rounds import MIN_ROUNDS, Conditions, Rounds, Summary, run_rounds, table
from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE, VLLM_TEST_CACHE_ONLY

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve().parent

# Everything a fetch needs is imported before the gate; the child reports the moment it has
# the file (CLOCK_MONOTONIC is system-wide), so interpreter teardown is not counted.
CHILD_GATED = """
import sys, time
import filelock
from cacheroot.fetch import fetch
import cacheroot.fetch._http, cacheroot.fetch._lock, cacheroot.fetch._proc, cacheroot.fetch._used
print("ready", flush=True)
sys.stdin.readline()
fetch(sys.argv[1], sha256=sys.argv[2], offline=False, progress=False)
print(time.monotonic(), flush=True)
"""

CHILD_RSS = """
import json, resource, sys
from cacheroot.fetch import fetch
import cacheroot.fetch._http
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fetch(sys.argv[1], sha256=sys.argv[2], offline=False, progress=False)
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

#: The shell arms of the cold download: name -> (the command line, run by ``bash -c`` with ``$1``
#: the URL and ``$2`` the file; whether it verifies the sha256; whether it fsyncs the file).
SHELL_ARMS: dict[str, tuple[str, bool, bool]] = {
    "curl -o": ('curl -sS -o "$2" "$1"', False, False),
    "curl | tee | openssl": ('curl -sS "$1" | tee "$2" | openssl dgst -sha256', True, False),
    "curl | tee | openssl; sync": (
        'curl -sS "$1" | tee "$2" | openssl dgst -sha256; sync "$2"',
        True,
        True,
    ),
    "curl -o && openssl dgst": ('curl -sS -o "$2" "$1" && openssl dgst -sha256 "$2"', True, False),
    "curl -o && sha256sum": ('curl -sS -o "$2" "$1" && sha256sum "$2"', True, False),
}


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


def use_cache(cache: Path, environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Point ``environ`` at ``cache`` for fetch, with nothing that would forbid the network."""
    environ[VLLM_TEST_CACHE] = str(cache)
    for name in (CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY):
        environ.pop(name, None)


def env_with(cache: Path) -> dict[str, str]:
    """The environment of a child that fetches into ``cache``."""
    env = dict(os.environ)
    use_cache(cache, env)
    return env


def digest_of(output: str, *, verifies: bool) -> str | None:
    """The hex digest a shell arm printed (openssl: last field; sha256sum: first)."""
    if not verifies:
        return None
    fields = output.split()
    return fields[0] if len(fields[0]) == 64 else fields[-1]


def cold(url: str, digest: str, work: Path, rounds: int) -> Rounds:
    """Seconds per cold verified download: fetch and each shell arm, in rotated rounds."""
    from cacheroot.fetch import Fetcher

    # Warm up: the miss path's imports (requests, filelock) are paid once per process, not
    # per download; the shell arms' start-up (bash, curl, openssl) stays in their figures.
    use_cache(work / "warmup")
    Fetcher().fetch(url.rsplit("/", 1)[0] + "/small.bin", progress=False)
    out = work / "shell.bin"
    caches = (work / f"cold{i}" for i in range(1 << 30))

    def fetch_arm() -> float:
        cache = next(caches)
        use_cache(cache)
        fetcher = Fetcher()
        t = time.perf_counter()
        fetcher.fetch(url, sha256=digest, offline=False, progress=False)
        elapsed = time.perf_counter() - t
        fetcher.close()
        shutil.rmtree(cache)
        return elapsed

    def shell_arm(script: str, *, verifies: bool) -> Callable[[], float]:
        argv = ["bash", "-c", f"set -eo pipefail; {script}", "bench", url, str(out)]

        def run() -> float:
            t = time.perf_counter()
            got = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            elapsed = time.perf_counter() - t
            found = digest_of(got, verifies=verifies)
            assert found in (None, digest), f"{script}: digest {found}, expected {digest}"
            out.unlink()
            return elapsed

        return run

    arms: dict[str, Callable[[], float]] = {"fetch": fetch_arm}
    if shutil.which("curl") and shutil.which("openssl") and shutil.which("sha256sum"):
        for name, (script, verifies, _) in SHELL_ARMS.items():
            arms[name] = shell_arm(script, verifies=verifies)
    else:
        print("  note: curl, openssl or sha256sum is not on PATH: the shell arms are skipped")
    return run_rounds(arms, rounds, each=lambda r: print(f"  {r.last(fmt='.3f')} s", flush=True))


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


def per_call(call: Callable[[], object], calls: int) -> Callable[[], float]:
    """An arm that makes ``calls`` calls and returns the seconds per call."""

    def run() -> float:
        t = time.perf_counter()
        for _ in range(calls):
            call()
        return (time.perf_counter() - t) / calls

    return run


def hits(
    url: str, digest: str, work: Path, rounds: int, *, calls: int, slow_calls: int
) -> tuple[Rounds, list[str]]:
    """Seconds per call on a hit: fetch, pooch with and without a hash, tiktoken; and notes."""
    from cacheroot.fetch import Fetcher

    notes: list[str] = []
    use_cache(work / "hits")
    fetcher = Fetcher()
    fetcher.fetch(url, sha256=digest, offline=False, progress=False)
    arms = {"fetch hit": per_call(lambda: fetcher.fetch(url, sha256=digest), calls)}

    try:
        import pooch  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        notes.append("pooch: skipped, not installed (uv pip install pooch)")
    else:
        pooch.get_logger().setLevel("WARNING")
        known = f"sha256:{digest}"
        where = {"path": str(work / "pooch"), "fname": "data.bin", "progressbar": False}
        pooch.retrieve(url, known_hash=known, **where)
        arms["pooch, no hash"] = per_call(
            lambda: pooch.retrieve(url, known_hash=None, **where), calls
        )
        arms["pooch, with the hash"] = per_call(
            lambda: pooch.retrieve(url, known_hash=known, **where), slow_calls
        )

    try:
        import tiktoken.load
    except ImportError:
        notes.append("tiktoken: skipped, not installed")
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(work / "tiktoken")
        tiktoken.load.read_file_cached(url, digest)
        arms["tiktoken read_file_cached"] = per_call(
            lambda: tiktoken.load.read_file_cached(url, digest), slow_calls
        )
    result = run_rounds(
        arms, rounds, each=lambda r: print(f"  {r.last(1e6, '.1f')} us", flush=True)
    )
    fetcher.close()
    return result, notes


def crowd(url: str, digest: str, work: Path, procs: int, rounds: int) -> Rounds:
    """Wall time from the start gate until every process has the file: 1 vs ``procs``."""
    caches = (work / f"crowd{i}" for i in range(1 << 30))

    def once(n: int) -> float:
        cache = next(caches)
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

    solo, many = "one alone", f"{procs} at once"

    def each(r: Rounds) -> None:
        ratio = r.samples[many][-1] / r.samples[solo][-1]
        print(f"  {r.last(fmt='.3f')} s; ratio {ratio:.2f}", flush=True)

    return run_rounds({solo: lambda: once(1), many: lambda: once(procs)}, rounds, each=each)


#: --quick: a smoke test that the script works, not figures to report.
QUICK = {"size": 8, "rounds": MIN_ROUNDS, "procs": 4, "hit_calls": 200}
SECTIONS = ("cold", "rss", "hits", "crowd")
FULL = {"size": 1024, "rounds": 1 + len(SHELL_ARMS), "procs": 32, "hit_calls": 10000}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with what was not given taken from the --quick or the full preset."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    p.add_argument("--size", type=int, help=f"file size in MiB (default {FULL['size']})")
    p.add_argument(
        "--rounds",
        type=int,
        help=f"rounds of every comparison (default {FULL['rounds']}: each cold arm in each place)",
    )
    p.add_argument("--procs", type=int, help=f"processes in the crowd (default {FULL['procs']})")
    p.add_argument(
        "--hit-calls",
        type=int,
        help=f"fetch and pooch-without-hash hits per round ({FULL['hit_calls']})",
    )
    p.add_argument(
        "--slow-calls", type=int, default=1, help="pooch/tiktoken-with-hash hits per round"
    )
    p.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run (default: {','.join(SECTIONS)})",
    )
    p.add_argument("--dir", default=None, help="where files go (default: the temp directory)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    unknown = {s.strip() for s in args.only.split(",")} - set(SECTIONS)
    if unknown:
        p.error(f"--only: unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every comparison and print the figures."""
    args = parse_args(argv)
    size_mib: int = args.size
    rounds: int = args.rounds
    procs: int = args.procs
    sections = {s.strip() for s in args.only.split(",")}

    conditions = Conditions.now()
    print(conditions.header())
    mode = "quick (a smoke test, not figures to report)" if args.quick else "full"
    print(f"mode: {mode}; {size_mib} MiB file, {rounds} rounds, order rotated each round")
    if rounds < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not figures to report")
    work = Path(tempfile.mkdtemp(prefix="bench-fetch-", dir=args.dir))
    size = size_mib << 20
    src = work / "src"
    src.mkdir()
    digest = make_file(src / "data.bin", size)
    make_file(src / "small.bin", 1024)
    server, base = start_server(src)
    url = f"{base}/data.bin"
    figures: dict[str, object] = {"size_mib": size_mib, "rounds": rounds, "dir": str(work)}
    try:
        if "cold" in sections:
            print(f"\ncold verified download of {size_mib} MiB in {work}:")
            print_cold(figures, cold(url, digest, work, rounds), size)
        if "rss" in sections:
            print_rss(figures, rss(url, digest, work))
        if "hits" in sections:
            print(f"\ntime per call on a hit ({size_mib} MiB file):")
            print_hits(
                figures,
                *hits(url, digest, work, rounds, calls=args.hit_calls, slow_calls=args.slow_calls),
            )
        if "crowd" in sections:
            print(f"\n{procs} processes asking for one {size_mib} MiB URL at once vs one alone:")
            print_crowd(figures, crowd(url, digest, work, procs, rounds), procs)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(conditions.footer())
    figures["conditions"] = conditions.as_dict()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


def summaries(r: Rounds, baseline: str) -> dict[str, Summary]:
    """Per arm, the round-by-round ratio ``arm / baseline``: their median and spread."""
    return {name: Summary.of(r.ratios(name, baseline)) for name in r.samples}


def print_cold(figures: dict[str, object], c: Rounds, size: int) -> None:
    """Cold download figures and their ratios."""
    rows = {name: c.summary(name) for name in c.samples}
    ratios = summaries(c, "fetch")
    for line in table(
        rows, unit="seconds", fmt=".3f", ratios=ratios, ratio_title="arm time / fetch time"
    ):
        print(f"  {line}")
    print("  arm                          verifies  fsyncs  MB/s (median)")
    flags = {"fetch": (True, True)} | {n: (v, f) for n, (_, v, f) in SHELL_ARMS.items()}
    for name, s in rows.items():
        verifies, fsyncs = flags[name]
        yes = {True: "yes", False: "no"}
        print(f"  {name:<29}{yes[verifies]:<10}{yes[fsyncs]:<8}{size / s.median / 1e6:8.0f}")
    figures["cold_s"] = {name: s.as_dict() for name, s in rows.items()}
    figures["cold_samples_s"] = c.samples
    figures["cold_orders"] = c.orders
    figures["cold_over_fetch"] = {name: s.as_dict() for name, s in ratios.items()}
    print("  (arm time / fetch time, round by round, is fetch's speed over the arm's: > 1, fetch")
    print("  was faster; at small sizes the shell arms' start-up, a few ms, weighs in)")


def print_rss(figures: dict[str, object], r: dict[str, float]) -> None:
    """Peak memory figures."""
    figures["rss"] = r
    print(
        f"\npeak RSS (one run each): fetch {r['fetch_peak_mib']:.1f} MiB "
        f"(+{r['fetch_growth_mib']:.1f} MiB during the download; target <= 64), "
        f"urlopen().read() {r['naive_peak_mib']:.1f} MiB"
    )


HIT_LABELS = {
    "fetch hit": "a stat, compared with the record made at download; no re-hash",
    "pooch, no hash": "pooch.retrieve(known_hash=None): an exists(); no re-hash",
    "pooch, with the hash": "pooch.retrieve(known_hash=...): re-hashes the whole file",
    "tiktoken read_file_cached": "reads the whole file into memory and re-hashes it",
}


def print_hits(figures: dict[str, object], h: Rounds, notes: list[str]) -> None:
    """Hit-path figures."""
    rows = {name: h.summary(name).scaled(1e6) for name in h.samples}
    ratios = summaries(h, "fetch hit")
    for line in table(
        rows, unit="microseconds per call", fmt=".1f", ratios=ratios, ratio_title="x fetch hit"
    ):
        print(f"  {line}")
    for name in h.samples:
        print(f"  {name}: {HIT_LABELS[name]}")
    for note in notes:
        print(f"  note: {note}")
    figures["hit_us"] = {name: s.as_dict() for name, s in rows.items()}
    figures["hit_over_fetch"] = {name: s.as_dict() for name, s in ratios.items()}


def print_crowd(figures: dict[str, object], c: Rounds, procs: int) -> None:
    """Crowd figures: each round's ratio, their median and spread."""
    solo, many = "one alone", f"{procs} at once"
    rows = {name: c.summary(name) for name in c.samples}
    for line in table(rows, unit="seconds", fmt=".3f"):
        print(f"  {line}")
    ratios = c.ratios(many, solo)
    s = Summary.of(ratios)
    print(f"  ratio per round: {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"  ratio: median {s.median:.2f}, min-max {s.low:.2f}-{s.high:.2f} (target <= 1.2)")
    figures["crowd_s"] = {name: s.as_dict() for name, s in rows.items()}
    figures["crowd_ratios"] = ratios


if __name__ == "__main__":
    sys.exit(main())
