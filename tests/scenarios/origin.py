"""The scenario suite's origin: a real HTTP server on 127.0.0.1 that counts what it serves.

It stands in for the hosts upstream's tests download from (GitHub raw files, S3 buckets, the
Prithvi demo repository), serving :func:`.assets.catalog`. Every request is counted, by method
and path, and ``GET /__stats`` returns the counts as JSON, so a harness can prove that a warm run
asked for nothing.

Run as ``python -m scenarios.origin`` (from the ``tests`` directory): it binds, prints its URL as
one line and serves until the process named by ``--owner`` exits. ``--detach`` forks a daemon
that outlives the command, for :func:`ensure_origin` (the once-per-run origin that every xdist
worker shares).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.envs import CACHEROOT_SCENARIO_ORIGIN, CACHEROOT_SCENARIO_ROOT

from .assets import catalog

if TYPE_CHECKING:
    from tests.origin import Exchange, Server, static
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, static

#: A fixed root for the scenario suite (a CI volume, or the harness's cold/warm directory).
SCENARIO_ROOT: str = CACHEROOT_SCENARIO_ROOT
#: An origin URL to use instead of starting one (the harness reads its request counts).
SCENARIO_ORIGIN: str = CACHEROOT_SCENARIO_ORIGIN

#: The ``tests`` directory: ``python -m scenarios.origin`` runs from there.
TESTS_DIR = Path(__file__).resolve().parent.parent
#: The fixed ``Last-Modified`` of every asset (the bytes never change).
LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT"
#: Ports derived from a cache root are picked in this range, below Linux's ephemeral ports.
PORT_RANGE = (20000, 32000)


def port_for(root: str) -> int:
    """A port derived from a cache root, so one volume keeps one origin URL across runs.

    Entries are keyed by URL, and the URL holds the port: a warm volume is only warm for the same
    URLs, as it is for real hosts.
    """
    digest = hashlib.sha256(os.path.realpath(root).encode()).digest()
    low, high = PORT_RANGE
    return low + int.from_bytes(digest[:4], "big") % (high - low)


class Origin(Server):
    """The server (the toolkit's, ``tests/origin``): serves the catalog, counts requests.

    :meth:`stats` counts ``"METHOD /path"`` for everything but ``/__stats``.
    """

    def __init__(self, port: int = 0) -> None:
        try:
            super().__init__(self._asset, port=port)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            super().__init__(self._asset)  # taken: a cold volume, not an error
        self.assets = catalog()
        self.route("/__stats", self._stats)

    def stats(self) -> dict[str, Any]:
        """``{"total": N, "requests": {"GET /path": n, ...}}``."""
        counts = Counter(f"{r.method} {r.path}" for r in self.requests() if r.path != "/__stats")
        return {"total": sum(counts.values()), "requests": dict(counts)}

    def _stats(self, ex: Exchange) -> None:
        ex.respond(200, json.dumps(self.stats()).encode())

    def _asset(self, ex: Exchange) -> None:
        asset = self.assets.get(ex.info.path)
        if asset is None:
            ex.respond(404, b"not found\n")
            return
        static(
            asset.data,
            etag=f'"{asset.sha256}"',
            last_modified=LAST_MODIFIED,
            content_type=asset.content_type,
            headers={"Cache-Control": "public, max-age=3600"},
        )(ex)


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` has exited (a pidfd where the kernel has them)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        # No pidfd: poll, the only portable way to watch a process that is not our child.
        while not threading.Event().wait(0.5) and _alive(pid):
            pass
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _daemonise() -> bool:
    """Fork; True in the daemon (new session, stdio on /dev/null), False in the parent."""
    if os.fork() != 0:
        return False
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    return True


def main(argv: list[str] | None = None) -> int:
    """Serve until ``--owner`` exits; the URL is the first line on stdout."""
    parser = argparse.ArgumentParser(prog="python -m scenarios.origin", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="preferred port (0: any free one)")
    parser.add_argument("--owner", type=int, default=os.getppid(), help="serve until it exits")
    parser.add_argument("--detach", action="store_true", help="fork a daemon, print its URL")
    args = parser.parse_args(argv)
    server = Origin(args.port)
    if args.detach and not _daemonise():
        server.close()
        print(server.base, flush=True)  # noqa: T201 - the URL is this command's output
        return 0
    if not args.detach:
        print(server.base, flush=True)  # noqa: T201
    with server:
        wait_for_exit(args.owner)
    return 0


def ensure_origin(shared: Path, *, owner: int, port: int = 0) -> str:
    """The URL of this run's origin, starting it the first time any worker asks.

    The pytest-xdist recipe for once-per-session work: a file lock in a directory that every
    worker of the run shares, and a file that records the result. The origin is a daemon that
    serves until ``owner`` (the xdist controller, or the single pytest process) exits, so no
    worker has to outlive the others to keep it up.
    """
    from filelock import FileLock

    record = shared / "origin.url"
    with FileLock(str(shared / "origin.lock")):
        if record.exists():
            return record.read_text(encoding="utf-8").strip()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "scenarios.origin",
                "--detach",
                "--owner",
                str(owner),
                "--port",
                str(port),
            ],
            cwd=TESTS_DIR,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(
                f"the scenario origin did not start (exit {out.returncode}): expected its URL "
                f"on stdout, found {out.stdout!r}; stderr: {out.stderr.strip()}"
            )
        url = out.stdout.strip().splitlines()[-1]
        tmp = record.with_suffix(".tmp")
        tmp.write_text(url + "\n", encoding="utf-8")
        tmp.replace(record)
        return url


def stats(url: str) -> dict[str, Any]:
    """The origin's request counts (``GET /__stats``), read over real HTTP."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/__stats", timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
