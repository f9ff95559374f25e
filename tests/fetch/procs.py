"""Child processes: fetches behind a start gate (concurrency, crashes) and the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The child: build a Fetcher, import the miss path, say "ready", wait for the gate, fetch.
CHILD = """
import json, sys
from cacheroot.fetch import Fetcher, stats
import cacheroot.fetch._http
job = json.loads(sys.argv[1])
f = Fetcher(read_timeout=10.0, retries=3, backoff=0.01, backoff_max=0.05, lock_timeout=60.0)
print("ready", flush=True)
if job.get("gate"):
    sys.stdin.readline()
paths = [str(f.fetch(url, sha256=digest)) for url, digest in job["urls"]]
print(json.dumps({"paths": paths, "stats": stats()}), flush=True)
"""


def spawn(
    urls: Sequence[tuple[str, str | None]], *, gate: bool = True, child: str = CHILD
) -> subprocess.Popen[str]:
    """Start a child that fetches ``urls`` (``(url, sha256)`` pairs) in order.

    ``child`` is the program (see :data:`CHILD` for what it must read, print and wait for).
    """
    job = json.dumps({"urls": urls, "gate": gate})
    return subprocess.Popen(
        [sys.executable, "-c", child, job],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    """Block until the child has imported everything and reached its gate."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line


def open_gate(procs: list[subprocess.Popen[str]]) -> None:
    """Release every child at once."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def result(proc: subprocess.Popen[str], timeout: float = 120.0) -> dict[str, object]:
    """The child's report; it must have exited 0."""
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``cacheroot`` command in a fresh interpreter with this environment."""
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
