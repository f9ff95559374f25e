"""``cacheroot cache ls | du | verify | prune``: the command over :mod:`.cache`'s operations.

``ls`` lists what the root holds: the test cache's entries, and the Hugging Face and ModelScope
repositories and the hub cache's store (:mod:`.inventory`); ``du`` measures the test cache by
namespace and every cache of the layout, other tools' directories apart; ``verify`` looks at
the test cache (``--manifest`` also at a manifest's model snapshots); ``prune`` weighs every
cache under the root (:mod:`.budget`). Kept apart from the operations so that those import
nothing of the command, and the budget can build on them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

from cacheroot.envs import CACHEROOT, HF_HOME, MODELSCOPE_CACHE, VLLM_TEST_CACHE, resolve
from cacheroot.envs.units import format_age, format_size

from .._cachedir import cache_dir
from .._cli import age_arg, namespace_arg, size_arg
from .._errors import FetchError
from .._progress import counted
from .._redact import printable
from .._warm.manifest import load_manifest
from .._warm.warm import check_model
from .cache import GRACE, disk_usage, entries, missing_namespace, verify
from .inventory import HUB_STORE_LABEL, root_listing, root_usage
from .prune_report import run_prune


def _cache_dir() -> str:
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
        help="list what the root holds; verify the test cache; measure and prune every cache under "
        "the root",
        description=f"List what ${CACHEROOT} holds (the test cache ${VLLM_TEST_CACHE}, Hugging "
        "Face and ModelScope models and datasets, the hub cache's store); verify the test cache; "
        "measure (du) and prune every cache under the root (Hugging Face hub, Triton, Inductor, "
        "the JIT caches, the test cache).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ops = p.add_subparsers(dest="cache_command", metavar="OPERATION", required=True)
    namespace = (
        f"only this namespace (a directory under ${VLLM_TEST_CACHE}) and those nested in it, "
        "e.g. gsm8k or gpt_oss/tiktoken"
    )
    ls = ops.add_parser(
        "ls",
        help="the test cache's entries, the Hugging Face and ModelScope repositories and the "
        "hub cache's store under the root: size, last use, source or revisions",
        description="List what the root holds, one section per cache: the test cache's entries "
        "(size, last used, source URL); the Hugging Face hub cache's models and datasets, read "
        "by huggingface_hub's own scanner (revisions with their refs, files, size on disk, last "
        "accessed and modified; without huggingface_hub, its directories and their sizes only); "
        "ModelScope's models and datasets (revisions, files, size, last modified); the hub "
        "cache's store (answers, files, size). A cache that is not there is left out; --json "
        "gives the same as one object (test_cache, huggingface, modelscope, hub_store).",
    )
    ls.add_argument(
        "--namespace",
        metavar="NS",
        type=namespace_arg,
        default=None,
        help=f"{namespace}; the test cache alone is listed then",
    )
    du = ops.add_parser(
        "du",
        help="bytes per namespace of the test cache and per cache of the layout (the hub "
        "cache's store included); other tools' directories in the root apart",
        description="Bytes per namespace of the test cache, then per cache directory of the "
        f"layout and the hub cache's store ({HUB_STORE_LABEL}). What lies in the root but "
        "belongs to no cache of the layout (other tools' caches, where the root is ~/.cache) is "
        "listed apart as other tools and left out of the layout's figures.",
    )
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
        "Inductor, the JIT caches, the test cache, the hub cache's store's answers and files, "
        "...) by size budget, free space or age (one "
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


def _table(title: str, header: str, rows: list[str]) -> list[str]:
    """A section of ``ls``: its title line, its header, its rows (or ``(empty)``)."""
    return [f"{title}\n", f"{header}\n", *(rows or ["(empty)\n"])]


def _hub_table(hub: dict[str, Any]) -> list[str]:
    """The Hugging Face hub cache's section: its repositories, or its directories' sizes where
    huggingface_hub could not read it."""
    title = f"Hugging Face hub ({HF_HOME}): {hub['path']}"
    if not hub["scanned"]:
        rows = [f"{d['name']}\t{format_size(d['size'])}\n" for d in hub["directories"]]
        return _table(title, "DIRECTORY\tSIZE", rows)
    rows = []
    for r in hub["repos"]:
        revisions = ", ".join(
            v["commit"] + (f" ({', '.join(v['refs'])})" if v["refs"] else "")
            for v in r["revisions"]
        )
        rows.append(
            f"{r['repo_type']}/{r['repo_id']}\t{revisions}\t{r['nb_files']}\t"
            f"{format_size(r['size'])}\t{_when(r['last_accessed'])}\t"
            f"{_when(r['last_modified'])}\n"
        )
    header = "REPO\tREVISIONS (REFS)\tFILES\tSIZE\tLAST ACCESSED (UTC)\tLAST MODIFIED (UTC)"
    return _table(title, header, rows)


def _modelscope_table(ms: dict[str, Any]) -> list[str]:
    """ModelScope's section: its repositories (a legacy one has no revision)."""
    rows = [
        f"{r['repo_type']}/{r['repo_id']}\t{', '.join(r['revisions']) or '-'}\t"
        f"{r['nb_files']}\t{format_size(r['size'])}\t{_when(r['last_modified'])}\n"
        for r in ms["repos"]
    ]
    title = f"ModelScope ({MODELSCOPE_CACHE}): {ms['path']}"
    return _table(title, "REPO\tREVISIONS\tFILES\tSIZE\tLAST MODIFIED (UTC)", rows)


def _store_table(store: dict[str, Any]) -> list[str]:
    """The hub cache store's section: one row of counts."""
    row = (
        f"{store['answers']}\t{store['files']}\t{format_size(store['size'])}\t"
        f"{_when(store['last_modified'])}\n"
    )
    title = f"hub cache store (cacheroot hub serve): {store['path']}"
    return _table(title, "ANSWERS\tFILES\tSIZE\tLAST MODIFIED (UTC)", [row])


def _listed(listing: dict[str, Any]) -> list[str]:
    """The text of ``ls`` for the caches of the root beyond the test cache: a section for each
    that is there, then its notes (one that was skipped has its notes alone, saying why)."""
    lines: list[str] = []
    for key, table in (
        ("huggingface", _hub_table),
        ("modelscope", _modelscope_table),
        ("hub_store", _store_table),
    ):
        section = listing[key]
        if section is None:
            continue
        block = table(section) if section["exists"] else []
        block += [f"note: {n}\n" for n in section["notes"]]
        if block:
            lines += ["\n", *block]
    return lines


def _run_ls(args: argparse.Namespace, cache: str) -> int:
    rows = entries(cache, args.namespace)
    data: dict[str, Any] = {
        "test_cache": {
            "variable": VLLM_TEST_CACHE,
            "path": cache,
            "exists": os.path.isdir(cache),
            "entries": [e.as_dict() for e in rows],
        }
    }
    lines = _table(
        f"test cache ({VLLM_TEST_CACHE}): {cache}",
        "ENTRY\tSIZE\tLAST USED (UTC)\tSOURCE",
        [
            f"{printable(f'{e.namespace}/{e.name}')}\t{format_size(e.size)}\t"
            f"{_when(e.last_used)}\t{printable(e.url or '-')}\n"
            for e in rows
        ],
    )
    if args.namespace is None:  # --namespace names a part of the test cache: nothing else
        layout = resolve(os.environ)
        data["root"] = layout.root
        if layout.root is None:
            lines.append(f"note: only the test cache is listed: {layout.root_reason}\n")
        else:
            listing = root_listing(layout.root, os.environ)
            data.update(listing)
            lines += _listed(listing)
    _emit(args, data, "".join(lines))
    return 0


def _run_du(args: argparse.Namespace, cache: str) -> int:
    usage = {**disk_usage(cache), **root_usage(os.environ)}
    lines = [f"{format_size(v)}\t{k}\n" for k, v in usage["namespaces"].items()]
    if usage["exists"]:
        lines.append(f"{format_size(usage['total'])}\ttotal ({cache})\n\n")
    else:
        lines.append(f"no test cache: {_NO_CACHE.format(cache=cache)}\n\n")
    lines += [
        f"{format_size(c['size'])}\t{c['variable']}\t{c['path']}"
        + ("\t(other tools left out)" if c.get("other_tools_left_out") else "")
        + "\n"
        for c in usage["caches"]
        if c["exists"]
    ]
    others = usage["other_tools"]
    if others:
        lines.append(
            f"\nother tools: {counted(len(others), 'entry', 'entries')} of the root that no "
            "cache of the layout owns, left out above\n"
        )
        lines += [f"{format_size(o['size'])}\tother tools\t{o['path']}\n" for o in others]
        lines.append(f"{format_size(usage['other_tools_total'])}\ttotal of other tools\n")
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
            entry = printable(f"{r['namespace']}/{r['name']}")
            lines.append(f"{r['status']}: {entry}: {printable(r['detail'])}{printable(where)}\n")
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
