"""Fixtures of the hub tests: a tiny model repository, a local hub serving it, and runners.

The hub clients run in subprocesses (see ``hubdriver.py``): they read their environment at
import time, and a subprocess started with the test's environment is the honest way to give
them one, the way a CI job gets its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .hubserver import HubRepo, HubServer

if TYPE_CHECKING:
    from collections.abc import Iterator

DRIVER = str(Path(__file__).with_name("hubdriver.py"))
REPO_ID = "acme/tiny-model"
#: The files of the tiny repository, in the order the tests name them.
FILES = ("config.json", "model.safetensors", "tokenizer.json")


def _safetensors() -> bytes:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    return save(
        {
            "embed.weight": rng.standard_normal((32, 16)).astype(np.float32),
            "lm_head.weight": rng.standard_normal((16, 32)).astype(np.float32),
        }
    )


@pytest.fixture(scope="session")
def tiny_repo() -> HubRepo:
    """A tiny model: a config, a tokenizer and a few KiB of safetensors weights (LFS)."""
    config = {"model_type": "llama", "hidden_size": 16, "vocab_size": 32}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}
    return HubRepo(
        REPO_ID,
        {
            "config.json": json.dumps(config).encode(),
            "model.safetensors": _safetensors(),
            "tokenizer.json": json.dumps(tokenizer).encode(),
        },
    )


@pytest.fixture
def hub(tiny_repo: HubRepo) -> Iterator[HubServer]:
    """A fresh local hub (fresh counts) serving the tiny repository on both APIs."""
    server = HubServer()
    server.add_hf(tiny_repo)
    server.add_modelscope(tiny_repo)
    with server:
        yield server


@pytest.fixture
def hub_env(hub: HubServer) -> dict[str, str]:
    """The environment of a job: the isolated cache layout, pointed at the local hub."""
    env = dict(os.environ)
    env.update(
        HF_ENDPOINT=hub.url,
        MODELSCOPE_ENDPOINT=hub.url,
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    return env


class Driver:
    """Starts ``hubdriver.py`` processes with a given environment and reads their outcome."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def request(self, op: str, spec: dict[str, Any], **kw: Any) -> str:
        return json.dumps({"op": op, "spec": spec, "kw": kw})

    def run(
        self, op: str, spec: dict[str, Any], *, env: dict[str, str] | None = None, **kw: Any
    ) -> dict[str, Any]:
        """Run one operation to completion and return its JSON outcome."""
        proc = subprocess.run(
            [sys.executable, DRIVER, self.request(op, spec, **kw)],
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return _outcome(proc.returncode, proc.stdout, proc.stderr)

    def start(self, op: str, spec: dict[str, Any], **kw: Any) -> subprocess.Popen[str]:
        """Start one operation and return its process (for tests that kill it)."""
        return subprocess.Popen(
            [sys.executable, DRIVER, self.request(op, spec, **kw)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def run_together(
        self, n: int, op: str, spec: dict[str, Any], **kw: Any
    ) -> list[dict[str, Any]]:
        """Start ``n`` processes, wait until all are imported, release them at once."""
        request = json.loads(self.request(op, spec, **kw))
        request["gate"] = True
        procs = [
            subprocess.Popen(
                [sys.executable, DRIVER, json.dumps(request)],
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "ready"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = []
            for proc in procs:
                out, err = proc.communicate(timeout=120)
                results.append(_outcome(proc.returncode, out, err))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return results


def _outcome(code: int, stdout: str, stderr: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    assert code == 0, f"driver exited {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert lines, f"driver printed nothing\nstderr:\n{stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["stderr"] = stderr
    return result


@pytest.fixture
def driver(hub_env: dict[str, str]) -> Driver:
    """Runs hub operations in fresh processes with the job's environment."""
    return Driver(hub_env)
