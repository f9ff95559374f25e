"""vLLM 0.33 knows every ``VLLM_*`` name the hook sets, by its own table and its own check.

A real hooked interpreter of the session's venv (vLLM installed there with ``--no-deps``) starts
with ``CACHEROOT`` at a fresh directory and every opt-in on, under no tag and under each vendor
tag. It loads the installed ``vllm/envs.py`` and runs ``Platform.validate_environ`` from the
installed ``vllm/platforms/interface.py`` against its own ``os.environ``: the check behind
vLLM's "Unknown vLLM environment variable detected" warning (an error under
``--fail-on-environ-validation``).

Neither module can be imported the usual way without torch, which the pinned set leaves out:
``vllm/__init__.py`` imports it (through ``vllm.env_override``), and so does
``vllm/platforms/interface.py`` at its top. So the probe registers the ``vllm`` package without
running its ``__init__.py`` (``import vllm.envs`` then loads the real file, as does the method's
own ``from vllm import envs``), and compiles ``validate_environ`` from its source in the
installed file (decorator dropped; its globals are the module's ``os`` and a logger the probe
listens to).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_OPT_IN, CACHEROOT_TAG

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.upstream.conftest import Pins

PROBE = """\
import ast, importlib, importlib.metadata, importlib.util, json, logging, os, sys, types

where = list(importlib.util.find_spec("vllm").submodule_search_locations)
package = types.ModuleType("vllm")
package.__path__ = where
sys.modules["vllm"] = package  # vllm/__init__.py imports torch: not run
envs = importlib.import_module("vllm.envs")

source = os.path.join(where[0], "platforms", "interface.py")
with open(source, encoding="utf-8") as f:
    tree = ast.parse(f.read(), source)
(platform,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Platform"]
(method,) = [n for n in platform.body if getattr(n, "name", "") == "validate_environ"]
method.decorator_list = []
logger = logging.getLogger("vllm.platforms.interface")
scope = {"os": os, "logger": logger}
exec(compile(ast.Module(body=[method], type_ignores=[]), source, "exec"), scope)

warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logger.addHandler(handler)
logger.propagate = False
scope["validate_environ"](None, False)
try:
    scope["validate_environ"](None, True)
    error = ""
except ValueError as exc:
    error = str(exc)

json.dump(
    {
        "version": importlib.metadata.version("vllm"),
        "envs": envs.__file__,
        "known": sorted(envs.environment_variables),
        "environ": dict(os.environ),
        "warnings": warnings,
        "error": error,
    },
    sys.stdout,
)
"""


def probe(env: dict[str, str]) -> dict[str, object]:
    """What vLLM's own table and check make of a hooked interpreter started with ``env``."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    seen: dict[str, object] = json.loads(proc.stdout)
    return seen


@pytest.fixture
def hooked(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A fresh root with every opt-in on, no tag yet, and nothing ``VLLM_*`` from outside."""
    return {**clean_env, CACHEROOT: str(tmp_path / "root"), CACHEROOT_OPT_IN: "all"}


@pytest.mark.parametrize("tag", ["", "cuda", "rocm"], ids=["no-tag", "cuda", "rocm"])
def test_vllm_knows_every_name_the_hook_sets(
    hooked: dict[str, str], pins: Pins, report: Callable[[str], None], tag: str
) -> None:
    env = {**hooked, CACHEROOT_TAG: tag} if tag else hooked

    seen = probe(env)

    (vllm,) = [p for p in pins.wheels if p.name == "vllm"]
    assert seen["version"] == vllm.version
    environ = seen["environ"]
    known = seen["known"]
    assert isinstance(environ, dict)
    assert isinstance(known, list)
    names = sorted(n for n in environ if n.startswith("VLLM_"))
    assert "VLLM_CACHE_ROOT" in names  # the hook ran (nothing VLLM_* came in from outside)
    assert [n for n in names if n not in known] == []
    assert seen["warnings"] == []
    assert seen["error"] == ""
    assert str(seen["envs"]).endswith(os.path.join("site-packages", "vllm", "envs.py"))
    aside = sorted(n for n in environ if "VLLM_" in n and not n.startswith("VLLM_"))
    report(
        f"{CACHEROOT_TAG}={tag or '(unset)'} {CACHEROOT_OPT_IN}=all: vllm=={seen['version']} "
        f"knows {', '.join(names)} ({len(known)} names in envs.environment_variables; "
        "validate_environ silent)"
        + (f"; outside its VLLM_ rule: {', '.join(aside)}" if aside else "")
    )


def test_an_unknown_vllm_name_is_reported(
    hooked: dict[str, str], report: Callable[[str], None]
) -> None:
    """The negative control: vLLM's check does flag a name its table lacks."""
    seen = probe({**hooked, "VLLM_NOT_A_VARIABLE": "1"})

    known = seen["known"]
    assert isinstance(known, list)
    assert "VLLM_NOT_A_VARIABLE" not in known
    message = "Unknown vLLM environment variable detected: VLLM_NOT_A_VARIABLE"
    assert seen["warnings"] == [message]
    assert seen["error"] == message
    report(f"negative control: VLLM_NOT_A_VARIABLE=1 -> warning and ValueError {message!r}")
