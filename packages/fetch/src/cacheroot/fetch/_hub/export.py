"""``cacheroot hub export-manifest``: what a suite used, as ``[[model]]`` entries to warm.

Every file a hub cache serves is noted in its store (:meth:`.store.Store.record_served`): the
repository, the revision asked for, the commit it resolved to and the file's path. Grouped by
repository and commit, that is a manifest that a nightly ``cacheroot warm`` keeps fresh, so a
test author never writes one by hand: each entry pins the commit, names the branch it came
from, and lists exactly the files that were served. It says ``hub_cache = true``: the suite ran
through a hub cache, and a warm of it keeps the answers of the suite's metadata calls in the
volume's hub store too, so that the next run through the hub needs no Hub at all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING

from .routes import is_commit

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["literal_pattern", "manifest_text"]


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, for the characters that occur here)."""
    return json.dumps(value, ensure_ascii=False)


def literal_pattern(path: str) -> str:
    """An ``allow_patterns`` entry that matches ``path`` alone (fnmatch's ``*?[`` escaped)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def manifest_text(rows: Iterable[dict[str, str]]) -> str:
    """The ``[[model]]`` entries for the served ``rows``, sorted, as TOML text."""
    groups: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    branches: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for row in rows:
        hub = "modelscope" if row.get("hub") == "modelscope" else "hf"
        repo_type, repo_id = row.get("repo_type", "model"), row.get("repo_id", "")
        revision, path = row.get("revision", ""), row.get("path", "")
        commit = row.get("commit", "") or revision
        if not repo_id or not path or not commit:
            continue
        group = (hub, repo_type, repo_id, commit)
        groups[group].add(path)
        if revision and not is_commit(revision):
            branches[group].add(revision)
    out = [
        (
            "# What the hub cache served, as `cacheroot hub export-manifest` wrote it:\n"
            "# one entry per repository and commit, with the files that were asked for.\n"
            "\n"
            "# The suite runs through the hub cache: warming this also keeps the answers of\n"
            "# its metadata calls (model_info, list_repo_files, file_exists) in the hub store.\n"
            "hub_cache = true\n"
        )
    ]
    for group in sorted(groups):
        hub, repo_type, repo_id, commit = group
        out.append("\n[[model]]\n")
        out.append(f"hub = {_toml(hub)}\n")
        out.append(f"repo_id = {_toml(repo_id)}\n")
        out.append(f"revision = {_toml(commit)}\n")
        named = sorted(branches.get(group, ()))
        if len(named) == 1 and is_commit(commit) and hub == "hf":
            out.append(f"branch = {_toml(named[0])}\n")
        elif named:
            out.append(f"# asked for as: {', '.join(named)}\n")
        if repo_type != "model":
            out.append(f"repo_type = {_toml(repo_type)}\n")
        files = ", ".join(_toml(literal_pattern(p)) for p in sorted(groups[group]))
        out.append(f"allow_patterns = [{files}]\n")
    return "".join(out)
