"""``cacheroot cache prune``: the budget over every cache of the root, and the report it prints.

One report, as JSON (``--json``) or as text: per cache what went (or, with ``--dry-run``, would
go) and why, what was kept and why, what could not be removed (the exit status is then 1), then
the test cache's stray files and the totals. The work itself is :mod:`.budget`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from cacheroot.envs import resolve
from cacheroot.envs.units import format_size

from .._progress import counted
from .._redact import printable
from .budget import apply, choose
from .cache import prune
from .root_caches import free_space, not_followed
from .survey import survey

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from .survey import Victim

__all__ = ["prune_root", "render", "run_prune"]


def prune_root(
    root: str,
    *,
    max_size: int | None = None,
    min_free: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Plan and (unless ``dry_run``) apply; the report ``cacheroot cache prune`` prints."""
    now = time.time()
    found = survey(root, environ=environ, now=now)
    victims, kept = choose(
        found, max_size=max_size, min_free=min_free, older_than=older_than, now=now
    )
    refused: list[tuple[Victim, str]] = []
    if dry_run:
        removed = victims
    else:
        summary = apply(victims)
        removed, kept, refused = summary.removed, kept + summary.skipped, summary.refused
    freed = sum(v.size for v in removed)
    per_cache: dict[str, dict[str, Any]] = {
        c.name: {"path": c.path, "removed": 0, "freed": 0} for c in found.caches
    }
    for v in removed:
        per_cache[v.cache]["removed"] += 1
        per_cache[v.cache]["freed"] += v.size
    free = None
    with contextlib.suppress(OSError):
        free = free_space(root)[0]
    return {
        "root": root,
        "dry_run": dry_run,
        "criteria": {"max_size": max_size, "min_free": min_free, "older_than": older_than},
        "removed": [v.as_dict() for v in removed],
        "kept": [{**v.as_dict(), "reason": why, "error": False} for v, why in kept]
        + [{**v.as_dict(), "reason": why, "error": True} for v, why in refused],
        "caches": per_cache,
        "freed": freed,
        "total_before": found.total,
        "total_after": found.total - freed,
        "free": free,
        "notes": found.notes,
    }


def run_prune(args: argparse.Namespace, cache: str) -> int:
    """``cacheroot cache prune``: the budget over every cache of the root, then the test cache's
    stray files (abandoned partials, orphaned records, dead locks)."""
    layout = resolve(os.environ)
    if layout.root is None:
        sys.stderr.write(f"cacheroot cache prune: {layout.root_reason}\n")
        return 2
    report = prune_root(
        layout.root,
        max_size=args.max_size,
        min_free=getattr(args, "min_free", None),
        older_than=args.older_than,
        dry_run=args.dry_run,
        environ=os.environ,
    )
    why = not_followed(layout.root, cache)
    if why:  # said by the survey's notes when the layout's own test cache is the one
        note = f"skipped the test cache's stray files ({cache}): {why}"
        report["notes"] += [] if any(why in n for n in report["notes"]) else [note]
        report["strays"] = []
    else:
        report["strays"] = prune(cache, grace=args.grace, dry_run=args.dry_run)["strays"]
    report["freed"] += sum(s["size"] for s in report["strays"])
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render(report))
    return 1 if any(k["error"] for k in report["kept"]) else 0


def render(report: dict[str, Any]) -> str:
    """The text form of a :func:`prune_root` report: per cache, then the total."""
    verb = "would remove" if report["dry_run"] else "removed"
    lines: list[str] = []
    for name, info in report["caches"].items():
        rows = [r for r in report["removed"] if r["cache"] == name]
        held = [k for k in report["kept"] if k["cache"] == name]
        if not rows and not held:
            continue
        lines.append(f"{name} ({info['path']}):\n")
        lines += [
            f"  {verb} {printable(r['label'])} ({format_size(r['size'])}): "
            f"{printable(r['reason'])}\n"
            for r in rows
        ]
        lines += [
            f"  {'could not remove' if k['error'] else 'kept'} {printable(k['label'])}: "
            f"{printable(k['reason'])}\n"
            for k in held
        ]
        if rows:
            lines.append(
                f"  {counted(len(rows), 'entry', 'entries')}, {format_size(info['freed'])}\n"
            )
    lines += [
        f"{verb} {printable(s['path'])}: {printable(s['reason'])}\n"
        for s in report.get("strays", [])
    ]
    lines += [f"note: {n}\n" for n in report["notes"]]
    free = "" if report["free"] is None else f", {format_size(report['free'])} free"
    lines.append(
        f"{verb} {counted(len(report['removed']), 'entry', 'entries')} and "
        f"{counted(len(report.get('strays', [])), 'stray file')}, {format_size(report['freed'])}; "
        f"{format_size(report['total_after'])} left"
        f"{free}\n"
    )
    return "".join(lines)
