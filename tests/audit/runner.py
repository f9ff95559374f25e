"""Inner pytest sessions for the audit's tests: a project in ``tmp_path``, with its own HOME.

Every run gets its own ``HOME``, temporary directory, cache root and working tree inside the
outer test's ``tmp_path``, so an escape the inner run provokes lands there and nowhere real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_PIN_FILE,
    HF_ENDPOINT,
    HF_HUB_OFFLINE,
    TABLE,
)

HERE = Path(__file__).resolve().parent
ESCAPES = HERE / "escapes"
#: Names an inner run must not inherit from the outer one: the layout, cacheroot's switches
#: (the audit's own included), pytest's and xdist's markers, hub settings.
_LAYOUT = frozenset({CACHEROOT_APPLIED, HF_HUB_OFFLINE, *(v.name for v in TABLE)})


def _inherited(name: str) -> bool:
    upper = name.upper()
    return not (
        name in _LAYOUT
        or upper.startswith(("CACHEROOT", "PYTEST_", "HF_", "VLLM_", "_VLLM_"))
        or upper in {"PYTHONPATH", "TMPDIR", "TMP", "TEMP"}
    )


@dataclass(frozen=True)
class Project:
    """The directories of one inner run."""

    work: Path
    home: Path
    tmp: Path
    root: Path

    @classmethod
    def make(cls, base: Path) -> Project:
        dirs = {name: base / name for name in ("work", "home", "tmp", "root")}
        for folder in dirs.values():
            folder.mkdir(parents=True)
        (dirs["work"] / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        return cls(**dirs)

    def add(self, scenario: str, as_name: str) -> Path:
        """Copy ``escapes/<scenario>`` into the working tree as ``as_name``."""
        target = self.work / as_name
        shutil.copyfile(ESCAPES / scenario, target)
        return target

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if _inherited(k)}
        env.update(
            HOME=str(self.home),
            TMPDIR=str(self.tmp),
            **{CACHEROOT: str(self.root), CACHEROOT_PIN_FILE: ""},
        )
        env.update(extra)
        return env

    def pytest(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        """``python -m pytest ARGS`` in the working tree; output captured as text."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
            cwd=self.work,
            env=self.env() if env is None else env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )


def hub_env(url: str) -> dict[str, str]:
    """The variables that point huggingface_hub at a local hub."""
    return {HF_ENDPOINT: url}


def marked_line(path: Path, marker: str) -> int:
    """The 1-based number of the line of ``path`` that ends with ``# escape: MARKER``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.rstrip().endswith(f"# escape: {marker}"):
            return number
    raise AssertionError(f"no line marked {marker!r} in {path}")


def load_report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def writes(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every write of the report, over all its groups."""
    return [w for group in report["groups"] for w in group["writes"]]
