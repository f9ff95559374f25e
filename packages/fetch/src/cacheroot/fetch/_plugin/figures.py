"""What the cache did during a test session: per-process figures, summed over xdist workers.

Each process reads the counters of :mod:`cacheroot.fetch` (and of :mod:`cacheroot.mediacache`
when it is installed) when the session starts and when it ends; the difference is that process's
share. A share is split in two: what the tests did in the session's own cache (the volume: the
cache directory the session started with), and what they did in caches of their own (a unit
test's throwaway root under its ``tmp_path``), which a warm volume cannot save. Shares are plain
``dict``s, so they travel from xdist workers to the controller as they are, and
:class:`Summary` adds them up into the one line and the JSON that CI keeps.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

from cacheroot.envs.units import format_size

from .. import _stats
from .._progress import counted

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["FETCH_FIELDS", "OWN_ROOTS", "REPORT_VERSION", "Figures", "Summary", "counters"]

#: The fetch counters, in report order (see :func:`cacheroot.fetch.stats`).
FETCH_FIELDS = _stats.FIELDS
#: Version of the JSON written by ``--cacheroot-report`` (bumped when a field changes meaning):
#: 2 counts the volume alone at the top level, and the tests' own roots under ``tests_own_roots``.
REPORT_VERSION = 2
#: The JSON key of what tests did in caches of their own (not the volume).
OWN_ROOTS = "tests_own_roots"


@functools.cache
def _media_counters() -> Callable[[], Mapping[str, float]] | None:
    """The media cache's ``stats``, or None when it is not installed or has none.

    Looked up once: the per-test figures read the counters around every test phase, and a
    failed import costs a search of ``sys.path`` each time.
    """
    try:
        from cacheroot import mediacache  # noqa: PLC0415 - optional distribution
    except ImportError:
        return None
    found = getattr(mediacache, "stats", None)
    return found if callable(found) else None


def counters() -> Figures:
    """This process's cache counters so far (fetch, and media where installed)."""
    media = _media_counters()
    return Figures(
        fetch=_stats.stats(),
        media=None if media is None else {str(k): float(v) for k, v in dict(media()).items()},
    )


def _growth(now: dict[str, float] | None, then: dict[str, float] | None) -> dict[str, float]:
    """What a group of counters grew by since ``then``; all of ``now`` where it was reset since.

    The counters only grow, except that ``reset_stats()`` (which unit tests call) sets a whole
    group back to zero: any counter below its earlier value means the group started again.
    """
    now = now or {}
    then = then or {}
    if any(v < then.get(k, 0) for k, v in now.items()):
        return dict(now)
    return {k: v - then.get(k, 0) for k, v in now.items()}


def _hits(n: int) -> str:
    return counted(n, "hit")


def _misses(n: int) -> str:
    return counted(n, "miss", "misses")


class Figures:
    """Summed counters of one or more processes, in one cache or a group of caches.

    ``fetch`` holds :data:`FETCH_FIELDS`; ``media`` the media cache's counters (None when no
    process had a media cache); ``offline_misses`` the tests that failed because an offline run
    found an entry missing (:mod:`cacheroot.fetch` raises before counting those);
    ``builds``/``build_hits``: ``build_once`` calls through the plugin's fixture that found no
    artifact (and built it, or waited for another process's build) / found it published;
    ``model_hits``/``model_misses``: model snapshots (the ``model_snapshot`` fixture, and a
    manifest warmed before the tests) found complete in the cache / downloaded;
    ``processes`` how many processes contributed.
    """

    __slots__ = (
        "build_hits",
        "builds",
        "fetch",
        "media",
        "model_hits",
        "model_misses",
        "offline_misses",
        "processes",
    )

    def __init__(
        self,
        *,
        fetch: dict[str, float] | None = None,
        media: dict[str, float] | None = None,
        offline_misses: int = 0,
        builds: int = 0,
        build_hits: int = 0,
        model_hits: int = 0,
        model_misses: int = 0,
        processes: int = 0,
    ) -> None:
        self.builds = builds
        self.build_hits = build_hits
        self.model_hits = model_hits
        self.model_misses = model_misses
        self.fetch = dict.fromkeys(FETCH_FIELDS, 0.0) | (fetch or {})
        self.media = media
        self.offline_misses = offline_misses
        self.processes = processes

    def add(self, other: Figures) -> None:
        """Add another process's (or group's) figures to these."""
        for k, v in other.fetch.items():
            self.fetch[k] = self.fetch.get(k, 0) + v
        if other.media is not None:
            mine = self.media if self.media is not None else {}
            for k, v in other.media.items():
                mine[k] = mine.get(k, 0) + v
            self.media = mine
        self.offline_misses += other.offline_misses
        self.builds += other.builds
        self.build_hits += other.build_hits
        self.model_hits += other.model_hits
        self.model_misses += other.model_misses
        self.processes += other.processes

    def since(self, earlier: Figures) -> Figures:
        """What these counters grew by since ``earlier`` (a reading of the same process).

        A group reset in between (``reset_stats()``) counts from zero: what it held before the
        reset was settled at an earlier reading.
        """
        return Figures(
            fetch=_growth(self.fetch, earlier.fetch),
            media=None if self.media is None else _growth(self.media, earlier.media),
            offline_misses=self.offline_misses - earlier.offline_misses,
            builds=self.builds - earlier.builds,
            build_hits=self.build_hits - earlier.build_hits,
            model_hits=self.model_hits - earlier.model_hits,
            model_misses=self.model_misses - earlier.model_misses,
        )

    @property
    def misses(self) -> int:
        """Every miss: downloads that went to the origin plus offline misses."""
        return int(self.fetch.get("misses", 0)) + self.offline_misses

    def counts(self) -> dict[str, Any]:
        """The JSON form of the counters alone (no version, no process count)."""
        out: dict[str, Any] = {}
        for k in FETCH_FIELDS:
            v = self.fetch.get(k, 0)
            out[k] = round(v, 3) if k == "lock_wait_seconds" else int(v)
        out["misses"] = self.misses
        out["offline_misses"] = self.offline_misses
        out["builds"] = self.builds
        out["build_hits"] = self.build_hits
        out["model_hits"] = self.model_hits
        out["model_misses"] = self.model_misses
        out["media"] = None if self.media is None else {k: int(v) for k, v in self.media.items()}
        return out

    @classmethod
    def from_counts(cls, data: Mapping[str, Any], processes: int = 0) -> Figures:
        """Inverse of :meth:`counts`."""
        offline = int(data.get("offline_misses", 0))
        fetch = {k: float(data.get(k, 0)) for k in FETCH_FIELDS}
        fetch["misses"] -= offline
        media = data.get("media")
        return cls(
            fetch=fetch,
            media=None if media is None else {k: float(v) for k, v in media.items()},
            offline_misses=offline,
            builds=int(data.get("builds", 0)),
            build_hits=int(data.get("build_hits", 0)),
            model_hits=int(data.get("model_hits", 0)),
            model_misses=int(data.get("model_misses", 0)),
            processes=processes,
        )

    def text(self) -> str:
        """The figures as the summary line words them (without its head and process count)."""
        f = self.fetch
        misses = _misses(self.misses)
        if self.offline_misses:
            misses += f" ({self.offline_misses} offline)"
        text = (
            f"{_hits(int(f['hits']))}, {misses}, "
            f"{format_size(f['bytes_downloaded'])} downloaded, "
            f"{format_size(f['bytes_from_cache'])} served from cache, "
            f"{f['lock_wait_seconds']:.2f} s waiting on locks"
        )
        if self.builds or self.build_hits:
            text += f"; built: {self.builds} new, {self.build_hits} reused"
        if self.model_hits or self.model_misses:
            text += f"; models: {_hits(self.model_hits)}, {_misses(self.model_misses)}"
        if self.media is not None:
            m = self.media
            text += (
                f"; media: {_hits(int(m.get('hits', 0)))}, {_misses(int(m.get('misses', 0)))}, "
                f"{int(m.get('revalidations', 0))} revalidated, "
                f"{format_size(m.get('bytes_saved', 0))} saved"
            )
        return text


class Summary:
    """A session's figures: the volume's, the tests' own roots' apart, and whether it was offline.

    ``volume`` counts what the tests did in the session's own cache (and the manifest step before
    them); ``own_roots`` what they did in caches of their own, which every run starts empty, so
    a warm offline run reads no miss on the volume whatever its unit tests download. Both are
    :class:`Figures`; the process count is the volume's.
    """

    __slots__ = ("offline", "online_clients", "own_roots", "volume")

    def __init__(
        self,
        volume: Figures | None = None,
        own_roots: Figures | None = None,
        *,
        offline: bool = False,
        online_clients: int = 0,
    ) -> None:
        self.volume = volume if volume is not None else Figures()
        self.own_roots = own_roots if own_roots is not None else Figures()
        self.offline = offline
        #: Processes of an offline run whose huggingface_hub read ``HF_HUB_OFFLINE`` before the
        #: run set it (imported before pytest), and so stayed online.
        self.online_clients = online_clients

    def add(self, other: Summary) -> None:
        """Add another process's (or group's) figures; whether the run was offline stays."""
        self.volume.add(other.volume)
        self.own_roots.add(other.own_roots)
        self.online_clients += other.online_clients

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (what workers send and ``--cacheroot-report`` writes)."""
        out: dict[str, Any] = {"version": REPORT_VERSION, "offline": self.offline}
        out["online_hub_clients"] = self.online_clients
        out |= self.volume.counts()
        out["processes"] = self.volume.processes
        out[OWN_ROOTS] = self.own_roots.counts()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        """Inverse of :meth:`as_dict`."""
        return cls(
            Figures.from_counts(data, processes=int(data.get("processes", 0))),
            Figures.from_counts(data.get(OWN_ROOTS) or {}),
            offline=bool(data.get("offline", False)),
            online_clients=int(data.get("online_hub_clients", 0)),
        )

    def line(self) -> str:
        """The one-line summary printed at the end of the session."""
        head = "cacheroot: offline run; " if self.offline else "cacheroot: "
        if self.offline and self.online_clients:
            n = self.online_clients
            head = (
                f"cacheroot: offline run, but huggingface_hub stayed online in {n} "
                f"{'process' if n == 1 else 'processes'} (imported before the run set "
                "HF_HUB_OFFLINE); "
            )
        text = head + self.volume.text()
        own = self.own_roots
        if own.fetch["hits"] or own.misses or own.fetch["bytes_downloaded"]:
            text += (
                f"; tests' own roots: {_hits(int(own.fetch['hits']))}, {_misses(own.misses)}, "
                f"{format_size(own.fetch['bytes_downloaded'])} downloaded"
            )
        n = self.volume.processes
        return f"{text} ({n} {'process' if n == 1 else 'processes'})"

    def write(self, path: str | os.PathLike[str], **extra: Any) -> None:
        """Write :meth:`as_dict` (plus ``extra`` fields) as JSON, atomically."""
        data = self.as_dict() | extra
        path = os.fspath(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
