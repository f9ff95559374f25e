"""The ``PYTHONPATH`` variant: a ``sitecustomize`` that applies the layout, then chains.

Images that cannot install a ``.pth`` file put the folder from ``cacheroot hook --pythonpath``
first on ``PYTHONPATH``. Its ``sitecustomize`` shadows the image's own, so it must run that one
too. The proof uses the base interpreter of this environment, which has no ``.pth`` hook: the
layout can only come from the ``sitecustomize`` under test.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import _cacheroot_hook
import pytest

import cacheroot.envs
from cacheroot.envs import CACHEROOT, resolve

if TYPE_CHECKING:
    from pathlib import Path

    from tests.sitecustomize.conftest import Interpreter

#: The shadowed ``sitecustomize``: records what the layout looked like when it ran.
SHADOWED = """\
import os
with open(os.environ["SHADOWED_MARKER"], "w") as f:
    f.write(os.environ.get("HF_HOME", "<unset>"))
"""

#: Where ``cacheroot.envs`` is importable from without this environment's ``.pth`` files.
ENVS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(cacheroot.envs.__file__)))
#: The same for the hook's modules (``_cacheroot_start`` included): both, as an image has them.
LIBS = (ENVS_DIR, os.path.dirname(os.path.abspath(_cacheroot_hook.__file__)))


@pytest.fixture
def base_python() -> str:
    """The interpreter this environment was made from: same Python, no cacheroot ``.pth``."""
    # Not sys._base_executable: inside a venv, Python 3.10 reports the venv's own interpreter.
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    base = os.path.join(sys.base_prefix, "bin", version)
    if sys.prefix == sys.base_prefix or not os.path.exists(base):
        pytest.skip("needs a virtual environment with a separate base interpreter")
    return base


@pytest.fixture
def shadowed(tmp_path: Path) -> Path:
    folder = tmp_path / "image"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SHADOWED)
    return folder


def test_cli_prints_the_folder(interp: Interpreter, child_env: dict[str, str]) -> None:
    proc = interp.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "hook", "--pythonpath"], child_env
    )
    assert proc.returncode == 0, proc.stderr
    folder = proc.stdout.strip()
    assert folder == _cacheroot_hook.pythonpath()
    assert os.path.isfile(os.path.join(folder, "sitecustomize.py"))


def _env(child_env: dict[str, str], root: Path, marker: Path, *folders: str) -> dict[str, str]:
    return {
        **child_env,
        CACHEROOT: str(root),
        "SHADOWED_MARKER": str(marker),
        "PYTHONPATH": os.pathsep.join(folders),
    }


def test_base_interpreter_has_no_hook(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, shadowed: Path, base_python: str
) -> None:
    """The control: without the folder, the image's sitecustomize runs and nothing is derived."""
    marker = tmp_path / "marker"
    env = _env(child_env, tmp_path / "root", marker, *LIBS, str(shadowed))

    layout = interp.layout(env, python=base_python)

    assert set(layout.values()) == {None}
    assert marker.read_text() == "<unset>"


def test_applies_the_layout_then_chains(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, shadowed: Path, base_python: str
) -> None:
    root = tmp_path / "root"
    marker = tmp_path / "marker"
    env = _env(child_env, root, marker, _cacheroot_hook.pythonpath(), *LIBS, str(shadowed))

    started = interp.run([base_python, "-c", "pass"], env)
    layout = interp.layout(env, python=base_python)

    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    expected = resolve(env).applied()
    assert {k: v for k, v in layout.items() if v is not None} == expected
    # The shadowed sitecustomize ran, and ran after the layout was applied.
    assert marker.read_text() == str(root / "huggingface")


def test_without_a_shadowed_sitecustomize(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, base_python: str
) -> None:
    root = tmp_path / "root"
    env = _env(child_env, root, tmp_path / "marker", _cacheroot_hook.pythonpath(), *LIBS)

    started = interp.run([base_python, "-c", "pass"], env)

    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    assert interp.layout(env, python=base_python)["HF_HOME"] == str(root / "huggingface")
    assert not (tmp_path / "marker").exists()


def test_a_failing_shadowed_sitecustomize_does_not_stop_start_up(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, base_python: str
) -> None:
    """The image's own hook failing is reported (as Python itself would), never fatal."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sitecustomize.py").write_text("raise RuntimeError('the image hook is broken')\n")
    root = tmp_path / "root"
    env = _env(child_env, root, tmp_path / "marker", _cacheroot_hook.pythonpath(), *LIBS)
    env["PYTHONPATH"] += os.pathsep + str(broken)

    started = interp.run([base_python, "-c", "import os; print(os.environ['HF_HOME'])"], env)

    assert started.returncode == 0
    assert started.stdout == str(root / "huggingface") + "\n"
    assert "RuntimeError: the image hook is broken" in started.stderr


def test_with_the_pth_hook_as_well(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, shadowed: Path
) -> None:
    """Both hooks in one interpreter (``.pth`` and ``PYTHONPATH``): applied once, same layout."""
    root = tmp_path / "root"
    marker = tmp_path / "marker"
    env = _env(child_env, root, marker, _cacheroot_hook.pythonpath(), str(shadowed))

    started = interp.run([sys.executable, "-c", "pass"], env)
    layout = interp.layout(env)

    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    assert {k: v for k, v in layout.items() if v is not None} == resolve(env).applied()
    assert marker.read_text() == str(root / "huggingface")


@pytest.mark.parametrize("spelling", ["symlink", "copy"])
def test_the_folder_twice_on_pythonpath_runs_once_and_still_chains(  # noqa: PLR0917 - fixtures
    interp: Interpreter,
    child_env: dict[str, str],
    tmp_path: Path,
    shadowed: Path,
    base_python: str,
    spelling: str,
) -> None:
    """The folder under two spellings (a symlink, or a copied image layer) must not recurse."""
    import shutil

    real = _cacheroot_hook.pythonpath()
    other = tmp_path / "other-spelling"
    if spelling == "symlink":
        other.symlink_to(real, target_is_directory=True)
    else:
        shutil.copytree(real, other)
    root = tmp_path / "root"
    marker = tmp_path / "marker"
    env = _env(child_env, root, marker, real, str(other), *LIBS, str(shadowed))

    started = interp.run([base_python, "-c", "import os; print(os.environ['HF_HOME'])"], env)

    assert (started.returncode, started.stderr) == (0, "")
    assert started.stdout == f"{root}/huggingface\n"
    assert marker.read_text() == f"{root}/huggingface"  # the image's own hook still ran
