"""``cacheroot audit``: which cache locations the layout table does not cover.

The table is kept by hand, and the ecosystem moves under it: a new release of vLLM brings new
JIT libraries with caches of their own, and test code keeps writing to ``/tmp``. The audit reads
the source of what is installed (or of the wheels, sdists and directories named), finds every
place that decides a cache location (:mod:`._audit_scan`), and says for each whether a row of
the table moves it into the root, and which. Its exit status makes it a CI gate: 1 while
anything is not covered and not explicitly allowed.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from _cacheroot_layout import BY_NAME, NEVER, TABLE, TAGS

from ._audit_downloaders import instead
from ._audit_names import DOWNLOAD, GATING, LAYOUT_OVERRIDE, PLATFORMS
from ._audit_scan import Stats, scan

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Sequence

    from ._audit_ast import Finding
    from ._audit_downloaders import KnownDownload

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

#: What the audit cannot see, said in every report.
BLIND_SPOTS = (
    "compiled code (.so, .pyd) and C/C++/CUDA/Rust sources",
    "names and paths built at run time (shown as {...} where a part of one is)",
    "configuration files, and test, benchmark and example code inside distributions",
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
        return not runs_on or _platform(self.platform) in runs_on

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


def download_json(d: KnownDownload) -> dict[str, Any]:
    """A known downloader's call as ``--json`` lists it, with a finding's keys: where it lands
    (the layout row's place, or the place its keyword gives), never failing."""
    row = d.downloader
    return {
        "dist": d.dist,
        "version": d.version,
        "file": d.file,
        "line": d.line,
        "variable": row.variable,
        "expression": d.destination or row.expression,
        "default": "",
        "style": [],
        "fallback_of": None,
        "class": DOWNLOAD,
        "reason": f"known downloader {d.call} (where: {row.source})",
        "runs_on": list(d.runs_on),
        "failing": False,
        "covered_by": None if d.given else row.variable,
        "coverage": "" if d.given else f"lands in {row.lands}",
        "allowed": False,
        "suggestion": None,
        "instead": _leave_out(d) or None,
        "downloader": d.call,
    }


def _leave_out(d: KnownDownload) -> str:
    """For a known downloader sent elsewhere: the keyword to leave out."""
    if not d.given:
        return ""
    return f"leave {d.given}= out of {d.short}(): then it lands in {d.downloader.lands}"


def _row_note(name: str) -> str:
    row = BY_NAME[name]
    notes = []
    if row.mode == NEVER:
        notes.append("deliberately never set")
    if row.tags != TAGS:
        notes.append(f"{'/'.join(row.tags)} only")
    return f" ({', '.join(notes)})" if notes else ""


#: How many fallbacks (``A`` when ``B`` is unset, ``B`` when ``C`` is) a cover is chained
#: through.
FALLBACK_DEPTH = 4


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


def _platform(name: str) -> str:
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


def _where(f: Finding | KnownDownload) -> str:
    label = f"{f.dist}=={f.version}" if f.version else f.dist
    return f"{label} {f.file}:{f.line}"


def _what(f: Finding) -> str:
    text = f"{f.variable} = {f.expression}" if f.variable else f.expression
    return f"{text}  [{', '.join(f.style)}]" if f.style else text


def text(report: Report) -> str:
    """The human-readable report."""
    s = report.stats
    failing = [i for i in report.items if i.failing]
    ok = [i for i in report.items if i.covered_by is not None]
    allowed_items = [i for i in report.items if i.covered_by is None and i.allowed]
    listed = [i for i in report.items if i.covered_by is None and not i.allowed]
    elsewhere = [i for i in listed if i.gating and not i.applies]
    apart = [i for i in listed if not i.gating]
    lines = [
        (
            f"cacheroot audit: {s.sources} {_plural('source', s.sources)}, {s.python_files} "
            f"Python {_plural('file', s.python_files)} ({s.parsed} parsed), "
            f"{len(report.items)} {_plural('location', len(report.items))}, "
            f"{len(failing)} not covered ({report.seconds:.1f} s)"
        ),
    ]
    if failing:
        lines += ["", f"Not covered by the layout ({len(failing)}):"]
        for item in failing:
            f = item.finding
            lines.append(f"  {_where(f)}")
            lines.append(f"    {_what(f)}")
            lines.append(f"    {f.kind}: {f.reason}")
            if f.fallback_of:
                lines.append(f"    fallback when {f.fallback_of[0]} is unset")
            if f.fallbacks:
                lines.append(f"    falls back on: {f.default}")
            prefix = "suggested row: " if f.variable and f.kind != LAYOUT_OVERRIDE else ""
            lines.append(f"    {prefix}{item.suggestion}")
            lines += [f"    {item.instead}"] if item.instead else []
            lines.append(f"    to accept it: {allow_argument(f)}")
    if apart:
        lines += ["", f"Listed, not gating ({len(apart)}):"]
        for item in apart:
            lines.append(f"  {_where(item.finding)}  {_what(item.finding)}")
            lines.append(f"    {item.finding.kind}: {item.finding.reason}")
            lines += [f"    {item.instead}"] if item.instead else []
    if elsewhere:
        platform = _platform(elsewhere[0].platform)
        lines += ["", f"On other platforms' branches ({len(elsewhere)}; not {platform}):"]
        for item in elsewhere:
            on = "/".join(item.finding.runs_on)
            lines.append(f"  {_where(item.finding)}  {_what(item.finding)}  (only {on})")
    if allowed_items:
        lines += ["", f"Allowed (--allow) ({len(allowed_items)}):"]
        lines += [f"  {_where(i.finding)}  {_what(i.finding)}" for i in allowed_items]
    if ok:
        lines += ["", f"Covered ({len(ok)}):"]
        for i in ok:
            lines.append(f"  {_where(i.finding)}  {_what(i.finding)}")
            lines.append(f"    covered by {i.covered_by}: {i.how}")
    lines += _download_lines(report.downloads)
    lines += _unfollowed_lines(s)
    lines += ["", "Not seen: " + _blind(s)]
    return "\n".join(lines) + "\n"


def _download_lines(downloads: list[KnownDownload]) -> list[str]:
    """The known downloaders' calls, each with where it lands."""
    if not downloads:
        return []
    lines = ["", f"Known downloaders ({len(downloads)}; not gating):"]
    for d in downloads:
        only = f"  (only {'/'.join(d.runs_on)})" if d.runs_on else ""
        lines.append(f"  {_where(d)}  {d.call}{only}")
        if d.given:
            lines.append(
                f"    lands in {d.destination} ({d.given}=); without {d.given}= it lands in "
                f"{d.downloader.lands}"
            )
        else:
            lines.append(f"    lands in {d.downloader.lands}")
    return lines


def _unfollowed_lines(s: Stats) -> list[str]:
    """Per distribution, what the analysis could not follow, counted, with the first lines."""
    counts: dict[str, dict[str, int]] = {}
    for u in s.unfollowed:
        per = counts.setdefault(u.dist, {})
        per[u.what] = per.get(u.what, 0) + 1
    for dist, compiled in s.compiled_by.items():
        counts.setdefault(dist, {})["compiled module"] = compiled
    if not counts:
        return []
    lines = ["", "Not followed (a location may hide behind each):"]
    for dist in sorted(counts):
        parts = [f"{n} {_plural(what, n)}" for what, n in sorted(counts[dist].items(), key=_order)]
        lines.append(f"  {dist}: {', '.join(parts)}")
        shown = [u for u in s.unfollowed if u.dist == dist][:SHOWN]
        lines += [f"    {u.file}:{u.line} {u.what}: {u.text}" for u in shown]
    return lines


#: Unfollowed places listed per distribution (the JSON has them all).
SHOWN = 5
_ORDER = ("environment name built at run time", "helper in another module", "compiled module")


def _order(item: tuple[str, int]) -> int:
    return _ORDER.index(item[0]) if item[0] in _ORDER else len(_ORDER)


def _plural(what: str, n: int) -> str:
    if n == 1:
        return what
    head, _, tail = what.partition(" ")
    return f"{head}s {tail}".strip()


def _blind(s: Stats) -> str:
    counted = (
        f"{s.compiled} compiled modules, {s.native} C/C++/CUDA/Rust sources, "
        f"{s.shipped_tests} test/benchmark/example files of distributions, "
        f"{len(s.unparsable)} files that do not parse, {len(s.unreadable)} unreadable"
    )
    return f"{counted}; and in general: {'; '.join(BLIND_SPOTS)}."


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cacheroot audit``: cache locations the layout does not cover; exit 1 when any."""
    p = sub.add_parser(
        "audit",
        help="find cache locations in installed code (or wheels, sdists, directories) that "
        "the layout does not cover",
        description=(
            "Read the Python source of the installed distributions (or of the wheels, sdists "
            "and directories given) and report every cache location found: the variable that "
            "moves it, its default, the file and line, and the layout row that covers it (or a "
            "suggested one). Exit status 1 when something is not covered. Not seen: "
            + "; ".join(BLIND_SPOTS)
            + "."
        ),
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a wheel (.whl), an sdist (.tar.gz) or a directory; default: every distribution "
        "installed in this environment",
    )
    p.add_argument(
        "--json", action="store_true", help="print a JSON list of findings instead of text"
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="NAME",
        help="accept a variable name, or a location pattern (fnmatch, e.g. '/tmp/*'), as known "
        "to be fine; repeat for more",
    )
    p.add_argument(
        "--platform",
        default=sys.platform,
        choices=sorted({*PLATFORMS, sys.platform}),
        help="the platform whose sys.platform/os.name branches count (default: this one, "
        f"{sys.platform}); findings on other platforms' branches are listed apart",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        report = audit(args.paths, args.allow, args.platform)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"cacheroot audit: {exc}\n")
        return 2
    if args.json:
        listed = [i.as_json() for i in report.items]
        listed += [download_json(d) for d in report.downloads]
        sys.stdout.write(json.dumps(listed, indent=2) + "\n")
        sys.stderr.write(f"cacheroot audit: not seen: {_blind(report.stats)}\n")
        for line in _unfollowed_lines(report.stats)[1:]:
            sys.stderr.write(f"cacheroot audit: {line.strip()}\n")
    else:
        sys.stdout.write(text(report))
    return report.status
