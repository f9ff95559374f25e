"""Start-up cost of the cacheroot hook: ``python -c pass`` with the hook installed vs without.

Two virtual environments are made from the same base Python: one with the built wheels of
``cacheroot-envs`` and ``cacheroot-sitecustomize``, one with nothing. A third arm runs the
hooked environment with ``CACHEROOT_DISABLE=1``, which separates the cost of importing the hook
from the cost of resolving and applying the layout. Runs are interleaved (the order of the arms
rotates every round) so that drift in machine load hits every arm alike; medians are reported.

Bytecode: wheels are installed with ``--compile-bytecode``. Without it, a machine that sets
``PYTHONDONTWRITEBYTECODE=1`` (as CI images often do) would recompile the hook's modules from
source at every start, which measures the compiler, not the hook.

Run from the repository root::

    python benchmarks/bench_startup.py            # 200 runs per arm
    python benchmarks/bench_startup.py --runs 50  # quicker
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from cacheroot.envs import TABLE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRIBUTIONS = ("packages/envs", "sitecustomize")
#: Modules the hook imports at start-up, as ``-X importtime`` names them.
HOOK_MODULES = ("_cacheroot_hook", "_cacheroot_layout")
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


def build(work: str, base: str) -> tuple[str, str]:
    """Build the wheels and make both environments; return their interpreters."""
    uv = _uv()
    wheels = os.path.join(work, "wheels")
    for dist in DISTRIBUTIONS:
        _check([uv, "build", "--wheel", "--quiet", os.path.join(REPO, dist), "-o", wheels])
    pythons = []
    for name in ("with-hook", "without-hook"):
        venv = os.path.join(work, name)
        _check([uv, "venv", "--quiet", "--python", base, venv])
        pythons.append(os.path.join(venv, "bin", "python"))
    built = sorted(os.path.join(wheels, f) for f in os.listdir(wheels) if f.endswith(".whl"))
    _check([
        uv, "pip", "install", "--quiet", "--compile-bytecode", "--offline",
        "--python", pythons[0], *built,
    ])  # fmt: skip
    return pythons[0], pythons[1]


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


def time_once(python: str, env: Mapping[str, str]) -> float:
    """Wall time of one ``python -c pass``, in milliseconds."""
    start = time.perf_counter_ns()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    return (time.perf_counter_ns() - start) / 1e6


def interleaved(
    arms: Mapping[str, tuple[str, Mapping[str, str]]], runs: int, warmup: int
) -> dict[str, list[float]]:
    """Run every arm ``runs`` times, rotating the order each round; drop ``warmup`` rounds."""
    names = list(arms)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + runs):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            python, env = arms[name]
            elapsed = time_once(python, env)
            if i >= warmup:
                times[name].append(elapsed)
    return times


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


def module_count(python: str, env: Mapping[str, str]) -> int:
    proc = subprocess.run(
        [python, "-c", "import sys; print(len(sys.modules))"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per arm (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="rounds dropped first")
    parser.add_argument("--python", default=_base_python(), help="base interpreter")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as work:
        hooked, plain = build(work, args.python)
        root = os.path.join(work, "cache-root")
        env = clean_env(root)
        disabled = {**env, "CACHEROOT_DISABLE": "1"}
        probe = subprocess.run(
            [hooked, "-c", "import os; print(os.environ.get('HF_HOME'))"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        assert probe.stdout.strip() == os.path.join(root, "huggingface"), "hook not active"
        assert not os.path.exists(root), "the hook created the root"

        arms = {"without hook": (plain, env), "with hook": (hooked, env)}
        arms["with hook, disabled"] = (hooked, disabled)
        times = interleaved(arms, args.runs, args.warmup)
        base = statistics.median(times["without hook"])

        print(f"python: {args.python} ({sys.version.split()[0]} here)")
        print(f"runs: {args.runs} per arm, interleaved, {args.warmup} warm-up rounds dropped")
        print("bytecode: compiled at install time (uv pip install --compile-bytecode)")
        print()
        columns = f"{'median ms':>10}{'min':>8}{'p25':>8}{'p75':>8}{'delta ms':>10}{'ratio':>8}"
        print(f"{'arm':<22}{columns}")
        for name, values in times.items():
            q = statistics.quantiles(values, n=4)
            med = statistics.median(values)
            print(
                f"{name:<22}{med:>10.2f}{min(values):>8.2f}{q[0]:>8.2f}{q[2]:>8.2f}"
                f"{med - base:>+10.2f}{med / base:>8.3f}"
            )
        print()
        print(
            f"modules at start-up: {module_count(plain, env)} without, "
            f"{module_count(hooked, env)} with the hook"
        )
        print("-X importtime, median of 50 starts (microseconds):")
        print(f"  {'module':<26}{'self':>8}{'cumulative':>12}")
        for module, (own, cumulative) in importtime(hooked, env, 50).items():
            print(f"  {module:<26}{own:>8.0f}{cumulative:>12.0f}")
        over = statistics.median(times["with hook"]) / base - 1
        print()
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average: {load} (a busy machine widens p25..p75 and shifts the medians)")
        print(f"overhead: {over:+.1%} (target: at most +10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
