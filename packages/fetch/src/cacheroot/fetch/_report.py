"""What the cache did during a test session: per-process figures, summed over xdist workers.

Each process snapshots the counters of :mod:`cacheroot.fetch` (and of :mod:`cacheroot.mediacache`
when it is installed) when the session starts and when it ends; the difference is that process's
share. Shares are plain ``dict``s, so they travel from xdist workers to the controller as they
are, and :class:`Figures` adds them up into the one line and the JSON that CI keeps.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import _stats

#: The fetch counters, in report order (see :func:`cacheroot.fetch.stats`).
FETCH_FIELDS = _stats.FIELDS
#: Version of the JSON written by ``--cacheroot-report`` (bumped when a field changes meaning).
REPORT_VERSION = 1


def _media_stats() -> dict[str, float] | None:
    """The media cache's process counters, or None when it is not installed or has none."""
    try:
        from cacheroot import mediacache  # noqa: PLC0415 - optional distribution
    except ImportError:
        return None
    counters = getattr(mediacache, "stats", None)
    if not callable(counters):
        return None
    values = counters()
    return {str(k): float(v) for k, v in dict(values).items()}


def snapshot() -> dict[str, Any]:
    """This process's counters now: ``{"fetch": {...}, "media": {...} | None}``."""
    return {"fetch": _stats.stats(), "media": _media_stats()}


def _minus(after: dict[str, float] | None, before: dict[str, float] | None) -> dict[str, float]:
    after = after or {}
    before = before or {}
    return {k: v - before.get(k, 0) for k, v in after.items()}


class Figures:
    """Summed counters of one or more processes.

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

    @classmethod
    def since(
        cls,
        before: dict[str, Any],
        *,
        offline_misses: int = 0,
        builds: int = 0,
        build_hits: int = 0,
        model_hits: int = 0,
        model_misses: int = 0,
    ) -> Figures:
        """This process's share: its counters now minus ``before`` (a :func:`snapshot`)."""
        now = snapshot()
        media = None if now["media"] is None else _minus(now["media"], before.get("media"))
        return cls(
            fetch=_minus(now["fetch"], before["fetch"]),
            media=media,
            offline_misses=offline_misses,
            builds=builds,
            build_hits=build_hits,
            model_hits=model_hits,
            model_misses=model_misses,
            processes=1,
        )

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

    @property
    def misses(self) -> int:
        """Every miss: downloads that went to the origin plus offline misses."""
        return int(self.fetch.get("misses", 0)) + self.offline_misses

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (what workers send and ``--cacheroot-report`` writes)."""
        out: dict[str, Any] = {"version": REPORT_VERSION}
        for k in FETCH_FIELDS:
            v = self.fetch.get(k, 0)
            out[k] = round(v, 3) if k == "lock_wait_seconds" else int(v)
        out["misses"] = self.misses
        out["offline_misses"] = self.offline_misses
        out["builds"] = self.builds
        out["build_hits"] = self.build_hits
        out["model_hits"] = self.model_hits
        out["model_misses"] = self.model_misses
        out["processes"] = self.processes
        out["media"] = None if self.media is None else {k: int(v) for k, v in self.media.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figures:
        """Inverse of :meth:`as_dict`."""
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
            processes=int(data.get("processes", 0)),
        )

    def line(self) -> str:
        """The one-line summary printed at the end of the session."""
        f = self.fetch
        misses = f"{self.misses} misses"
        if self.offline_misses:
            misses += f" ({self.offline_misses} offline)"
        text = (
            f"cacheroot: {int(f['hits'])} hits, {misses}, "
            f"{human_bytes(f['bytes_downloaded'])} downloaded, "
            f"{human_bytes(f['bytes_from_cache'])} served from cache, "
            f"{f['lock_wait_seconds']:.2f} s waiting on locks"
        )
        if self.builds or self.build_hits:
            text += f"; built: {self.builds} new, {self.build_hits} reused"
        if self.model_hits or self.model_misses:
            text += f"; models: {self.model_hits} hits, {self.model_misses} misses"
        if self.media is not None:
            m = self.media
            text += (
                f"; media: {int(m.get('hits', 0))} hits, {int(m.get('misses', 0))} misses, "
                f"{int(m.get('revalidations', 0))} revalidated, "
                f"{human_bytes(m.get('bytes_saved', 0))} saved"
            )
        plural = "process" if self.processes == 1 else "processes"
        return f"{text} ({self.processes} {plural})"

    def write(self, path: str | os.PathLike[str], **extra: Any) -> None:
        """Write :meth:`as_dict` (plus ``extra`` fields) as JSON, atomically."""
        data = self.as_dict() | extra
        path = os.fspath(path)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB`` (binary units; whole bytes below 1 KiB)."""
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
