"""The CI volume's promise, end to end: isolated runs that share only the volume.

Each run is a fresh "container" (``ci/isolated-run.sh``) that starts its own origin server on
loopback and fetches a set of assets through :func:`cacheroot.fetch.fetch`. A network namespace
of its own means every run's origin can listen on the same fixed port, so the URLs, and with them
the cache keys, are the same in every run, as a real origin's are. The origin counts the requests
it serves: a cold run makes one per asset, a warm run none, and two runs at once on a fresh
volume one per asset between them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

    from tests.ci import isolated
else:
    # pytest puts tests/ci on sys.path (no package there); mypy names it tests.ci.
    import isolated

#: bubblewrap runs each job: `nox -s e2e`, never the default sessions.
pytestmark = pytest.mark.e2e

CONTAINER_ROOT = "/cacheroot"
ASSETS = 6
SIZE = 256 * 1024
#: Free in every run: each has a network namespace of its own.
PORT = 18080

#: One job: serve the assets on 127.0.0.1:PORT, fetch them all, print what happened as JSON.
#: argv: port, count, size, chunk delay (seconds between 16 KiB pieces; slows the origin so that
#: runs overlap), then optionally the FIFOs "ready" (written once the origin listens) and "go"
#: (read to EOF). It runs from the repository: the origin is the toolkit's (tests/origin).
JOB = """
import hashlib, json, sys, time
sys.path.insert(0, "tests")
from origin import Server, paced, static
from cacheroot.fetch import fetch, stats

port, count, size, delay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
gates = sys.argv[5:]

def body(i):
    return (hashlib.sha256(b"asset-%d" % i).digest() * (size // 32 + 1))[:size]

def asset(ex):
    data = body(int(ex.info.path.rsplit("/", 1)[1]))
    paced(static(data), chunk=16384, every=delay)(ex)

server = Server(asset, port=port, methods=("GET",)).start()
if gates:
    with open(gates[0], "w") as ready:
        ready.write("ready\\n")
    with open(gates[1]) as go:
        go.read()
paths = []
began = time.time()
for i in range(count):
    digest = hashlib.sha256(body(i)).hexdigest()
    paths.append(str(fetch(f"http://127.0.0.1:{port}/asset/{i}", sha256=digest, namespace="e2e")))
ended = time.time()
server.close()
served = [r.path for r in server.requests()]
print(json.dumps({"served": served, "paths": paths, "stats": stats(), "span": [began, ended]}))
"""


def asset(i: int) -> bytes:
    """The bytes the origin serves for asset ``i`` (the same formula as in :data:`JOB`)."""
    return (hashlib.sha256(b"asset-%d" % i).digest() * (SIZE // 32 + 1))[:SIZE]


@pytest.fixture
def job_argv(bash: str, script_env: dict[str, str], cli_dir: Path) -> Callable[..., list[str]]:
    """The argv of one isolated job; skips where isolated runs are impossible here."""
    run = isolated.isolated_run(bash, script_env, cli_dir)

    def argv(*options: str, delay: float = 0.0, gates: tuple[str, ...] = ()) -> list[str]:
        return [
            *run,
            *options,
            "--",
            "python",
            "-c",
            JOB,
            str(PORT),
            str(ASSETS),
            str(SIZE),
            str(delay),
            *gates,
        ]

    return argv


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for a job and return its JSON report."""
    return isolated.finish(proc, timeout=120)


def check_volume(volume: Path, report: dict[str, Any]) -> None:
    """Every path the job got is on the host's volume with the right bytes, and nothing partial."""
    assert len(report["paths"]) == ASSETS
    for i, inside in enumerate(report["paths"]):
        assert inside.startswith(CONTAINER_ROOT + "/")
        on_host = volume / inside.removeprefix(CONTAINER_ROOT + "/")
        assert on_host.read_bytes() == asset(i)
        leftovers = [p.name for p in on_host.parent.iterdir() if "partial" in p.name]
        assert leftovers == []


def test_a_cold_run_fills_the_volume_and_a_warm_run_makes_no_request(
    job_argv: Callable[..., list[str]], script_env: dict[str, str], isolated_cache: Path
) -> None:
    with isolated.started(job_argv(), script_env) as proc:
        cold = finish(proc)
    assert len(cold["served"]) == ASSETS
    assert cold["stats"]["downloads"] == ASSETS
    check_volume(isolated_cache, cold)

    # Offline as well: a miss would be an error, not a request.
    with isolated.started(job_argv("--setenv", CACHEROOT_OFFLINE, "1"), script_env) as proc:
        warm = finish(proc)
    assert warm["served"] == []
    assert warm["stats"]["hits"] == ASSETS
    assert warm["stats"]["bytes_from_cache"] == ASSETS * SIZE
    assert warm["paths"] == cold["paths"]


def test_two_runs_at_once_download_each_asset_once(
    job_argv: Callable[..., list[str]],
    script_env: dict[str, str],
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    gates = tmp_path / "gates"
    a_gates, b_gates = isolated.make_gates(gates)
    bind = ("--bind", str(gates), "/gates")
    a_argv = job_argv(*bind, delay=0.004, gates=a_gates)
    b_argv = job_argv(*bind, delay=0.004, gates=b_gates)
    with isolated.started(a_argv, script_env) as a, isolated.started(b_argv, script_env) as b:
        isolated.release_together(gates)
        first, second = finish(a), finish(b)
    served = len(first["served"]) + len(second["served"])
    assert served == ASSETS, (first["served"], second["served"])
    (a_began, a_ended), (b_began, b_ended) = first["span"], second["span"]
    overlap = min(a_ended, b_ended) - max(a_began, b_began)
    assert overlap > 0, "the runs did not overlap: this run proves nothing about concurrency"
    check_volume(isolated_cache, first)
    check_volume(isolated_cache, second)
    assert first["paths"] == second["paths"]
