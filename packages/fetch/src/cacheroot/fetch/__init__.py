"""Cached, single-flight, atomic, verified and resumable downloads (filled in by the fetch work)."""

from __future__ import annotations

__all__: list[str] = []
