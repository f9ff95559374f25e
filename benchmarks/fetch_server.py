"""A static file server for the fetch benchmark: ``sendfile`` from the page cache, with Range.

Run as ``python benchmarks/fetch_server.py DIR``; it prints its port on the first line of
standard output and serves until killed. Python's ``http.server`` copies through 64 KiB
buffers in Python; this one hands the file to the kernel, so the client is what is measured.
"""

from __future__ import annotations

import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """GET a file below the served directory, whole or from a byte offset."""

    protocol_version = "HTTP/1.1"
    root = "."

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Quiet."""

    def do_GET(self) -> None:
        path = os.path.join(self.root, os.path.basename(self.path.split("?", 1)[0]))
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            self.send_error(404)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start = int(rng[6:].split("-", 1)[0] or 0)
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("Content-Length", str(size - start))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            self.wfile.flush()
            offset, left = start, size - start
            while left > 0:
                sent = os.sendfile(self.connection.fileno(), f.fileno(), offset, left)
                if sent == 0:
                    break
                offset += sent
                left -= sent


def main() -> None:
    """Serve ``sys.argv[1]`` on a free port of 127.0.0.1."""
    Handler.root = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
