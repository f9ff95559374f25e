"""A static file server for the fetch benchmark: ``sendfile`` from the page cache, with Range.

Run as ``python benchmarks/fetch_server.py DIR``; it prints its port on the first line of
standard output and serves until killed. Python's ``http.server`` copies through 64 KiB
buffers in Python; this one hands the file to the kernel (the origin toolkit's
``files`` handler, ``tests/origin``), so the client is what is measured.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.origin import Server, files


def main() -> None:
    """Serve ``sys.argv[1]`` on a free port of 127.0.0.1."""
    with Server(files(sys.argv[1]), methods=("GET",)) as server:
        print(server.port, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
