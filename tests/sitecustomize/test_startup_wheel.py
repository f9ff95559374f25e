"""Packaging: the hook's start-up files sit at the root of site-packages, in the wheel and here.

A ``.pth`` or ``.start`` file inside a package directory is silently ignored by ``site``, so a
packaging slip would turn the hook off without any error; these tests catch it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import _cacheroot_hook

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.ci import wheelhouse
else:
    # The wheelhouse helper of tests/ci (no package there): the build backend, packed offline.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))
    import wheelhouse
import pytest

DISTRIBUTION = Path(__file__).resolve().parents[2] / "sitecustomize"
PTH = "import _cacheroot_start; _cacheroot_start.start()\n"
START = "_cacheroot_start:start\n"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The hook distribution, built from source as a wheel (as the nox sessions install it)."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv on PATH to build the wheel")
    if not (DISTRIBUTION / "pyproject.toml").is_file():
        pytest.skip(f"needs the source tree ({DISTRIBUTION} not found)")
    # The build backend from wheels packed from this environment, uv with a fresh cache: the
    # outcome never depends on what uv's cache of this machine holds, nor on the network.
    try:
        wheels = wheelhouse.build(tmp_path_factory.mktemp("backend"), ["hatchling>=1.25"])
    except wheelhouse.MissingError as exc:
        pytest.skip(str(exc))
    env = wheelhouse.offline(dict(os.environ), wheels, tmp_path_factory.mktemp("uv-cache"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--quiet", str(DISTRIBUTION), "-o", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
        env=env,
    )
    (built,) = out.glob("cacheroot_sitecustomize-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_wheel_ships_the_start_up_files_at_its_root(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {
        "cacheroot.pth",
        "cacheroot.start",
        "_cacheroot_start.py",
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
