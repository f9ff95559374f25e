"""vLLM 0.33's own media cache and cacheroot.mediacache, side by side, on vLLM's real connector.

Not a test: it prints the figures of the docs' comparison. It needs vLLM and what importing
its connector needs (torch, a CPU build is enough: see ``tests/upstream``), so it runs in a
separate venv, with the workspace's sources on the path::

    PYTHONPATH=packages/envs/src:packages/fetch/src:packages/mediacache/src \\
        VLLM_VENV/bin/python benchmarks/bench_media_vs_vllm.py [--rounds 3] [--quick]

One origin on 127.0.0.1 (``tests/mediacache/origin.py``, in this process) serves real PNGs
made with Pillow and counts every GET. Two arms drive ``vllm.multimodal.media.connector.
MediaConnector.fetch_image``, one fresh connector per request as vLLM's server builds them:

- ``vllm``: vLLM's own cache (``VLLM_MEDIA_CACHE``), the plugin not registered;
- ``cacheroot``: ``cacheroot.mediacache.vllm_plugin.register()`` with ``CACHEROOT_MEDIA_CACHE``
  (vLLM's own cache is then off for the connector).

Both get the same bound (``VLLM_MEDIA_CACHE_MAX_SIZE_MB``, which both read) and TTL. Measured:

1. What is stored for responses a shared cache must not keep: a request with credentials
   (``http://user:pass@host/...``, sent as ``Authorization: Basic``), ``Cache-Control:
   no-store`` and ``private``. Two fetches each: origin GETs, and files left in the directory.
2. ``--threads`` concurrent requests for one uncached URL: origin GETs. The origin holds its
   answers until every request has arrived or one second has passed since the first, so the
   requests overlap for certain.
3. Eviction under concurrency: ``--threads`` threads fetch ``--images`` distinct images
   (about 64 KiB each, several times the 1 MiB bound in all) in random order, ``--fetches``
   each. A sampler lists the directory every 2 ms. Reported: origin GETs, the peak and final
   bytes on disk against the bound, requests that failed, and images whose bytes were not the
   origin's.

Each round runs both arms in a new directory, the order alternated between rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import io
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The test origins import their toolkit as pytest does, from the tests directory.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))

from cacheroot.envs import CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE, VLLM_MEDIA_CACHE_MAX_SIZE_MB
from cacheroot.mediacache import vllm_plugin
from tests.mediacache.origin import Origin

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

VLLM, OURS = "vllm", "cacheroot"
BOUND_MB = 1
_MIB = 1024 * 1024


def load_vllm() -> Any:
    """vLLM's connector module (looked up, so that type checks pass without vLLM)."""
    return importlib.import_module("vllm.multimodal.media.connector")


def png_of(side: int, seed: int) -> bytes:
    """A PNG of ``side`` x ``side`` pseudo-random pixels (incompressible: ~3 * side**2 bytes)."""
    image_module = importlib.import_module("PIL.Image")
    pixels = random.Random(seed).randbytes(3 * side * side)  # noqa: S311 - data, not a secret
    buf = io.BytesIO()
    image_module.frombytes("RGB", (side, side), pixels).save(buf, format="PNG")
    return buf.getvalue()


def disk_bytes(directory: str) -> int:
    """Bytes of every regular file under ``directory`` (what either bound is meant to hold)."""
    total = 0
    for here, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):  # removed since the listing
                total += os.lstat(os.path.join(here, name)).st_size
    return total


def entries(directory: str) -> list[str]:
    """Files not named ``.*``: the entries of either cache (and vLLM's temporary files)."""
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


class Arm:
    """One way of running vLLM's connector: its own cache, or ours through the plugin."""

    def __init__(self, name: str, root: Path, connector_class: type) -> None:
        self.name = name
        self.directory = str(root / name)
        self.connector_class = connector_class
        # vLLM's aiohttp session belongs to the event loop that made it: one per round.
        self.connection = importlib.import_module("vllm.connections").HTTPConnection()

    def __enter__(self) -> Arm:
        os.environ[VLLM_MEDIA_CACHE_MAX_SIZE_MB] = str(BOUND_MB)
        if self.name == VLLM:
            os.environ[VLLM_MEDIA_CACHE] = self.directory
        else:
            os.environ[CACHEROOT_MEDIA_CACHE] = self.directory
            vllm_plugin.register()
            if vllm_plugin.installed_cache() is None:
                raise SystemExit("the plugin did not install the cache: see the log above")
        return self

    def __exit__(self, *exc: object) -> None:
        vllm_plugin.unregister()
        for name in (VLLM_MEDIA_CACHE, CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE_MAX_SIZE_MB):
            os.environ.pop(name, None)

    def connector(self) -> Any:
        """A connector as vLLM's server builds one per request."""
        return self.connector_class(connection=self.connection)

    def fetch(self, url: str) -> Any:
        return self.connector().fetch_image(url)


def rules(arm: Arm, origin: Origin, body: bytes) -> dict[str, tuple[int, int]]:
    """Per case: (origin GETs for two fetches, files stored in the arm's directory)."""
    cases: dict[str, Callable[[str], str]] = {
        "Authorization": lambda path: origin.route(path, body).replace(
            "http://", "http://user:secret@"
        ),
        "no-store": lambda path: origin.route(path, body, headers={"Cache-Control": "no-store"}),
        "private": lambda path: origin.route(
            path, body, headers={"Cache-Control": "private, max-age=600"}
        ),
    }
    out = {}
    for case, make in cases.items():
        path = f"/{arm.name}/{case}.png"
        url = make(path)
        before = set(entries(arm.directory))
        for _ in range(2):
            arm.fetch(url)
        out[case] = (origin.gets[path], len(set(entries(arm.directory)) - before))
    return out


def concurrent_one_url(arm: Arm, origin: Origin, body: bytes, threads: int) -> int:
    """Origin GETs for ``threads`` overlapping requests of one uncached URL."""
    gate = threading.Event()
    path = f"/{arm.name}/busy.png"
    url = origin.route(path, body, gate=gate)
    start = threading.Barrier(threads + 1)

    def one() -> None:
        start.wait(30)
        arm.fetch(url)

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for w in workers:
        w.start()
    start.wait(30)
    deadline = None
    while not gate.is_set():
        if origin.gets[path] >= threads:
            gate.set()
        elif origin.gets[path] and deadline is None:
            deadline = time.monotonic() + 1.0
        elif deadline is not None and time.monotonic() > deadline:
            gate.set()
        time.sleep(0.002)
    for w in workers:
        w.join(60)
    return origin.gets[path]


class Sampler:
    """Lists a directory every 2 ms in a thread and keeps the peak of its bytes."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, disk_bytes(self.directory))
            time.sleep(0.002)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def eviction(
    arm: Arm, origin: Origin, bodies: list[bytes], *, threads: int, fetches: int, seed: int
) -> dict[str, Any]:
    """Many threads, many images, a small bound: GETs, bytes on disk, failures, wrong bytes."""
    urls = [origin.route(f"/{arm.name}/many/{i}.png", b) for i, b in enumerate(bodies)]
    gets_before = sum(origin.gets[f"/{arm.name}/many/{i}.png"] for i in range(len(bodies)))
    failures: Counter[str] = Counter()
    samples: dict[str, str] = {}
    wrong = 0
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(n: int) -> None:
        nonlocal wrong
        rng = random.Random(seed * 1000 + n)  # noqa: S311 - an order, not a secret
        start.wait(30)
        for _ in range(fetches):
            i = rng.randrange(len(urls))
            try:
                image = arm.fetch(urls[i])
            except Exception as exc:  # noqa: BLE001 - every failure is counted by its type
                with lock:
                    failures[type(exc).__name__] += 1
                    samples.setdefault(type(exc).__name__, str(exc)[:80])
                continue
            if getattr(image, "original_bytes", bodies[i]) != bodies[i]:
                with lock:
                    wrong += 1

    disabled = _Count("not writable")
    connector_log = logging.getLogger("vllm.multimodal.media.connector")
    connector_log.addHandler(disabled)
    try:
        with Sampler(arm.directory) as sampler:
            workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(300)
    finally:
        connector_log.removeHandler(disabled)
    gets = sum(origin.gets[f"/{arm.name}/many/{i}.png"] for i in range(len(bodies)))
    return {
        "requests": threads * fetches,
        "gets": gets - gets_before,
        "peak": sampler.peak,
        "final": disk_bytes(arm.directory),
        "failures": dict(failures),
        "samples": samples,
        "wrong": wrong,
        "empty": len([n for n in entries(arm.directory) if _size(arm.directory, n) == 0]),
        "own_cache_off": disabled.count,
    }


class _Count(logging.Handler):
    """Counts the log records whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.count += 1


def _size(directory: str, name: str) -> int:
    try:
        return os.lstat(os.path.join(directory, name)).st_size
    except OSError:
        return -1


def async_one_url(arm: Arm, origin: Origin, body: bytes, tasks: int) -> int:
    """Origin GETs for ``tasks`` concurrent ``fetch_image_async`` calls of one URL."""
    gate = threading.Event()
    path = f"/{arm.name}/busy-async.png"
    url = origin.route(path, body, gate=gate)

    def opener() -> None:
        origin.first_get.wait(30)
        deadline = time.monotonic() + 1.0
        while origin.gets[path] < tasks and time.monotonic() < deadline:
            time.sleep(0.002)
        gate.set()

    origin.first_get.clear()
    threading.Thread(target=opener, daemon=True).start()

    async def many() -> None:
        await asyncio.gather(*(arm.connector().fetch_image_async(url) for _ in range(tasks)))
        session = getattr(arm.connection, "_async_client", None)  # vLLM's, made on this loop
        if session is not None:
            await session.close()

    asyncio.run(many())
    return origin.gets[path]


def run_round(
    name: str, root: Path, cls: type, bodies: list[bytes], args: argparse.Namespace, *, seed: int
) -> dict[str, Any]:
    origin = Origin().start()
    try:
        with Arm(name, root, cls) as arm:
            small = png_of(32, seed)
            return {
                "rules": rules(arm, origin, small),
                "one_url": concurrent_one_url(arm, origin, small, args.threads),
                "one_url_async": async_one_url(arm, origin, small, args.tasks),
                "eviction": eviction(
                    arm, origin, bodies, threads=args.threads, fetches=args.fetches, seed=seed
                ),
            }
    finally:
        origin.close()


def rounds(args: argparse.Namespace) -> Iterator[tuple[int, str, dict[str, Any]]]:
    cls = load_vllm().MediaConnector
    bodies = [png_of(148, i) for i in range(args.images)]  # about 64 KiB each
    for r in range(args.rounds):
        order = (VLLM, OURS) if r % 2 == 0 else (OURS, VLLM)
        for name in order:
            with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
                yield r, name, run_round(name, Path(tmp), cls, bodies, args, seed=r)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=4, help="concurrent asyncio requests")
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--fetches", type=int, default=40, help="per thread, eviction part")
    parser.add_argument("--quick", action="store_true", help="1 round, 4 threads, 12 images")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.threads, args.images, args.fetches = 1, 4, 12, 10
    bound = BOUND_MB * _MIB
    print(
        f"bound {bound} bytes; {args.threads} threads; {args.images} images; "
        f"{args.fetches} fetches per thread; Python {sys.version.split()[0]}"
    )
    for r, name, res in rounds(args):
        ev = res["eviction"]
        rules_text = ", ".join(
            f"{case}: {gets} GETs/{files} stored" for case, (gets, files) in res["rules"].items()
        )
        print(
            f"round {r} {name:9s} | {rules_text} | one URL x{args.threads} threads: "
            f"{res['one_url']} GETs, x{args.tasks} tasks: {res['one_url_async']} GETs | "
            f"eviction: {ev['gets']} GETs for {ev['requests']} requests, peak {ev['peak']} B "
            f"({ev['peak'] / bound:.2f}x bound), final {ev['final']} B, failures "
            f"{ev['failures'] or 0}, wrong bytes {ev['wrong']}, empty entries left "
            f"{ev['empty']}, connectors whose own cache turned itself off {ev['own_cache_off']}",
            flush=True,
        )
        for kind, text in ev["samples"].items():
            print(f"    {kind}: {text}")


if __name__ == "__main__":
    main()
