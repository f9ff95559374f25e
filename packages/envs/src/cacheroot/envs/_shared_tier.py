"""The shared tier's rules (``CACHEROOT_SHARED``), in one place for ``cacheroot doctor``, the
downloads and ``cacheroot tier``: the shared root must be another volume than the host's own
cache, and an existing directory this host can write (cacheroot never creates it: an unmounted
volume or a typo would fill the host's own disk instead).

How a process uses it is its trust tier (``CACHEROOT_SHARED_MODE``, :func:`shared_mode`): ``rw``
reads and writes, ``ro`` only reads (an untrusted build: nothing it runs can reach the fleet), and
``off`` ignores it. A volume mounted read-only is read as ``ro`` (:func:`read_only_mount`).

The shared tier may also be a bucket of an object store (``s3://BUCKET/PREFIX``, ``gs://``,
``az://``: :func:`shared_url`): no volume to mount, the same trust tiers. Only the scheme is
read here (the hook and a hit must not pay for an object-store client); the downloads reach the
bucket through ``cacheroot.fetch``'s bucket client, which reads its own configuration
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) as the ecosystem's tools do.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from _cacheroot_layout import CACHEROOT, CACHEROOT_SHARED, CACHEROOT_SHARED_MODE

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BUCKET_SCHEMES",
    "MODES",
    "OFF",
    "RO",
    "RW",
    "overlap_problem",
    "read_only_mount",
    "shared_mode",
    "shared_root_problem",
    "shared_url",
]

#: The trust tiers: read and write, read only, ignored.
RW, RO, OFF = "rw", "ro", "off"
MODES = (RW, RO, OFF)
#: The URL schemes that make ``CACHEROOT_SHARED`` a bucket (as the object-store client spells
#: them: S3 and S3-compatible stores, Google Cloud Storage, Azure Blob Storage).
BUCKET_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure")


def shared_url(environ: Mapping[str, str]) -> str | None:
    """``CACHEROOT_SHARED`` of ``environ`` when it names a bucket (``s3://...``: a scheme of
    :data:`BUCKET_SCHEMES`, any case), padding removed; ``None`` when it is unset, blank or a
    path. Only the scheme is checked: what follows it is judged where the bucket is opened, so
    that a malformed value is one note there, never a failure of the start-up hook."""
    raw = environ.get(CACHEROOT_SHARED)
    if raw is None:
        return None
    value = raw.strip()
    scheme, sep, _rest = value.partition("://")
    if not sep or scheme.lower() not in BUCKET_SCHEMES:
        return None
    return value


def shared_mode(environ: Mapping[str, str]) -> str:
    """``CACHEROOT_SHARED_MODE`` of ``environ``: ``rw`` (also when unset or blank), ``ro`` or
    ``off``; :class:`ValueError` for anything else (any case and padding accepted)."""
    raw = environ.get(CACHEROOT_SHARED_MODE)
    if raw is None or not raw.strip():
        return RW
    value = raw.strip().lower()
    if value not in MODES:
        raise ValueError(
            f"{CACHEROOT_SHARED_MODE}={raw!r} is not a mode: expected one of "
            f"{', '.join(MODES)} (rw: read and write the shared tier, the default; ro: read "
            "it only, for untrusted builds; off: ignore it)"
        )
    return value


def read_only_mount(path: str) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (a bind mount's own flag
    counts); ``False`` where that cannot be asked."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def overlap_problem(root: str, l2: str) -> str:
    """Why ``l2`` cannot be the shared tier of the host root ``root`` because the two overlap
    (the same directory, one inside the other, also through links), or ``""``.

    One tree cannot be both a host's own cache and the fleet's: a sync would copy it into itself
    and an eviction of one tier would remove the other's files.
    """
    pairs = [(root, l2), (os.path.realpath(root), os.path.realpath(l2))]
    for a, b in pairs:
        why = (
            "is the same directory as"
            if a == b
            else "is inside"
            if _within(b, a)
            else "contains"
            if _within(a, b)
            else ""
        )
        if why:
            return (
                f"{CACHEROOT_SHARED}={l2} {why} {CACHEROOT}={root}: expected another volume than "
                f"this host's cache (the fleet's shared one); point {CACHEROOT_SHARED} there, or "
                "unset it to use one tier"
            )
    return ""


def shared_root_problem(l2: str, probe: str) -> str:
    """Why the shared tier's root ``l2`` cannot be used (``""`` when it can): it must be an
    existing directory this process can create a file in (``probe``, a name inside ``l2`` that
    the caller's own clean-up recognises).

    Writability is tried, not asked of ``os.access``: a server that squashes root answers
    otherwise than the client's view of the permissions.
    """
    if not os.path.isdir(l2):
        why = "is not a directory" if os.path.lexists(l2) else "does not exist"
    else:
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:
            why = f"is not writable by uid {os.getuid()} ({exc.strerror or exc})"
        else:
            return ""
    return (
        f"{CACHEROOT_SHARED}={l2} {why}: expected the fleet's shared volume, a directory this "
        "host can write (cacheroot never creates it: an unmounted volume or a typo would fill "
        f"this host's disk instead); mount it there, or unset {CACHEROOT_SHARED} to use one tier"
    )
