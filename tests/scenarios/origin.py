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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cacheroot.envs import CACHEROOT_SCENARIO_ORIGIN, CACHEROOT_SCENARIO_ROOT

from .assets import Asset, catalog

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


class Origin(ThreadingHTTPServer):
    """The server: :attr:`requests` counts ``"METHOD /path"`` for everything but ``/__stats``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int = 0) -> None:
        try:
            super().__init__(("127.0.0.1", port), _Handler)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            super().__init__(("127.0.0.1", 0), _Handler)  # taken: a cold volume, not an error
        self.assets = catalog()
        self.requests: Counter[str] = Counter()
        self.count_lock = threading.Lock()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stats(self) -> dict[str, Any]:
        """``{"total": N, "requests": {"GET /path": n, ...}}``."""
        with self.count_lock:
            return {"total": sum(self.requests.values()), "requests": dict(self.requests)}


class _Handler(BaseHTTPRequestHandler):
    server: Origin
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it
        pass

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, *, body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/__stats":
            self._send(200, json.dumps(self.server.stats()).encode(), {}, body=body)
            return
        with self.server.count_lock:
            self.server.requests[f"{self.command} {path}"] += 1
        asset = self.server.assets.get(path)
        if asset is None:
            self._send(404, b"not found\n", {}, body=body)
            return
        self._asset(asset, body=body)

    def _asset(self, asset: Asset, *, body: bool) -> None:
        etag = f'"{asset.sha256}"'
        headers = {
            "Content-Type": asset.content_type,
            "ETag": etag,
            "Last-Modified": LAST_MODIFIED,
            "Cache-Control": "public, max-age=3600",
            "Accept-Ranges": "bytes",
        }
        if self.headers.get("If-None-Match") == etag:
            self._send(304, b"", headers, body=False)
            return
        data = asset.data
        status = 200
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and ranged[6:].endswith("-") and ranged[6:-1].isdigit():
            start = int(ranged[6:-1])
            if start < len(data):
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                data, status = data[start:], 206
        self._send(status, data, headers, body=body)

    def _send(self, status: int, data: bytes, headers: dict[str, str], *, body: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body and data:
            self.wfile.write(data)


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
        server.server_close()
        print(server.url, flush=True)  # noqa: T201 - the URL is this command's output
        return 0
    if not args.detach:
        print(server.url, flush=True)  # noqa: T201
    thread = threading.Thread(target=server.serve_forever, name="origin", daemon=True)
    thread.start()
    wait_for_exit(args.owner)
    server.shutdown()
    server.server_close()
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
