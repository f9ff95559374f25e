"""The generated parts of the docs match the code: the variable table, the commands, the API."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.docs import reference
else:
    # pytest puts tests/docs on sys.path (no package there); mypy names it tests.docs.
    import reference


@pytest.mark.parametrize(
    ("name", "page", "generate"), [pytest.param(*g, id=g[0]) for g in reference.GENERATED]
)
def test_the_generated_block_is_fresh(name: str, page: Path, generate: Callable[[], str]) -> None:
    block = reference.block(page.read_text(encoding="utf-8"), name)
    assert block == generate(), f"{page} is stale: run `nox -s readme`"


def test_the_variable_table_names_every_variable_of_the_layout() -> None:
    from cacheroot.envs import TABLE

    text = (reference.DOCS / "reference" / "variables.md").read_text(encoding="utf-8")
    table = reference.block(text, "variables")
    for var in TABLE:
        assert f"| `{var.name}` |" in table


def test_the_command_reference_names_every_subcommand_and_flag() -> None:
    text = (reference.DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for literal in (
        "## `cacheroot fetch`",
        "`--sha256 HEX`",
        "### `cacheroot tier evict`",
        "`--l2-older-than AGE`",
        "### `cacheroot hub serve`",
        "## `cacheroot warm`",
        "`--key`",
    ):
        assert literal in text


def test_every_relative_link_of_the_readme_names_a_file() -> None:
    import re

    readme = reference.REPO / "README.md"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "the README links to no page"
    missing = [link for link in local if not (reference.REPO / link).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
