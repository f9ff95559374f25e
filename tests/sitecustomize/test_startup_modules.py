"""What start-up loads: ``_cacheroot_start`` alone in a plain environment, the compact rules
where the user set a variable of the layout, and the full layout only for a pin.

The layout module (``_cacheroot_layout``: the documented table, the doctor's resolver) is what
the hook's start-up cost was made of. A fresh interpreter with ``CACHEROOT`` set, one without it
under ``HOME``, and a child of a hooked process apply the layout from ``_cacheroot_start``'s
templates; an environment with a value of its own takes ``_cacheroot_compact`` too. A process
without ``CACHEROOT`` that finds a pin file hands over to the layout, which reads and judges the
pin.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT, CACHEROOT_PIN_FILE

if TYPE_CHECKING:
    from pathlib import Path

    from tests.sitecustomize.conftest import Interpreter

#: Prints which of the hook's modules this interpreter loaded, and where HF_HOME points.
PROBE = (
    "import json, os, sys; print(json.dumps({'modules': sorted(m for m in sys.modules "
    "if m.startswith('_cacheroot')), 'HF_HOME': os.environ.get('HF_HOME')}))"
)


def started(interp: Interpreter, env: dict[str, str]) -> dict[str, object]:
    proc = interp.run([sys.executable, "-c", PROBE], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    found: dict[str, object] = json.loads(proc.stdout)
    return found


def test_a_process_with_a_root_loads_only_the_fast_path(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    found = started(interp, {**child_env, CACHEROOT: str(tmp_path / "root")})
    assert found == {"modules": ["_cacheroot_start"], "HF_HOME": f"{tmp_path}/root/huggingface"}


def test_a_process_without_a_root_or_a_pin_loads_only_the_fast_path(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**child_env, CACHEROOT_PIN_FILE: str(tmp_path / "no-pin"), "HOME": str(tmp_path)}
    found = started(interp, env)
    assert found == {"modules": ["_cacheroot_start"], "HF_HOME": f"{tmp_path}/.cache/huggingface"}


def test_a_child_of_a_hooked_process_loads_only_the_start_module(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    spawn = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {PROBE!r}], check=True)"
    proc = interp.run(
        [sys.executable, "-c", spawn], {**child_env, CACHEROOT: str(tmp_path / "root")}
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found == {"modules": ["_cacheroot_start"], "HF_HOME": f"{tmp_path}/root/huggingface"}


def test_a_value_of_the_users_own_takes_the_compact_rules_not_the_layout(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**child_env, CACHEROOT: str(tmp_path / "root"), "HF_HOME": str(tmp_path / "hf")}
    found = started(interp, env)
    assert found == {
        "modules": ["_cacheroot_compact", "_cacheroot_start"],
        "HF_HOME": f"{tmp_path}/hf",
    }


def test_a_pin_is_read_by_the_full_layout(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "etc"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    pin = folder / "pin"
    pin.write_text(f"CACHEROOT={tmp_path}/pinned\n", encoding="utf-8")
    pin.chmod(0o644)
    found = started(interp, {**child_env, CACHEROOT_PIN_FILE: str(pin)})
    assert found == {
        "modules": ["_cacheroot_compact", "_cacheroot_layout", "_cacheroot_start"],
        "HF_HOME": f"{tmp_path}/pinned/huggingface",
    }
