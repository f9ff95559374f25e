"""``cacheroot tier``: join a host's cache (``CACHEROOT``, L1) to the fleet's (``CACHEROOT_SHARED``,
L2) around a run: ``up`` before, ``sync`` during and after, ``down`` and ``evict`` at the end."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED, CACHEROOT_SHARED_MODE, resolve, shared_root
from cacheroot.envs._shared_tier import (
    OFF,
    RO,
    RW,
    overlap_problem,
    read_only_mount,
    shared_mode,
    shared_url,
)
from cacheroot.envs.units import format_size

from .._cli import age_arg, seconds_arg, size_arg
from .._progress import counted
from .._redact import printable
from .._shared import read_only_note, read_problem, root_problem
from . import bucket as _bucket
from . import layers as _tier
from . import view as _view

if TYPE_CHECKING:
    import argparse
    from types import FrameType

EPILOG = f"""\
L1 is {CACHEROOT} (a fast local disk), L2 is {CACHEROOT_SHARED} (a volume every host mounts).
A CI job runs `tier up --merged DIR`, mounts DIR into its container as the cache root, runs
`tier sync --watch 300` beside the tests, then `tier sync`, `tier down --merged DIR` and, now
and then, `tier evict`.

{CACHEROOT_SHARED} must name an existing directory (the mounted volume): cacheroot never creates
it, so that an unmounted volume or a typo cannot fill the local disk. It may name a bucket
instead (s3://BUCKET/PREFIX, configured by AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...): `up`
seeds L1 with the bucket's entries, `sync` writes L1's entries through, `evict` applies the
--l2-* budget to the bucket.

{CACHEROOT_SHARED_MODE}=ro (a job that runs untrusted code, a volume mounted read-only) reads
L2 and never writes it: `up` seeds or overlays from it, `sync` and evicting L2 do nothing.
{CACHEROOT_SHARED_MODE}=off ignores L2: `up` links DIR to L1 alone.

exit status:
  0  done
  1  something could not be done (the message says what): {CACHEROOT_SHARED} does not exist,
     is not a directory or is not writable; a sync counts files it could not copy
  2  usage: no shared tier configured, one that is, contains or lies inside {CACHEROOT}, evict
     without a criterion, or an invalid value (of {CACHEROOT_SHARED_MODE} too)
"""

#: The options of ``tier evict`` that say what to remove (one at least), with an example each.
EVICT_CRITERIA = (
    ("--l1-max-size SIZE", "800G"),
    ("--l1-min-free SIZE", "100G"),
    ("--l2-max-size SIZE", "2T"),
    ("--l2-older-than AGE", "14d"),
)


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
        f"{_view.WORK_SUFFIX} beside L1)",
    )
    _budget_flags(up, "seeding stops before")
    up.set_defaults(func=_run_up)

    sy = verbs.add_parser("sync", help="copy L1's complete new files to L2 (never replacing)")
    sy.add_argument(
        "--watch",
        metavar="SECONDS",
        type=seconds_arg,
        default=None,
        help="repeat every SECONDS seconds until SIGTERM or SIGINT (a watchdog beside the run)",
    )
    sy.add_argument(
        "--settle",
        metavar="SECONDS",
        type=seconds_arg,
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
        type=size_arg,
        help="L1 total at most SIZE (bytes, or 500M, 800G, ...)",
    )
    ev.add_argument(
        "--l1-min-free",
        metavar="SIZE",
        type=size_arg,
        help="keep at least SIZE free on L1's file system (bytes, or 100G, ...)",
    )
    ev.add_argument(
        "--l2-max-size",
        metavar="SIZE",
        type=size_arg,
        help="L2 total at most SIZE (bytes, or 2T, ...)",
    )
    ev.add_argument(
        "--l2-older-than",
        metavar="AGE",
        type=age_arg,
        help="remove L2 entries unused for longer than AGE, by the newer of access and "
        "modification time: a file just written counts as used (seconds, or 12h, 14d, 2w)",
    )
    ev.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    ev.set_defaults(func=_run_evict)


def _budget_flags(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--max-size",
        metavar="SIZE",
        type=size_arg,
        default=None,
        help=f"{what} L1 holds SIZE in all (bytes, or 500M, 100G, ...)",
    )
    p.add_argument(
        "--min-free",
        metavar="SIZE",
        type=size_arg,
        default=None,
        help=f"{what} L1's file system has less than SIZE free (bytes, or 100G, ...)",
    )


def _tiers(verb: str, *, shared: bool = True) -> tuple[str, str, str]:
    """L1, L2 and the trust tier this process uses them with (``rw``, ``ro``, ``off``) from the
    environment, or exit: 2 (usage) when either is unset or invalid or they overlap, 1 when
    ``shared`` (the command uses L2) and L2's root cannot be used. A volume mounted read-only
    is used as ``ro``, said on stderr. A bucket (``s3://...``) is L2 as its URL; it is opened
    by :mod:`.bucket`."""
    url = shared_url(os.environ)
    if url is not None:
        l1, _bucket_or_none, mode = _bucket.tiers(verb, url, shared=False)
        return l1, url, mode
    try:
        l2 = shared_root(os.environ)
        mode = shared_mode(os.environ)
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
    problem = overlap_problem(layout.root, l2)
    if problem:
        sys.stderr.write(f"cacheroot tier {verb}: {problem}\n")
        raise SystemExit(2)
    if shared and mode == RW and os.path.isdir(l2) and read_only_mount(l2):
        sys.stderr.write(f"cacheroot tier {verb}: {read_only_note(l2)}\n")
        mode = RO
    problem = (
        "" if not shared or mode == OFF else read_problem(l2) if mode == RO else root_problem(l2)
    )
    if problem:
        sys.stderr.write(f"cacheroot tier {verb}: {problem}\n")
        raise SystemExit(1)
    return layout.root, l2, mode


def _not_written(mode: str) -> str:
    """Why this process leaves L2 alone under the trust tier ``mode``."""
    if mode == OFF:
        return f"{CACHEROOT_SHARED_MODE}=off: the shared tier is ignored"
    return f"the shared tier is read-only here ({CACHEROOT_SHARED_MODE}=ro or a read-only mount)"


class _Printable(logging.Formatter):
    """Log lines with control characters escaped (:func:`printable`): the names a sync or an
    eviction reports are the ones jobs gave files on the volume, and a line feed in one would
    forge a line of this command's output."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def _quiet_logging() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_Printable("cacheroot tier: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def _run_up(args: argparse.Namespace) -> int:
    url = shared_url(os.environ)
    if url is not None:
        return _bucket.run_up(args, url)
    l1, l2, trust = _tiers("up")
    _quiet_logging()
    merged = os.path.abspath(args.merged)
    try:
        mode, why = _view.up(
            l1,
            l2,
            merged,
            mode=args.mode,
            work=args.work,
            max_size=args.max_size,
            min_free=args.min_free,
            shared=trust != OFF,
        )
    except OSError as exc:
        sys.stderr.write(f"cacheroot tier up: {exc}\n")
        return 1
    if trust == OFF:
        sys.stdout.write(f"{mode}: {merged} shows {l1} alone ({_not_written(OFF)})\n")
        return 0
    detail = f" ({why})" if why else ""
    sys.stdout.write(f"{mode}: {merged} shows {l2} under {l1}{detail}\n")
    return 0


def _run_sync(args: argparse.Namespace) -> int:
    url = shared_url(os.environ)
    if url is not None:
        return _bucket.run_sync(args, url)
    l1, l2, trust = _tiers("sync")
    if trust != RW:
        sys.stdout.write(f"nothing synced: {_not_written(trust)}\n")
        return 0
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
        what = _view.down(os.path.abspath(args.merged))
    except OSError as exc:
        sys.stderr.write(f"cacheroot tier down: {exc}\n")
        return 1
    sys.stdout.write(f"{what}\n")
    return 0


def _run_evict(args: argparse.Namespace) -> int:
    from .._upkeep.budget import apply, choose  # noqa: PLC0415 - only eviction needs it

    l1_budget = {"max_size": args.l1_max_size, "min_free": args.l1_min_free}
    l2_budget = {"max_size": args.l2_max_size, "older_than": args.l2_older_than}
    l2_wanted = any(v is not None for v in l2_budget.values())
    if not l2_wanted and all(v is None for v in l1_budget.values()):
        named = ", ".join(f"{flag} (e.g. {example})" for flag, example in EVICT_CRITERIA[:-1])
        flag, example = EVICT_CRITERIA[-1]
        sys.stderr.write(
            f"cacheroot tier evict: say what to remove: {named} or {flag} (e.g. {example}); "
            "nothing was removed\n"
        )
        return 2
    from .._upkeep.survey import survey  # noqa: PLC0415 - only eviction needs it

    url = shared_url(os.environ)
    # L1's budget alone needs no L2 (a host whose volume is gone still frees its own disk).
    l1, l2, trust = _tiers("evict", shared=l2_wanted and url is None)
    status = 0
    for label, root, budget in (("L1", l1, l1_budget), ("L2", l2, l2_budget)):
        if all(v is None for v in budget.values()):
            continue
        if label == "L2" and url is not None:
            status = _bucket.run_evict_l2(args, url) or status
            continue
        if label == "L2" and trust != RW:
            sys.stdout.write(f"L2: nothing removed: {_not_written(trust)}\n")
            continue
        found = survey(root)
        victims = choose(found, **budget)[0]
        for note in found.notes:
            sys.stdout.write(f"{label}: note: {note}\n")
        size = sum(v.size for v in victims)
        if args.dry_run:
            sys.stdout.write(f"{label}: would remove {len(victims)} ({format_size(size)})\n")
            for v in victims:
                sys.stdout.write(
                    f"  {printable(v.path)} ({format_size(v.size)}): {printable(v.reason)}\n"
                )
            continue
        done = apply(victims)
        sys.stdout.write(
            f"{label}: removed {done.removed_count} ({format_size(done.removed_bytes)}); "
            f"{len(done.skipped)} in use, {len(done.refused)} refused\n"
        )
        status = status or (1 if done.refused else 0)
    return status
