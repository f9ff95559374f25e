"""The session's summary names the console blocks that were not run, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from tests.docs import consoleblocks
else:
    import consoleblocks


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per console block that is not run, after a count of all of them."""
    blocks = consoleblocks.collect()
    skipped = [b for b in blocks if b.not_run is not None]
    terminalreporter.write_line(
        f"console blocks: {len(blocks)} in README.md and docs/, "
        f"{len(blocks) - len(skipped)} run, {len(skipped)} not run:"
    )
    for block in skipped:
        terminalreporter.write_line(f"  {block.where}: {block.not_run}")
