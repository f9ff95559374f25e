"""A model snapshot entry: which hub, which repository, which revision, which files.

One type for the three places that name a model: a manifest's ``[[model]]`` table
(:mod:`.._warm.manifest` validates the file and builds these), the snapshot functions
(:func:`~.snapshot.warm_snapshot`, :func:`~.snapshot.check_snapshot`), and the pytest plugin's
``model_snapshot`` fixture. It turns back into the manifest table that names it
(:meth:`Model.to_toml`), which is what an offline miss prints.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: The hubs cacheroot can warm from.
HUBS = ("hf", "modelscope")
#: The repository types both hubs share.
REPO_TYPES = ("model", "dataset")
#: A full git commit id: the only revision that cannot move.
COMMIT_HASH = re.compile(r"[0-9a-f]{40}")
#: The fields of a ``[[model]]`` table, in the order the manifest documents them.
FIELDS = ("hub", "repo_id", "revision", "branch", "allow_patterns", "ignore_patterns", "repo_type")
#: A branch name as ``refs/<branch>`` stores it: path-safe parts, no ``..``.
_BRANCH = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")


def _branch(value: object, revision: str, hub: str) -> str | None:
    """Check the ``branch`` a pinned entry came from (``None``: not given)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not _BRANCH.fullmatch(value)
        or any(part in (".", "..") for part in value.split("/"))
        or COMMIT_HASH.fullmatch(value)
    ):
        raise ValueError(
            f"branch must be a branch or tag name such as 'main' (the one the pinned commit "
            f"came from), got {value!r}"
        )
    if hub != "hf":
        raise ValueError(
            f"branch applies to hub = 'hf' only (it writes the client's refs/{value}), "
            f"got hub {hub!r}: remove it"
        )
    if COMMIT_HASH.fullmatch(revision) is None and value != revision:
        raise ValueError(
            f"branch {value!r} names the branch a pinned commit came from, but revision "
            f"{revision!r} is itself a branch or tag: pin a commit, or remove branch"
        )
    return value


def _patterns(value: Iterable[str] | str | None, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(p, str) and p for p in items):
        raise TypeError(f"{name} must be a string or a list of non-empty strings, got {value!r}")
    return items


@dataclass(frozen=True, init=False)
class Model:
    """One model snapshot: ``Model("org/name", "<40-hex commit>", hub="hf")``.

    ``branch`` (Hugging Face, with a commit ``revision``) names the branch the commit came
    from: a warm also writes the client's ``refs/<branch>`` pointing at the commit, so that a
    test asking for that branch resolves it offline.
    ``allow_patterns`` / ``ignore_patterns`` are the hub clients' glob patterns (``*`` matches
    across ``/``); a string counts as a one-element list. ``index`` is the entry's position in
    its manifest (1-based; 0 when it comes from elsewhere): it names the entry in summaries and
    takes no part in equality. Models are immutable and hashable.
    """

    repo_id: str
    revision: str
    hub: str
    repo_type: str
    allow_patterns: tuple[str, ...] | None
    ignore_patterns: tuple[str, ...] | None
    branch: str | None
    index: int = field(default=0, compare=False, repr=False)

    def __init__(
        self,
        repo_id: str,
        revision: str,
        *,
        hub: str = "hf",
        repo_type: str = "model",
        allow_patterns: Iterable[str] | str | None = None,
        ignore_patterns: Iterable[str] | str | None = None,
        branch: str | None = None,
        index: int = 0,
    ) -> None:
        if hub not in HUBS:
            raise ValueError(f"hub must be one of {', '.join(HUBS)}, got {hub!r}")
        if repo_type not in REPO_TYPES:
            raise ValueError(f"repo_type must be one of {', '.join(REPO_TYPES)}, got {repo_type!r}")
        parts = repo_id.split("/") if isinstance(repo_id, str) else []
        need = (2,) if hub == "modelscope" else (1, 2)
        if len(parts) not in need or not all(p and p not in (".", "..") for p in parts):
            shape = "owner/name" if hub == "modelscope" else "name or owner/name"
            raise ValueError(f"repo_id must look like {shape}, got {repo_id!r}")
        if not isinstance(revision, str) or not revision.strip():
            raise ValueError(
                f"revision must be a commit hash (recommended) or a branch or tag name, "
                f"got {revision!r}"
            )
        for name, value in (
            ("repo_id", repo_id),
            ("revision", revision),
            ("hub", hub),
            ("repo_type", repo_type),
            ("allow_patterns", _patterns(allow_patterns, "allow_patterns")),
            ("ignore_patterns", _patterns(ignore_patterns, "ignore_patterns")),
            ("branch", _branch(branch, revision, hub)),
            ("index", index),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> Model:
        """Build a model from a ``[[model]]`` table; unknown keys are an error."""
        unknown = sorted(set(entry) - set(FIELDS))
        if unknown:
            raise ValueError(
                f"unknown key(s) {', '.join(unknown)} in a model entry; "
                f"expected some of {', '.join(sorted(FIELDS))}"
            )
        missing = [k for k in ("repo_id", "revision") if k not in entry]
        if missing:
            raise ValueError(f"a model entry needs {' and '.join(missing)}: {dict(entry)!r}")
        return cls(
            repo_id=entry["repo_id"],
            revision=entry["revision"],
            hub=entry.get("hub", "hf"),
            repo_type=entry.get("repo_type", "model"),
            allow_patterns=entry.get("allow_patterns"),
            ignore_patterns=entry.get("ignore_patterns"),
            branch=entry.get("branch"),
        )

    @property
    def pinned(self) -> bool:
        """Whether the revision is a full commit hash (which cannot move)."""
        return COMMIT_HASH.fullmatch(self.revision) is not None

    @property
    def uri(self) -> str:
        """A readable name for messages: ``hf://owner/name@rev``, ``hf://datasets/...``."""
        kind = "datasets/" if self.repo_type == "dataset" else ""
        return f"{self.hub}://{kind}{self.repo_id}@{self.revision}"

    @property
    def label(self) -> str:
        """How summaries name the manifest entry: ``[[model]] #2 hf:org/name@rev``."""
        return f"[[model]] #{self.index} {self.hub}:{self.repo_id}@{self.revision}"

    def as_dict(self) -> dict[str, Any]:
        """The ``[[model]]`` table's fields, JSON-ready (every field, ``None`` when unset).

        ``branch`` only where the entry names one: an entry without it keeps the CI cache key
        it had before the field existed.
        """
        out: dict[str, Any] = {
            "hub": self.hub,
            "repo_id": self.repo_id,
            "revision": self.revision,
            "allow_patterns": None if self.allow_patterns is None else list(self.allow_patterns),
            "ignore_patterns": None if self.ignore_patterns is None else list(self.ignore_patterns),
            "repo_type": self.repo_type,
        }
        if self.branch is not None:
            out["branch"] = self.branch
        return out

    def to_toml(self) -> str:
        """The manifest entry (a ``[[model]]`` table) that names this snapshot."""
        lines = [
            "[[model]]",
            f"hub = {json.dumps(self.hub)}",
            f"repo_id = {json.dumps(self.repo_id)}",
            f"revision = {json.dumps(self.revision)}",
        ]
        if self.branch is not None:
            lines.append(f"branch = {json.dumps(self.branch)}")
        if self.repo_type != "model":
            lines.append(f"repo_type = {json.dumps(self.repo_type)}")
        for key in ("allow_patterns", "ignore_patterns"):
            value = getattr(self, key)
            if value is not None:
                lines.append(f"{key} = [{', '.join(json.dumps(p) for p in value)}]")
        return "\n".join(lines)
