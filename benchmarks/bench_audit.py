"""Cost of the run-time audit: 10,000 opens with the audit off and on, and the start-up cost.

Each sample is a fresh interpreter of this environment (the start-up hook installed, as in the
development venv or a nox session) that times, inside itself, 10,000 ``open(...).close()`` of
one kind and prints the seconds; the audit hook cannot be removed from a process, so "off" and
"on" must be separate processes. Kinds: reads of a file, writes of a file under the cache root
(allowed: a prefix test), and writes of one file outside (an escape: recorded once, then a set
lookup). "on" joins an existing session, as every process of an audited suite but the first
does. The start-up arms time ``python -c pass`` with the audit off (the hook looks up one
variable) and on (the module imported, the session's places read, the hook added).
``PYTHON*`` variables are cleared (``PYTHONDONTWRITEBYTECODE`` included), so the audit module
is compiled once and read as bytecode after, as from a wheel installed with bytecode.

Each arm runs once per round, in an order rotated every round (``benchmarks/_rounds.py``);
per arm the median, min-max and interquartile range are printed, ratios are taken round by
round, and the Python, nproc and the load before and after are printed too.

Run from the repository root::

    .venv/bin/python benchmarks/bench_audit.py            # 31 rounds
    .venv/bin/python benchmarks/bench_audit.py --quick    # smoke test: 5 rounds
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._rounds import MIN_ROUNDS, Conditions, Summary, run_rounds, table
from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_AUDIT,
    CACHEROOT_AUDIT_ALLOW,
    CACHEROOT_AUDIT_DIR,
    CACHEROOT_AUDIT_REPORT,
    CACHEROOT_DISABLE,
    TABLE,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

OPENS = 10_000
#: The loop each sample runs: argv[1] is the kind, argv[2] the file; prints seconds.
LOOP = f"""
import sys, time
kind, path = sys.argv[1], sys.argv[2]
mode = "rb" if kind == "read" else "wb"
open(path, mode).close()
start = time.perf_counter()
for _ in range({OPENS}):
    open(path, mode).close()
print(time.perf_counter() - start)
print("_cacheroot_audit" in sys.modules)
"""
CLEARED = {CACHEROOT_AUDIT, CACHEROOT_AUDIT_ALLOW, CACHEROOT_AUDIT_DIR, CACHEROOT_AUDIT_REPORT}
CLEARED |= {CACHEROOT_DISABLE, *(v.name for v in TABLE)}


def _env(root: str, session: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("PYTHON")}
    env[CACHEROOT] = root
    if session is not None:
        env[CACHEROOT_AUDIT] = "1"
        env[CACHEROOT_AUDIT_DIR] = session
    return env


def loop_arm(kind: str, path: str, env: Mapping[str, str], *, audited: bool) -> Callable[[], float]:
    """One sample: a fresh interpreter's time for OPENS opens of ``kind``, in seconds."""

    def sample() -> float:
        proc = subprocess.run(
            [sys.executable, "-c", LOOP, kind, path],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        seconds, installed = proc.stdout.split()
        assert installed == str(audited), f"audit installed: {installed}, expected {audited}"
        return float(seconds)

    return sample


def start_arm(env: Mapping[str, str]) -> Callable[[], float]:
    """One sample: the wall time of ``python -c pass``, in seconds."""

    def sample() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        return time.perf_counter() - start

    return sample


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 5 rounds, 1 warm-up")
    parser.add_argument("--runs", type=int, help="rounds, one sample per arm each (default 31)")
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 31)
    warmup = 1 if args.quick else 3
    conditions = Conditions.now()
    print(conditions.header())
    if args.quick or runs < MIN_ROUNDS:
        print("mode: quick (a smoke test, not figures to report)")
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as work:
        root, outside = os.path.join(work, "root"), os.path.join(work, "outside")
        session = os.path.join(work, "session")
        for folder in (root, outside, session):
            os.makedirs(folder)
        with open(os.path.join(session, "places"), "w", encoding="utf-8") as f:
            f.write(root + "\n")
        inside_file = os.path.join(root, "data.bin")
        outside_file = os.path.join(outside, "stray.bin")
        with open(inside_file, "wb") as f:
            f.write(b"x" * 4096)
        off, on = _env(root, None), _env(root, session)
        arms: dict[str, Callable[[], float]] = {
            "read, off": loop_arm("read", inside_file, off, audited=False),
            "read, on": loop_arm("read", inside_file, on, audited=True),
            "write in root, off": loop_arm("write", inside_file, off, audited=False),
            "write in root, on": loop_arm("write", inside_file, on, audited=True),
            "write outside, off": loop_arm("write", outside_file, off, audited=False),
            "write outside, on": loop_arm("write", outside_file, on, audited=True),
            "start, off": start_arm(off),
            "start, on": start_arm(on),
        }
        result = run_rounds(arms, runs, warmup=warmup)
    print(f"runs: {runs} rounds, one sample per arm each, order rotated every round,")
    print(f"      {warmup} warm-up rounds dropped; {OPENS} opens per loop sample")
    print()
    loops = {n: Summary.of(v).scaled(1e3) for n, v in result.samples.items() if "start" not in n}
    ratios = {}
    for name in loops:
        base = name.replace(", on", ", off")
        ratios[name] = Summary.of(result.ratios(name, base))
    for line in table(loops, unit=f"ms per {OPENS} opens", ratios=ratios, ratio_title="x off"):
        print(line)
    starts = {n: Summary.of(v).scaled(1e3) for n, v in result.samples.items() if "start" in n}
    start_ratio = {"start, on": Summary.of(result.ratios("start, on", "start, off"))}
    for line in table(starts, unit="ms per `python -c pass`", ratios=start_ratio):
        print(line)
    print()
    for kind in ("read", "write in root", "write outside"):
        extra = loops[f"{kind}, on"].median - loops[f"{kind}, off"].median
        print(f"  {kind}: {extra:+.2f} ms per {OPENS} opens with the audit on (medians)")
    print(conditions.footer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
