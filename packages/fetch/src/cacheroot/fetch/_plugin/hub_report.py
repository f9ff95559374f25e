"""The session hub cache's report, written where CI shows it.

The terminal line of ``--cacheroot-hub`` (``cacheroot hub: N requests (...)``) scrolls away in
a long log; whether the hub kept a run green through an outage, and which downloads made it
slow, is what someone reading the job's page wants first. So the same figures, with the
slowest fills, are also written as Markdown:

- on GitHub Actions, appended to the file ``GITHUB_STEP_SUMMARY`` names (the job's summary page);
- on Buildkite (``BUILDKITE`` set and ``buildkite-agent`` on ``PATH``), as the build's
  annotation ``cacheroot-hub`` (``buildkite-agent annotate --style info --context
  cacheroot-hub``, the Markdown on its standard input).

A report is a courtesy: a summary file that cannot be written, or an agent that fails or hangs,
costs one warning line and never the run's outcome.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from cacheroot.envs import BUILDKITE, GITHUB_STEP_SUMMARY, truthy
from cacheroot.envs.units import format_size

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AGENT",
    "AGENT_TIMEOUT",
    "ANNOTATION_CONTEXT",
    "markdown",
    "publish",
    "report_problems",
]

#: The Buildkite agent's command, and the annotation's context (a later session's report
#: replaces an earlier one's in the same build).
AGENT = "buildkite-agent"
ANNOTATION_CONTEXT = "cacheroot-hub"
#: Seconds the agent may take to annotate before it is given up on.
AGENT_TIMEOUT = 30.0


def _cell(text: str) -> str:
    """``text`` as a Markdown table cell's code span (a ``|`` or a backtick would break it)."""
    return "`" + text.replace("`", "'").replace("|", "%7C") + "`"


def markdown(stats: Mapping[str, Any]) -> str:
    """The report of a hub's ``GET /.cacheroot/hub`` answer, as Markdown."""
    counts: Mapping[str, int] = stats.get("counts", {})

    def n(key: str) -> int:
        return int(counts.get(key, 0))

    rows = [
        ("Requests", str(n("requests"))),
        ("Answers from the store (hits)", str(n("hit"))),
        ("Answers asked upstream (misses)", str(n("miss"))),
        ("Answers asked again (revalidated)", str(n("revalidated"))),
        ("Stale answers served while the upstream failed", str(n("stale"))),
        ("Errors", str(n("error"))),
        ("Files from the store", str(n("file_hit") + n("file_from_shared_tier"))),
        ("Files fetched from the upstream", str(n("file_miss"))),
        ("Bytes from the upstream", format_size(n("bytes_from_upstream"))),
        ("Upstream requests (failed)", f"{n('upstream')} ({n('upstream_errors')})"),
    ]
    lines = ["### cacheroot hub cache", "", "| | |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    breakers: Mapping[str, Mapping[str, Any]] = stats.get("breakers", {})
    left_alone = [origin for origin, b in breakers.items() if b.get("state") != "closed"]
    if left_alone:
        lines += ["", "Left alone at the end (breaker open): " + ", ".join(left_alone)]
    fills: list[Mapping[str, Any]] = stats.get("slowest_fills", [])
    if fills:
        lines += ["", "Slowest fills:", "", "| Seconds | Size | File | Outcome |"]
        lines.append("|---:|---:|---|---|")
        lines += [
            f"| {float(f['seconds']):.3f} | {format_size(int(f['bytes']))} | "
            f"{_cell(str(f['target']))} | {'stored' if f['outcome'] == 'ok' else 'failed'} |"
            for f in fills
        ]
    return "\n".join(lines) + "\n"


def publish(text: str, environ: Mapping[str, str]) -> list[str]:
    """Write ``text`` where the CI that runs this session shows it (see the module docstring);
    the problems met, one line each (none: written, or no CI to write to)."""
    problems: list[str] = []
    summary = environ.get(GITHUB_STEP_SUMMARY, "").strip()
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            problems.append(f"{GITHUB_STEP_SUMMARY} {summary}: {exc.strerror or exc}")
    agent = (
        shutil.which(AGENT, path=environ.get("PATH")) if truthy(environ.get(BUILDKITE)) else None
    )
    if agent is not None:
        problems += _annotate(agent, text, environ)
    return problems


def _annotate(agent: str, text: str, environ: Mapping[str, str]) -> list[str]:
    argv = [agent, "annotate", "--style", "info", "--context", ANNOTATION_CONTEXT]
    try:
        done = subprocess.run(
            argv,
            input=text,
            text=True,
            capture_output=True,
            timeout=AGENT_TIMEOUT,
            env=dict(environ),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [f"{AGENT} annotate gave no answer within {AGENT_TIMEOUT:g} s"]
    except OSError as exc:
        return [f"{AGENT} annotate could not start: {exc.strerror or exc}"]
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return [f"{AGENT} annotate exited {done.returncode}" + (f": {said[-1]}" if said else "")]
    return []


def report_problems(problems: list[str]) -> str:
    """The one warning line of a report that could not be written everywhere."""
    return "cacheroot hub: warning: the CI report was not written: " + "; ".join(problems)
