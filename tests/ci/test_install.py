"""One-step install: ``pip install .`` and ``uv pip install .`` at the repository root.

The root is the metadata-only distribution ``cacheroot``, whose dependencies point at the members
in the same tree. These tests install a copy of the tree (as an unpacked archive or a clone
elsewhere would be) into fresh virtual environments and check that every member arrived: the
``cacheroot`` command with each distribution's subcommands, and the start-up hook's ``.pth``
file, which must take effect in a new interpreter.

No test here reaches the network, nor any cache of this machine: pip, the build backend and the
members' third-party dependencies come from a wheelhouse that the session packs from this
environment's own installed distributions (``wheelhouse.py``), and uv gets a fresh cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, HF_HOME, TABLE

if TYPE_CHECKING:
    from tests.ci import wheelhouse
else:
    # pytest puts tests/ci on sys.path (no package there); mypy names it tests.ci.
    import wheelhouse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

REPO = Path(__file__).resolve().parents[2]
#: What the root distribution is made of: its metadata and the members it points at.
TREE = ("pyproject.toml", "README.md", "packages", "sitecustomize")
MEMBERS = ("packages/envs", "packages/fetch", "packages/mediacache", "sitecustomize")
#: Subcommands that cacheroot-envs registers, and those the other members add.
ENVS_COMMANDS = {"doctor", "env"}
OTHER_COMMANDS = {"cache", "fetch", "hook", "warm"}
#: What an offline install of the tree needs besides the members: their build backend, and what
#: it asks for to build an editable wheel (uv installs workspace members editable).
BUILD_BACKEND = ("hatchling>=1.25", "editables~=0.3")


@pytest.fixture(scope="session")
def uv() -> str:
    """The ``uv`` command; the tests skip without it."""
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH: ci/bootstrap.sh installs it")
    return found


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip, the build backend and the members' dependencies, as wheels packed in this session."""
    try:
        return wheelhouse.build(
            tmp_path_factory.mktemp("wheelhouse"),
            [*BUILD_BACKEND, *third_party_requirements()],
            pip=True,
        )
    except wheelhouse.MissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def offline_env(wheels: Path, tmp_path: Path) -> dict[str, str]:
    """An environment in which pip and uv install from ``wheels`` only, with a fresh cache."""
    return wheelhouse.offline(dict(os.environ), wheels, tmp_path / "uv-cache")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the parts of the repository that the root distribution is built from."""
    dest = tmp_path / "cacheroot-src"
    dest.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".venv", "dist", "build")
    for name in TREE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=skip)
        else:
            shutil.copy2(src, dest / name)
    return dest


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; fail with its output when it fails."""
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    if out.returncode != 0:
        pytest.fail(f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def third_party_requirements() -> list[str]:
    """The members' requirements on other projects, with those of the extras the root asks for
    (``cacheroot-fetch[hub]``): what ``--no-index`` pip must find."""
    with (REPO / "pyproject.toml").open("rb") as f:
        root = tomllib.load(f)["project"]["dependencies"]
    extras: dict[str, list[str]] = {}
    for line in root:
        name, _, rest = line.partition("[")
        if rest:
            extras[name.strip()] = [e.strip() for e in rest.split("]")[0].split(",")]
    found: list[str] = []
    for member in MEMBERS:
        with (REPO / member / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        wanted = list(project.get("dependencies", []))
        for extra in extras.get(project["name"], []):
            wanted += project.get("optional-dependencies", {}).get(extra, [])
        found += [r for r in wanted if not r.startswith("cacheroot-")]
    return sorted(set(found))


def site_packages(venv: Path) -> Path:
    """The venv's ``purelib`` (where pip and uv put ``.pth`` files)."""
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def commands(venv: Path, env: dict[str, str]) -> set[str]:
    """The subcommands ``cacheroot --help`` lists."""
    out = run([str(venv / "bin" / "cacheroot"), "--help"], env)
    assert "skipping subcommand" not in out.stderr, out.stderr
    listed = out.stdout.split("positional arguments:")[1].split("options:")[0]
    # A subcommand's line is indented by four spaces; a wrapped help line by more.
    return set(re.findall(r"^    ([a-z][a-z-]*)\b", listed, flags=re.MULTILINE))


def check_hook(venv: Path, env: dict[str, str], root: Path) -> None:
    """A new interpreter of ``venv`` derives the layout from ``CACHEROOT`` alone (the .pth)."""
    assert (site_packages(venv) / "cacheroot.pth").is_file()
    bare = {k: v for k, v in env.items() if k not in {v.name for v in TABLE}}
    bare[CACHEROOT] = str(root)
    probe = f"import os; print(os.environ.get({HF_HOME!r}))"
    out = run([str(venv / "bin" / "python"), "-c", probe], bare)
    assert out.stdout.strip() == f"{root}/huggingface"


def direct_url(venv: Path, dist: str) -> dict[str, object]:
    """The ``direct_url.json`` record of an installed distribution."""
    (info,) = site_packages(venv).glob(f"{dist.replace('-', '_')}-*.dist-info")
    data: dict[str, object] = json.loads((info / "direct_url.json").read_text())
    return data


def test_pip_installs_every_distribution_from_the_root(
    uv: str, offline_env: dict[str, str], tree: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "pip-venv"
    run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], offline_env)
    python = str(venv / "bin" / "python")
    # No index: pip, the build backend and the third-party dependencies come from the session's
    # wheelhouse (`python -m venv` would give pip too, but ensurepip alone takes seconds).
    setup = ["pip", *BUILD_BACKEND, *third_party_requirements()]
    run([uv, "pip", "install", "--quiet", "--python", python, *setup], offline_env)
    pip = [python, "-m", "pip", "install", "--quiet", "--no-build-isolation"]

    run([*pip, str(tree / "packages" / "envs")], offline_env)  # a member alone
    alone = commands(venv, offline_env)
    assert alone >= ENVS_COMMANDS
    assert not alone & OTHER_COMMANDS

    run([*pip, str(tree)], offline_env)
    assert commands(venv, offline_env) >= ENVS_COMMANDS | OTHER_COMMANDS
    check_hook(venv, offline_env, tmp_path / "root")
    record = direct_url(venv, "cacheroot-fetch")
    assert record["url"] == (tree / "packages" / "fetch").as_uri()
    assert record["dir_info"] == {}  # a copy, not a link into the tree


@pytest.mark.parametrize(
    ("flags", "editable"),
    [([], True), (["--no-sources"], False)],
    ids=["workspace-sources", "no-sources"],
)
def test_uv_pip_installs_every_distribution_from_the_root(
    uv: str,
    offline_env: dict[str, str],
    tree: Path,
    flags: list[str],
    editable: bool,
) -> None:
    venv = tree.parent / "uv-venv"
    run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], offline_env)
    run(
        [uv, "pip", "install", "--python", str(venv / "bin" / "python"), *flags, str(tree)],
        offline_env,
    )
    assert commands(venv, offline_env) >= ENVS_COMMANDS | OTHER_COMMANDS
    check_hook(venv, offline_env, tree.parent / "root")
    # uv installs workspace members editable (linked to the tree) unless told --no-sources.
    record = direct_url(venv, "cacheroot-fetch")
    assert record["url"] == (tree / "packages" / "fetch").as_uri()
    assert record["dir_info"] == ({"editable": True} if editable else {})
