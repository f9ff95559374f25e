"""A small static origin for the cache-operation tests (the toolkit's server, ``tests/origin``).

``serve(name, data)`` publishes bytes at ``/NAME``; every request is counted per path.
``hold(name)`` makes GETs of that path send their headers and the first half of the body, then
wait until :meth:`Origin.release` (a download that is in flight for as long as a test needs).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.origin import Exchange, Handler, Request, Server, hold, static
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, hold, static


class Origin(Server):
    """The server: files by path, ``requests`` counted by path, GETs in flight measured."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()
        #: Released once per held GET that has sent half its body.
        self.holding = threading.Semaphore(0)
        self.released = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._flight = threading.Lock()

    def serve(self, name: str, data: bytes) -> str:
        """Publish ``data`` at ``/NAME``; return its URL."""
        plain = static(data, content_type="application/octet-stream", ranges=False)
        halted = hold(plain, len(data) // 2, reached=_Signal(self.holding), release=self.released)

        def answer(ex: Exchange) -> None:
            (halted if ex.info.path in self.held else plain)(ex)

        return self.route("/" + name, answer)

    def hold(self, name: str) -> None:
        """GETs of ``/NAME`` stop halfway until :meth:`release`."""
        self.held.add("/" + name)

    def release(self) -> None:
        """Let every held GET finish."""
        self.released.set()

    @property
    def requests(self) -> Counter[str]:  # type: ignore[override]  # counts, as the tests read
        """Requests (GET and HEAD) per path."""
        return Counter(r.path for r in self._select(None, None))

    @property
    def total(self) -> int:
        """Requests received, all paths."""
        return self.count()

    def handler_for(self, request: Request) -> Handler:
        """The route's handler, with the GET it answers counted as in flight."""
        inner = super().handler_for(request)
        if request.method != "GET":
            return inner

        def answer(ex: Exchange) -> None:
            with self._flight:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                inner(ex)
            finally:
                with self._flight:
                    self.in_flight -= 1

        return answer


class _Signal(threading.Event):
    """An event whose every ``set`` also releases a semaphore (one per held request)."""

    def __init__(self, semaphore: threading.Semaphore) -> None:
        super().__init__()
        self._semaphore = semaphore

    def set(self) -> None:
        """Set, and count one more held request."""
        super().set()
        self._semaphore.release()
