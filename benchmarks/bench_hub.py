"""Benchmark of the hub cache (``cacheroot hub``) against asking the hub directly.

Not a test: it prints figures for the docs. Run from the repository root::

    .venv/bin/python benchmarks/bench_hub.py             # 256 MiB file, 7 rounds, fault table
    .venv/bin/python benchmarks/bench_hub.py --quick     # 16 MiB, 5 rounds, no fault table
    .venv/bin/python benchmarks/bench_hub.py --speed     # 1 GiB file: section 0 alone
    .venv/bin/python benchmarks/bench_hub.py --speed --size 256   # the same, quicker
    .venv/bin/python benchmarks/bench_hub.py --speed --rate 1000  # an origin at 1000 MiB/s

The upstream is the project's local test hub (``tests/hub/hubserver.py``: a threaded Python
server on 127.0.0.1, the file sent from memory), so "direct" is a fast, local hub: the real Hub
is tens of milliseconds away, which the cache saves on every hit. Arms run in interleaved
rounds, the order rotated each round (``benchmarks/_rounds.py``); per arm the median and
min-max are printed, with the Python, nproc and the load before and after.

0. (``--speed``, alone.) Near disk speed, against a sendfile origin (``tests/origin``'s
   ``files``: the kernel copies the file from the page cache, as a CDN on loopback would) that
   answers the Hub's ``HEAD`` for one LFS file and sends its bytes. The file and the hub's
   store are in a temporary directory on disk (the script prints its file system), never a
   tmpfs: the hub's writes and its fsync are real. Each pull is one ``GET`` read to nowhere in
   1 MiB ``readinto`` calls (``http.client``), timed to its last byte; ratios are taken round
   by round. (a) A cold pull through the hub (the stored file removed before each; its ``HEAD``
   answer kept) against the origin directly; after it, untimed, the script waits until the
   hub has published the file, so its fsync never overlaps the next arm. With ``--rate``, the
   origin sends the file's bytes no faster than that (``sendfile`` in 4 MiB slices, paced): a
   link of that speed, the same for both arms. (b) The first serve
   after a restart of a file the hub verified itself (the hub restarted before each, untimed),
   and a later serve of it, against the origin. (c) ``hf_hub_download`` into an empty cache
   directory, through the hub (file stored), through the hub with its stored file removed
   first (a cold pull-through as a user meets it: the client writes the file in both arms),
   and directly from the origin. The hub's peak RSS
   (``VmHWM``, the largest over its processes) is printed last.
1. Metadata latency, per call, over a kept-alive connection (``requests.Session``): ``GET
   /api/models/REPO/revision/main`` and ``HEAD /REPO/resolve/main/config.json``, from the hub
   directly and through a warm hub cache.
2. File throughput: ``GET`` of the LFS file, streamed to nowhere in 1 MiB reads, from the hub
   directly, from a static origin that sends the same file with ``sendfile`` (the fairest
   comparator: a CDN's speed on loopback), and through a hub cache that has it (``sendfile``
   from the store).
3. Upstream requests when ``--procs`` processes run ``snapshot_download`` of one model at once
   through one cold hub cache, against the same processes asking the hub directly: the most
   requests any one URL received, and the total.
4. (Without ``--quick``; alone with ``--only-faults``.) The fault table: the 30-test suite of
   ``tests/hub/suite.py`` with xdist on a warm volume, under each fault, with a plain warm cache
   and with ``--cacheroot-hub`` (``--ttl=0``, so every branch answer is asked of the failing
   hub again): failures and time; a run past ``--limit`` seconds is stopped and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import requests  # noqa: E402

from benchmarks._rounds import (  # noqa: E402
    MIN_ROUNDS,
    Conditions,
    Rounds,
    Summary,
    run_rounds,
    table,
)
from cacheroot.fetch._hub.service import HubProcess  # noqa: E402
from tests.hub.hubserver import HubRepo, HubServer  # noqa: E402
from tests.hub.suite import write_suite  # noqa: E402
from tests.origin import Exchange, Handler, Server, files  # noqa: E402

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable

REPO = "acme/bench-model"
CHILD = """
import sys
import huggingface_hub as hh
print("ready", flush=True)
sys.stdin.readline()
hh.snapshot_download(sys.argv[1])
"""


def _repo(size_mib: int) -> HubRepo:
    config = json.dumps({"model_type": "llama", "hidden_size": 16}).encode()
    return HubRepo(
        REPO,
        {
            "config.json": config,
            "tokenizer.json": b'{"version": "1.0"}',
            "model.safetensors": os.urandom(size_mib << 20),
        },
    )


def _per_call(session: requests.Session, method: str, url: str, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        resp = session.request(method, url, timeout=30)
        resp.raise_for_status()
        resp.content  # noqa: B018 - read the body, as a client does
    return (time.perf_counter() - start) / calls


def _throughput(session: requests.Session, url: str) -> float:
    start = time.perf_counter()
    total = 0
    with session.get(url, stream=True, timeout=60) as resp:
        resp.raise_for_status()
        for chunk in resp.iter_content(1 << 20):
            total += len(chunk)
    return total / (1 << 20) / (time.perf_counter() - start)


def metadata_and_files(
    hub: HubServer, proxy: HubProcess, *, rounds: int, calls: int, data: bytes, tmp: Path
) -> None:
    direct, cached = requests.Session(), requests.Session()
    api = f"/api/models/{REPO}/revision/main"
    head = f"/{REPO}/resolve/main/config.json"
    blob = f"/{REPO}/resolve/main/model.safetensors"
    for path in (api, blob):  # warm the store
        cached.get(proxy.url + path, timeout=120).raise_for_status()
    cached.head(proxy.url + head, timeout=30).raise_for_status()

    arms = {
        "hub directly": lambda: _per_call(direct, "GET", hub.url + api, calls),
        "hub cache (hit)": lambda: _per_call(cached, "GET", proxy.url + api, calls),
    }
    r = run_rounds(arms, rounds, warmup=1)
    print(f"\n1a. GET {api}: milliseconds per call ({calls} calls a round)")
    _print(r, arms, scale=1e3)
    arms = {
        "hub directly": lambda: _per_call(direct, "HEAD", hub.url + head, calls),
        "hub cache (hit)": lambda: _per_call(cached, "HEAD", proxy.url + head, calls),
    }
    r = run_rounds(arms, rounds, warmup=1)
    print(f"\n1b. HEAD {head}: milliseconds per call ({calls} calls a round)")
    _print(r, arms, scale=1e3)
    static = tmp / "static"
    static.mkdir()
    (static / "model.safetensors").write_bytes(data)
    with Server(files(str(static))) as origin:
        plain = requests.Session()
        arms = {
            "sendfile origin": lambda: _throughput(plain, origin.base + "/model.safetensors"),
            "hub directly": lambda: _throughput(direct, hub.url + blob),
            "hub cache (stored)": lambda: _throughput(cached, proxy.url + blob),
        }
        r = run_rounds(arms, rounds, warmup=1)
    print("\n2. GET of the LFS file: MiB/s")
    _print(r, arms, scale=1.0)
    for other in ("sendfile origin", "hub directly"):
        ratios = r.ratios("hub cache (stored)", other)
        print(f"   hub cache / {other}, per round: " + ", ".join(f"{x:.2f}" for x in ratios))


def _print(r: Rounds, arms: dict[str, Any], scale: float) -> None:
    for line in table({a: r.summary(a).scaled(scale) for a in arms}, unit="", fmt=".3f")[1:]:
        print("   " + line)


def crowd(hub: HubServer, procs: int, tmp: Path) -> None:
    def run(endpoint: str, home: Path) -> Counter[tuple[str, str]]:
        hub.reset()
        env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HOME=str(home))
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, REPO],
                env={**env, "HF_HOME": str(home / str(i))},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(procs)
        ]
        for child in children:
            assert child.stdout is not None
            child.stdout.readline()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            child.communicate(timeout=300)
        counts: Counter[tuple[str, str]] = hub.counts()
        return counts

    direct = run(hub.url, tmp / "direct")
    proxy = HubProcess.start(upstream=hub.url, store=str(tmp / "crowd-store"))
    try:
        through = run(proxy.url, tmp / "through")
    finally:
        proxy.stop()
    print(f"\n3. {procs} processes, snapshot_download of one model at once (cold):")
    for name, counts in (("hub directly", direct), ("through one hub cache", through)):
        most = max(counts.values()) if counts else 0
        print(f"   {name:<24} {sum(counts.values()):>4} requests, at most {most} for one URL")


def faults(hub: HubServer, repo: HubRepo, tmp: Path, limit: float) -> None:
    project = tmp / "suite"
    write_suite(project, repo=REPO, commit=repo.commit, files=sorted(repo.files), kind="llama")
    root = tmp / "fault-root"
    from cacheroot.envs import resolve

    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CACHEROOT"))}
    base.update(CACHEROOT=str(root), HF_ENDPOINT=hub.url, HF_HUB_DISABLE_PROGRESS_BARS="1")
    base.update(resolve(base).applied())
    scenarios: dict[str, Callable[[], object]] = {
        "healthy": lambda: None,
        "30% of API calls 429": lambda: hub.fail_rate(0.3, status=429, match="^/api/"),
        "30% of all requests 429": lambda: hub.fail_rate(0.3, status=429),
        "every API call 429": lambda: hub.fail_rate(1.0, status=429, match="^/api/"),
        "503 outage": lambda: hub.fail_rate(1.0, status=503),
        "hanging hub": hub.hang_all,
    }

    def run(*extra: str) -> tuple[str, int]:
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:randomly", *extra],
                cwd=project,
                env=base,
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"not done in {limit:.0f} s (stopped)", hub.total()
        took = time.monotonic() - start
        last = [
            line for line in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)
        ]
        failed = re.search(r"(\d+) failed", last[-1]) if last else None
        return f"{int(failed[1]) if failed else 0} failed, {took:.0f} s", hub.total()

    run()  # warm the volume and the hub cache's store
    run("--cacheroot-hub")
    print("\n4. The 30-test suite on a warm volume (xdist, 2 workers): failed tests, wall time,")
    print("   requests that reached the hub")
    print(f"   {'hub':<26}{'plain warm cache':<44}{'--cacheroot-hub (--ttl=0)':<44}")
    for name, inject in scenarios.items():
        cells = []
        for extra in ((), ("--cacheroot-hub", "--cacheroot-hub-option=--ttl=0")):
            hub.reset()
            inject()
            text, asked = run(*extra)
            cells.append(f"{text}, {asked} requests")
        print(f"   {name:<26}{cells[0]:<44}{cells[1]:<44}")
    hub.reset()
    text, asked = run("--cacheroot-hub")
    print(f"   healthy re-run, default TTL, through the hub cache: {text}, {asked} requests")
    hub.close()  # nothing listens on its port any more: connections are refused
    cells = [
        run(*extra)[0] for extra in ((), ("--cacheroot-hub", "--cacheroot-hub-option=--ttl=0"))
    ]
    print(f"   {'refused connection':<26}{cells[0]:<44}{cells[1]:<44}")


SPEED_FILE = "model.safetensors"
SPEED_PATH = f"/{REPO}/resolve/main/{SPEED_FILE}"


def _paced(static: Path, rate: float) -> Handler:
    """The file named by the path from ``static``, sent by ``sendfile`` in 4 MiB slices at
    ``rate`` bytes a second at most (a link of that speed); no ``Range``."""

    def answer(ex: Exchange) -> None:
        path = static / os.path.basename(ex.info.path)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            ex.send_response(200)
            ex.send_header("Content-Length", str(size))
            ex.send_header("Content-Type", "application/octet-stream")
            ex.end_headers()
            ex.wfile.flush()
            began, offset = time.perf_counter(), 0
            while offset < size:
                ahead = began + offset / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
                sent = os.sendfile(ex.connection.fileno(), f.fileno(), offset, 4 << 20)
                if sent == 0:
                    break
                offset += sent

    return answer


def _speed_origin(static: Path, sha: str, size: int, rate: float | None = None) -> Handler:
    """The Hub's ``HEAD`` of one LFS file (as ``tests/hub/hubserver.py`` answers it) and its
    bytes by ``sendfile`` (``files``; at ``rate`` bytes a second, when given); the client's "no
    agent known" registry; else 404."""
    send = files(str(static)) if rate is None else _paced(static, rate)
    commit = hashlib.sha1(sha.encode(), usedforsecurity=False).hexdigest()
    head = {"X-Repo-Commit": commit, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"'}
    head.update({"X-Linked-Size": str(size), "Content-Type": "application/octet-stream"})

    def answer(ex: Exchange) -> None:
        if ex.info.path == "/api/agent-harnesses":
            ex.respond(200, b'{"standardEnvVars": [], "harnesses": {}}')
        elif ex.info.path != SPEED_PATH:
            ex.respond(404, b"not found\n")
        elif ex.command == "HEAD":
            ex.respond(200, b"", head, length=size)
        else:
            send(ex)

    return answer


def _pull(url: str, size: int) -> float:
    """Seconds a ``GET`` of ``url`` takes to its last byte, read to nowhere in 1 MiB reads."""
    parts = urlsplit(url)
    start = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    try:
        conn.request("GET", parts.path)
        resp = conn.getresponse()
        view = memoryview(bytearray(1 << 20))
        total = 0
        while n := resp.readinto(view):
            total += n
    finally:
        conn.close()
    took = time.perf_counter() - start
    if resp.status != 200 or total != size:
        raise RuntimeError(f"{url}: status {resp.status}, {total} of {size} bytes")
    return took


def _peak_rss(proc: HubProcess) -> int:
    """The hub process's peak resident set (``VmHWM``), in KiB; 0 if it cannot be read."""
    try:
        with open(f"/proc/{proc.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fs_of(path: Path) -> str:
    """The file system type ``path`` is on (from ``/proc/mounts``: the longest mount prefix)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1]
            if str(path).startswith(point.rstrip("/") + "/") and len(point) > len(best):
                best, kind = point, fields[2]
    return f"{kind} (mounted at {best or '?'})"


def _write_file(path: Path, size_mib: int) -> str:
    """Write ``size_mib`` MiB of random bytes to ``path``; their sha256."""
    hasher = hashlib.sha256()
    with open(path, "wb") as out:
        for _ in range(size_mib):
            block = os.urandom(1 << 20)
            hasher.update(block)
            out.write(block)
    return hasher.hexdigest()


class _Speed:
    """Section 0's hub (restarted at will on one store), its origin and its arms."""

    def __init__(self, origin: Server, store: Path, blob: Path, size: int) -> None:
        self.origin, self.store, self.blob, self.size = origin, store, blob, size
        self.hub = HubProcess.start(upstream=origin.base, store=str(store))
        #: The largest peak RSS of the hub processes stopped so far (KiB).
        self.peak = 0

    def stop(self) -> None:
        self.peak = max(self.peak, _peak_rss(self.hub))
        self.hub.stop()

    def direct(self) -> float:
        return _pull(self.origin.base + SPEED_PATH, self.size)

    def cold(self) -> float:
        with contextlib.suppress(FileNotFoundError):
            self.blob.unlink()
        took = _pull(self.hub.url + SPEED_PATH, self.size)
        deadline = time.monotonic() + 120
        while not self.blob.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # published (synced): nothing left to overlap the next arm
        return took

    def first(self) -> float:
        self.stop()
        self.hub = HubProcess.start(upstream=self.origin.base, store=str(self.store))
        return _pull(self.hub.url + SPEED_PATH, self.size)

    def later(self) -> float:
        return _pull(self.hub.url + SPEED_PATH, self.size)

    def hf(self, endpoint: str, into: Path, *, cold: bool = False) -> float:
        import huggingface_hub as hh

        if cold:
            with contextlib.suppress(FileNotFoundError):
                self.blob.unlink()
        shutil.rmtree(into, ignore_errors=True)
        start = time.perf_counter()
        hh.hf_hub_download(REPO, SPEED_FILE, endpoint=endpoint, cache_dir=str(into))
        took = time.perf_counter() - start
        shutil.rmtree(into, ignore_errors=True)
        return took


def speed(size_mib: int, rounds: int, tmp: Path, rate: float | None = None) -> None:
    """Section 0 (see the module docstring)."""
    size = size_mib << 20
    static = tmp / "static"
    static.mkdir()
    sha = _write_file(static / SPEED_FILE, size_mib)
    print(f"file: {size_mib} MiB in {tmp}, on {_fs_of(tmp)}")
    if rate is not None:
        print(f"origin paced at {rate / (1 << 20):.0f} MiB/s ({rate * 8 / 1e9:.1f} Gbit/s)")
    with Server(_speed_origin(static, sha, size, rate), methods=("GET", "HEAD")) as origin:
        s = _Speed(origin, tmp / "store", tmp / "store" / "blobs" / sha, size)
        try:
            arms: dict[str, Callable[[], float]] = {
                "sendfile origin": s.direct,
                "hub, cold pull-through": s.cold,
            }
            r = run_rounds(arms, rounds, warmup=1)
            print("\n0a. Cold pull: seconds to the last byte")
            _print(r, arms, scale=1.0)
            _ratio(r, "hub, cold pull-through", "sendfile origin")
            arms = {
                "sendfile origin": s.direct,
                "hub, first serve after restart": s.first,
                "hub, later serve": s.later,
            }
            r = run_rounds(arms, rounds, warmup=1)
            print("\n0b. Stored file: seconds to the last byte")
            _print(r, arms, scale=1.0)
            _ratio(r, "hub, first serve after restart", "sendfile origin")
            _ratio(r, "hub, later serve", "sendfile origin")
            arms = {
                "hf_hub_download, origin": lambda: s.hf(origin.base, tmp / "hf-direct"),
                "hf_hub_download, hub": lambda: s.hf(s.hub.url, tmp / "hf-hub"),
                "hf_hub_download, cold hub": lambda: s.hf(s.hub.url, tmp / "hf-cold", cold=True),
            }
            r = run_rounds(arms, rounds, warmup=1)
            print("\n0c. hf_hub_download into an empty cache directory: seconds")
            _print(r, arms, scale=1.0)
            _ratio(r, "hf_hub_download, hub", "hf_hub_download, origin")
            _ratio(r, "hf_hub_download, cold hub", "hf_hub_download, origin")
        finally:
            s.stop()
    print(f"\n   hub peak RSS (VmHWM, largest of its processes): {s.peak / 1024:.0f} MiB")


def _ratio(r: Rounds, arm: str, base: str) -> None:
    s = Summary.of(r.ratios(arm, base))
    print(f"   {arm} / {base}: median {s.median:.2f}, min-max {s.low:.2f}-{s.high:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size", type=int, default=None, help="MiB of the LFS file (default 256; --speed: 1024)"
    )
    p.add_argument("--speed", action="store_true", help="section 0 alone (near disk speed)")
    p.add_argument("--dir", default=None, help="--speed: the directory its files go under")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="--speed: the origin sends at most this many MiB/s (a link of that speed)",
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only-faults", action="store_true", help="the fault table alone (section 4)")
    p.add_argument("--no-faults", action="store_true", help="sections 1 to 3 only")
    p.add_argument(
        "--limit", type=float, default=600.0, help="seconds a suite run may take (default 600)"
    )
    args = p.parse_args()
    if args.quick:
        args.size, args.rounds, args.calls = 16, MIN_ROUNDS, 50
    args.rounds = max(args.rounds, MIN_ROUNDS)
    conditions = Conditions.now()
    print(conditions.header())
    if args.speed:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp_text:
            rate = None if args.rate is None else args.rate * (1 << 20)
            speed(args.size or 1024, args.rounds, Path(tmp_text), rate)
        print(conditions.footer())
        return
    args.size = args.size or 256
    repo = _repo(args.size)
    with tempfile.TemporaryDirectory() as tmp_text, HubServer() as hub:
        tmp = Path(tmp_text)
        hub.add_hf(repo)
        if args.only_faults:
            faults(hub, repo, tmp, args.limit)
            print(conditions.footer())
            return
        proxy = HubProcess.start(upstream=hub.url, store=str(tmp / "store"))
        try:
            print(f"file: {args.size} MiB; upstream: the local test hub at {hub.url}")
            data = repo.files["model.safetensors"]
            metadata_and_files(hub, proxy, rounds=args.rounds, calls=args.calls, data=data, tmp=tmp)
        finally:
            proxy.stop()
        crowd(hub, args.procs, tmp)
        if not (args.quick or args.no_faults):
            faults(hub, repo, tmp, args.limit)
    print(conditions.footer())


if __name__ == "__main__":
    main()
