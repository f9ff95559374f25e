"""Every ``console`` block of the README and the docs runs, and shows what it prints.

How blocks are written, run and compared: ``consoleblocks.py``. A block that cannot run here
says why in its marker; those are counted and listed at the end of the session.
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.bucket import s3server
    from tests.docs import consoleblocks, hubblocks
    from tests.docs.consoleblocks import Block
    from tests.origin import Server, static
else:
    # pytest puts tests/ and tests/docs on sys.path (no packages there); mypy names them tests.*.
    import consoleblocks
    import hubblocks
    from bucket import s3server
    from consoleblocks import Block
    from origin import Server, static

BLOCKS = consoleblocks.collect()
RUN = [b for b in BLOCKS if b.not_run is None]


@pytest.fixture
def origin() -> Iterator[str]:
    """The local origin standing in for remote hosts: ``127.0.0.1:PORT``."""
    with Server() as server:
        for path, body in consoleblocks.ORIGIN_FILES.items():
            server.route(path, static(body))
        yield f"127.0.0.1:{server.port}"


@contextmanager
def _bucket(work: Path) -> Iterator[dict[str, str]]:
    """A local S3 server with the bucket ``fleet-cache`` for a block marked ``s3``: the
    variables that name it (moto's server, as the bucket tier's tests use)."""
    work.mkdir(parents=True, exist_ok=True)
    with contextmanager(s3server.serve)(work / "s3.log") as s3:
        s3.client().create_bucket(Bucket="fleet-cache")
        yield s3.env()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    """Where a block runs: ``tmp_path``, unless that lies inside this repository (the nox
    sessions keep their temporary directory there). A reader's project has no pytest
    configuration above it; inside the checkout, pytest would take the repository's as the
    block's rootdir. Then the block runs in a directory of its own in ``/tmp``, removed after."""
    if consoleblocks.REPO not in tmp_path.parents:
        yield tmp_path / "s"
        return
    outside = Path(tempfile.mkdtemp(prefix="cacheroot-console-", dir="/tmp"))
    try:
        yield outside / "s"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in RUN])
def test_the_block_prints_what_it_shows(
    block: Block, sandbox: Path, request: pytest.FixtureRequest
) -> None:
    assert block.commands, f"{block.where}: a console block without a `$ ` command"
    unknown = block.words - {"origin", "checkout", "example", "root", "hub", "service", "s3"}
    assert not unknown, f"{block.where}: unknown marker options {sorted(unknown)}"
    if "service" in block.words:
        assert "root" in block.words, f"{block.where}: a service runs in its own namespaces (root)"
    if "root" in block.words and (why := consoleblocks.namespace_missing()):
        pytest.skip(f"{block.where}: {why}")
    address = request.getfixturevalue("origin") if "origin" in block.words else None
    with ExitStack() as stack:
        env: dict[str, str] = {}
        before: dict[int, str] = {}
        if "hub" in block.words:
            env, before = stack.enter_context(hubblocks.serving(block.settings["hub"]))
        if "s3" in block.words:
            env.update(stack.enter_context(_bucket(sandbox.parent)))
        results = consoleblocks.run(block, sandbox, address, env=env, before=before)
    assert len(results) == len(block.commands), f"{block.where}: the block stopped early"
    for command, (actual, status) in zip(block.commands, results, strict=True):
        if not consoleblocks.matches(command.expected, actual):
            diff = "\n".join(
                difflib.unified_diff(command.expected, actual, "shown", "printed", lineterm="")
            )
            pytest.fail(f"{block.where}: $ {command.text}\n{diff}")
        if command.status is not None:
            assert status == command.status, f"{block.where}: $ {command.text}: exit {status}"


def test_every_block_that_is_not_run_says_why() -> None:
    for block in BLOCKS:
        if block.options.startswith("not run"):
            assert block.not_run, f"{block.where}: `not run` without a reason after it"
    assert RUN, "no console block runs"


def test_blocks_are_found_in_the_readme_and_the_docs() -> None:
    pages = {b.page.name for b in BLOCKS}
    assert "README.md" in pages
    assert "install.md" in pages


def test_placeholders_match_what_changes_and_nothing_else() -> None:
    shown = ["miss https://example.org/x (2.3 MiB) in 0.83 s, 2.7 MiB/s from 127.0.0.1:8000", "..."]
    printed = ["miss https://example.org/x (12 B) in 0.01 s, 1.2 KiB/s from 127.0.0.1:40123", "a"]
    assert consoleblocks.matches(shown, printed)
    assert not consoleblocks.matches(["miss https://example.org/y ..."], ["miss https://x/"])
    assert consoleblocks.matches(["a", "...", "z"], ["a", "z"])
    assert not consoleblocks.matches(["a"], ["a", "b"])
    progress = "..............................                                           [100%]"
    assert consoleblocks.matches([progress], [progress])
    assert not consoleblocks.matches([progress], ["." * 29 + " [100%]"])
