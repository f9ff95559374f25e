"""Start-up cost of the cacheroot hook: ``python -c pass`` with the hook installed vs without.

Three virtual environments are made from the same base Python: one with the built wheels of
``cacheroot-envs`` and ``cacheroot-sitecustomize``, one with nothing, and one with the floor of
any ``.pth`` hook: a ``.pth`` line of the same shape as ``cacheroot.pth`` that imports an empty
module and calls its no-op ``start()``. What ``site`` pays to read a ``.pth`` file (twice in a
venv) and the import system pays to load one module from site-packages is paid by every hook
installed this way; the difference between the hook and the floor is what cacheroot's own code
costs. Three more arms run the hooked environment as a child of a hooked process (it inherits
``CACHEROOT_APPLIED``: the xdist worker's case), the same environment without the hook (a child
starts with some thirty more variables, which the interpreter pays for with or without a hook),
and the hooked one with ``CACHEROOT_DISABLE=1``. Runs are
interleaved (the order of the arms rotates every round) so that drift in machine load hits every
arm alike; medians are reported.

Bytecode: wheels are installed with ``--compile-bytecode``. Without it, a machine that sets
``PYTHONDONTWRITEBYTECODE=1`` (as CI images often do) would recompile the hook's modules from
source at every start, which measures the compiler, not the hook.

Each arm runs once per round, in an order rotated every round (``benchmarks/_rounds.py``); the
default 402 rounds put each of the six arms in each position 67 times. Per arm the median,
min-max and interquartile range are printed, the ratio to the arm without the hook is taken
round by round, and the Python, nproc and the load average before and after are printed too.

Two figures per run: its wall time, and the CPU time (user + system) the child used, read from
``getrusage(RUSAGE_CHILDREN)`` around it. On a busy machine the wall time also counts the time
the child waited for a CPU; the CPU time does not, so it is the steadier of the two there (it
still grows with cache and frequency effects). The target (the issue's: at most +0.4 ms and
+3 % over ``python -c pass``) is judged on the wall time of a quiet machine.

Run from the repository root::

    .venv/bin/python benchmarks/bench_startup.py            # 402 rounds
    .venv/bin/python benchmarks/bench_startup.py --quick    # smoke test: 15 rounds
    .venv/bin/python benchmarks/bench_startup.py --instructions   # and callgrind's counts
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._rounds import MIN_ROUNDS, Conditions, Rounds, Summary, run_rounds, table
from cacheroot.envs import TABLE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRIBUTIONS = ("packages/envs", "sitecustomize")
#: Modules the hook may import at start-up, as ``-X importtime`` names them: ``_cacheroot_start``
#: alone in a plain environment with the audit off.
HOOK_MODULES = ("_cacheroot_start", "_cacheroot_compact", "_cacheroot_layout", "_cacheroot_hook")
#: The floor's module: empty but for a no-op ``start()``, imported by a copy of ``cacheroot.pth``.
FLOOR_MODULE = "_bench_empty_hook"
#: The overhead the hook may add to ``python -c pass`` (issue 24): a ratio and milliseconds.
TARGET_RATIO = 1.03
TARGET_MS = 0.4
#: Variables that would change what the hook does: cleared so every arm starts alike.
CLEARED_PREFIXES = ("CACHEROOT", "PYTHON", "HF_", "VLLM_", "TIKTOKEN", "TORCH", "TRITON")
CLEARED = tuple(v.name for v in TABLE)


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        sys.exit("bench_startup: needs uv on PATH (https://docs.astral.sh/uv/)")
    return uv


def _base_python() -> str:
    """The interpreter both environments are made from: this one's base, not a venv's."""
    return str(getattr(sys, "_base_executable", "") or sys.executable)


def _check(argv: Sequence[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def build(work: str, base: str) -> tuple[str, str, str]:
    """Build the wheels and make the three environments; return their interpreters (with the
    hook, without it, the floor)."""
    uv = _uv()
    wheels = os.path.join(work, "wheels")
    for dist in DISTRIBUTIONS:
        _check([uv, "build", "--wheel", "--quiet", os.path.join(REPO, dist), "-o", wheels])
    pythons = []
    for name in ("with-hook", "without-hook", "floor"):
        venv = os.path.join(work, name)
        _check([uv, "venv", "--quiet", "--python", base, venv])
        pythons.append(os.path.join(venv, "bin", "python"))
    built = sorted(os.path.join(wheels, f) for f in os.listdir(wheels) if f.endswith(".whl"))
    _check([
        uv, "pip", "install", "--quiet", "--compile-bytecode", "--offline",
        "--python", pythons[0], *built,
    ])  # fmt: skip
    _floor(pythons[2])
    return pythons[0], pythons[1], pythons[2]


def _floor(python: str) -> None:
    """Install the floor into ``python``'s environment: :data:`FLOOR_MODULE` (compiled, as the
    wheels are) and ``cacheroot.pth``'s line with the module's name in place of the hook's."""
    found = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    purelib = found.stdout.strip()
    with open(os.path.join(REPO, "sitecustomize", "src", "cacheroot.pth"), encoding="utf-8") as f:
        line = f.read()
    if "_cacheroot_start" not in line:
        sys.exit(f"bench_startup: expected cacheroot.pth to name _cacheroot_start: {line}")
    with open(os.path.join(purelib, "floor.pth"), "w", encoding="utf-8") as f:
        f.write(line.replace("_cacheroot_start", FLOOR_MODULE))
    module = os.path.join(purelib, f"{FLOOR_MODULE}.py")
    with open(module, "w", encoding="utf-8") as f:
        f.write('def start():\n    """Nothing: the floor of a .pth hook."""\n')
    _check([python, "-m", "compileall", "-q", module])


def clean_env(root: str) -> dict[str, str]:
    """This environment without anything the hook reads, and ``CACHEROOT`` set to ``root``.

    ``PYTHON*`` variables are cleared too (``PYTHONDONTWRITEBYTECODE`` included: the bytecode
    is already compiled, and nothing may be written during the runs either way).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(CLEARED_PREFIXES) and k not in CLEARED
    }
    env["CACHEROOT"] = root
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(python: str, env: Mapping[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one ``python -c pass``, in milliseconds."""
    cpu = _children_cpu()
    start = time.perf_counter_ns()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    wall = (time.perf_counter_ns() - start) / 1e6
    return wall, (_children_cpu() - cpu) * 1e3


def interleaved(
    arms: Mapping[str, tuple[str, Mapping[str, str]]], runs: int, warmup: int
) -> tuple[Rounds, dict[str, list[float]]]:
    """Run every arm ``runs`` times, rotating the order each round; drop ``warmup`` rounds.

    Returns the wall times as rounds, and each arm's CPU times in the same order.
    """
    cpu: dict[str, list[float]] = {name: [] for name in arms}

    def call(name: str, python: str, env: Mapping[str, str]) -> float:
        wall, used = time_once(python, env)
        cpu[name].append(used)
        return wall

    calls = {
        name: (lambda n=name, p=python, e=env: call(n, p, e))
        for name, (python, env) in arms.items()
    }
    result = run_rounds(calls, runs, warmup=warmup)
    # The warm-up rounds ran first, one call per arm each: drop their CPU times alike.
    return result, {name: values[len(values) - runs :] for name, values in cpu.items()}


def importtime(python: str, env: Mapping[str, str], runs: int) -> dict[str, tuple[float, float]]:
    """Median ``-X importtime`` (self, cumulative; microseconds) of each hook module."""
    seen: dict[str, list[tuple[int, int]]] = {m: [] for m in HOOK_MODULES}
    for _ in range(runs):
        proc = subprocess.run(
            [python, "-X", "importtime", "-c", "pass"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            fields = line[len("import time:") :].split("|")
            module = fields[2].strip()
            if module in seen and fields[0].strip().isdigit():
                seen[module].append((int(fields[0]), int(fields[1])))
    return {
        m: (statistics.median(s for s, _ in v), statistics.median(c for _, c in v))
        for m, v in seen.items()
        if v
    }


def instructions(python: str, env: Mapping[str, str], work: str) -> int | None:
    """User-space instructions of one ``python -c pass`` under callgrind (``None`` without
    valgrind). With ``PYTHONHASHSEED=0`` the count repeats to the instruction: the figure to
    compare arms by where wall time is too noisy for a difference of 0.1 ms."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    out = os.path.join(work, "callgrind.out")
    proc = subprocess.run(
        [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", python, "-c", "pass"],
        env={**env, "PYTHONHASHSEED": "0"},
        check=True,
        capture_output=True,
        text=True,
    )
    found = [line for line in proc.stderr.splitlines() if "Collected :" in line]
    return int(found[-1].rsplit(":", 1)[1]) if found else None


def module_count(python: str, env: Mapping[str, str]) -> int:
    proc = subprocess.run(
        [python, "-c", "import sys; print(len(sys.modules))"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


def print_figures(unit: str, samples: Mapping[str, Sequence[float]], what: str) -> None:
    """Per arm: the median and spread, the ratio to the arm without the hook taken round by
    round, and the difference of the medians."""
    base = samples["without hook"]
    rows = {name: Summary.of(values) for name, values in samples.items()}
    ratios = {
        name: Summary.of([v / b for v, b in zip(values, base, strict=True) if b > 0])
        for name, values in samples.items()
    }
    for line in table(rows, unit=unit, ratios=ratios, ratio_title="x without"):
        print(line)
    median = statistics.median(base)
    for name, s in rows.items():
        print(f"  {name}: {s.median - median:+.2f} {what} over the median without the hook")
    print()


def print_overhead(
    times: Mapping[str, Sequence[float]], cpu: Mapping[str, Sequence[float]]
) -> None:
    """The hook's overhead against the target, and how much of it is the floor of any hook."""
    base = statistics.median(times["without hook"])
    cpu_base = statistics.median(cpu["without hook"])
    added = statistics.median(times["with hook"]) - base
    over = statistics.median(times["with hook"]) / base - 1
    cpu_added = statistics.median(cpu["with hook"]) - cpu_base
    cpu_over = statistics.median(cpu["with hook"]) / cpu_base - 1 if cpu_base else 0.0
    floor_added = statistics.median(times["empty .pth hook"]) - base
    own = statistics.median(times["with hook"]) - statistics.median(times["empty .pth hook"])
    print()
    print(
        f"overhead (median with / median without - 1): wall {over:+.1%} ({added:+.2f} ms), "
        f"CPU {cpu_over:+.1%} ({cpu_added:+.2f} ms); target: at most "
        f"{TARGET_RATIO - 1:+.0%} and {TARGET_MS:+.1f} ms on the wall time of a quiet machine"
    )
    print(
        f"of which the floor of any .pth hook (empty module): {floor_added:+.2f} ms "
        f"({floor_added / base:+.1%}); cacheroot's own code: {own:+.2f} ms"
    )
    child = statistics.median(times["with hook, child"])
    child_base = statistics.median(times["without hook, child's environment"])
    print(
        f"in a child of a hooked process (same environment without the hook): "
        f"{child / child_base - 1:+.1%} ({child - child_base:+.2f} ms)"
    )


def print_instructions(arms: Mapping[str, tuple[str, Mapping[str, str]]], work: str) -> None:
    """Each arm's instruction count (callgrind), and its difference to the arm without the hook."""
    counts = {name: instructions(python, env, work) for name, (python, env) in arms.items()}
    base = counts["without hook"]
    if base is None:
        print("instructions: valgrind not found")
        return
    print("instructions per `python -c pass` (callgrind, PYTHONHASHSEED=0):")
    for name, count in counts.items():
        if count is not None:
            print(f"  {name:<36}{count:>14,}  {count - base:>+12,} ({count / base - 1:+.2%})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: 15 rounds, 3 warm-up")
    parser.add_argument("--runs", type=int, help="rounds, one run per arm each (default 402)")
    parser.add_argument("--warmup", type=int, help="rounds dropped first (default 10)")
    parser.add_argument("--python", default=_base_python(), help="base interpreter")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each arm's instructions once under valgrind's callgrind",
    )
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 15 if args.quick else 402
    if args.warmup is None:
        args.warmup = 3 if args.quick else 10
    conditions = Conditions.now()
    print(conditions.header())
    if args.quick:
        print("mode: quick (a smoke test, not figures to report)")
    if args.runs < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not figures to report")

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as work:
        hooked, plain, floor = build(work, args.python)
        root = os.path.join(work, "cache-root")
        env = clean_env(root)
        disabled = {**env, "CACHEROOT_DISABLE": "1"}
        probe = subprocess.run(
            [hooked, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        child: dict[str, str] = json.loads(probe.stdout)
        assert child.get("HF_HOME") == os.path.join(root, "huggingface"), "hook not active"
        assert "CACHEROOT_APPLIED" in child, "hook not active"
        assert not os.path.exists(root), "the hook created the root"

        arms = {
            "without hook": (plain, env),
            "empty .pth hook": (floor, env),
            "with hook": (hooked, env),
            "with hook, child": (hooked, child),
            "without hook, child's environment": (plain, child),
            "with hook, disabled": (hooked, disabled),
        }
        result, cpu = interleaved(arms, args.runs, args.warmup)
        times = result.samples
        print(f"python measured: {args.python} ({sys.version.split()[0]} here)")
        print(f"runs: {args.runs} rounds, one run per arm each, order rotated every round,")
        print(f"      {args.warmup} warm-up rounds dropped")
        print("bytecode: compiled at install time (uv pip install --compile-bytecode)")
        print()
        print_figures("ms per `python -c pass`", times, "ms")
        print_figures("CPU ms (user + system) per `python -c pass`", cpu, "CPU ms")
        print(
            f"modules at start-up: {module_count(plain, env)} without, "
            f"{module_count(hooked, env)} with the hook"
        )
        starts = 10 if args.quick else 50
        print(f"-X importtime, median of {starts} starts (microseconds):")
        print(f"  {'module':<26}{'self':>8}{'cumulative':>12}")
        for module, (own, cumulative) in importtime(hooked, env, starts).items():
            print(f"  {module:<26}{own:>8.0f}{cumulative:>12.0f}")
        print_overhead(times, cpu)
        if args.instructions:
            print_instructions(arms, work)
        print(conditions.footer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
