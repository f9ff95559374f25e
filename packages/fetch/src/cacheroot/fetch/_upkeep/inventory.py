"""What a root holds beyond the test cache: the models, datasets and stores ``cacheroot cache ls``
lists, and the figures ``cacheroot cache du`` gives per cache.

Someone used to ``hf cache ls`` expects ``cacheroot cache ls`` to show every model on the root,
and ``du`` on a root that is the user's own ``~/.cache`` must not pass a browser's cache off as
one of the layout's. So this reads, besides the test cache (:mod:`.cache`):

- the Hugging Face hub cache, through huggingface_hub's own scanner (``scan_cache_dir``): the
  code that writes that layout is the one that reads it here, so nothing drifts from it. Without
  huggingface_hub installed, the directories there and their sizes only;
- ModelScope's cache, in the layouts the installed clients read (modelscope 1.40,
  modelscope_hub 0.5): ``{type}s/{owner}--{name}/snapshots/{revision}/`` where modelscope_hub
  downloads to (``DownloadManager._repo_cache_dir_path``), and ``{type}s/{owner}/{name}/`` and
  ``hub/{type}s/{owner}/{name}/`` of the SDKs up to 1.37, which it still reuses, with each dot
  of the name written ``___`` (``DownloadManager._find_legacy_repo_dir``). The older flat
  ``{owner}/{name}/`` cannot be told apart from modelscope's other directories there (its
  dynamic modules), so it is measured, not listed;
- the store of ``cacheroot hub serve`` (``$CACHEROOT/hubcache``);
- what lies in the root but is no cache of the layout: other tools' directories, which ``du``
  names apart instead of counting them into the layout's figures.

Other jobs write the root: nothing here follows a link (:func:`.root_caches.not_followed` for a
cache's own directory, ``lstat`` below it), except huggingface_hub's scanner, which reads the
links of its own snapshots to their blobs.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_OPT_IN,
    INVALID,
    MODELSCOPE_CACHE,
    TABLE,
    TAGS,
    resolve,
)

from .cache import tree_stats
from .root_caches import HF_REVISION, CacheDir, caches, inside, not_followed

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "HUB_STORE",
    "HUB_STORE_LABEL",
    "MODELSCOPE_TYPES",
    "hf_listing",
    "hub_store_listing",
    "layout_paths",
    "modelscope_listing",
    "other_tools",
    "root_listing",
    "root_usage",
]

#: The store of ``cacheroot hub serve`` under the root (the hub wing's ``STORE_DIR``, which this
#: wing may not import; the tests check that the two agree).
HUB_STORE = "hubcache"
#: How ``du`` and ``ls`` name the store among the layout's variables.
HUB_STORE_LABEL = f"{CACHEROOT}/{HUB_STORE}"
#: The store's answers (``meta/<2 hex>/<key>``) and files (``blobs/<digest>``).
_STORE_ANSWERS = "meta"
_STORE_FILES = "blobs"
#: ModelScope's repository types; each has a directory named by its plural (modelscope_hub 0.5
#: ``constants.RepoType``).
MODELSCOPE_TYPES = ("model", "dataset", "studio", "mcp", "skill")
#: Names in a type's directory that are no owner of repositories: the datasets' raw downloads
#: (modelscope 1.40 ``utils/config_ds.py``, ``DOWNLOADED_DATASETS_DIR``).
_MODELSCOPE_NOT_OWNERS = frozenset({"downloads"})
#: How modelscope_hub joins owner and name into one directory, and how the SDKs up to 1.37
#: wrote a dot in a repository's name.
_MODELSCOPE_JOIN = "--"
_MODELSCOPE_DOT = "___"


def _is_dir(path: str) -> bool:
    """Whether ``path`` is a directory itself (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _subdirs(path: str, *, judged: bool = False) -> list[str]:
    """The directories in ``path`` whose names do not start with a dot, sorted. A link is never
    followed: ``path`` itself must be a directory (unless ``judged``: a cache's own directory,
    which :func:`.root_caches.not_followed` has looked at), and a link in it is no directory."""
    if not judged and not _is_dir(path):
        return []
    try:
        with os.scandir(path) as it:
            found = [d.name for d in it if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(n for n in found if not n.startswith("."))


def _section(name: str, path: str, root: str) -> dict[str, Any]:
    """The fields every cache's listing has: its row of the layout, its directory, whether that
    is there (and may be looked into), and notes for the user."""
    why = not_followed(root, path)
    return {
        "variable": name,
        "path": path,
        # Below the root every directory down to it is one (not_followed); beyond the root it is
        # the user's own setting, a link included.
        "exists": not why and os.path.isdir(path),
        "notes": [f"skipped {name} ({path}): {why}"] if why else [],
    }


# -- the Hugging Face hub ------------------------------------------------------------------------


def hf_listing(cache: CacheDir, root: str) -> dict[str, Any]:
    """The repositories of a Hugging Face hub cache, as huggingface_hub's scanner reads them.

    ``scanned`` says whether huggingface_hub read it; without it, ``directories`` holds what is
    there and its sizes, and a note says why that is all.
    """
    found = _section(cache.name, cache.path, root)
    found.update(scanned=False, size=0, repos=[], directories=[])
    if not found["exists"]:
        return found
    try:
        from huggingface_hub import scan_cache_dir  # noqa: PLC0415 - optional, and slow to import
        from huggingface_hub.errors import CacheNotFound  # noqa: PLC0415
    except ImportError:
        found["notes"].append(
            f"Hugging Face cache at {cache.path}: huggingface_hub is not installed here, sizes only"
        )
        found["directories"] = [
            {"name": name, "path": path, "size": tree_stats(path).size}
            for name in _subdirs(cache.path, judged=True)
            for path in [os.path.join(cache.path, name)]
        ]
        found["size"] = sum(d["size"] for d in found["directories"])
        return found
    try:
        info = scan_cache_dir(cache.path)
    except (OSError, ValueError, CacheNotFound) as exc:
        found["notes"].append(f"cannot scan {cache.path} with huggingface_hub: {exc}")
        return found
    found["scanned"] = True
    found["size"] = int(info.size_on_disk)
    found["notes"] += [f"{cache.name}: huggingface_hub skipped {w}" for w in info.warnings]
    for repo in sorted(info.repos, key=lambda r: (r.repo_type, r.repo_id.lower())):
        revisions = sorted(repo.revisions, key=lambda r: r.commit_hash)
        found["repos"].append(
            {
                "repo_type": repo.repo_type,
                "repo_id": repo.repo_id,
                "path": str(repo.repo_path),
                "size": int(repo.size_on_disk),
                "nb_files": int(repo.nb_files),
                "last_accessed": float(repo.last_accessed),
                "last_modified": float(repo.last_modified),
                "refs": sorted(repo.refs),
                "revisions": [
                    {
                        "commit": rev.commit_hash,
                        "refs": sorted(rev.refs),
                        "path": str(rev.snapshot_path),
                        "size": int(rev.size_on_disk),
                        "nb_files": int(rev.nb_files),
                        "last_modified": float(rev.last_modified),
                    }
                    for rev in revisions
                ],
            }
        )
    return found


# -- ModelScope ----------------------------------------------------------------------------------


def _modelscope_repo(repo_type: str, repo_id: str, path: str, layout: str) -> dict[str, Any]:
    tree = tree_stats(path)
    return {
        "repo_type": repo_type,
        "repo_id": repo_id,
        "path": path,
        "layout": layout,
        "revisions": _subdirs(os.path.join(path, "snapshots")) if layout == "current" else [],
        "size": tree.size,
        "nb_files": tree.files,
        "last_modified": tree.newest,
    }


def modelscope_listing(cache: CacheDir, root: str) -> dict[str, Any]:
    """The repositories of ModelScope's cache, in every layout its clients read (see the module's
    docstring); ``layout`` is ``current`` (modelscope_hub's) or ``legacy`` (the SDKs' up to 1.37,
    which keep no revisions)."""
    found = _section(cache.name, cache.path, root)
    found["repos"] = []
    if not found["exists"]:
        return found
    for base in (cache.path, os.path.join(cache.path, "hub")):
        if base != cache.path and not _is_dir(base):
            continue  # no hub/ of the older SDKs, or a link in its place: never followed
        for repo_type in MODELSCOPE_TYPES:
            kind = os.path.join(base, f"{repo_type}s")
            for name in _subdirs(kind):
                owner, joined, rest = name.partition(_MODELSCOPE_JOIN)
                path = os.path.join(kind, name)
                if joined and owner and rest:
                    found["repos"].append(
                        _modelscope_repo(repo_type, f"{owner}/{rest}", path, "current")
                    )
                elif name not in _MODELSCOPE_NOT_OWNERS:
                    found["repos"] += [
                        _modelscope_repo(
                            repo_type,
                            f"{name}/{sub.replace(_MODELSCOPE_DOT, '.')}",
                            os.path.join(path, sub),
                            "legacy",
                        )
                        for sub in _subdirs(path)
                    ]
    found["repos"].sort(key=lambda r: (r["repo_type"], r["repo_id"].lower(), r["path"]))
    return found


# -- the hub cache's store -----------------------------------------------------------------------


def _count_files(directory: str, depth: int) -> tuple[int, float]:
    """Regular files ``depth`` levels below ``directory`` (``0``: in it) whose names do not start
    with a dot (a file being written), and the newest modification time among them."""
    count, newest = 0, 0.0
    dirs = [directory] if _is_dir(directory) else []
    for _ in range(depth):
        dirs = [os.path.join(d, s) for d in dirs for s in _subdirs(d)]
    for d in dirs:
        try:
            with os.scandir(d) as it:
                found = [e for e in it if not e.name.startswith(".")]
        except OSError:
            continue
        for entry in found:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISREG(st.st_mode):
                count += 1
                newest = max(newest, st.st_mtime)
    return count, newest


def hub_store_listing(root: str) -> dict[str, Any]:
    """What the store of ``cacheroot hub serve`` under ``root`` keeps: ``answers`` (the Hub's
    answers, one per request and credential), ``files`` (one per digest), their bytes and when
    the newest was written."""
    path = os.path.join(root, HUB_STORE)
    found = _section(HUB_STORE_LABEL, path, root)
    found.update(answers=0, files=0, size=0, last_modified=0.0)
    if found["exists"]:
        answers, newest_answer = _count_files(os.path.join(path, _STORE_ANSWERS), 1)
        files, newest_file = _count_files(os.path.join(path, _STORE_FILES), 0)
        found.update(
            answers=answers,
            files=files,
            size=tree_stats(path).size,
            last_modified=max(newest_answer, newest_file),
        )
    return found


# -- other tools ---------------------------------------------------------------------------------


def layout_paths(root: str, environ: Mapping[str, str]) -> set[str]:
    """Every directory that the layout (any tag, every opt-in) maps for ``root``, the rows that
    are never set included (their place follows their parent's), and the hub cache's store."""
    base = dict(environ)
    base.update({CACHEROOT: root, CACHEROOT_OPT_IN: "all"})
    paths = {c.path for c in caches(root, environ)}
    paths.add(os.path.join(root, HUB_STORE))
    for tag in TAGS:
        values = {
            name: os.path.normpath(os.path.expanduser(s.value))
            for name, s in resolve(base, tag=tag).settings.items()
            if s.value and s.source != INVALID
        }
        paths.update(values.values())
        for var in TABLE:
            if var.name not in values and var.path and var.parent in values:
                paths.add(os.path.normpath(os.path.join(values[var.parent], var.path)))
    return paths


def other_tools(root: str, environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """What lies in ``root`` itself but holds no directory of the layout, with its size: other
    tools' caches where the root is someone's ``~/.cache`` (a browser's, an editor's)."""
    mapped = [p for p in layout_paths(root, environ) if p != os.path.normpath(root)]
    try:
        names = sorted(os.listdir(root))  # the root itself may be a link: the user's setting
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(root, name)
        if any(inside(m, path) for m in mapped):
            continue
        found.append({"path": path, "size": tree_stats(path).size})
    return found


# -- what ls and du show -------------------------------------------------------------------------


def root_listing(root: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The Hugging Face hub cache, ModelScope's cache and the hub cache's store of ``root``."""
    every = caches(root, environ)
    hub = next((c for c in every if c.kind == HF_REVISION), None)
    modelscope = next((c for c in every if c.name == MODELSCOPE_CACHE), None)
    return {
        # None where the layout has no such cache (its variable is invalid: the doctor says why).
        "huggingface": None if hub is None else hf_listing(hub, root),
        "modelscope": None if modelscope is None else modelscope_listing(modelscope, root),
        "hub_store": hub_store_listing(root),
    }


def root_usage(environ: Mapping[str, str]) -> dict[str, Any]:
    """Bytes per top-level cache of the layout, the hub cache's store among them, and apart from
    them what belongs to other tools.

    A cache's figure leaves other tools' directories out: where the root is the XDG cache home
    (``~/.cache``), ``XDG_CACHE_HOME`` is the root, and would otherwise count a browser's cache
    as the layout's.
    """
    layout = resolve(environ)
    root = layout.root
    others = [] if root is None else other_tools(root, environ)
    skip = {o["path"] for o in others}
    rows = [
        (name, os.path.expanduser(s.value.strip()))
        for name, s in layout.settings.items()
        if s.value and s.source != INVALID
    ]
    if root is not None:
        rows.append((HUB_STORE_LABEL, os.path.join(root, HUB_STORE)))
    found = []
    for name, path in rows:
        exists = os.path.isdir(path)
        holds = exists and any(inside(o, path) for o in skip)
        row: dict[str, Any] = {
            "variable": name,
            "path": path,
            "size": tree_stats(path, skip if holds else ()).size if exists else 0,
            "exists": exists,
        }
        if holds:
            row["other_tools_left_out"] = True
        found.append(row)
    return {
        "root": root,
        "caches": found,
        "other_tools": others,
        "other_tools_total": sum(o["size"] for o in others),
    }
