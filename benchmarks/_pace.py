"""A TCP relay on 127.0.0.1 that sends each connection's answers at a bounded rate.

A server on the loopback answers as fast as the CPUs copy bytes, which is not what a job sees
from an object store across a network: there, one stream arrives at some hundreds of MiB/s and
the CPUs are free meanwhile. Put in front of a server, the relay models that link for every arm
alike: what a client sends goes through untouched, what the server answers reaches the client
at ``rate`` bytes a second at most, per connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

__all__ = ["Relay"]

#: Bytes read from the server per step (the pacing's grain).
STEP = 256 << 10


class Relay:
    """Relay connections to ``upstream`` (``host``, ``port``), answers paced at ``rate`` bytes a
    second; :attr:`url` is its ``http://`` address. Close it with :meth:`close`."""

    def __init__(self, upstream: tuple[str, int], rate: float) -> None:
        self.upstream = upstream
        self.rate = rate
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for args in ((client, server, None), (server, client, self.rate)):
                threading.Thread(target=self._pipe, args=args, daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, rate: float | None) -> None:
        due = 0.0  # when the link is free again: an idle connection saves up no burst
        try:
            while data := src.recv(STEP):
                if rate is not None:
                    now = time.perf_counter()
                    due = max(due, now) + len(data) / rate
                    if due > now:
                        time.sleep(due - now)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop accepting (connections already relayed end with their peers)."""
        self._closed = True
        self._listener.close()
