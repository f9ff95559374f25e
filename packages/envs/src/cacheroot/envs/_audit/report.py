"""What ``cacheroot audit`` prints: the report as text or JSON, and the command itself. The
last stage of the pipeline."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from .findings import HELPER, RUN_TIME_NAME
from .gate import allow_argument, audit, spelled_platform
from .names import DOWNLOAD, LAYOUT_OVERRIDE, PLATFORMS

if TYPE_CHECKING:
    import argparse

    from .downloaders import KnownDownload
    from .findings import Finding
    from .gate import Report
    from .scan import Stats


#: What the audit cannot see, said in every report.
BLIND_SPOTS = (
    "compiled code (.so, .pyd) and C/C++/CUDA/Rust sources",
    "names and paths built at run time (shown as {...} where a part of one is)",
    "configuration files, and test, benchmark and example code inside distributions",
)


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
        platform = spelled_platform(elsewhere[0].platform)
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
_ORDER = (RUN_TIME_NAME, HELPER, "compiled module")


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
