"""One snapshot names one commit: a branch is resolved once per TTL, and its answers follow.

A branch (or a tag) moves. Kept answer by answer, each file's answer for a branch would expire
on a clock of its own: after ``main`` moved, a process could read ``config.json`` from the new
commit and ``tokenizer.json`` from the old one for up to one TTL, and huggingface_hub would file
them in two snapshots. So the hub resolves a branch to a commit once, with the repository's
revision answer (``GET /api/{models,datasets,spaces}/REPO/revision/REV``), kept per credential
like any answer: fresh for the TTL, served stale when the upstream fails. Every other request
for that branch (a file's ``HEAD`` and bytes, ``/tree``, ``model_info`` with options) is asked
as the commit's, whose answers never change and are kept for good, so they all name that commit
(``X-Repo-Commit``, ``sha``). After the TTL the revision answer is asked again, and the branch's
requests follow the commit it names then.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import quote

from . import routes

if TYPE_CHECKING:
    from .store import Answer

__all__ = ["Pins", "movable", "on_commit", "revision_target"]

_KINDS = ("model", "dataset", "space")


def movable(route: routes.Route) -> bool:
    """Whether ``route`` names a Hub repository at a revision that may move (not a commit)."""
    return (
        route.hub == "hf"
        and route.kind in (routes.META, routes.FILE)
        and bool(route.repo_id)
        and bool(route.revision)
        and not route.immutable
        and route.repo_type in _KINDS
    )


def revision_target(route: routes.Route) -> str:
    """The request target of the revision answer that resolves ``route``'s revision."""
    repo = quote(route.repo_id, safe="/")
    return f"/api/{route.repo_type}s/{repo}/revision/{quote(route.revision, safe='')}"


def on_commit(target: str, commit: str) -> str | None:
    """``target`` (path and query, as sent) with its revision replaced by ``commit``."""
    path, sep, query = target.partition("?")
    span = routes.revision_span(path)
    if span is None:
        return None
    start, end = span
    return f"{path[:start]}{commit}{path[end:]}{sep}{query}"


class Pins:
    """The commits named by the revision answers this process served, each parsed once."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._seen: dict[tuple[str, str, float], str | None] = {}

    def commit(self, target: str, cred: str, answer: Answer) -> str | None:
        """The commit the revision answer ``answer`` (to ``target``, for ``cred``) names, or
        ``None`` when it is no such answer."""
        key = (target, cred, answer.stored)
        if key in self._seen:
            return self._seen[key]
        sha = None
        if answer.status == 200:
            try:
                found = json.loads(answer.body).get("sha")
            except (ValueError, AttributeError):
                found = None
            if isinstance(found, str) and routes.is_commit(found):
                sha = found
        if len(self._seen) >= self._size:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = sha
        return sha
