"""The caches of a root, and what one entry of a plain cache is.

The layout names where every cache lives; this turns that into the directories a budget looks
at, each with the kind of unit it is removed by: the test cache by its entries (:mod:`.cache`),
the Hugging Face hub by revisions (:mod:`.survey`), every other cache by plain entries.

A plain entry is a top-level file or directory of its cache (a kernel directory, one file), or
one level further down where a cache keeps its entries in a fixed sub-directory
(``torch_compile_cache/<hash>``, ``fxgraph/<hash>``); some caches are one entry as a whole. The
dot-files, locks and partials beside an entry belong to it; a directory that another cache of
the layout owns is never an entry of the cache around it.

Other jobs write the root, so a cache directory below it that is a symbolic link (or lies
behind one) is never followed: :func:`not_followed` says why, and the budget skips it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from typing import TYPE_CHECKING, NamedTuple

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_OPT_IN,
    HF_HOME,
    HF_HUB_CACHE,
    INVALID,
    TAGS,
    VLLM_TEST_CACHE,
    XDG_CACHE_HOME,
    resolve,
)

from .._held import subdir
from .._shared import open_below
from .._store import parse_partial, partial_abandoned
from .cache import FOREIGN_STALE
from .in_use import is_lock, lock_held, open_seen

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "ENTRY",
    "HF_REVISION",
    "QUARANTINED",
    "TEST_ENTRY",
    "WHOLE_LABEL",
    "CacheDir",
    "Listed",
    "PlainEntry",
    "caches",
    "device",
    "free_space",
    "inside",
    "listdir",
    "not_followed",
    "open_cache",
    "walk_entries",
]

#: Sub-directories of a cache whose children are its entries (``*``: any one name), by row.
CONTAINERS: dict[str, tuple[str, ...]] = {
    "VLLM_CACHE_ROOT": ("torch_compile_cache",),
    "TORCHINDUCTOR_CACHE_DIR": ("fxgraph", "aotautograd", "triton/*"),
    "FLASHINFER_WORKSPACE_BASE": (".cache/flashinfer",),
    "MODELSCOPE_CACHE": ("models/*", "datasets/*", "hub/models/*", "hub/datasets/*"),
    "TORCH_HOME": ("hub", "hub/checkpoints"),
}
#: Caches that are one entry as a whole: the NVIDIA driver keeps an index over its files.
WHOLE = frozenset({"CUDA_CACHE_PATH"})
#: Caches under the XDG cache home that no row names but the layout's purpose does.
XDG_CACHES: dict[str, tuple[str, ...]] = {
    "pip": ("http-v2", "http", "wheels"),
    "uv": ("*",),
    "outlines": (),
    "b12x": (),
}
#: How a cache removed as a whole names its one entry.
WHOLE_LABEL = "(the whole cache)"
#: Kinds of unit a cache is removed by (and of the victims that name them).
TEST_ENTRY = "test-entry"
QUARANTINED = "quarantined"
HF_REVISION = "hf-revision"
ENTRY = "entry"


class CacheDir:
    """One cache directory and how to read it."""

    __slots__ = ("containers", "kind", "name", "path", "whole")

    def __init__(
        self, name: str, path: str, kind: str, containers: tuple[str, ...] = (), *, whole: bool
    ) -> None:
        self.name = name
        self.path = path
        self.kind = kind
        self.containers = containers
        self.whole = whole


def inside(path: str, other: str) -> bool:
    """Whether ``path`` is ``other`` or lies under it."""
    return path == other or path.startswith(other.rstrip("/") + "/")


def caches(root: str, environ: Mapping[str, str] | None = None) -> list[CacheDir]:
    """Every cache directory of the layout for ``root``, all tags and opt-ins included.

    Without ``environ`` the layout is the one ``root`` alone derives. With it, values the user
    set explicitly count too (wherever they point), as ``cacheroot cache du`` shows them.
    """
    base = {} if environ is None else dict(environ)
    base.update({CACHEROOT: root, CACHEROOT_OPT_IN: "all"})
    paths: dict[str, str] = {}
    for tag in TAGS:
        for name, setting in resolve(base, tag=tag).settings.items():
            if setting.value and setting.source != INVALID:
                paths.setdefault(name, os.path.normpath(os.path.expanduser(setting.value)))
    found: list[CacheDir] = []
    for name, path in paths.items():
        if name == XDG_CACHE_HOME:
            found += [
                CacheDir(f"{name}/{sub}", os.path.join(path, sub), ENTRY, inner, whole=False)
                for sub, inner in XDG_CACHES.items()
            ]
        elif name == HF_HOME:
            hub = (base.get(HF_HUB_CACHE) or "").strip()
            hub = hub if os.path.isabs(hub) else os.path.join(path, "hub")
            found.append(CacheDir(name, os.path.normpath(hub), HF_REVISION, whole=False))
            found.append(CacheDir(f"{name}/xet", os.path.join(path, "xet"), ENTRY, whole=False))
        elif name == VLLM_TEST_CACHE:
            found.append(CacheDir(name, path, TEST_ENTRY, whole=False))
        else:
            found.append(CacheDir(name, path, ENTRY, CONTAINERS.get(name, ()), whole=name in WHOLE))
    # One directory, one owner: the first row that names it (parents come first in the table).
    unique: dict[str, CacheDir] = {}
    for cache in found:
        unique.setdefault(cache.path, cache)
    return list(unique.values())


def not_followed(root: str, path: str) -> str:
    """Why the cache directory ``path`` is never looked into (``""``: it may be): a directory
    from ``root`` down to it is a symbolic link or no directory. A path outside ``root`` (a
    variable the user set to elsewhere) is the user's own setting and is not judged here."""
    rel = os.path.relpath(path, root)
    if rel in {".", ".."} or rel.startswith(".." + os.sep):
        return ""
    here = root
    for part in rel.split(os.sep):
        here = os.path.join(here, part)
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return ""  # not there (yet): nothing to look into
        if stat.S_ISLNK(mode):
            return (
                f"{here} is a symbolic link; never followed (remove it, or point the variable "
                "at the directory itself)"
            )
        if not stat.S_ISDIR(mode):
            return f"{here} is not a directory"
    return ""


def open_cache(root: str, path: str) -> int:
    """A descriptor of the cache directory ``path``: reached from ``root`` without following a
    link where it lies in ``root`` (:func:`.._shared.open_below`; ``OSError`` ``ELOOP`` where a
    directory on the way is a link), else opened as the user set it."""
    if inside(path, root):
        return open_below(root, os.path.relpath(path, root))
    return subdir(None, path, follow=True)


def device(path: str) -> int:
    """The device of the file system holding ``path`` (``-1``: it cannot be read)."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return -1


def free_space(path: str) -> tuple[int, int]:
    """``(bytes free to this user, device)`` of the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, device(path)


def listdir(path: str) -> list[str]:
    """The names in ``path``; none where it cannot be read (gone, or not a directory)."""
    try:
        return os.listdir(path)
    except OSError:
        return []


# -- plain entries -------------------------------------------------------------------------------


class PlainEntry:
    """A plain entry of a cache: the path, the dot-files that belong to it, locks beside it."""

    __slots__ = ("cache_lock", "ident", "locks", "partials", "path", "sidecars")

    def __init__(self, path: str, cache_lock: str, ident: tuple[int, int] | None = None) -> None:
        self.path = path
        self.cache_lock = cache_lock
        #: ``(st_dev, st_ino)`` of what the survey saw (``None``: not recorded); a removal
        #: leaves whatever is there under the name now alone unless it is the same.
        self.ident = ident
        self.sidecars: list[str] = []
        self.locks: list[str] = []
        self.partials: list[str] = []

    def busy(self, *, dir_fd: int | None = None, cache_fd: int | None = None) -> str:
        """Why a lock or a writer beside the entry keeps it (``""``: none does).

        A partial of another machine, whose writer cannot be checked, counts as abandoned only
        when untouched for :data:`.cache.FOREIGN_STALE`, as the test cache judges its own.
        ``dir_fd``: the entry's directory, held (its locks and partials are looked at there);
        ``cache_fd``: the cache's, held (its ``.lock``).
        """
        if self.cache_lock:
            name = self.cache_lock if cache_fd is None else os.path.basename(self.cache_lock)
            if lock_held(name, dir_fd=cache_fd):
                return f"the cache is locked ({self.cache_lock})"
        for lock in self.locks:
            if lock_held(lock if dir_fd is None else os.path.basename(lock), dir_fd=dir_fd):
                return f"locked ({lock})"
        for part in self.partials:
            name = part if dir_fd is None else os.path.basename(part)
            try:
                os.lstat(name, dir_fd=dir_fd)
            except OSError:
                continue
            if not partial_abandoned(name, stale_after=FOREIGN_STALE, dir_fd=dir_fd):
                return f"being written ({os.path.basename(part)})"
        return ""


def _matches(rel: str, patterns: tuple[str, ...]) -> tuple[bool, bool]:
    """``(is a container, leads to one)`` for the relative path ``rel``."""
    parts = rel.split("/")
    full = deeper = False
    for pattern in patterns:
        want = pattern.split("/")
        if len(parts) <= len(want) and all(
            fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want, strict=False)
        ):
            if len(parts) == len(want):
                full = True
            else:
                deeper = True
    return full, deeper


class Listed(NamedTuple):
    """One directory of a plain cache where entries live, as :func:`walk_entries` held it."""

    #: Its path relative to the cache (``""``, ``"fxgraph/"``), and its full path.
    rel: str
    directory: str
    #: Its descriptor, valid until the walk moves on.
    fd: int
    #: Every name in it, and its entries (``(label, entry)``).
    names: list[str]
    entries: list[tuple[str, PlainEntry]]


def walk_entries(
    cache: CacheDir, claimed: list[str], fd: int, planted: list[str]
) -> Iterator[Listed]:
    """Every directory of a plain cache where entries live, the cache's own (held at ``fd``)
    first, each with its entries, the ``claimed`` directories (other caches') left out.

    Walked through held descriptors, as :func:`shutil.rmtree` does: each directory is listed
    through its descriptor and each sub-directory opened relative to it, never through a link.
    One that became a link (or no directory) since its parent was listed, or another directory,
    is not walked; ``planted`` gets a line saying so. A cache kept whole is one entry, its own
    directory, reported with the cache's descriptor.
    """
    cache_lock = ""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(".lock", dir_fd=fd).st_mode):
            cache_lock = os.path.join(cache.path, ".lock")
    if cache.whole:
        names = _names(fd)
        if names:
            st = os.fstat(fd)
            whole = PlainEntry(cache.path, cache_lock, (st.st_dev, st.st_ino))
            yield Listed("", cache.path, fd, names, [(WHOLE_LABEL, whole)])
        return
    yield from _walk_entries(
        cache, claimed, fd, ("", cache.path), cache_lock=cache_lock, planted=planted
    )


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _walk_entries(
    cache: CacheDir,
    claimed: list[str],
    fd: int,
    where: tuple[str, str],
    *,
    cache_lock: str,
    planted: list[str],
) -> Iterator[Listed]:
    rel, directory = where
    names = _names(fd)
    here: dict[str, PlainEntry] = {}
    found: list[tuple[str, PlainEntry]] = []
    below: list[tuple[str, str, str, os.stat_result]] = []
    for name in sorted(names):
        path = os.path.join(directory, name)
        sub = f"{rel}{name}"
        if any(inside(c, path) for c in claimed):
            continue  # another cache's directory, or holds one
        try:
            st = os.lstat(name, dir_fd=fd)
        except OSError:
            continue  # gone meanwhile
        full, deeper = _matches(sub, cache.containers)
        if (full or deeper) and stat.S_ISDIR(st.st_mode):
            below.append((name, sub, path, st))
            continue
        if name.startswith(".") or is_lock(name) or name.endswith(".lock.holder"):
            continue  # internal files; a lock and its holder record are never entries
        here[name] = PlainEntry(path, cache_lock, (st.st_dev, st.st_ino))
        found.append((sub, here[name]))
    _attach(here, names, directory)
    yield Listed(rel, directory, fd, names, found)
    for name, sub, path, st in below:
        child = open_seen(fd, name, path, st, planted.append)
        if child is None:
            continue
        try:
            yield from _walk_entries(
                cache, claimed, child, (sub + "/", path), cache_lock=cache_lock, planted=planted
            )
        finally:
            os.close(child)


def _attach(here: dict[str, PlainEntry], names: list[str], directory: str) -> None:
    """Give each entry of ``here`` what belongs to it among ``names`` (its dot-files, locks,
    partials)."""
    present = set(names)
    for name in names:
        owner = _owner(name, present)
        if owner in here:
            path = os.path.join(directory, name)
            if parse_partial(name) is not None:
                here[owner].partials.append(path)
            elif is_lock(name):
                here[owner].locks.append(path)
            else:
                here[owner].sidecars.append(path)


def _owner(name: str, present: set[str]) -> str:
    """The entry a dot-file or lock file ``name`` belongs to (``""``: none)."""
    parsed = parse_partial(name)
    if parsed is not None:
        return parsed[0]
    for suffix in (".lock.holder", ".meta.json", ".used", ".lock"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if stem.startswith(".") and stem[1:] in present:
                return stem[1:]
            if stem in present:
                return stem
    return ""
