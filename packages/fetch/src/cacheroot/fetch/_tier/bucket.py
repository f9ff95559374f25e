"""``cacheroot tier`` when the shared tier is a bucket (``CACHEROOT_SHARED=s3://...``).

The verbs keep their meaning and exit statuses (:mod:`.cli`): ``up`` seeds L1 from the bucket
(no overlay of an object store exists) and links the merged path to L1, ``sync`` writes
through what L1 has and the bucket lacks, ``down`` removes the link, ``evict`` applies L2's
budget to the bucket. What a bucket holds is cacheroot's own entries only
(:mod:`.._bucket.upkeep`); the caches the libraries write stay on each host.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_SHARED_MODE, resolve
from cacheroot.envs._shared_tier import OFF, RW, shared_mode
from cacheroot.envs.units import format_size

from .._progress import counted
from .._redact import printable
from . import view as _view

if TYPE_CHECKING:
    import argparse

    from .._bucket.tier import Bucket

__all__ = ["run_evict_l2", "run_sync", "run_up"]


def _not_written(mode: str) -> str:
    if mode == OFF:
        return f"{CACHEROOT_SHARED_MODE}=off: the shared tier is ignored"
    return f"the bucket is read-only here ({CACHEROOT_SHARED_MODE}=ro)"


def tiers(verb: str, url: str, *, shared: bool = True) -> tuple[str, Bucket | None, str]:
    """L1, the bucket and the trust tier, or exit: 2 for an invalid mode or no root, 1 when
    the bucket is needed (``shared``) and cannot be opened or does not answer."""
    from .._bucket.tier import open_bucket  # noqa: PLC0415 - only a bucket tier loads it

    try:
        mode = shared_mode(os.environ)
    except ValueError as exc:
        sys.stderr.write(f"cacheroot tier: {exc}\n")
        raise SystemExit(2) from None
    layout = resolve(os.environ)
    if layout.root is None:
        sys.stderr.write(f"cacheroot tier: {layout.root_reason}\n")
        raise SystemExit(2)
    if not shared or mode == OFF:
        return layout.root, None, mode
    bucket, problem = open_bucket(url, mode, os.environ)
    if bucket is None:
        sys.stderr.write(f"cacheroot tier {verb}: {problem}\n")
        raise SystemExit(1)
    if not bucket.contact():  # the cause is said on stderr
        raise SystemExit(1)
    return layout.root, bucket, mode


def run_up(args: argparse.Namespace, url: str) -> int:
    """``tier up`` on a bucket: link the merged path to L1, then seed L1 from the bucket."""
    from .._bucket.upkeep import seed  # noqa: PLC0415 - only a bucket tier loads it

    l1, bucket, trust = tiers("up", url)
    if args.mode == "overlay":
        sys.stderr.write(
            f"cacheroot tier up: {url} is a bucket: no overlay can show it; use --mode seed "
            "(or auto)\n"
        )
        return 1
    merged = os.path.abspath(args.merged)
    try:
        _view.up(l1, l1, merged, shared=False)
    except OSError as exc:
        sys.stderr.write(f"cacheroot tier up: {exc}\n")
        return 1
    if bucket is None:
        sys.stdout.write(f"link: {merged} shows {l1} alone ({_not_written(trust)})\n")
        return 0
    report = seed(bucket, l1, max_size=args.max_size, min_free=args.min_free)
    sys.stdout.write(f"seed: {merged} shows {l1}, seeded from {url} ({report})\n")
    for failure in report.failed:
        sys.stderr.write(f"cacheroot tier up: not seeded: {printable(failure)}\n")
    return 1 if report.failed else 0


def run_sync(args: argparse.Namespace, url: str) -> int:
    """``tier sync`` on a bucket: write L1's entries through (see :mod:`.._bucket.upkeep`)."""
    from .._bucket.upkeep import sync  # noqa: PLC0415 - only a bucket tier loads it

    l1, bucket, trust = tiers("sync", url, shared=shared_mode_is_rw())
    if bucket is None or trust != RW:
        sys.stdout.write(f"nothing synced: {_not_written(trust)}\n")
        return 0
    if args.watch is None:
        report = sync(bucket, l1)
        sys.stdout.write(f"{report}\n")
        for failure in report.failed:
            sys.stderr.write(f"cacheroot tier sync: not synced: {printable(failure)}\n")
        return 1 if report.failed else 0
    import signal  # noqa: PLC0415 - a watch only

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    signal.signal(signal.SIGINT, lambda _s, _f: stop.set())
    passes = 0
    while True:
        sync(bucket, l1)
        passes += 1
        if stop.wait(args.watch):
            break
    sys.stdout.write(f"{counted(passes, 'sync pass', 'sync passes')}\n")
    return 0


def shared_mode_is_rw() -> bool:
    """Whether the environment's trust tier is ``rw`` (an invalid one is said by :func:`tiers`)."""
    try:
        return shared_mode(os.environ) == RW
    except ValueError:
        return True


def run_evict_l2(args: argparse.Namespace, url: str) -> int:
    """L2's part of ``tier evict`` on a bucket."""
    from .._bucket.upkeep import evict  # noqa: PLC0415 - only a bucket tier loads it

    _l1, bucket, trust = tiers("evict", url, shared=shared_mode_is_rw())
    if bucket is None or trust != RW:
        sys.stdout.write(f"L2: nothing removed: {_not_written(trust)}\n")
        return 0
    done = evict(
        bucket, max_size=args.l2_max_size, older_than=args.l2_older_than, dry_run=args.dry_run
    )
    verb = "would remove" if args.dry_run else "removed"
    answers = f", {counted(len(done.answers), 'hub answer', 'hub answers')}" if done.answers else ""
    sys.stdout.write(
        f"L2: {verb} {counted(len(done.records), 'entry', 'entries')} "
        f"({format_size(done.size)} in {counted(len(done.blobs), 'blob', 'blobs')}){answers} "
        f"and {len(done.leftovers)} abandoned leases or probes from {url}\n"
    )
    if args.dry_run:
        for name in [*done.records, *(name for name, _size in done.answers)]:
            sys.stdout.write(f"  {printable(name)}\n")
    return 0
