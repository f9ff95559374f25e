"""The test's side of a simulated host: its job file, its process, its report; polling."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ._namespaces import enter

#: The host's own process (:mod:`._inside`), run as a script: it imports nothing of this package.
INSIDE = str(Path(__file__).with_name("_inside.py"))


class Host:
    """One simulated host running ``driver`` (an area's ``prepare``, see :mod:`._inside`).

    The job is written to ``work/NAME.job.json``; the host's L1 is ``work/NAME/l1`` and its
    report lands in ``work/NAME.json``. The host starts at once, in a session of its own.
    """

    def __init__(self, name: str, work: Path, driver: str, **job: Any) -> None:
        self.name = name
        self.out = work / f"{name}.json"
        self.job = {"l1": str(work / name / "l1"), "out": str(self.out), **job}
        spec = work / f"{name}.job.json"
        spec.write_text(json.dumps(self.job))
        self.proc = subprocess.Popen(
            [*enter(name), sys.executable, INSIDE, driver, str(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def report(self, timeout: float = 120.0) -> dict[str, Any]:
        """Wait for the host and return its report; fail with its output if it failed."""
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            output, _ = self.proc.communicate()
            pytest.fail(f"host {self.name} did not finish in {timeout} s:\n{output}")
        assert self.proc.returncode == 0, f"host {self.name} failed:\n{output}"
        result: dict[str, Any] = json.loads(self.out.read_text())
        return result

    def kill(self) -> None:
        """``kill -9`` every process of the host."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "") -> None:
    """Poll ``predicate`` (a cheap look at the file system) until true; fail after ``timeout``."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what or predicate}")
        time.sleep(0.01)
