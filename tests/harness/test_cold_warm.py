"""Cold then warm: the scenario suite, run twice on one volume, asks nothing the second time.

Both runs are real ``pytest -n 2`` processes against one origin process that counts every
request; each run's figures come from its ``--cacheroot-report`` JSON and its one summary line.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from .runner import (
    SCENARIO_ORIGIN,
    SCENARIO_ROOT,
    TESTS,
    ServedOrigin,
    layout_env,
    media_cache_available,
    plugin_args,
    report_lines,
    run_pytest,
)

if TYPE_CHECKING:
    from pathlib import Path


def _run(root: Path, origin: ServedOrigin, work: Path, name: str) -> tuple[dict[str, Any], str]:
    report = work / f"{name}.json"
    # The volume is the session's CACHEROOT, as `nox -s tests-*` sets it.
    env = layout_env(root, **{SCENARIO_ROOT: str(root), SCENARIO_ORIGIN: origin.url})
    args = ["tests/scenarios", "-n", "2", "-q", *plugin_args()]
    args += ["--cacheroot-report", str(report), f"--basetemp={work / name}"]
    out = run_pytest(args, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = report_lines(out.stdout)
    assert len(lines) == 1, out.stdout  # one line for the whole run, not one per worker
    figures: dict[str, Any] = json.loads(report.read_text())
    assert figures["line"] == lines[0]
    print(f"{name}: {lines[0]}")  # noqa: T201 - the docs quote these lines
    return figures, lines[0]


def test_second_run_on_one_volume_is_warm(tmp_path: Path) -> None:
    catalog = importlib.import_module("scenarios.assets").catalog()
    files = [a for a in catalog.values() if a.namespace != "media"]
    media = [a for a in catalog.values() if a.namespace == "media"]
    if not media_cache_available():  # the media scenarios skip
        catalog = {a.path: a for a in files}
        media = []
    size = sum(len(a.data) for a in files)
    root = tmp_path / "volume"

    with ServedOrigin() as origin:
        cold, _ = _run(root, origin, tmp_path, "cold")
        after_cold = origin.stats()
        warm, _ = _run(root, origin, tmp_path, "warm")
        after_warm = origin.stats()

    # Cold: every asset came from the origin exactly once, whichever worker asked first.
    assert after_cold["requests"] == {f"GET {path}": 1 for path in catalog}
    assert cold["processes"] == 2
    assert (cold["misses"], cold["downloads"], cold["bytes_downloaded"]) == (len(files),) * 2 + (
        size,
    )
    assert cold["builds"] == 2
    if media:
        assert cold["media"]["misses"] == len(media)

    # Warm: not one request, no miss, no byte downloaded, no model rebuilt.
    assert after_warm == after_cold
    assert warm["misses"] == 0
    assert warm["downloads"] == 0
    assert warm["bytes_downloaded"] == 0
    assert warm["hits"] == len(files)
    assert warm["bytes_from_cache"] == size
    assert warm["builds"] == 0
    assert warm["build_hits"] == 4
    if media:
        assert warm["media"]["misses"] == 0
        assert warm["media"]["hits"] == 2 * len(media)


def test_warm_command_makes_the_first_run_warm(tmp_path: Path) -> None:
    """``nox -s warm`` (``python -m scenarios.warm``), then an offline run: nothing is missing."""
    root = tmp_path / "volume"
    env = layout_env(root, **{SCENARIO_ROOT: str(root)})
    warmed = subprocess.run(
        [sys.executable, "-m", "scenarios.warm"],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert warmed.returncode == 0, warmed.stdout + warmed.stderr
    assert "0 failures" in warmed.stdout

    report = tmp_path / "offline.json"
    args = ["tests/scenarios", "-n", "2", "-q", *plugin_args(), "--cacheroot-offline"]
    out = run_pytest([*args, "--cacheroot-report", str(report)], env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    figures = json.loads(report.read_text())
    assert (figures["misses"], figures["downloads"], figures["offline"]) == (0, 0, True)
    assert figures["hits"] == 4
    if media_cache_available():
        assert figures["media"]["misses"] == 0
