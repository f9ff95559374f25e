"""Hosts of a fleet sharing a bucket: each a process with its own cache root (``host.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_PIN_FILE,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    TABLE,
)

if TYPE_CHECKING:
    from .s3server import S3

HOST = str(Path(__file__).with_name("host.py"))
_LAYOUT = {v.name for v in TABLE}


def host_env(
    root: Path, shared: str, s3: S3 | None, *, mode: str = "rw", **extra: str
) -> dict[str, str]:
    """The environment of a host whose cache root is ``root`` and whose shared tier is
    ``shared``: nothing of this process's cache layout or AWS configuration leaks in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CACHEROOT", "AWS_", "HF_")) and k not in _LAYOUT
    }
    if s3 is not None:
        env.update(s3.env())
    env.update({CACHEROOT: str(root), CACHEROOT_PIN_FILE: "", CACHEROOT_SHARED: shared})
    env[CACHEROOT_SHARED_MODE] = mode
    env.update(extra)
    return env


@dataclass
class Done:
    """What a host did: exit status, the sha256 of each file it was served, its stderr."""

    rc: int
    served: list[str]
    grown_kib: list[int]
    stdout: str
    stderr: str


class Host:
    """One host process running :data:`HOST` with ``job`` in ``env``."""

    def __init__(self, work: Path, name: str, env: dict[str, str], **job: Any) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.job_file = work / f"{name}.json"
        self.job_file.write_text(json.dumps(job))
        self.proc = subprocess.Popen(
            [sys.executable, HOST, str(self.job_file)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, timeout: float = 45.0) -> Done:
        out, err = self.proc.communicate(timeout=timeout)
        lines = out.strip().splitlines()
        report = json.loads(lines[-1]) if self.proc.returncode == 0 and lines else {}
        return Done(
            self.proc.returncode, report.get("served", []), report.get("grown_kib", []), out, err
        )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)
