"""The verdict: for each finding, the row of the layout table that moves it into the root, or
a suggested one; the exit status that makes ``cacheroot audit`` a CI gate (1 while anything is
neither covered nor explicitly allowed)."""

from __future__ import annotations

import fnmatch
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from _cacheroot_layout import BY_NAME, NEVER, TABLE, TAGS

from .downloaders import instead
from .limits import FALLBACK_DEPTH
from .names import GATING, LAYOUT_OVERRIDE, PLATFORMS
from .scan import Stats, scan

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .downloaders import KnownDownload
    from .findings import Finding


#: Which row covers a name: the row's own name, or a legacy name of it.
ROW_OF: dict[str, str] = {v.name: v.name for v in TABLE} | {
    old: v.name for v in TABLE for old in v.legacy
}
_FIRST_VARIABLE = re.compile(r"\$\{?(_*[A-Z][A-Z0-9_]*)")
_DEFAULT_OF = re.compile(r"\$\{(_*[A-Z][A-Z0-9_]*):-")
#: Name endings left off a variable to make its directory under the root.
_SUFFIXES = (
    "_CACHE_DIR",
    "_CACHE_PATH",
    "_CACHE_ROOT",
    "_DIR",
    "_PATH",
    "_ROOT",
    "_HOME",
    "_CACHE",
)


@dataclass
class Item:
    """A finding with its verdict."""

    finding: Finding
    covered_by: str | None
    how: str
    allowed: bool
    suggestion: str
    #: The platform the verdict is for (``sys.platform``).
    platform: str = sys.platform
    #: What to write instead of the download that lands there, in code of one's own (a
    #: ``cacheroot.fetch`` call, or a known downloader's keyword to leave out); ``""``: none.
    instead: str = ""

    @property
    def applies(self) -> bool:
        """Whether the finding lies on a branch that runs on :attr:`platform`."""
        runs_on = self.finding.runs_on
        return not runs_on or spelled_platform(self.platform) in runs_on

    @property
    def gating(self) -> bool:
        """Whether its class fails the gate (``cache``, ``download``, ``layout-override``)."""
        return self.finding.kind in GATING

    @property
    def failing(self) -> bool:
        return self.covered_by is None and not self.allowed and self.gating and self.applies

    def as_json(self) -> dict[str, Any]:
        f = self.finding
        return {
            "dist": f.dist,
            "version": f.version,
            "file": f.file,
            "line": f.line,
            "variable": f.variable,
            "expression": f.expression,
            "default": f.default,
            "style": list(f.style),
            "fallback_of": f.fallback_of[0] if f.fallback_of else None,
            "class": f.kind,
            "reason": f.reason,
            "runs_on": list(f.runs_on),
            "failing": self.failing,
            "covered_by": self.covered_by,
            "coverage": self.how,
            "allowed": self.allowed,
            "suggestion": self.suggestion or None,
            "instead": self.instead or None,
            "downloader": None,
        }


@dataclass
class Report:
    """Everything one audit found, with what it read and how long it took."""

    items: list[Item]
    stats: Stats
    seconds: float

    @property
    def status(self) -> int:
        """The exit status: 1 when something is neither covered nor allowed (a known
        downloader never counts: where it lands is its own finding, if anything)."""
        return 1 if any(i.failing for i in self.items) else 0

    @property
    def downloads(self) -> list[KnownDownload]:
        """The calls of known downloaders in the source trees read."""
        return self.stats.downloads


def _row_note(name: str) -> str:
    row = BY_NAME[name]
    notes = []
    if row.mode == NEVER:
        notes.append("deliberately never set")
    if row.tags != TAGS:
        notes.append(f"{'/'.join(row.tags)} only")
    return f" ({', '.join(notes)})" if notes else ""


def _cover(
    finding: Finding, by_variable: dict[tuple[str, str, str], Finding], depth: int = 0
) -> tuple[str | None, str]:
    """The row that moves ``finding`` into the root, and how; ``(None, "")`` when none does."""
    if finding.variable and finding.variable in ROW_OF:
        row = ROW_OF[finding.variable]
        how = "its row" if row == finding.variable else f"legacy name of {row}"
        return row, how + _row_note(row)
    if finding.fallback_of is not None and depth < FALLBACK_DEPTH:
        name, line = finding.fallback_of
        if name in ROW_OF:
            return ROW_OF[name], f"fallback when {name} (line {line}) is unset"
        earlier = by_variable.get((finding.dist, finding.file, name))
        if earlier is not None:
            chained, how = _cover(earlier, by_variable, depth + 1)
            if chained is not None:
                return chained, f"fallback when {name} (line {line}) is unset; {name}: {how}"
    base = _base_row(finding.default)
    if base is not None:
        return ROW_OF[base], f"its default lies under ${base}"
    return None, ""


def _base_row(default: str) -> str | None:
    """The first layout variable a default falls back on, ``${A:-${B:-~/.x}}`` read left to
    right as the layout leaves it: ``A`` when the layout sets ``A``, else ``B``, else none."""
    text = default
    while (match := _DEFAULT_OF.match(text)) is not None:
        if match[1] in ROW_OF:
            return str(match[1])
        text = text[match.end() :]
    match = _FIRST_VARIABLE.match(text)
    return str(match[1]) if match is not None and match[1] in ROW_OF else None


def _directory(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].lower()
    return name.lower()


def shell_word(text: str) -> str:
    """``text`` as one word of a POSIX shell, always in single quotes (``'`` as ``'"'"'``)."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def fnmatch_literal(text: str) -> str:
    """An fnmatch pattern that matches ``text`` and nothing else (``[``, ``*``, ``?`` in
    brackets)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in text)


def allow_argument(finding: Finding) -> str:
    """The ``--allow`` that accepts ``finding`` and nothing else, ready to paste into a shell:
    its variable's name, or a pattern that matches its place literally."""
    pattern = finding.variable or fnmatch_literal(finding.expression)
    return f"--allow {shell_word(pattern)}"


def suggest(finding: Finding) -> str:
    """A layout row for an uncovered variable; for a fixed place, what can be done instead."""
    if finding.kind == LAYOUT_OVERRIDE:
        return (
            f"leave {finding.variable} to the layout (use a directory under it, or tmp_path), "
            f"or {allow_argument(finding)}"
        )
    if finding.variable is None:
        return (
            "no variable moves it: ask upstream for one, patch the code to read one, or "
            f"{allow_argument(finding)}"
        )
    replaces = finding.default or "unknown (decided outside this expression)"
    return (
        f"Variable({finding.variable!r}, {_directory(finding.variable)!r}, "
        f"purpose='<what it caches>', replaces={replaces!r}, "
        f"upstream=({finding.upstream!r},)),"
    )


def allowed(finding: Finding, allow: Iterable[str]) -> bool:
    """Whether ``--allow`` names the finding's variable, or a pattern its place matches."""
    for pattern in allow:
        if pattern == finding.variable:
            return True
        if fnmatch.fnmatchcase(finding.expression, pattern) or (
            finding.default and fnmatch.fnmatchcase(finding.default, pattern)
        ):
            return True
    return False


def spelled_platform(name: str) -> str:
    """``sys.platform`` as the branches spell it (``linux2``, ``cygwin`` and the like folded)."""
    for known in PLATFORMS:
        if name.startswith(known[:3]):
            return known
    return name


def judge(
    findings: Iterable[Finding], allow: Sequence[str] = (), platform: str = sys.platform
) -> list[Item]:
    """Each finding with the row that covers it, or a suggested one."""
    found = list(findings)
    by_variable = {(f.dist, f.file, f.variable): f for f in found if f.variable}
    # A variable with no default of its own whose fallback (built elsewhere) lies under a
    # layout variable is covered by that one: TORCH_EXTENSIONS_DIR, whose fallback is
    # $XDG_CACHE_HOME/torch_extensions.
    fallback_row: dict[tuple[str, str, str, int], tuple[str, int]] = {}
    for f in found:
        base = _base_row(f.default) if f.fallback_of is not None else None
        if f.fallback_of is not None and base is not None:
            name, line = f.fallback_of
            fallback_row[(f.dist, f.file, name, line)] = (base, f.line)
    items = []
    for f in found:
        if f.kind == LAYOUT_OVERRIDE:
            row, how = None, ""
        else:
            row, how = _cover(f, by_variable)
        tied = fallback_row.get((f.dist, f.file, f.variable or "", f.line))
        if row is None and not f.default and tied is not None and f.kind != LAYOUT_OVERRIDE:
            row, how = ROW_OF[tied[0]], f"its fallback (line {tied[1]}) lies under ${tied[0]}"
        suggestion = "" if row is not None else suggest(f)
        rewrite = instead(f.fetched) if row is None and f.fetched is not None else ""
        items.append(Item(f, row, how, allowed(f, allow), suggestion, platform, rewrite))
    return items


def audit(
    paths: Iterable[str] = (), allow: Sequence[str] = (), platform: str = sys.platform
) -> Report:
    """Scan ``paths`` (the installed distributions when empty) and judge what was found, for
    ``platform`` (the ``sys.platform`` whose branches count)."""
    stats = Stats()
    start = time.perf_counter()
    findings = list(scan(paths, stats))
    return Report(judge(findings, allow, platform), stats, time.perf_counter() - start)
