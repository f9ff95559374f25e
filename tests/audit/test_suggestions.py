"""Every suggestion the static audit prints can be pasted into a POSIX shell, and then it
matches what it was suggested for: pasted after the same command, the gate passes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

#: Places whose text is hard on a shell and on fnmatch: quotes, brackets, stars, dollars.
AWKWARD = """\
import os
import tempfile


def extract(member):
    target = os.path.join(tempfile.gettempdir(), member.split('/')[-1])
    os.makedirs(target, exist_ok=True)


SPACED = "/tmp/a b*?[x]"
QUOTED = os.path.expanduser("~/.it's here")
CACHE = os.getenv("DEMO_CACHE_DIR", os.path.expanduser("~/.demo"))
"""

OVERRIDE = """\
def test_points_hf_home_elsewhere(monkeypatch):
    monkeypatch.setenv("HF_HOME", "/srv/hf")
"""


def _audit(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cacheroot.envs._cli", "audit", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_each_suggestion_pasted_into_sh_makes_the_gate_pass(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "tests").mkdir(parents=True)
    (src / "m.py").write_text(AWKWARD, encoding="utf-8")
    (src / "tests" / "test_env.py").write_text(OVERRIDE, encoding="utf-8")
    first = _audit(str(src))
    assert first.returncode == 1
    pasted = [
        line.split("to accept it: ", 1)[1]
        for line in first.stdout.splitlines()
        if "to accept it: " in line
    ]
    assert pasted == [
        "--allow '$TMPDIR/{member.split('\"'\"'/'\"'\"')[[]-1]}'",
        "--allow '/tmp/a b[*][?][[]x]'",
        "--allow '~/.it'\"'\"'s here'",
        "--allow 'DEMO_CACHE_DIR'",
        "--allow 'HF_HOME'",
    ]
    command = " ".join([shlex.quote(sys.executable), "-m", "cacheroot.envs._cli", "audit"])
    line = f"{command} {shlex.quote(str(src))} {' '.join(pasted)}"
    run = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Allowed (--allow) (5):" in run.stdout
    # Each one alone accepts only its own finding: the gate still fails on the others.
    for one in pasted:
        alone = subprocess.run(
            ["sh", "-c", f"{command} {shlex.quote(str(src))} {one}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert "Allowed (--allow) (1):" in alone.stdout, (one, alone.stdout)
