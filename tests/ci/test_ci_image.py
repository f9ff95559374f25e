"""``ci/Dockerfile``, the runners' image recipe: parsed and checked against what they need.

No image is built here (that needs a registry and minutes); the recipe is read as docker reads
it (comments dropped, continued lines joined, ``ARG`` defaults substituted) and checked against
what the runners start in the container, what the noxfile asks of nox, the Python versions the
distributions support, and ``docs/ci-image.md``, which lists the same requirements for users who
build their image another way.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "ci" / "Dockerfile"
DOC = REPO / "docs" / "ci-image.md"


def instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, as docker reads the file."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), " ".join(rest.split())))
    assert not pending, "the file ends in a continued line"
    return found


@pytest.fixture(scope="module")
def recipe() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text(encoding="utf-8"))


def final_stage(recipe: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (word, _) in enumerate(recipe) if word == "FROM"]
    return recipe[starts[-1] :]


def args(recipe: list[tuple[str, str]]) -> dict[str, str]:
    """Every ``ARG NAME=default`` of the file."""
    return dict(rest.split("=", 1) for word, rest in recipe if word == "ARG" and "=" in rest)


def substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m[1]], text)


def test_the_parser_reads_continued_lines_and_skips_comments() -> None:
    text = "# c\nFROM a AS b\nRUN x \\\n    && y\n\n# more\nWORKDIR /w\n"
    assert instructions(text) == [("FROM", "a AS b"), ("RUN", "x && y"), ("WORKDIR", "/w")]


def test_the_image_starts_from_the_vendor_base_and_its_python_is_supported(
    recipe: list[tuple[str, str]],
) -> None:
    values = args(recipe)
    stage = final_stage(recipe)
    assert stage[0] == ("FROM", "${BASE}")
    assert values["BASE"] == "nvidia/cuda:12.8.1-devel-ubuntu24.04"
    python = values["PYTHON"]
    assert python == "python3.12"
    supported = SpecifierSet(
        tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "requires-python"
        ]
    )
    assert Version(python.removeprefix("python")) in supported


def test_nox_is_the_locked_one_and_satisfies_the_noxfile(recipe: list[tuple[str, str]]) -> None:
    values = args(recipe)
    assert values["NOX_VERSION"] == "2026.10.20"
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    locked = {p["name"]: p["version"] for p in lock["package"] if "version" in p}
    assert locked["nox"] == values["NOX_VERSION"]
    needs = re.search(r'nox\.needs_version = "([^"]+)"', (REPO / "noxfile.py").read_text())
    assert needs is not None
    assert Version(values["NOX_VERSION"]) in SpecifierSet(needs[1])
    runs = [substitute(rest, values) for word, rest in final_stage(recipe) if word == "RUN"]
    assert any(
        f"uv tool install --python python3.12 nox=={values['NOX_VERSION']}" in r.replace('"', "")
        for r in runs
    )


def test_every_command_the_runners_start_is_on_path_in_the_image(
    recipe: list[tuple[str, str]],
) -> None:
    """The runners start ``nox -s tests-TAG``; nox runs uv (its venv backend, ``uv build``), the
    sessions' Python, and Inductor's C++ compiler: each one on PATH."""
    stage = final_stage(recipe)
    env = " ".join(rest for word, rest in stage if word == "ENV")
    assert "UV_TOOL_BIN_DIR=/usr/local/bin" in env.split()  # where `uv tool install` links nox
    assert ("COPY", "--from=uv /uv /uvx /usr/local/bin/") in stage
    assert args(recipe)["UV_IMAGE"] == "ghcr.io/astral-sh/uv:0.13.9"
    apt = next(rest for word, rest in stage if word == "RUN" and "apt-get install" in rest)
    words = shlex.split(apt)
    installed = set(words[words.index("--no-install-recommends") + 1 : words.index("&&", 3)])
    assert installed == {"ca-certificates", "g++", "python3", "python3-venv"}
    # No recommended packages, and apt's lists are not left in the layer.
    assert "rm -rf /var/lib/apt/lists/*" in apt


def test_the_workdir_is_where_the_runners_mount_the_checkout(
    recipe: list[tuple[str, str]],
) -> None:
    assert final_stage(recipe)[-1] == ("WORKDIR", "/workspace")
    lib = (REPO / "ci" / "lib.sh").read_text(encoding="utf-8")
    assert "local inside=${CHECKOUT_CONTAINER:-/workspace}" in lib


def test_the_documentation_lists_what_the_recipe_holds(recipe: list[tuple[str, str]]) -> None:
    doc = DOC.read_text(encoding="utf-8")
    values = args(recipe)
    for needed in (
        "g++",
        "python3-venv",
        "ca-certificates",
        f"nox {values['NOX_VERSION']}",
        "uv 0.13.9",
        "Python 3.10 to 3.13",
        "/workspace",
        "CHECKOUT=none",
        "docker build -f ci/Dockerfile",
    ):
        assert needed in doc, needed
