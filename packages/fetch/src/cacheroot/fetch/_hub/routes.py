"""What a request to the Hub is: metadata to keep, file bytes to store, or neither.

Only the paths the Hub's clients call are recognised; the rest is passed through unstored, so
an upload or a request nobody here has read the semantics of is never answered from a store.
A revision that is a full commit hash names content that never changes: its answers are kept
for good. A branch or a tag moves, so its answers are fresh for a while only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

__all__ = ["FILE", "META", "OTHER", "Route", "classify", "is_commit", "revision_span"]

#: Kept per URL and credential: every ``/api/...`` answer and every ``HEAD`` of a file.
META = "meta"
#: A file's bytes (``GET .../resolve/REV/PATH``): stored once per content digest.
FILE = "file"
#: Anything else: forwarded as it is, never stored.
OTHER = "other"

_COMMIT = re.compile(r"[0-9a-f]{40}")
#: ``/[datasets/|spaces/]REPO/resolve/REV/PATH``; a repository id is ``name`` or ``org/name``,
#: the revision is quoted by the clients (a ``/`` in a branch name travels as ``%2F``).
_RESOLVE = re.compile(
    r"^/(?:(?P<kind>datasets|spaces)/)?(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$"
)
#: ModelScope's API: ``/api/v1/...``; a file's bytes are
#: ``GET /api/v1/models/OWNER/NAME/repo?Revision=REV&FilePath=PATH``.
_MS_FILE = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo$")
#: ``/api/{models,datasets,spaces}/REPO[/OP/REV[/...]]``.
_API_REPO = re.compile(
    r"^/api/(?P<kind>models|datasets|spaces)/(?P<repo>[^/]+(?:/[^/]+)?)"
    r"(?:/(?P<op>revision|tree|paths-info|treesize)/(?P<rev>[^/]+)(?:/.*)?)?$"
)
_KINDS = {"datasets": "dataset", "spaces": "space", "models": "model", None: "model"}
#: Xet's token endpoints (``/api/{models,datasets,spaces,buckets}/REPO/xet-read-token/REV``):
#: a token expires and is for one client, so it is asked for every time and never kept.
_XET_TOKEN = re.compile(r"^/api/.+/xet-[a-z]+-token(?:/|$)")


def is_commit(revision: str) -> bool:
    """Whether ``revision`` is a full commit hash (what the Hub never moves)."""
    return _COMMIT.fullmatch(revision) is not None


@dataclass(frozen=True)
class Route:
    """What one request is; ``repo_type``, ``repo_id``, ``revision`` and ``path`` where known."""

    kind: str
    immutable: bool = False
    #: ``hf`` (the Hugging Face Hub's API) or ``ms`` (ModelScope's, under ``/api/v1/``).
    hub: str = "hf"
    repo_type: str = ""
    repo_id: str = ""
    revision: str = ""
    path: str = ""


def classify(method: str, path: str, query: str = "") -> Route:
    """The route of a request: ``method``, its path (still quoted) and its query."""
    if path.startswith("/api/v1/"):
        return _modelscope(method, path, query)
    if method not in ("GET", "HEAD") or _XET_TOKEN.match(path) is not None:
        return Route(OTHER)
    resolve = _RESOLVE.match(path)
    if resolve is not None and not path.startswith("/api/"):
        revision = unquote(resolve["rev"])
        return Route(
            FILE if method == "GET" else META,
            immutable=is_commit(revision),
            repo_type=_KINDS[resolve["kind"]],
            repo_id=unquote(resolve["repo"]),
            revision=revision,
            path=unquote(resolve["file"]),
        )
    if path.startswith("/api/"):
        api = _API_REPO.match(path)
        if api is None:
            return Route(META)
        revision = unquote(api["rev"] or "")
        return Route(
            META,
            immutable=bool(revision) and is_commit(revision),
            repo_type=_KINDS[api["kind"]],
            repo_id=unquote(api["repo"]),
            revision=revision,
        )
    return Route(OTHER)


def revision_span(path: str) -> tuple[int, int] | None:
    """Where the revision is in ``path`` (a file's or a repository's API path, still quoted),
    as ``(start, end)``; ``None`` when it names none."""
    found = _API_REPO.match(path) if path.startswith("/api/") else _RESOLVE.match(path)
    if found is None or found["rev"] is None:
        return None
    return found.span("rev")


def _modelscope(method: str, path: str, query: str) -> Route:
    """A route of ModelScope's API: a file's bytes, other metadata, or neither."""
    if method not in ("GET", "HEAD"):
        return Route(OTHER, hub="ms")
    found = _MS_FILE.match(path)
    params = parse_qs(query)
    if found is not None and method == "GET" and params.get("FilePath"):
        return Route(
            FILE,
            hub="ms",
            repo_type="model",
            repo_id=unquote(found["repo"]),
            revision=params.get("Revision", ["master"])[-1],
            path=params["FilePath"][-1],
        )
    return Route(META, hub="ms")
