"""The scenario suite in isolated runs that share only the cache volume, as CI jobs do.

Each run (``ci/isolated-run.sh``: fresh HOME and /tmp, loopback only, the volume at /cacheroot)
starts the scenario origin on the port derived from the volume's path, which is /cacheroot in
every run, so all runs see the same URLs; then it runs ``pytest tests/scenarios`` sharded over
two xdist workers and prints the origin's request counts. A cold run asks for each asset once, a
warm run (offline) asks for nothing, and two runs at once on a fresh volume ask for each asset
once between them, with every test passing in both.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "isolated-run.sh"
SCENARIOS = REPO / "tests" / "scenarios"

#: Runs inside an isolated run, from the repository. argv: the report path, then optionally the
#: FIFOs "ready" (written once the origin listens) and "go" (read to EOF before pytest starts).
DRIVER = """
import json, os, subprocess, sys, threading
sys.path.insert(0, "tests")
from scenarios.conftest import SCENARIO_ORIGIN, SCENARIO_ROOT
from scenarios.origin import Origin, port_for

root = os.environ["CACHEROOT"]
origin = Origin(port_for(root))
threading.Thread(target=origin.serve_forever, daemon=True).start()
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as ready:
        ready.write("ready\\n")
    with open(sys.argv[3]) as go:
        go.read()
env = {**os.environ, SCENARIO_ROOT: root, SCENARIO_ORIGIN: origin.url}
run = subprocess.run(
    [sys.executable, "-m", "pytest", "tests/scenarios", "-q", "-n", "2",
     "--cacheroot-report=" + sys.argv[1]],
    env=env, capture_output=True, text=True,
)
origin.shutdown()
print(json.dumps({"status": run.returncode, "output": run.stdout + run.stderr,
                  "origin": origin.stats()}))
"""


@pytest.fixture
def driver_argv(bash: str, script_env: dict[str, str], cli_dir: Path) -> Callable[..., list[str]]:
    """The argv of one isolated scenario run; skips where it cannot run here."""
    if not SCENARIOS.is_dir():
        pytest.skip("tests/scenarios is not in this checkout")
    if not (Path(sys.prefix) / "pyvenv.cfg").is_file():
        pytest.skip(f"{sys.executable} is not in a virtual environment: nothing to bind inside")
    check = subprocess.run(
        [bash, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    if check.returncode == 77:
        pytest.skip(check.stderr.strip())
    assert check.returncode == 0, check.stderr
    script_env["ISOLATED_VENV"] = sys.prefix
    script_env["CACHEROOT_CLI"] = str(cli_dir / "cacheroot")

    def argv(*options: str, report: str, gates: tuple[str, ...] = ()) -> list[str]:
        return [bash, str(SCRIPT), *options, "--", "python", "-c", DRIVER, report, *gates]

    return argv


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A running isolated run, killed on the way out if the test failed before it finished."""
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for a run; its JSON, after checking that every scenario passed."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result: dict[str, Any] = json.loads(out)
    assert result["status"] == 0, result["output"]
    return result


def requests(result: dict[str, Any]) -> Counter[str]:
    """The origin's counts, ``"METHOD /path" -> n``."""
    return Counter(result["origin"]["requests"])


def test_cold_then_warm_scenario_runs(
    driver_argv: Callable[..., list[str]], script_env: dict[str, str], tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    bind = ("--tag", "cuda", "--bind", str(reports), "/reports")
    with started(driver_argv(*bind, report="/reports/cold.json"), script_env) as proc:
        cold = finish(proc)
    served = requests(cold)
    assert served, "the cold run asked the origin for nothing: the suite fetched nothing"
    assert set(served.values()) == {1}, served  # each asset once, across both workers
    cold_report = json.loads((reports / "cold.json").read_text())
    assert cold_report["misses"] > 0

    offline = ("--setenv", CACHEROOT_OFFLINE, "1")
    with started(driver_argv(*bind, *offline, report="/reports/warm.json"), script_env) as proc:
        warm = finish(proc)
    assert requests(warm) == Counter()
    warm_report = json.loads((reports / "warm.json").read_text())
    assert warm_report["misses"] == 0
    assert warm_report["hits"] == cold_report["misses"] + cold_report["hits"]
    assert warm_report["bytes_downloaded"] == 0


def test_two_scenario_runs_at_once_ask_for_each_asset_once(
    driver_argv: Callable[..., list[str]],
    script_env: dict[str, str],
    tmp_path: Path,
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    names = ("ready-a", "go-a", "ready-b", "go-b")
    for name in names:
        os.mkfifo(gates / name)
    bind = ("--tag", "rocm", "--bind", str(gates), "/gates")
    a_gates = ("/gates/ready-a", "/gates/go-a")
    b_gates = ("/gates/ready-b", "/gates/go-b")
    with (
        started(driver_argv(*bind, report="/gates/a.json", gates=a_gates), script_env) as a,
        started(driver_argv(*bind, report="/gates/b.json", gates=b_gates), script_env) as b,
    ):
        for ready in ("ready-a", "ready-b"):  # both origins listen
            with (gates / ready).open() as fifo:
                assert fifo.readline() == "ready\n"
        with (gates / "go-a").open("w"), (gates / "go-b").open("w"):
            pass  # both runs are blocked reading "go": closing releases them together
        first, second = finish(a), finish(b)
    both = requests(first) + requests(second)
    assert both, "neither run asked the origin for anything"
    assert set(both.values()) == {1}, (requests(first), requests(second))
