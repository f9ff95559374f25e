"""The merged view of the two tiers: L2 shown under L1 at a path of the operator's choosing.

:func:`up` mounts an OverlayFS with the shared tier (L2) as the read-only lower layer and the
host's root (L1) as the upper one, where the kernel and the privileges allow it; otherwise it
seeds L1 from L2 (:func:`.layers.seed`) and makes the merged path a link to L1. :func:`down`
undoes it.

What this module makes, mounts, links and removes are the paths the operator names: the
merged view (``tier up MERGED``), the overlay's work directory beside L1, and L1 itself where it
is missing. None of them lies below the cache root, so none is reached through held
descriptors; what is copied into L1 is, in :mod:`.layers`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess

from .. import _store
from .layers import root_gone, seed

__all__ = ["WORK_SUFFIX", "down", "overlay_supported", "up", "work_dir"]

log = logging.getLogger("cacheroot.fetch")

#: The directory ``up`` makes for the overlay's work directory, beside the root (same disk).
WORK_SUFFIX = ".overlay-work"


def overlay_supported(filesystems: str = "/proc/filesystems") -> bool:
    """Whether this kernel knows OverlayFS (mounting it may still be refused: privileges)."""
    try:
        with open(filesystems, encoding="ascii") as f:
            return any(line.split()[-1:] == ["overlay"] for line in f)
    except OSError:
        return False


def work_dir(l1: str) -> str:
    """The overlay's work directory for the upper layer ``l1``: beside it, on the same disk."""
    head, name = os.path.split(os.path.normpath(l1))
    return os.path.join(head, f".{name}{WORK_SUFFIX}")


def _mount_overlay(l1: str, l2: str, merged: str, work: str) -> str:
    """Mount the overlay; ``""`` on success, else why it could not be."""
    if not overlay_supported():
        return "this kernel has no OverlayFS (not in /proc/filesystems)"
    for path in (l1, l2, work):
        if any(c in path for c in ",:\\"):
            return f"{path!r} contains ',', ':' or '\\', which overlay mount options cannot hold"
    os.makedirs(work, exist_ok=True)
    if os.stat(work).st_dev != os.stat(l1).st_dev:
        return (
            f"the work directory {work} is not on the same file system as {l1} (is {l1} a mount "
            "point? pass --work DIR on its disk, or set CACHEROOT to a directory inside it)"
        )
    options = f"lowerdir={l2},upperdir={l1},workdir={work}"
    done = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, merged],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return " ".join((done.stderr or done.stdout).split()) or f"mount exited {done.returncode}"
    return ""


def up(
    l1: str,
    l2: str,
    merged: str,
    *,
    mode: str = "auto",
    work: str | None = None,
    max_size: int | None = None,
    min_free: int | None = None,
    shared: bool = True,
) -> tuple[str, str]:
    """Show ``l2`` under ``l1`` at ``merged``: ``("overlay", "")``, or ``("seed", why)`` after
    seeding ``l1`` and linking ``merged`` to it; without ``shared`` (the trust tier ``off``),
    ``("link", "")`` after linking ``merged`` to ``l1`` alone.

    ``mode``: ``auto`` (overlay, else seed), ``overlay`` (raise :class:`OSError` if it cannot),
    ``seed``. ``merged`` must be absent or an empty directory. ``l1`` is made if need be, ``l2``
    never (:class:`FileNotFoundError`).
    """
    if shared and not os.path.isdir(l2):
        raise root_gone(l2)
    _store.makedirs(l1)  # as seeding makes it: 2775 in a group-shared parent
    if os.path.islink(merged) or os.path.ismount(merged):
        raise OSError(f"{merged} is already up (a link or a mount point): run `tier down` first")
    if os.path.isdir(merged) and os.listdir(merged):
        raise OSError(f"{merged} is a directory that is not empty: the merged view needs its own")
    if not shared:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(merged)
        os.symlink(os.path.abspath(l1), merged)
        return "link", ""
    why = "seeding asked for (--mode seed)"
    if mode != "seed":
        os.makedirs(merged, exist_ok=True)
        why = _mount_overlay(l1, l2, merged, work or work_dir(l1))
        if not why:
            return "overlay", ""
        if mode == "overlay":
            raise OSError(f"cannot mount the overlay at {merged}: {why}")
        log.info("tier up: no overlay (%s); seeding %s from %s", why, l1, l2)
    report = seed(l2, l1, max_size=max_size, min_free=min_free)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(merged)
    os.symlink(os.path.abspath(l1), merged)
    return "seed", f"{why}; {report}"


def down(merged: str) -> str:
    """Undo :func:`up` at ``merged``: unmount the overlay or remove the link; says which."""
    if os.path.islink(merged):
        os.unlink(merged)
        return "link removed"
    if os.path.ismount(merged):
        done = subprocess.run(
            ["umount", merged],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"cannot unmount {merged}: {(done.stderr or done.stdout).strip()}")
        with contextlib.suppress(OSError):
            os.rmdir(merged)
        return "overlay unmounted"
    return "nothing was up"
