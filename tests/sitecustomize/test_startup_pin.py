"""A pinned root: children started with a scrubbed environment still land in the volume.

vLLM's GPQA eval starts its grader with ``subprocess.run(..., env={"OPENAI_API_KEY": "dummy"})``:
no ``CACHEROOT``, no ``HOME``, nothing the hook could derive from, so without a pin the child's
caches go to the password database's home. Each test builds a fresh environment (a venv whose
``sys.prefix`` it owns) that imports exactly what this one does and carries the hook's ``.pth``
line, so ``cacheroot hook pin`` writes into that environment and nowhere else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_PIN_FILE

#: The GPQA eval's child: a scrubbed environment, then the real huggingface_hub reads its cache.
GPQA_CHILD = """
import json, os, subprocess, sys
code = (
    "import json, os, huggingface_hub.constants as c; "
    "print(json.dumps({'hub': c.HF_HUB_CACHE, 'tiktoken': os.environ.get('TIKTOKEN_CACHE_DIR'), "
    "'test_cache': os.environ.get('_VLLM_TEST_CACHE'), 'root': os.environ.get('CACHEROOT')}))"
)
out = subprocess.run(
    [sys.executable, "-c", code], env={"OPENAI_API_KEY": "dummy"},
    capture_output=True, text=True, check=True,
)
sys.stdout.write(out.stdout)
"""


def _hook_pth() -> Path:
    pth = Path(sysconfig.get_paths()["purelib"]) / "cacheroot.pth"
    if not pth.exists():
        pytest.skip(f"the hook is not installed in this environment ({pth} is missing)")
    return pth


@pytest.fixture
def pinnable_env(child_env: dict[str, str]) -> dict[str, str]:
    """The child environment without the suite's "no pin" override: the pin file is read."""
    return {k: v for k, v in child_env.items() if k != CACHEROOT_PIN_FILE}


@pytest.fixture
def env_prefix(tmp_path: Path) -> Path:
    """A fresh venv that sees this environment's packages and runs the hook at start-up."""
    prefix = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(prefix)
    python = prefix / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "")},
    ).stdout.strip()
    site = Path(purelib)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    (site / "parent.pth").write_text("\n".join(paths) + "\n", encoding="utf-8")
    (site / "cacheroot.pth").write_text(_hook_pth().read_text(encoding="utf-8"), encoding="utf-8")
    return prefix


def _run(prefix: Path, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(prefix / "bin" / "python"), *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def _cli(prefix: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run(prefix, "-m", "cacheroot.envs._cli", *args, env=env)


def test_a_scrubbed_child_uses_the_pinned_root(
    env_prefix: Path, tmp_path: Path, pinnable_env: dict[str, str]
) -> None:
    volume = tmp_path / "volume"
    parent_env = {**pinnable_env, CACHEROOT: str(volume)}

    before = json.loads(_run(env_prefix, "-c", GPQA_CHILD, env=parent_env).stdout)
    assert not before["hub"].startswith(str(volume)), before  # the escape the pin closes

    pinned = _cli(env_prefix, "hook", "pin", str(volume), "--tag", "cuda", env=parent_env)
    assert pinned.returncode == 0, pinned.stderr
    pin_file = env_prefix / "etc" / "cacheroot" / "pin"
    assert pin_file.read_text(encoding="utf-8") == f"CACHEROOT={volume}\nCACHEROOT_TAG=cuda\n"

    after = json.loads(_run(env_prefix, "-c", GPQA_CHILD, env=parent_env).stdout)
    assert after == {
        "hub": f"{volume}/huggingface/hub",
        "tiktoken": f"{volume}/tiktoken",
        "test_cache": f"{volume}/vllm/test_cache",
        "root": None,  # the pin stands in for CACHEROOT; it is not exported
    }

    doctor = _cli(env_prefix, "doctor", env={"PATH": os.environ.get("PATH", "")})
    assert f"root: {volume}  (from pinned root in {pin_file})" in doctor.stdout
    assert f"pin:  {volume}, tag cuda from {pin_file} (in use: CACHEROOT is unset)" in (
        doctor.stdout
    )

    unpinned = _cli(env_prefix, "hook", "unpin", env=parent_env)
    assert unpinned.returncode == 0, unpinned.stderr
    assert not pin_file.exists()
    again = json.loads(_run(env_prefix, "-c", GPQA_CHILD, env=parent_env).stdout)
    assert again == before


def test_cacheroot_wins_over_the_pin(
    env_prefix: Path, tmp_path: Path, pinnable_env: dict[str, str]
) -> None:
    assert (
        _cli(env_prefix, "hook", "pin", str(tmp_path / "pinned"), env=pinnable_env).returncode == 0
    )
    code = "import os; print(os.environ['HF_HOME'])"
    out = _run(env_prefix, "-c", code, env={**pinnable_env, CACHEROOT: str(tmp_path / "set")})
    assert out.stdout.strip() == f"{tmp_path}/set/huggingface"
    doctor = _cli(env_prefix, "doctor", env={**pinnable_env, CACHEROOT: str(tmp_path / "set")})
    assert "(not used: CACHEROOT is set)" in doctor.stdout


@pytest.mark.parametrize("bad", ["relative/root", "/with\nnewline"])
def test_pin_refuses_a_root_that_is_not_absolute(
    env_prefix: Path, pinnable_env: dict[str, str], bad: str
) -> None:
    out = _cli(env_prefix, "hook", "pin", bad, env=pinnable_env)
    assert out.returncode == 2
    assert "expected an absolute path" in out.stderr
    assert "nothing was recorded" in out.stderr
    assert not (env_prefix / "etc" / "cacheroot" / "pin").exists()


def test_unpin_without_a_pin_says_so(env_prefix: Path, pinnable_env: dict[str, str]) -> None:
    out = _cli(env_prefix, "hook", "unpin", env=pinnable_env)
    assert out.returncode == 0
    assert out.stdout == f"no pinned root in {env_prefix}/etc/cacheroot/pin\n"
