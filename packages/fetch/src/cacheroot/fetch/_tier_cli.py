"""``cacheroot tier``: join a host's cache (``CACHEROOT``, L1) to the fleet's (``CACHEROOT_SHARED``,
L2) around a run: ``up`` before, ``sync`` during and after, ``down`` and ``evict`` at the end."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED, resolve, shared_root
from cacheroot.envs.units import format_size, parse_age, parse_size

from . import _tier
from ._progress import counted

if TYPE_CHECKING:
    import argparse
    from types import FrameType

EPILOG = f"""\
L1 is {CACHEROOT} (a fast local disk), L2 is {CACHEROOT_SHARED} (a volume every host mounts).
A CI job runs `tier up --merged DIR`, mounts DIR into its container as the cache root, runs
`tier sync --watch 300` beside the tests, then `tier sync`, `tier down --merged DIR` and, now
and then, `tier evict`.

exit status:
  0  done
  1  something could not be done (the message says what); a sync counts files it could not copy
  2  usage: no shared tier configured, or an invalid value
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cacheroot tier`` and its subcommands."""
    import argparse  # noqa: PLC0415 - the parser only

    p = sub.add_parser(
        "tier",
        help="two-tier cache for a fleet: local disk (L1) in front of a shared volume (L2)",
        description=(
            "Join this host's cache (L1) to the fleet's shared one (L2) around a run: up "
            "before, sync during and after, down and evict at the end."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    up = verbs.add_parser("up", help="show L2 under L1 at a merged path (overlay, else seed)")
    up.add_argument(
        "--merged",
        required=True,
        metavar="DIR",
        help="where the merged view goes: an absent or empty directory (mount it as the root)",
    )
    up.add_argument(
        "--mode",
        choices=("auto", "overlay", "seed"),
        default="auto",
        help="overlay: OverlayFS only (fail if refused); seed: copy L2's most recently used "
        "files into L1 and link DIR to L1; auto (default): overlay, else seed",
    )
    up.add_argument(
        "--work",
        metavar="DIR",
        default=None,
        help="the overlay's work directory, on L1's file system (default: .<L1 name>"
        f"{_tier.WORK_SUFFIX} beside L1)",
    )
    _budget_flags(up, "seeding stops before")
    up.set_defaults(func=_run_up)

    sy = verbs.add_parser("sync", help="copy L1's complete new files to L2 (never replacing)")
    sy.add_argument(
        "--watch",
        metavar="SECONDS",
        type=float,
        default=None,
        help="repeat every SECONDS seconds until SIGTERM or SIGINT (a watchdog beside the run)",
    )
    sy.add_argument(
        "--settle",
        metavar="SECONDS",
        type=float,
        default=_tier.SETTLE,
        help=f"skip files changed in the last SECONDS seconds (default {_tier.SETTLE:g})",
    )
    sy.set_defaults(func=_run_sync)

    dn = verbs.add_parser("down", help="unmount the overlay (or remove the link) of `tier up`")
    dn.add_argument("--merged", required=True, metavar="DIR", help="the DIR given to `tier up`")
    dn.set_defaults(func=_run_down)

    ev = verbs.add_parser("evict", help="apply each tier's budget, least recently used first")
    ev.add_argument(
        "--l1-max-size",
        metavar="SIZE",
        type=parse_size,
        help="L1 total at most SIZE (bytes, or 500M, 800G, ...)",
    )
    ev.add_argument(
        "--l1-min-free",
        metavar="SIZE",
        type=parse_size,
        help="keep at least SIZE free on L1's file system (bytes, or 100G, ...)",
    )
    ev.add_argument(
        "--l2-max-size",
        metavar="SIZE",
        type=parse_size,
        help="L2 total at most SIZE (bytes, or 2T, ...)",
    )
    ev.add_argument(
        "--l2-older-than",
        metavar="AGE",
        type=parse_age,
        help="remove L2 entries unused for longer than AGE, by access time (seconds, or "
        "12h, 14d, 2w)",
    )
    ev.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    ev.set_defaults(func=_run_evict)


def _budget_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--max-size",
        metavar="SIZE",
        type=parse_size,
        default=None,
        help=f"{what} L1 holds SIZE in all (bytes, or 500M, 100G, ...)",
    )
    p.add_argument(
        "--min-free",
        metavar="SIZE",
        type=parse_size,
        default=None,
        help=f"{what} L1's file system has less than SIZE free (bytes, or 100G, ...)",
    )


def _tiers() -> tuple[str, str]:
    """L1 and L2 from the environment; exits 2 with what to set when either is unusable."""
    try:
        l2 = shared_root(os.environ)
    except ValueError as exc:
        sys.stderr.write(f"cacheroot tier: {exc}\n")
        raise SystemExit(2) from None
    layout = resolve(os.environ)
    if l2 is None or layout.root is None:
        why = (
            f"{CACHEROOT_SHARED} is not set: set it to the shared volume's path (one tier needs "
            "no tier command)"
            if l2 is None
            else layout.root_reason
        )
        sys.stderr.write(f"cacheroot tier: {why}\n")
        raise SystemExit(2)
    return layout.root, l2


def _quiet_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="cacheroot tier: %(message)s")


def _run_up(args: argparse.Namespace) -> int:
    l1, l2 = _tiers()
    _quiet_logging()
    merged = os.path.abspath(args.merged)
    try:
        mode, why = _tier.up(
            l1,
            l2,
            merged,
            mode=args.mode,
            work=args.work,
            max_size=args.max_size,
            min_free=args.min_free,
        )
    except OSError as exc:
        sys.stderr.write(f"cacheroot tier up: {exc}\n")
        return 1
    detail = f" ({why})" if why else ""
    sys.stdout.write(f"{mode}: {merged} shows {l2} under {l1}{detail}\n")
    return 0


def _run_sync(args: argparse.Namespace) -> int:
    l1, l2 = _tiers()
    _quiet_logging()
    if args.watch is None:
        report = _tier.sync(l1, l2, settle=args.settle)
        sys.stdout.write(f"{report}\n")
        return 1 if report.failed else 0
    stop = threading.Event()

    def stopping(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    passes = _tier.watch(l1, l2, args.watch, stop, settle=args.settle)
    sys.stdout.write(f"{counted(passes, 'sync pass', 'sync passes')}\n")
    return 0


def _run_down(args: argparse.Namespace) -> int:
    try:
        what = _tier.down(os.path.abspath(args.merged))
    except OSError as exc:
        sys.stderr.write(f"cacheroot tier down: {exc}\n")
        return 1
    sys.stdout.write(f"{what}\n")
    return 0


def _run_evict(args: argparse.Namespace) -> int:
    from ._budget import apply, plan  # noqa: PLC0415 - only eviction needs it

    l1, l2 = _tiers()
    status = 0
    for label, root, budget in (
        ("L1", l1, {"max_size": args.l1_max_size, "min_free": args.l1_min_free}),
        ("L2", l2, {"max_size": args.l2_max_size, "older_than": args.l2_older_than}),
    ):
        if all(v is None for v in budget.values()):
            continue
        victims = plan(root, **budget)
        size = sum(v.size for v in victims)
        if args.dry_run:
            sys.stdout.write(f"{label}: would remove {len(victims)} ({format_size(size)})\n")
            for v in victims:
                sys.stdout.write(f"  {v.path} ({format_size(v.size)}): {v.reason}\n")
            continue
        done = apply(victims)
        sys.stdout.write(
            f"{label}: removed {done.removed_count} ({format_size(done.removed_bytes)}); "
            f"{len(done.skipped)} in use, {len(done.refused)} refused\n"
        )
        status = status or (1 if done.refused else 0)
    return status
