"""The ``cacheroot`` command: subcommands come from every installed cacheroot distribution.

Each distribution declares entry points in the ``cacheroot.commands`` group; each names a
function that adds one subparser and sets ``func`` (``args -> exit status``) as its default.
"""

from __future__ import annotations

import argparse
import functools
import sys
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from importlib.metadata import EntryPoint

GROUP = "cacheroot.commands"

#: The subcommands of the other cacheroot distributions: their distribution and its folder in a
#: clone, so that a missing one is named with the way to install it (argparse alone lists only
#: what is installed, which reads as if the subcommand did not exist).
ELSEWHERE = {
    "cache": ("cacheroot-fetch", "packages/fetch"),
    "fetch": ("cacheroot-fetch", "packages/fetch"),
    "hook": ("cacheroot-sitecustomize", "sitecustomize"),
    "tier": ("cacheroot-fetch", "packages/fetch"),
    "warm": ("cacheroot-fetch", "packages/fetch"),
}


def register_env(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cacheroot env``: print the layout in one of the export formats."""
    from ._export import FORMATS  # noqa: PLC0415

    p = sub.add_parser("env", help="print the layout as shell, docker, GitHub or JSON text")
    p.add_argument("--format", choices=FORMATS, default="sh")
    p.add_argument("--tag", choices=("cuda", "rocm"), default=None)
    p.add_argument(
        "--container-root",
        default=None,
        help="docker only: the root's path inside the container (default: the host path)",
    )
    p.add_argument(
        "--table", action="store_true", help="print the variable table (markdown) instead"
    )
    p.set_defaults(func=functools.partial(_run_env, p))


def _run_env(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from _cacheroot_layout import read_pin  # noqa: PLC0415

    from ._export import export, table_markdown  # noqa: PLC0415

    if args.container_root is not None and args.format != "docker":
        # Accepted silently, it would suggest the sh or GitHub text is meant for a container.
        p.error(
            f"--container-root applies to --format docker only (got --format {args.format}): "
            "drop it, or add --format docker"
        )
    if args.table:
        sys.stdout.write(table_markdown())
        return 0
    try:
        # The hook's pin, as the hook reads it (a pin others may write counts as none).
        text = export(args.format, tag=args.tag, container_root=args.container_root, pin=read_pin())
    except ValueError as exc:
        sys.stderr.write(f"cacheroot env: {exc}\n")
        return 1
    sys.stdout.write(text)
    return 0


def register_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cacheroot doctor``: where each cache resolves and why; exit 1 when invalid."""
    p = sub.add_parser("doctor", help="show where each cache resolves and why")
    p.add_argument("--tag", choices=("cuda", "rocm"), default=None)
    p.add_argument(
        "--json", action="store_true", help="print what the table shows as one JSON document"
    )
    p.set_defaults(func=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    from ._doctor import report, report_json  # noqa: PLC0415

    text, status = (report_json if args.json else report)(tag=args.tag)
    sys.stdout.write(text)
    return status


def parser(entries: Iterable[EntryPoint] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with the subcommands of ``entries`` (default: the
    ``cacheroot.commands`` entry points of every installed distribution)."""
    top = argparse.ArgumentParser(
        prog="cacheroot", description="One cache root for every cache an ML test suite touches."
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    found = entry_points(group=GROUP) if entries is None else entries
    for ep in sorted(found, key=lambda e: e.name):
        try:
            register = ep.load()
        except (ImportError, AttributeError) as exc:
            # One broken distribution must not take every other subcommand down with it.
            sys.stderr.write(
                f"cacheroot: skipping subcommand {ep.name!r} ({ep.value}): {exc}; "
                f"reinstall the distribution that provides it\n"
            )
            continue
        register(sub)
    return top


def _not_installed(command: str, installed: Iterable[str]) -> str:
    """Why ``command`` is missing and how to install it, or ``""`` when it is none of ours."""
    if command not in ELSEWHERE:
        return ""
    dist, folder = ELSEWHERE[command]
    return (
        f"{command!r} is a subcommand of the {dist} distribution, which is not installed "
        f"(the subcommands installed here: {', '.join(sorted(installed))}); in a clone of the "
        "cacheroot repository, "
        f"`pip install .` at its root installs every cacheroot distribution, "
        f"`pip install ./{folder}` this one alone"
    )


def main(argv: Sequence[str] | None = None, *, entries: Iterable[EntryPoint] | None = None) -> int:
    """Entry point of the ``cacheroot`` console script; ``entries`` as for :func:`parser`."""
    found = list(entry_points(group=GROUP) if entries is None else entries)
    top = parser(found)
    given = sys.argv[1:] if argv is None else list(argv)
    # The top-level parser takes no option but -h, so the subcommand is the first argument. One
    # whose entry point exists but failed to load was reported (with a fix) by parser().
    if given and given[0] not in {ep.name for ep in found}:
        hint = _not_installed(given[0], {ep.name for ep in found})
        if hint:
            top.error(hint)
    args = top.parse_args(given)
    status: int = args.func(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
