"""Packaging: the hook's start-up files sit at the root of site-packages, in the wheel and here.

A ``.pth`` or ``.start`` file inside a package directory is silently ignored by ``site``, so a
packaging slip would turn the hook off without any error; these tests catch it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import _cacheroot_hook

if TYPE_CHECKING:
    from collections.abc import Iterator
import pytest

DISTRIBUTION = Path(__file__).resolve().parents[2] / "sitecustomize"
PTH = (
    "import sys; exec('try:\\n import _cacheroot_layout\\n if _cacheroot_layout.hook():\\n"
    "  import _cacheroot_hook\\n  _cacheroot_hook.audit()\\nexcept Exception:\\n pass')\n"
)
START = "_cacheroot_hook:start\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The hook distribution, built from source as a wheel (as the nox sessions install it)."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv on PATH to build the wheel")
    if not (DISTRIBUTION / "pyproject.toml").is_file():
        pytest.skip(f"needs the source tree ({DISTRIBUTION} not found)")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--quiet", str(DISTRIBUTION), "-o", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("cacheroot_sitecustomize-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_wheel_ships_the_start_up_files_at_its_root(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {
        "cacheroot.pth",
        "cacheroot.start",
        "_cacheroot_hook.py",
        "_cacheroot_pythonpath/sitecustomize.py",
    } <= names
    assert wheel.read("cacheroot.pth").decode() == PTH
    assert wheel.read("cacheroot.start").decode() == START
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "hook = _cacheroot_hook:register" in wheel.read(entry_points).decode()


def test_pth_line_is_one_import_statement() -> None:
    """``site`` executes a ``.pth`` line only if it starts with ``import``; keep it one line."""
    text = (DISTRIBUTION / "src" / "cacheroot.pth").read_text()
    assert text == PTH
    assert text.count("\n") == 1


def test_installed_environment_has_both_start_up_files() -> None:
    """Here (editable install or built wheel) ``cacheroot.start`` sits beside ``cacheroot.pth``."""
    purelib = sysconfig.get_paths()["purelib"]
    with open(os.path.join(purelib, "cacheroot.pth")) as f:
        assert f.read() == PTH
    with open(os.path.join(purelib, "cacheroot.start")) as f:
        assert f.read() == START
    assert os.path.isfile(os.path.join(_cacheroot_hook.pythonpath(), "sitecustomize.py"))
