"""Directories held from the top down: how cacheroot reaches a name on the volume.

The volume is written by other jobs, so every name on it may have been planted (see
``docs/explanation/threat-model.md``). A directory on the volume is reached from the cache root
(or the cache directory, where it is set outside the root) one component at a time with
``O_NOFOLLOW | O_DIRECTORY`` and held; what is made, renamed or removed in it is named relative
to that descriptor, so that a component swapped for a link after the walk leads nowhere. A
tree is emptied and removed through descriptors too, never following a link; a private
partial directory is made, filled and published by one rename in its held parent, only while
its name is still the directory this process made.

Paths outside the cache root and the cache directory are the caller's own: their directories
are followed, as given.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from ._cachedir import depends_key
from ._store import SHARED_DIR, makedirs, partial_path, shared

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Opening a directory below a held one: never through a link.
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def within(path: str, top: str) -> bool:
    """Whether the normalised absolute ``path`` is ``top`` or lies below it."""
    return path == top or path.startswith(top if top.endswith(os.sep) else top + os.sep)


def _top(path: str) -> tuple[str, bool]:
    """Where the walk down to the absolute ``path`` starts, and whether ``path`` is on the
    volume: the cache root, or the cache directory where it is set outside the root, when
    ``path`` lies in one; else ``path``'s own directory (a caller's own path, taken as given)."""
    here = os.path.dirname(path)
    for top in _tops():
        if within(here, top):
            return top, True
    return here, False


def _tops() -> tuple[str, ...]:
    """The cache root and the cache directory as the layout has them now (absolute), memoised
    on the variables they depend on: a hit pays a few look-ups, not a whole layout."""
    key = depends_key()
    found = _TOPS.get(key)
    if found is None:
        from cacheroot.envs import INVALID, VLLM_TEST_CACHE, resolve  # noqa: PLC0415 - on need

        layout = resolve(os.environ)
        tops = [layout.root] if layout.root else []
        setting = layout.settings.get(VLLM_TEST_CACHE)  # the cache directory, as fetch has it
        if setting is not None and setting.value and setting.source != INVALID:
            tops.append(os.path.expanduser(setting.value.strip()))
        found = _TOPS[key] = tuple(os.path.abspath(top) for top in tops)
    return found


_TOPS: dict[tuple[object, ...], tuple[str, ...]] = {}


def volume_top(path: str) -> str | None:
    """The cache root or the cache directory the absolute ``path`` is or lies in; ``None``
    for a path off the volume."""
    full = os.path.abspath(path)
    return next((top for top in _tops() if within(full, top)), None)


def tree(root: str, rel: str = "", *, create: bool = False) -> int:
    """A descriptor of the directory ``rel`` of the tree ``root`` a setting names (the hub's
    store), every component below where the walk starts opened without following a link (made
    where missing with ``create``).

    A tree on the volume (below the cache root or the cache directory: the default
    ``$CACHEROOT/hubcache``) is walked from the cache root or the cache directory, since its
    own directory is a name a co-tenant of the volume could swap for a link. A tree elsewhere
    is the operator's setting: its own directory is followed as given.
    """
    full = os.path.abspath(root)
    top = volume_top(full) or full
    if create and not os.path.isdir(top):
        makedirs(top)  # the operator's own setting
    return below(top, os.path.relpath(os.path.join(full, rel), top), create=create)


def reach(path: str, *, create: bool = False, follow: bool = False) -> tuple[int, str, bool]:
    """``(descriptor, name, on the volume)``: the directory ``path`` lies in, reached from the
    top (:func:`_top`) without following a link (made where missing with ``create``), and
    ``path``'s name in it. ``follow`` resolves a caller's own path off the volume first (an
    archive they named through a link)."""
    full = os.path.abspath(path)
    top, on_volume = _top(full)
    if follow and not on_volume:
        full = os.path.realpath(full)
        top, on_volume = _top(full)
    if create and not os.path.isdir(top):
        makedirs(top)  # the operator's (or the caller's) own setting
    rel = os.path.dirname(full)[len(top) :] if on_volume else ""
    return below(top, rel, create=create), os.path.basename(full), on_volume


def below(top: str, rel: str, *, create: bool = False) -> int:
    """A descriptor of the directory ``top/rel``, each component below ``top`` opened without
    following a link (:class:`OSError` ``ELOOP`` names the first that is a link or no
    directory; ``EINVAL`` a ``rel`` that leaves its tree through ``..``), made where missing with
    ``create`` (``0o2775`` in a group-shared parent, each made durable in its parent), again if
    one is removed before it could be opened. ``top`` itself is followed: it is the operator's
    (or the caller's) own setting."""
    parts = [p for p in os.path.normpath(rel).split(os.sep) if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EINVAL, "leaves its tree (..): refused", os.path.join(top, rel))
    fd = subdir(None, top, follow=True)
    here = top
    try:
        for part in parts:
            here = os.path.join(here, part)
            try:
                child = subdir(fd, part, create=create, share=True)
            except OSError as exc:
                # EMLINK: a link opened with O_NOFOLLOW on the BSDs; from a mkdir, a parent
                # with too many directories already (said as it is).
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) or (
                    exc.errno == errno.EMLINK and _is_link(part, fd)
                ):
                    raise OSError(
                        errno.ELOOP,
                        "is a symbolic link or not a directory: not followed (refused)",
                        here,
                    ) from None
                raise type(exc)(exc.errno, exc.strerror, here) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    st = lstat_quiet(name, dir_fd)
    return st is not None and stat.S_ISLNK(st.st_mode)


#: How often a directory made on the way is made again when it is removed before it could be
#: opened (a prune that removes empty directories, running in a loop).
_MAX_TRIES = 64


def subdir(
    parent: int | None,
    name: str,
    *,
    create: bool = False,
    share: bool = False,
    follow: bool = False,
) -> int:
    """The directory ``name`` in the one held at ``parent``, opened without following a link
    (``follow``: a path of the caller's, ``parent`` ``None``); made first (``0o777`` less the
    umask, ``0o2775`` in a group-shared parent with ``share``) when missing and ``create``."""
    flags = _DIR_FLAGS & ~_NOFOLLOW if follow else _DIR_FLAGS
    made = False
    for _ in range(_MAX_TRIES):
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except FileNotFoundError:
            if not create or parent is None:
                raise
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                continue
            made = True
            continue
        if made and parent is not None:
            if share and shared("", dir_fd=parent):
                with contextlib.suppress(OSError):
                    os.fchmod(fd, SHARED_DIR)  # the umask would take the group's write
            with contextlib.suppress(OSError):
                os.fsync(parent)  # the new name survives a crash of the host
        return fd
    raise FileNotFoundError(errno.ENOENT, "removed as soon as it was made, again and again", name)


def fd_path(fd: int, name: str = "") -> str:
    """A path for ``name`` in the directory open at ``fd`` that no rename or link above that
    directory can redirect (``/proc/self/fd``), for calls that take paths only."""
    return os.path.join(_FD_DIR, str(fd), name) if name else os.path.join(_FD_DIR, str(fd))


def held_path(fd: int, path: str) -> str:
    """:func:`fd_path` of ``path``'s last component in the directory held at ``fd`` (the one
    ``path`` lies in), for a library that opens by path; ``path`` itself where the system names
    no descriptors by path (no ``/proc``)."""
    if not _FD_PATHS:
        _FD_PATHS.append(os.path.isdir(_FD_DIR))
    return fd_path(fd, os.path.basename(path)) if _FD_PATHS[0] else path


#: Where a descriptor's directory can be named by a path (Linux): a name below it is then
#: resolved from that very directory, whatever was renamed or linked above it meanwhile.
_FD_DIR = "/proc/self/fd"
_FD_PATHS: list[bool] = []


def lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def remove(parent: int, name: str, *, directory: bool) -> None:
    """Remove the name ``name`` from the directory held at ``parent`` (best effort)."""
    with contextlib.suppress(OSError):
        if directory:
            os.rmdir(name, dir_fd=parent)
        else:
            os.unlink(name, dir_fd=parent)


def empty(top: int) -> None:
    """Remove everything in the directory held at ``top``, by name in each held directory,
    never following a link (best effort: what cannot be removed stays)."""
    try:
        stack: list[tuple[int, str, list[str]]] = [(top, "", os.listdir(top))]
    except OSError:
        return
    try:
        while stack:
            fd, _name, names = stack[-1]
            if not names:
                stack.pop()
                if stack:
                    os.close(fd)
                    remove(stack[-1][0], _name, directory=True)
                continue
            name = names.pop()
            st = lstat_quiet(name, fd)
            if st is None:
                continue
            if not stat.S_ISDIR(st.st_mode):
                remove(fd, name, directory=False)
                continue
            try:
                child = subdir(fd, name)
            except OSError:
                continue
            try:
                listing = os.listdir(child)
            except OSError:
                os.close(child)
                continue
            stack.append((child, name, listing))
    finally:
        for fd, _name, _names in stack[1:]:
            os.close(fd)


def lstat_quiet(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return None


def remove_tree(parent: int, name: str) -> None:
    """Remove the tree ``name`` of the directory held at ``parent``; a link or anything else
    there is removed as a name, never followed (best effort)."""
    try:
        fd = subdir(parent, name)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            remove(parent, name, directory=False)
        return
    try:
        empty(fd)
    finally:
        os.close(fd)
    remove(parent, name, directory=True)


def publish(dir_fd: int, stage: str, name: str, sfd: int, *, replace: bool, out: str) -> bool:
    """Rename the finished partial directory ``stage`` (held at ``sfd``) to ``name``, both in
    the directory held at ``dir_fd``; say whether ours was published.

    Without ``replace``, the first publisher wins: a tree already there stays, and ours is
    removed. With ``replace``, the tree there is renamed aside and removed once ours is in
    place (readers see the old tree or the new one, and for an instant nothing).
    """
    here = lstat_quiet(stage, dir_fd)
    if here is None or not os.path.samestat(here, os.fstat(sfd)):
        raise OSError(
            errno.ESTALE,
            "the partial directory was renamed or replaced by another process before it could "
            "be published",
            os.path.join(os.path.dirname(out), stage),
        )
    try:
        rename(dir_fd, stage, name)
    except OSError:
        st = lstat_quiet(name, dir_fd)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise
        if not replace:
            empty(sfd)
            remove(dir_fd, stage, directory=True)
            return False
        aside = os.path.basename(partial_path(out)) + ".old"
        rename(dir_fd, name, aside)
        try:
            rename(dir_fd, stage, name)
        except OSError:
            with contextlib.suppress(OSError):
                rename(dir_fd, aside, name)  # the old tree back where it was
            raise
        remove_tree(dir_fd, aside)
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)
    return True


def rename(dir_fd: int, old: str, new: str) -> None:
    """Rename ``old`` to ``new``, both in the directory held at ``dir_fd`` (the name moves,
    whatever it is: a link is never followed)."""
    move(dir_fd, old, dir_fd, new)


def move(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Rename ``src`` of the directory held at ``src_fd`` to ``dst`` of the one held at
    ``dst_fd``; :class:`OSError` as the system says it."""
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def unlink(dir_fd: int, name: str) -> None:
    """Remove the name ``name`` (a file, a link, a FIFO: never what it leads to) from the
    directory held at ``dir_fd``; :class:`OSError` as the system says it (:func:`remove` is
    the best-effort one)."""
    os.unlink(name, dir_fd=dir_fd)


def link(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Give the file ``src`` of the directory held at ``src_fd`` the second name ``dst`` in the
    one held at ``dst_fd``: the name itself, never what a link there leads to.
    :class:`FileExistsError` when ``dst`` exists in any form (a way to publish a complete file
    once); :class:`OSError` as the system says it otherwise."""
    os.link(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)


def symlink(dir_fd: int, target: str, name: str) -> None:
    """Make the link ``name`` to ``target`` in the directory held at ``dir_fd``
    (:class:`FileExistsError` when the name is taken: links are made under a partial name and
    published by rename)."""
    os.symlink(target, name, dir_fd=dir_fd)


def stamp(fd: int, ns: tuple[int, int] | None = None) -> None:
    """Set the access and modification times of the file open at ``fd`` (now, or ``ns``): by
    the descriptor, never by a name that could have been swapped for someone else's file."""
    if ns is None:
        os.utime(fd)
    else:
        os.utime(fd, ns=ns)


def drop_stage(dir_fd: int, stage: str, sfd: int) -> None:
    """Empty the staging directory open at ``sfd`` (ours, wherever it is now) and remove its
    name ``stage`` in the held ``dir_fd`` if that name is still it."""
    here = lstat_quiet(stage, dir_fd)
    empty(sfd)
    if here is not None and os.path.samestat(here, os.fstat(sfd)):
        remove(dir_fd, stage, directory=True)


def make_partial(out_fd: int, stage: str, label: str) -> tuple[int, int]:
    """``(descriptor, mode)`` of a new partial directory ``stage`` in the directory held at
    ``out_fd`` (``label``: its path), made private (``0700``) until it is published; ``mode``
    is the one it was made with."""
    sfd = subdir(out_fd, stage, create=True)
    made = os.fstat(sfd)
    if made.st_uid != os.geteuid():  # removed and made again by another user meanwhile
        os.close(sfd)
        raise OSError(errno.EPERM, "the partial directory was replaced by another user's", label)
    mode = stat.S_IMODE(made.st_mode)
    try:
        os.fchmod(sfd, 0o700 | (mode & stat.S_ISGID))
    except OSError:
        os.close(sfd)
        raise
    return sfd, mode
