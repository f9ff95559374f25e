"""``python -m cacheroot.fetch._hub serve ...``: the same as ``cacheroot hub``."""

from __future__ import annotations

import argparse
import sys

from .cli import register


def main() -> int:
    """Parse ``sys.argv`` as ``cacheroot hub`` would."""
    top = argparse.ArgumentParser(prog="cacheroot")
    register(top.add_subparsers(dest="command", required=True))
    args = top.parse_args(["hub", *sys.argv[1:]])
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
