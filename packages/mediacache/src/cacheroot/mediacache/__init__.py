"""An opt-in URL cache for media fetches (filled in by the mediacache work)."""

from __future__ import annotations

__all__: list[str] = []
