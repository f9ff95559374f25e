"""What verifying cache hits costs: a plain hit, a hit under ``CACHEROOT_VERIFY=first-use``, and
the first use itself (one sha256 of the entry per process).

Not a test: it prints figures for docs/explanation/benchmarks.md. Run from the repository root::

    .venv/bin/python benchmarks/bench_verify.py              # 1 GiB entry, 7 rounds
    .venv/bin/python benchmarks/bench_verify.py --size 256   # 256 MiB entry
    .venv/bin/python benchmarks/bench_verify.py --quick      # smoke test: 16 MiB, 5 rounds

One entry is fetched once (``file://`` source, so no server is involved: a hit never reaches the
network anyway), then four arms run in interleaved rounds, the order rotated each round
(``benchmarks/_rounds.py``):

- ``hit``: ``Fetcher.fetch(url, sha256=...)`` on the cached entry, ``CACHEROOT_VERIFY`` unset:
  one ``stat`` compared with what the process knows (size, mtime, inode, ctime); a round's
  sample is the median of ``--calls`` calls, each timed alone;
- ``hit, first-use``: the same with ``CACHEROOT_VERIFY=first-use`` on a Fetcher that has used
  the entry already (its first use is paid in the warm-up): what every later hit costs;
- ``first use``: a new Fetcher (a process that has not used the entry yet) with
  ``CACHEROOT_VERIFY=first-use``, one ``fetch``: reads the sidecar and hashes the whole entry;
  printed in seconds per GiB;
- ``sha256 of the file``: ``cacheroot.fetch.sha256_file`` alone, the floor of the above.

The entry sits in the page cache (it was just written and hashed), as it does for a test suite
that uses it repeatedly; from a cold disk the first use costs a read of the file besides.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._rounds import MIN_ROUNDS, Conditions, run_rounds, table
from cacheroot.envs import CACHEROOT_VERIFY, VLLM_TEST_CACHE
from cacheroot.fetch import Fetcher
from cacheroot.fetch.store import sha256_file

if TYPE_CHECKING:
    from collections.abc import Callable

HIT, HIT_FIRST_USE, FIRST_USE, HASH = "hit", "hit, first-use", "first use", "sha256 of the file"
#: --quick: a smoke test that the script works, not figures to report.
QUICK = {"size": 16, "rounds": 5, "calls": 200}
FULL = {"size": 1024, "rounds": 7, "calls": 2000}


def make_file(path: Path, size: int) -> str:
    """Write ``size`` pseudo-random bytes to ``path``; return their sha256."""
    block = os.urandom(1 << 20)
    with path.open("wb") as f:
        for _ in range(size >> 20):
            f.write(block)
        f.write(block[: size & ((1 << 20) - 1)])
    return sha256_file(str(path))[0]


def per_call(call: Callable[[], object], calls: int) -> float:
    """Median seconds of ``calls`` calls, each timed alone."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return float(statistics.median(times)) / 1e9


def verify_mode(value: str | None) -> None:
    """Set ``CACHEROOT_VERIFY`` (``None``: unset); read by the fetcher at every call."""
    if value is None:
        os.environ.pop(CACHEROOT_VERIFY, None)
    else:
        os.environ[CACHEROOT_VERIFY] = value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with what was not given taken from the --quick or the full preset."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    p.add_argument("--size", type=int, help=f"entry size in MiB (default {FULL['size']})")
    p.add_argument("--rounds", type=int, help=f"rounds (default {FULL['rounds']})")
    p.add_argument("--calls", type=int, help=f"hits per round and arm (default {FULL['calls']})")
    p.add_argument("--dir", default=None, help="where to put the entry (default: $TMPDIR)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def arms(work: Path, size: int, calls: int) -> dict[str, Callable[[], float]]:
    """Fetch one entry of ``size`` bytes into ``work``; the four arms that use it."""
    gib = size / (1 << 30)
    source = work / "data.bin"
    digest = make_file(source, size)
    url = source.as_uri()
    verify_mode(None)
    plain = Fetcher(allow_file=True)
    entry = str(plain.fetch(url, sha256=digest))
    verify_mode("first-use")
    used = Fetcher(allow_file=True)
    used.fetch(url, sha256=digest)  # its first use: hashed here, remembered after
    os.unlink(source)

    def hit() -> float:
        verify_mode(None)
        return per_call(lambda: plain.fetch(url, sha256=digest), calls)

    def hit_first_use() -> float:
        verify_mode("first-use")
        return per_call(lambda: used.fetch(url, sha256=digest), calls)

    def first_use() -> float:
        verify_mode("first-use")
        fresh = Fetcher(allow_file=True)
        t0 = time.perf_counter()
        fresh.fetch(url, sha256=digest)
        return (time.perf_counter() - t0) / gib

    def hash_only() -> float:
        t0 = time.perf_counter()
        sha256_file(entry)
        return (time.perf_counter() - t0) / gib

    return {HIT: hit, HIT_FIRST_USE: hit_first_use, FIRST_USE: first_use, HASH: hash_only}


def main(argv: list[str] | None = None) -> int:
    """Fetch one entry, then run the four arms in rotated rounds and print the figures."""
    args = parse_args(argv)
    conditions = Conditions.now()
    print(conditions.header())
    mode = "quick (a smoke test, not figures to report)" if args.quick else "full"
    print(f"mode: {mode}; {args.size} MiB entry, {args.rounds} rounds, {args.calls} hits per arm")
    if args.rounds < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not figures to report")
    work = Path(tempfile.mkdtemp(prefix="bench-verify-", dir=args.dir))
    os.environ[VLLM_TEST_CACHE] = str(work / "cache")
    try:
        r = run_rounds(arms(work, args.size << 20, args.calls), args.rounds, warmup=1)
    finally:
        verify_mode(None)
        shutil.rmtree(work, ignore_errors=True)
    hits = {name: r.summary(name).scaled(1e6) for name in (HIT, HIT_FIRST_USE)}
    hashing = {name: r.summary(name) for name in (FIRST_USE, HASH)}
    print(f"\nper hit on the cached {args.size} MiB entry:")
    for line in table(hits, unit="microseconds per call", fmt=".2f"):
        print(f"  {line}")
    extra = statistics.median(
        (a - b) * 1e6 for a, b in zip(r.samples[HIT_FIRST_USE], r.samples[HIT], strict=True)
    )
    print(f"  first-use over plain, round by round (median): {extra:+.2f} us per hit")
    print(f"\nthe first use in a process ({args.size} MiB entry, page cache warm):")
    for line in table(hashing, unit="seconds per GiB", fmt=".3f"):
        print(f"  {line}")
    print()
    print(conditions.footer())
    if args.json:
        figures = {
            "size_mib": args.size,
            "rounds": args.rounds,
            "calls": args.calls,
            "hit_us": {name: s.as_dict() for name, s in hits.items()},
            "first_use_extra_us": extra,
            "s_per_gib": {name: s.as_dict() for name, s in hashing.items()},
            "samples": r.samples,
            "orders": r.orders,
            "conditions": conditions.as_dict(),
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
