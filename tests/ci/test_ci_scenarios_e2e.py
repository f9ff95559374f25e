"""The scenario suite in isolated runs that share only the cache volume, as CI jobs do.

Each run (``ci/isolated-run.sh``: fresh HOME and /tmp, loopback only, the volume at /cacheroot)
starts the scenario origin on the port derived from the volume's path, which is /cacheroot in
every run, so all runs see the same URLs; then it runs ``pytest tests/scenarios`` sharded over
two xdist workers and prints the origin's request counts. A cold run asks for each asset once, a
warm run (offline) asks for nothing, and two runs at once on a fresh volume ask for each asset
once between them, with every test passing in both.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

    from tests.ci import isolated
else:
    # pytest puts tests/ci on sys.path (no package there); mypy names it tests.ci.
    import isolated

#: bubblewrap runs each job: `nox -s e2e`, never the default sessions.
pytestmark = pytest.mark.e2e

SCENARIOS = isolated.REPO / "tests" / "scenarios"

#: Runs inside an isolated run, from the repository. argv: the report path, then optionally the
#: FIFOs "ready" (written once the origin listens) and "go" (read to EOF before pytest starts).
DRIVER = """
import json, os, subprocess, sys
sys.path.insert(0, "tests")
from scenarios.conftest import SCENARIO_ORIGIN, SCENARIO_ROOT
from scenarios.origin import Origin, port_for

root = os.environ["CACHEROOT"]
origin = Origin(port_for(root)).start()
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as ready:
        ready.write("ready\\n")
    with open(sys.argv[3]) as go:
        go.read()
env = {**os.environ, SCENARIO_ROOT: root, SCENARIO_ORIGIN: origin.base}
run = subprocess.run(
    [sys.executable, "-m", "pytest", "tests/scenarios", "-q", "-n", "2",
     "--cacheroot-report=" + sys.argv[1]],
    env=env, capture_output=True, text=True,
)
origin.close()
print(json.dumps({"status": run.returncode, "output": run.stdout + run.stderr,
                  "origin": origin.stats()}))
"""


@pytest.fixture
def driver_argv(bash: str, script_env: dict[str, str], cli_dir: Path) -> Callable[..., list[str]]:
    """The argv of one isolated scenario run; skips where it cannot run here."""
    if not SCENARIOS.is_dir():
        pytest.skip("tests/scenarios is not in this checkout")
    run = isolated.isolated_run(bash, script_env, cli_dir)

    def argv(*options: str, report: str, gates: tuple[str, ...] = ()) -> list[str]:
        return [*run, *options, "--", "python", "-c", DRIVER, report, *gates]

    return argv


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for a run; its JSON, after checking that every scenario passed."""
    result = isolated.finish(proc, timeout=300)
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
    with isolated.started(driver_argv(*bind, report="/reports/cold.json"), script_env) as proc:
        cold = finish(proc)
    served = requests(cold)
    assert served, "the cold run asked the origin for nothing: the suite fetched nothing"
    assert set(served.values()) == {1}, served  # each asset once, across both workers
    cold_report = json.loads((reports / "cold.json").read_text())
    assert cold_report["misses"] > 0

    offline = ("--setenv", CACHEROOT_OFFLINE, "1")
    warm_argv = driver_argv(*bind, *offline, report="/reports/warm.json")
    with isolated.started(warm_argv, script_env) as proc:
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
    a_gates, b_gates = isolated.make_gates(gates)
    bind = ("--tag", "rocm", "--bind", str(gates), "/gates")
    a_argv = driver_argv(*bind, report="/gates/a.json", gates=a_gates)
    b_argv = driver_argv(*bind, report="/gates/b.json", gates=b_gates)
    with isolated.started(a_argv, script_env) as a, isolated.started(b_argv, script_env) as b:
        isolated.release_together(gates)
        first, second = finish(a), finish(b)
    both = requests(first) + requests(second)
    assert both, "neither run asked the origin for anything"
    assert set(both.values()) == {1}, (requests(first), requests(second))
