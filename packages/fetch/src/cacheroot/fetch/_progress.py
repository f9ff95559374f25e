"""What a fetch reports as it goes, and the one-line form the commands print of it.

Library code prints nothing: a :class:`~._fetcher.Fetcher` built with ``reporter=callback`` calls
it with a :class:`FetchEvent` for each finished fetch (a hit or a miss), each retry (before its
wait, so a dead origin is reported at its first failure rather than after the last) and each
source given up on for the next (a mirror that failed). ``cacheroot fetch`` and ``cacheroot
warm`` pass a :class:`LineReporter`, which writes one line per event to standard error: what a
CI log keeps. On a terminal it writes through tqdm, so the lines land above the progress bars
instead of through them, and the line of a finished download stays after its bar is cleared.

A download draws a bar by default only where someone watches it (:func:`bars_wanted`): standard
error is a terminal, not a dumb one, and not a CI job's. :func:`new_bar` draws it, or returns
``None`` when tqdm cannot be imported: a bar is a courtesy, never a reason for a fetch to fail.

Every URL in an event is redacted (:func:`~._redact.redact_url`); no request header is ever in
one, so the tokens of :mod:`._auth` cannot reach a log through it. Without a reporter the hit
path pays one attribute test.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cacheroot.envs import CI
from cacheroot.envs.units import format_size

from ._redact import printable, redact_url

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tqdm import tqdm

    #: What a Fetcher calls with each event.
    Reporter = Callable[["FetchEvent"], None]

#: Kinds of event: a finished fetch served from the cache, or downloaded (or copied from the
#: shared tier); a failed attempt about to be retried; a source given up on for the next; an
#: entry that failed for good (``cacheroot warm`` reports those).
HIT, MISS, RETRY, FALLBACK, FAILED = "hit", "miss", "retry", "fallback", "failed"
#: The ``source`` of a miss that the shared tier (``CACHEROOT_SHARED``) served.
SHARED_TIER = "shared tier"
#: The ``source`` of a miss copied from a ``file://`` URL.
LOCAL_FILE = "local file"


class FetchEvent:
    """One thing a fetch reports; the fields that do not apply to its ``kind`` keep defaults.

    ``url`` is the entry's canonical URL, redacted (for ``cacheroot warm``'s model entries, the
    entry's label). ``path``, ``size`` (bytes; ``None`` where unknown) and ``seconds`` (since the
    call began, lock waits included) describe a finished fetch. ``source`` is where a miss's
    bytes came from: the host (and port) of the URL that served them, or :data:`SHARED_TIER`.
    ``tried`` is that URL when it is not ``url`` (a mirror or a fallback URL served it), or the
    one that failed for a retry or a fallback (redacted); ``next`` is the one tried after a
    fallback. ``reason``, ``attempt`` (failures in a row), ``attempts`` (the retries allowed)
    and ``wait`` (seconds) describe a retry.
    """

    __slots__ = (
        "attempt",
        "attempts",
        "kind",
        "next",
        "path",
        "reason",
        "seconds",
        "size",
        "source",
        "tried",
        "url",
        "wait",
    )

    def __init__(
        self,
        kind: str,
        url: str,
        *,
        path: str | None = None,
        size: int | None = None,
        seconds: float = 0.0,
        source: str = "",
        tried: str = "",
        next: str = "",  # noqa: A002 - the field's name in the JSON summary
        reason: str = "",
        attempt: int = 0,
        attempts: int = 0,
        wait: float = 0.0,
    ) -> None:
        self.kind, self.url, self.path, self.size, self.seconds = kind, url, path, size, seconds
        self.source, self.tried, self.next, self.reason = source, tried, next, reason
        self.attempt, self.attempts, self.wait = attempt, attempts, wait

    def __repr__(self) -> str:
        return f"FetchEvent({self.kind!r}, {self.url!r})"

    def as_dict(self) -> dict[str, Any]:
        """The summary of a finished fetch, as ``cacheroot fetch --json`` prints it."""
        return {
            "status": self.kind,
            "url": self.url,
            "path": self.path,
            "bytes": self.size,
            "seconds": round(self.seconds, 3),
            "source": self.source or None,
            "from": self.tried or None,
        }


def counted(n: int, noun: str, plural: str = "") -> str:
    """``1 entry``, ``2 entries``: ``n`` and ``noun``, or ``plural`` (default: ``noun`` + "s")
    unless ``n`` is 1, so that a command's summary line reads right for a single item."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def host_of(url: str) -> str:
    """``host`` or ``host:port`` of ``url``: never its credentials (they are not the host);
    ``local file`` for a ``file://`` URL."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "?"
    if parts.scheme.lower() == "file":
        return LOCAL_FILE
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port is not None else host


def rate(size: int | None, seconds: float) -> str:
    """``12.3 MiB/s``; ``?`` when there is nothing to divide."""
    if size is None or seconds <= 0:
        return "? B/s"
    return f"{format_size(size / seconds)}/s"


def line(event: FetchEvent) -> str:
    """The event as one line for a log (no prefix, no newline)."""
    size = "" if event.size is None else f" ({format_size(event.size)})"
    if event.kind == HIT:
        return f"hit  {event.url}{size} in {event.seconds:.2f} s"
    if event.kind == MISS:
        speed = "" if event.size is None else f", {rate(event.size, event.seconds)}"
        mirror = " (a mirror)" if event.tried else ""
        return f"miss {event.url}{size} in {event.seconds:.2f} s{speed} from {event.source}{mirror}"
    if event.kind == RETRY:
        return (
            f"retry {event.attempt}/{event.attempts} {event.tried} in {event.wait:.1f} s: "
            f"{event.reason}"
        )
    if event.kind == FALLBACK:
        return f"skip {event.tried}: {event.reason}; trying {event.next}"
    return f"{event.kind} {event.url}: {event.reason}"


#: Values of ``CI`` that say "not CI" (blank included).
_NOT_CI = frozenset({"", "0", "false", "no", "off"})
#: The terminal size assumed where a terminal reports none and ``COLUMNS``/``LINES`` are unset.
DEFAULT_SIZE = (80, 24)


def _tqdm() -> type[tqdm[Any]] | None:
    """tqdm's bar class, or ``None`` where it cannot be imported (an install made without the
    dependencies of cacheroot-fetch)."""
    try:
        from tqdm import tqdm as bars  # noqa: PLC0415 - only where a bar may be drawn
    except ImportError:
        return None
    return bars


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs in a CI job: ``CI`` set to anything but a false value."""
    env = os.environ if environ is None else environ
    return env.get(CI, "").strip().lower() not in _NOT_CI


def bars_wanted(stream: IO[str] | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether downloads draw a progress bar on ``stream`` (default: standard error) unless told.

    Only where someone watches: ``stream`` is a terminal (a pipe or a file is a log, where each
    redraw would be one more line), ``TERM`` is not ``dumb`` (a terminal that claims no cursor
    movement, such as an editor's shell buffer), the run is not a CI job's (:func:`in_ci`), and
    tqdm can be imported.
    """
    env = os.environ if environ is None else environ
    out = sys.stderr if stream is None else stream
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        tty = False
    if not tty or env.get("TERM", "").strip() == "dumb" or in_ci(env):
        return False
    return _tqdm() is not None


def _env_size(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else default


def screen_size(stream: IO[str]) -> tuple[int, int]:
    """``(columns, rows)`` of the terminal ``stream`` writes to.

    A terminal whose size was never set (a pseudo-terminal that a program opens for a child, as
    test harnesses and some job runners do) reports 0 by 0: then ``COLUMNS`` and ``LINES``, else
    :data:`DEFAULT_SIZE`. tqdm, left to measure such a terminal itself, takes it for one of -1
    rows and draws nothing at all.
    """
    try:
        size = os.get_terminal_size(stream.fileno())
        columns, rows = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        columns = rows = 0
    return (
        columns if columns > 0 else _env_size("COLUMNS", DEFAULT_SIZE[0]),
        rows if rows > 0 else _env_size("LINES", DEFAULT_SIZE[1]),
    )


def new_bar(
    *, total: int | None, initial: int, desc: str, stream: IO[str] | None = None
) -> tqdm[Any] | None:
    """A tqdm bar of bytes on ``stream`` (default: standard error), or ``None`` without tqdm.

    ``total`` (``None``: unknown) and ``initial`` are bytes (a resumed download starts at its
    partial's size). The bar is sized to the terminal (:func:`screen_size`, one column left
    free, so that a bar as wide as the terminal does not wrap) and cleared when closed: the
    reporter's line of the finished download takes its place.
    """
    bar = _tqdm()
    if bar is None:
        return None
    out = sys.stderr if stream is None else stream
    columns, rows = screen_size(out)
    return bar(
        total=total,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=desc,
        file=out,
        leave=False,
        ncols=max(1, columns - 1),
        nrows=rows,
    )


class LineReporter:
    """Writes each event as a line to ``stream`` (default: standard error), after ``prefix``.

    Thread-safe (``cacheroot warm`` fetches in parallel). On a terminal the lines go through
    ``tqdm.write``, which clears the live bars, writes, and draws them again (without tqdm,
    there are no bars: the lines are written as they are). ``last`` is the last finished fetch
    (hit or miss), for the command's own summary; with ``quiet`` that is all it keeps, nothing
    is written, and the fetches of a :class:`~._fetcher.Fetcher` built with it draw no bar.
    """

    def __init__(self, prefix: str, stream: IO[str] | None = None, *, quiet: bool = False) -> None:
        self.prefix, self.quiet = prefix, quiet
        self.stream = sys.stderr if stream is None else stream
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self._bars = _tqdm() if tty and not quiet else None
        self.tty = self._bars is not None
        self.last: FetchEvent | None = None
        self._lock = threading.Lock()

    def __call__(self, event: FetchEvent) -> None:
        if event.kind in (HIT, MISS):
            self.last = event
        if not self.quiet:
            self.write(line(event))

    def write(self, text: str) -> None:
        """Write one line (redacted once more: a reason may quote a URL; control characters
        escaped: a name or record on the volume may hold terminal escape sequences)."""
        text = f"{self.prefix}: {printable(redact_url(text))}"
        with self._lock:
            if self._bars is not None:
                self._bars.write(text, file=self.stream)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()
