"""Serve the docs' stand-ins for the internet, so a reader can run the tutorials' commands.

The tutorials fetch from "a local copy of example.org" on ``127.0.0.1:8000`` and the hub pages
download ``acme/tiny-model`` from a local test hub. The docs' own tests start both for each
console block (``consoleblocks.py``, ``hubblocks.py``); this script starts the same two, with
the same files, in one process a reader can leave running in another terminal::

    nox -s examples                       # or, with the test dependency group installed:
    python tests/docs/serve.py [--origin-port N] [--hub-port N]

It prints what each serves and the ``export`` lines that point cacheroot and the hub clients at
them, then serves until SIGINT (Ctrl-C) or SIGTERM and exits 0. A port already in use is a
one-line error naming the option that changes it, exit 2. The files are imported from the
modules the docs' tests use, never copied, so a digest or a commit a page shows holds here too.
"""

from __future__ import annotations

import argparse
import errno
import shlex
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from tests.docs import consoleblocks, hubblocks
    from tests.hub.hubserver import HubServer, _Handler
    from tests.origin import Server, static
else:
    # Run as a script, only tests/docs is on sys.path; pytest puts tests/ there too, and the
    # modules below import their neighbours by those names (imported as tests.docs.serve,
    # neither is there). Both go first, as pytest puts them.
    for _directory in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parent):
        if str(_directory) not in sys.path:
            sys.path.insert(0, str(_directory))
    import consoleblocks
    import hubblocks
    from hub.hubserver import HubServer, _Handler
    from origin import Server, static

#: The example origin's port: the one the docs' commands name (``127.0.0.1:8000``).
ORIGIN_PORT = int(consoleblocks.ORIGIN_ADDRESS.rpartition(":")[2])
#: The test hub's port: clear of the hub cache's default (8765), which a reader may run too.
HUB_PORT = 8780
#: The host the example origin stands in for: the docs' URLs name it, a mirror maps it here.
EXAMPLE_HOST = "https://example.org"
#: Exit status when a port cannot be listened on (as for other usage errors).
USAGE = 2


class PortError(Exception):
    """A port could not be listened on; the message says which, and the option that changes it."""


class _HubOnPort(HubServer):
    """The test hub on a port of the reader's choice (the tests' hub always takes a free one)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def start(self) -> HubServer:
        """Listen on :attr:`port` (0: any free one) and serve in a daemon thread."""
        self._server = Server(lambda ex: _Handler(self, ex).dispatch(), port=self.port).start()
        return self


def _taken(error: OSError, port: int, what: str, option: str) -> PortError:
    """The one-line error for a port ``what`` cannot listen on, naming the ``option`` to change."""
    if error.errno == errno.EADDRINUSE:
        why = "is in use: stop what listens there, or"
    else:
        why = f"cannot be listened on ({error.strerror}):"
    return PortError(
        f"serve.py: port {port} for the {what} {why} choose another with {option} PORT "
        "(0: any free port)"
    )


def start_origin(port: int) -> Server:
    """The example origin on ``port``: exactly the files the docs' console blocks fetch."""
    try:
        server = Server(port=port)
    except OSError as error:
        raise _taken(error, port, "example origin", "--origin-port") from error
    for path, body in consoleblocks.ORIGIN_FILES.items():
        server.route(path, static(body))
    return server.start()


def start_hub(port: int) -> HubServer:
    """The test hub on ``port``, serving the docs' repository on both hubs' APIs."""
    hub = _HubOnPort(port)
    hub.add_hf(hubblocks.REPO)
    hub.add_modelscope(hubblocks.REPO)
    try:
        return hub.start()
    except OSError as error:
        raise _taken(error, port, "test hub", "--hub-port") from error


def exports(origin: str, hub: str) -> dict[str, str]:
    """The variables a reader's shell needs: the mirror for example.org and the hubs' endpoint.

    The last two are what the docs' own runs set (``hubblocks.py``), so the output matches the
    pages': no progress bars, and no telemetry request that a hub cache would count.
    """
    return {
        "CACHEROOT_MIRRORS": f"{EXAMPLE_HOST}/={origin}/",
        "HF_ENDPOINT": hub,
        "MODELSCOPE_ENDPOINT": hub,
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def _shell(value: str) -> str:
    """``value`` as a shell word, written as the docs write it: a mapping (``A=B``) in quotes."""
    if "=" in value or shlex.quote(value) != value:
        return f'"{value}"'
    return value


def describe(origin: str, hub: str) -> list[str]:
    """The lines printed once both listen: what is served where, then the exports."""
    repo = hubblocks.REPO
    lines = [f"example origin: {origin} (a local copy of {EXAMPLE_HOST})"]
    lines += [
        f"  {EXAMPLE_HOST}{path} ({len(body)} bytes)"
        for path, body in consoleblocks.ORIGIN_FILES.items()
    ]
    lines.append(f"test hub: {hub} (the Hugging Face and ModelScope APIs)")
    lines.append(f"  {repo.repo_id} at {repo.commit}: {', '.join(sorted(repo.files))}")
    lines.append("in the shell that runs the docs' commands:")
    lines += [f"export {name}={_shell(value)}" for name, value in exports(origin, hub).items()]
    lines.append("serving until Ctrl-C (SIGINT) or SIGTERM")
    return lines


def _port(text: str) -> int:
    """A port number for argparse: 0 (any free port) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535; 0: any free port)")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve both until a signal; 0 when stopped by one, 2 when a port is taken."""
    parser = argparse.ArgumentParser(
        prog="serve.py",
        description="Serve the local copy of example.org and the test hub the docs' examples use.",
    )
    parser.add_argument(
        "--origin-port",
        type=_port,
        default=ORIGIN_PORT,
        metavar="PORT",
        help=f"the example origin's port (default {ORIGIN_PORT}, as the docs show; 0: any free)",
    )
    parser.add_argument(
        "--hub-port",
        type=_port,
        default=HUB_PORT,
        metavar="PORT",
        help=f"the test hub's port (default {HUB_PORT}; 0: any free)",
    )
    args = parser.parse_args(argv)
    stopped_by: list[str] = []

    def on_signal(number: int, _frame: FrameType | None) -> None:
        # Only a note: a lock taken here could be the one the interrupted main thread holds.
        stopped_by.append(signal.Signals(number).name)

    # Before anything is printed: a reader's Ctrl-C (or a supervisor's SIGTERM) arriving as the
    # lines appear still ends the process cleanly.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with ExitStack() as stack:
        try:
            origin = start_origin(args.origin_port)
            stack.callback(origin.close)
            hub = start_hub(args.hub_port)
            stack.callback(hub.close)
        except PortError as error:
            sys.stderr.write(f"{error}\n")
            return USAGE
        sys.stdout.write("".join(f"{line}\n" for line in describe(origin.base, hub.url)))
        sys.stdout.flush()
        while not stopped_by:
            time.sleep(0.1)
    sys.stdout.write(f"stopped ({stopped_by[0]})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
