"""The ``cacheroot`` command: subcommands come from every installed cacheroot distribution.

Each distribution declares entry points in the ``cacheroot.commands`` group; each names a
function that adds one subparser and sets ``func`` (``args -> exit status``) as its default.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

GROUP = "cacheroot.commands"


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
    p.set_defaults(func=_run_env)


def _run_env(args: argparse.Namespace) -> int:
    from ._export import export, table_markdown  # noqa: PLC0415

    if args.table:
        sys.stdout.write(table_markdown())
        return 0
    try:
        text = export(args.format, tag=args.tag, container_root=args.container_root)
    except ValueError as exc:
        sys.stderr.write(f"cacheroot env: {exc}\n")
        return 1
    sys.stdout.write(text)
    return 0


def register_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cacheroot doctor``: where each cache resolves and why; exit 1 when invalid."""
    p = sub.add_parser("doctor", help="show where each cache resolves and why")
    p.add_argument("--tag", choices=("cuda", "rocm"), default=None)
    p.set_defaults(func=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    from ._doctor import report  # noqa: PLC0415

    text, status = report(tag=args.tag)
    sys.stdout.write(text)
    return status


def parser() -> argparse.ArgumentParser:
    """The top-level parser with every installed distribution's subcommands."""
    top = argparse.ArgumentParser(
        prog="cacheroot", description="One cache root for every cache an ML test suite touches."
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cacheroot`` console script."""
    args = parser().parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
