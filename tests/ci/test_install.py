"""One-step install: ``pip install .`` and ``uv pip install .`` at the repository root.

The root is the metadata-only distribution ``cacheroot``, whose dependencies point at the members
in the same tree. These tests install a copy of the tree (as an unpacked archive or a clone
elsewhere would be) into fresh virtual environments and check that every member arrived: the
``cacheroot`` command with each distribution's subcommands, and the start-up hook's ``.pth``
file, which must take effect in a new interpreter.

No test here reaches the network. The build backend and the members' third-party dependencies
come from uv's cache as the test runner sees it (``uv sync`` and every nox session fill it);
where uv or those entries are missing, the tests are skipped and say why. uv keeps the wheels it
builds of the copied members in that cache (about 160 KB each; ``uv cache prune`` removes them).
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

import pytest

from cacheroot.envs import CACHEROOT, HF_HOME, TABLE

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
#: How uv says that an offline run needed something its cache does not hold.
CACHE_MISS_HINTS = ("network connectivity is disabled", "network was disabled", "not in the cache")


@pytest.fixture(scope="session")
def uv() -> str:
    """The ``uv`` command; the tests skip without it."""
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH: ci/bootstrap.sh installs it")
    return found


@pytest.fixture(scope="session")
def uv_cache(uv: str) -> str:
    """uv's cache directory as the runner's environment names it.

    Session-scoped, so it is read before the per-test isolation points HOME and XDG_CACHE_HOME
    into ``tmp_path`` (where no cache is warm).
    """
    out = subprocess.run(
        [uv, "cache", "dir"], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.strip()


@pytest.fixture
def offline_env(uv_cache: str) -> dict[str, str]:
    """An environment in which pip and uv use no index, no user configuration and no network."""
    env = dict(os.environ)
    env.update(
        UV_CACHE_DIR=uv_cache,
        UV_OFFLINE="1",
        UV_PYTHON_DOWNLOADS="never",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_FIND_LINKS", "PIP_CONSTRAINT"):
        env.pop(name, None)
    return env


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
    """Run ``argv``; on failure, skip when uv's cache lacked something, else fail with output."""
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    if out.returncode != 0:
        text = (out.stdout + out.stderr).lower()
        if any(hint in text for hint in CACHE_MISS_HINTS):
            pytest.skip(
                f"uv's cache ({env['UV_CACHE_DIR']}) lacks what an offline install needs; "
                "run `uv sync --all-groups` once with the network. uv said: "
                + out.stderr.strip()[-400:]
            )
        pytest.fail(f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def third_party_requirements() -> list[str]:
    """The members' requirements on other projects (what ``--no-index`` pip must find)."""
    found: list[str] = []
    for member in MEMBERS:
        with (REPO / member / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        found += [r for r in project.get("dependencies", []) if not r.startswith("cacheroot-")]
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
    # No index: pip, the build backend and the third-party dependencies come from uv's cache
    # (`python -m venv` would give pip too, but ensurepip alone takes seconds).
    setup = ["pip", "hatchling>=1.25", *third_party_requirements()]
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
