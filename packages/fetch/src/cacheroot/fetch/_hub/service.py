"""A hub cache as a child process: started for a pytest session (or a test), stopped after.

The hub runs in a process of its own, so the tests it serves never share an interpreter (or a
GIL) with it, and its upstream connections are not subject to the session's network guard.
It prints one line when it listens; :meth:`HubProcess.start` reads the URL from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["HubProcess", "HubStartError", "store_only"]

#: How long a hub may take to listen.
START_TIMEOUT = 30.0
#: How long a stopping hub may take before it is killed.
STOP_TIMEOUT = 10.0


def store_only(url: str, *, on: bool = True) -> None:
    """Switch the hub cache at ``url`` to store-only (``on``) or back; :class:`OSError` if it
    does not answer."""
    req = urllib.request.Request(  # noqa: S310 - a hub cache's own control path
        url + "/.cacheroot/hub/offline", data=b"1" if on else b"0", method="POST"
    )
    with urllib.request.urlopen(req, timeout=10):  # noqa: S310
        pass


class HubStartError(RuntimeError):
    """The hub cache did not start; the message carries what it printed."""


class HubProcess:
    """A running ``cacheroot hub serve`` child and its URL."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    @classmethod
    def start(
        cls,
        *,
        upstream: str,
        store: str,
        modelscope: str | None = None,
        offline: bool = False,
        options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> HubProcess:
        """Start a hub on a free loopback port; raise :class:`HubStartError` if it fails."""
        argv = [sys.executable, "-m", "cacheroot.fetch._hub", "serve", "--listen", "127.0.0.1:0"]
        argv += ["--upstream", upstream, "--store", store, *options]
        if modelscope is not None:
            argv += ["--modelscope-upstream", modelscope]
        if offline:
            argv.append("--offline")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ if env is None else env),
        )
        if proc.stdout is None:  # pragma: no cover - stdout=PIPE always gives one
            raise HubStartError("the hub cache's output could not be read")
        import selectors  # noqa: PLC0415

        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(START_TIMEOUT)
        line = proc.stdout.readline() if ready else ""
        marker = "serving "
        if marker not in line:
            proc.kill()
            _out, err = proc.communicate()
            raise HubStartError(
                f"the hub cache did not start (exit status {proc.returncode}): "
                f"{(line + err).strip() or 'it printed nothing'}"
            )
        url = line.split(marker, 1)[1].split()[0]
        return cls(proc, url)

    def stats(self) -> dict[str, Any]:
        """The hub's counters (``GET /.cacheroot/hub``)."""
        with urllib.request.urlopen(self.url + "/.cacheroot/hub", timeout=10) as resp:  # noqa: S310 - our own loopback URL
            data: dict[str, Any] = json.load(resp)
        return data

    def set_offline(self, offline: bool) -> None:  # noqa: FBT001 - one switch
        """Switch store-only on or off."""
        store_only(self.url, on=offline)

    def stop(self) -> str:
        """Stop the hub (SIGTERM, then SIGKILL); return what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _out, err = self.proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, err = self.proc.communicate()
        return err or ""
