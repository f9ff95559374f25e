"""``cacheroot cache ls | du | verify | prune``: the command over :mod:`.cache`'s operations.

``ls``, ``du`` and ``verify`` look at the test cache (``verify --manifest`` also at a manifest's
model snapshots); ``prune`` weighs every cache under the root (:mod:`.budget`). Kept apart from
the operations so that those import nothing of the command, and the budget can build on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from cacheroot.envs import CACHEROOT, VLLM_TEST_CACHE
from cacheroot.envs.units import format_age, format_size

from .._cli import age_arg, namespace_arg, size_arg
from .._errors import FetchError
from .._progress import counted
from .._warm.manifest import load_manifest
from .._warm.warm import check_model
from .cache import GRACE, disk_usage, entries, missing_namespace, verify
from .prune_report import run_prune


def _cache_dir() -> str:
    from .._fetcher import cache_dir  # noqa: PLC0415 - keeps `requests` & co. off the hit path

    return cache_dir()


def _when(t: float) -> str:
    if not t:
        return "never"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


#: What ``du`` says of a test cache that is not there (rather than a total of nothing).
_NO_CACHE = (
    f"{{cache}} does not exist: nothing has been fetched into it yet (${VLLM_TEST_CACHE} or "
    f"${CACHEROOT} decide where it is)"
)

#: The options of ``cacheroot cache prune`` that say what to remove (one at least).
PRUNE_CRITERIA = ("--max-size SIZE", "--min-free SIZE", "--older-than AGE", "--strays")

EPILOG = """\
exit status:
  0  done (verify: nothing corrupt)
  1  verify found corrupt entries (they were quarantined unless --no-quarantine), or entries
     this user cannot read; prune could not remove entries it should have (permissions:
     each is listed with what to do; entries kept because they are busy do not count)
  2  bad arguments (prune: none of --max-size, --min-free, --older-than, --strays; ls,
     verify: a --namespace that is not a namespace of the cache), or the cache directory is
     unusable

Namespaces nest (gpt_oss/tiktoken): ls and verify look at every level, and --namespace NS
covers NS and the namespaces under it.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``cache`` subcommand (``ls``, ``du``, ``verify``, ``prune``)."""
    p = sub.add_parser(
        "cache",
        help="list and verify the test cache; measure and prune every cache under the root",
        description=f"List and verify ${VLLM_TEST_CACHE}; measure (du) and prune every cache "
        f"under ${CACHEROOT} (Hugging Face hub, Triton, Inductor, the JIT caches, the test cache).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ops = p.add_subparsers(dest="cache_command", metavar="OPERATION", required=True)
    namespace = (
        f"only this namespace (a directory under ${VLLM_TEST_CACHE}) and those nested in it, "
        "e.g. gsm8k or gpt_oss/tiktoken"
    )
    ls = ops.add_parser("ls", help="entries: name, size, last used, source URL")
    ls.add_argument("--namespace", metavar="NS", type=namespace_arg, default=None, help=namespace)
    du = ops.add_parser("du", help="bytes per namespace and per top-level cache of the layout")
    ver = ops.add_parser("verify", help="re-hash entries; quarantine the corrupt ones")
    ver.add_argument("--namespace", metavar="NS", type=namespace_arg, default=None, help=namespace)
    ver.add_argument("--no-quarantine", action="store_true", help="report only, move nothing")
    ver.add_argument(
        "--manifest",
        metavar="FILE",
        default=None,
        help="also check the [[model]] snapshots of this manifest, e.g. tests/manifest.toml",
    )
    pr = ops.add_parser(
        "prune",
        help="remove least recently used entries of every cache under the root (never busy ones)",
        description="Remove entries of every cache under the root (Hugging Face hub, Triton, "
        "Inductor, the JIT caches, the test cache, ...) by size budget, free space or age (one "
        f"of {', '.join(PRUNE_CRITERIA)} at least), in one least-recently-used order across all "
        "of them: quarantined test entries first, then the least recently used anywhere. Nothing "
        "locked, being written, changed in the last 30 s or open in a process visible here is "
        "removed. Abandoned partials, records of missing entries and unneeded locks of the test "
        "cache go too.",
    )
    pr.add_argument(
        "--max-size",
        metavar="SIZE",
        type=size_arg,
        default=None,
        help="remove least recently used entries until the caches of the root hold at most SIZE: "
        "bytes, or "
        "a number with K, M, G, T (1024-based; KB, MB, GB: 1000-based), e.g. 20G, 500M",
    )
    pr.add_argument(
        "--older-than",
        metavar="AGE",
        type=age_arg,
        default=None,
        help="remove entries not used for AGE: seconds, or numbers with w, d, h, m, s, "
        "e.g. 14d, 12h, 1h30m",
    )
    pr.add_argument(
        "--strays",
        action="store_true",
        help="remove only what no entry needs: abandoned partials, records of missing entries, "
        "locks of dead holders (the other criteria remove these too)",
    )
    pr.add_argument(
        "--min-free",
        metavar="SIZE",
        type=size_arg,
        default=None,
        help="remove least recently used entries until the root's file system has SIZE free, "
        "e.g. 50G",
    )
    pr.add_argument(
        "--grace",
        metavar="AGE",
        type=age_arg,
        default=GRACE,
        help=f"keep a dead writer's partial this long, e.g. 30m, 2h (default {format_age(GRACE)}: "
        "a next fetch may resume it)",
    )
    pr.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    for q in (ls, du, ver, pr):
        q.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(text)


def run(args: argparse.Namespace) -> int:
    """Run one ``cacheroot cache`` operation."""
    op = args.cache_command
    criteria = (args.max_size, args.min_free, args.older_than) if op == "prune" else ()
    if op == "prune" and all(c is None for c in criteria) and not args.strays:
        sys.stderr.write(
            "cacheroot cache prune: say what to remove: --max-size SIZE (e.g. 20G), "
            "--min-free SIZE (e.g. 50G), "
            "--older-than AGE (e.g. 14d), or --strays (only abandoned partials and stale records "
            "and locks, which the others remove too); nothing was removed\n"
        )
        return 2
    try:
        cache = _cache_dir()
    except FetchError as exc:
        sys.stderr.write(f"cacheroot cache: {exc}\n")
        return 2
    if op in ("ls", "verify") and args.namespace is not None:
        problem = missing_namespace(cache, args.namespace)
        if problem:
            sys.stderr.write(f"cacheroot cache {op}: {problem}\n")
            return 2
    operation = {"ls": _run_ls, "du": _run_du, "verify": _run_verify}.get(op, run_prune)
    return operation(args, cache)


def _run_ls(args: argparse.Namespace, cache: str) -> int:
    rows = entries(cache, args.namespace)
    lines = ["ENTRY\tSIZE\tLAST USED (UTC)\tSOURCE\n"]
    lines += [
        f"{e.namespace}/{e.name}\t{format_size(e.size)}\t{_when(e.last_used)}\t{e.url or '-'}\n"
        for e in rows
    ]
    if not rows:
        lines.append("(empty)\n")
    _emit(args, [e.as_dict() for e in rows], "".join(lines))
    return 0


def _run_du(args: argparse.Namespace, cache: str) -> int:
    usage = disk_usage(cache)
    lines = [f"{format_size(v)}\t{k}\n" for k, v in usage["namespaces"].items()]
    if usage["exists"]:
        lines.append(f"{format_size(usage['total'])}\ttotal ({cache})\n\n")
    else:
        lines.append(f"no test cache: {_NO_CACHE.format(cache=cache)}\n\n")
    lines += [
        f"{format_size(c['size'])}\t{c['variable']}\t{c['path']}\n"
        for c in usage["caches"]
        if c["exists"]
    ]
    _emit(args, usage, "".join(lines))
    return 0


def _run_verify(args: argparse.Namespace, cache: str) -> int:
    rows = verify(cache, args.namespace, move=not args.no_quarantine)
    models: list[dict[str, Any]] = []
    if args.manifest:
        try:
            manifest = load_manifest(args.manifest)
        except FetchError as exc:
            sys.stderr.write(f"cacheroot cache verify: {exc}\n")
            return 2
        models = [check_model(m, deep=True) for m in manifest.models]
    bad = [r for r in rows if r["status"] in ("corrupt", "unreadable")]
    bad_models = [m for m in models if m["status"] != "hit"]
    lines = []
    for r in rows:
        if r["status"] != "ok":
            where = f" -> {r['quarantined']}" if r.get("quarantined") else ""
            lines.append(f"{r['status']}: {r['namespace']}/{r['name']}: {r['detail']}{where}\n")
    lines += [f"incomplete: {m['entry']}: {m['reason']}\n" for m in bad_models]
    checked = f"; {counted(len(models), 'model')}, {len(bad_models)} incomplete"
    lines.append(
        f"verified {counted(len(rows), 'entry', 'entries')}: "
        f"{sum(r['status'] == 'corrupt' for r in rows)} corrupt, "
        f"{sum(r['status'] == 'unreadable' for r in rows)} unreadable, "
        f"{sum(r['status'] == 'unverified' for r in rows)} without a record"
        + (checked if args.manifest else "")
        + "\n"
    )
    _emit(args, {"entries": rows, "models": models}, "".join(lines))
    return 1 if bad or bad_models else 0
