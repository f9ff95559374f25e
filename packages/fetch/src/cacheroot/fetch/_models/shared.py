"""Model snapshots on the shared tier (L2): a host copies a revision that another host already
downloaded instead of asking the hub, and one host per revision asks the hub.

A fleet of hosts asking the hub for the same model at once is what rate limits (429) are for;
the shared tier makes it one request per file for the whole fleet. Both tiers keep the hub
clients' own layouts, at the same path relative to each root, so that libraries (and an overlay
mount of L2 under L1, ``cacheroot tier up``) find the files where they look:

- Hugging Face: ``models--org--name/blobs/<etag>`` holds the bytes, named after the hub's ETag
  (the sha256 of an LFS file, the git blob sha1 of a small one), ``snapshots/<commit>/<path>``
  are relative links to them, ``trees/<commit>.json`` (huggingface_hub 1.x and later) caches
  the commit's file listing. Only a pinned revision (a commit) is shared: ``refs/<branch>``
  moves, so a branch is resolved with the hub on every warm anyway.
- ModelScope (``modelscope_hub``): ``models/org--name/snapshots/<revision>/<path>`` holds the
  files themselves, one directory per revision, which copies as cleanly. A legacy cache that
  keeps the files directly under ``org/name`` (no revision in the path) is not shared: one
  revision's files would replace another's.

What marks a revision complete on L2 is cacheroot's completeness record (``snapshots/<key>.json``
under the state directory, see :mod:`.snapshot`), at its own path on L2, published with a link
that fails if the name exists, after every blob and link it names. Nothing trusts it: a reader
copies each file into a private partial, checks its sha256 against the record *and* against the
blob's name (its sha256, or its git blob sha1), and publishes it only then; the record of this
host's cache is written last. A copy torn by a writer killed mid-way (partials, no record) or a
record copied by ``tier sync`` before its blobs is simply not used, and the revision is fetched
from the hub as with one tier.

Writing through to L2 never replaces anything: a blob, link or record already there stays (it
was published complete), a snapshot directory that does not exist yet appears whole (staged,
then renamed), and the links of an existing one are added one by one.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import stat
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _held as _volume
from .. import _shared, _store
from .._held import rename as _rename_at

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    #: Makes one name of a snapshot: ``(held directory, name in it)`` (:func:`_place`).
    _Maker = Callable[[int, str], None]

__all__ = ["IDENTITY", "MAX_RECORD", "Tiers", "fill", "pull", "read_record", "tiers"]

log = logging.getLogger("cacheroot.fetch")

#: The record fields that name one revision (and its file selection): they must all match.
IDENTITY = (
    "format",
    "hub",
    "repo_type",
    "repo_id",
    "revision",
    "allow_patterns",
    "ignore_patterns",
)
#: Record fields that describe this host's files (inode, mtime), never carried between tiers.
_LOCAL = ("stat",)
#: The largest snapshot record (or huggingface_hub listing, ``trees/<commit>.json``) that is
#: read. Unlike the download core's records (:data:`.._store.MAX_RECORD`, a few hundred bytes
#: each) these name every file of a revision, some 250 bytes each: a dataset of a hundred
#: thousand files makes one of about 25 MiB. A larger one (a sparse file of gigabytes costs its
#: planter no disk) is damaged: never read, read as no record.
MAX_RECORD = 32 << 20
_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")


class Tiers(NamedTuple):
    """Where one snapshot's record and its hub cache are, on this host and on the shared tier."""

    hub: str
    record: str
    shared_hub: str
    shared_record: str


def tiers(record: str, hub_root: str, environ: Mapping[str, str] | None = None) -> Tiers | None:
    """The two tiers of the snapshot recorded at ``record`` (hub cache ``hub_root``); ``None``
    without a shared tier or when either lies outside the root (nothing to share then)."""
    shared_record = _shared.counterpart(record, environ)
    shared_hub = _shared.counterpart(hub_root, environ)
    if shared_record is None or shared_hub is None:
        return None
    return Tiers(hub_root, record, shared_hub, shared_record)


class _UnusableError(Exception):
    """The shared copy is missing a file or a file does not verify: none of it is used."""


class _File(NamedTuple):
    path: str
    size: int
    sha256: str


def read_record(path: str) -> dict[str, Any] | None:
    """The JSON object in the snapshot record (or listing) ``path``, read only once ``fstat``
    says it is a regular file of at most :data:`MAX_RECORD` bytes (:func:`.._store.read_small`);
    ``None`` when it is missing, larger, not JSON or not an object."""
    try:
        data = json.loads(_store.read_small(path, limit=MAX_RECORD))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _safe(rel: object) -> str:
    """``rel`` if it is a relative path that stays inside its directory; else unusable."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        raise _UnusableError(f"unsafe path {rel!r}")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise _UnusableError(f"unsafe path {rel!r}")
    return rel


def _revision(record: Mapping[str, Any], identity: Mapping[str, Any]) -> tuple[str, list[_File]]:
    """``(snapshot directory relative to the hub root, files)`` of a record of ``identity``."""
    for key in IDENTITY:
        if record.get(key) != identity.get(key):
            raise _UnusableError(f"another revision or selection ({key})")
    snapshot = _safe(record.get("snapshot"))
    parts = snapshot.split("/")
    if len(parts) < 3 or parts[-2] != "snapshots" or parts[-1] != identity["revision"]:
        raise _UnusableError(f"not a per-revision snapshot directory: {snapshot}")
    files = []
    for entry in record.get("files") or []:
        if not isinstance(entry, dict):
            raise _UnusableError("a malformed file entry")
        size, sha256 = entry.get("size"), entry.get("sha256")
        if (
            not isinstance(size, int)
            or not isinstance(sha256, str)
            or not _SHA256.fullmatch(sha256)
        ):
            raise _UnusableError("a malformed file entry")
        files.append(_File(_safe(entry.get("path")), size, sha256))
    listing = record.get("listing")
    if identity["hub"] == "hf" and not isinstance(listing, list):
        # Written by a cacheroot that could record a partly cached revision complete.
        raise _UnusableError("no listing of the revision in the record")
    if isinstance(listing, list) and not set(listing) <= {f.path for f in files}:
        raise _UnusableError("files of the revision's listing are not in the record")
    return snapshot, files


# -- bytes ------------------------------------------------------------------------------------


def _hashers(size: int, git_sha1: str | None) -> tuple[Any, Any]:
    blob = None
    if git_sha1 is not None:
        blob = hashlib.sha1(usedforsecurity=False)
        blob.update(b"blob %d\x00" % size)
    return hashlib.sha256(), blob


def _matches(path: str, want: _File, git_sha1: str | None) -> bool:
    """Whether the file at ``path`` holds ``want``'s bytes (and, given, that git blob id): a
    regular file with one name, opened without following a final link or blocking on a FIFO,
    and hashed only once ``fstat`` says it has ``want``'s size."""
    with contextlib.suppress(OSError):
        path = _blob_path(path, os.readlink(path))
    try:
        fd, st = _store.open_regular_stat(path)
    except OSError:
        return False
    try:
        if st.st_size != want.size or st.st_nlink != 1:
            return False
        sha, blob = _hashers(want.size, git_sha1)
        while chunk := os.read(fd, _CHUNK):
            sha.update(chunk)
            if blob is not None:
                blob.update(chunk)
    except OSError:
        return False
    finally:
        os.close(fd)
    return sha.hexdigest() == want.sha256 and (blob is None or blob.hexdigest() == git_sha1)


#: The target of a snapshot link as huggingface_hub makes it: up the tree, then a blob.
_BLOB_TARGET = re.compile(r"(\.\./)+blobs/([0-9a-f]{64}|[0-9a-f]{40})")


def _blob_path(link: str, target: str) -> str:
    """The blob the snapshot link ``link`` (whose target is ``target``) leads to, as a path;
    ``link`` itself, never followed, when it leads anywhere else."""
    if not _BLOB_TARGET.fullmatch(target):
        return link
    return os.path.normpath(os.path.join(os.path.dirname(link), target))


def _links_to(link: str, blob: str) -> bool:
    """Whether ``link`` (on this host) is a link whose target is ``blob`` (relative to the
    link's directory), read in its directory reached from the cache root, never followed."""
    try:
        fd, name, _on_volume = _volume.reach(link)
    except OSError:
        return False
    try:
        target = os.readlink(name, dir_fd=fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    return target == os.path.relpath(blob, os.path.dirname(link))


def _unlink(path: str) -> None:
    """Remove the name ``path`` in its directory, reached without following a link and held
    (best effort)."""
    with contextlib.suppress(OSError):
        fd, name, _on_volume = _volume.reach(path)
        try:
            _volume.remove(fd, name, directory=False)
        finally:
            os.close(fd)


def _clear_name(path: str) -> None:
    """Remove whatever is at ``path`` on this host, in its directory reached from the cache root
    and held: a directory as a tree through held descriptors, anything else as a name, never
    followed (best effort). A directory planted where a file belongs would stop the rename that
    publishes the file, and a link or a file with another name is not the file."""
    with contextlib.suppress(OSError):
        fd, name, _on_volume = _volume.reach(path)
        try:
            _volume.remove_tree(fd, name)
        finally:
            os.close(fd)


def _stat_here(path: str) -> os.stat_result:
    """The ``stat`` of the file ``path`` of this host's snapshot, its directory reached from the
    cache root and held: of the blob a Hugging Face snapshot link leads to (in its own
    repository's ``blobs/``, reached likewise), else of the name itself, never followed.
    :class:`OSError` when it is missing or unreachable."""
    fd, name, _on_volume = _volume.reach(path)
    try:
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        blob = _blob_path(path, target)
        if blob == path:  # a link elsewhere: the name itself
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)
    bfd, bname, _on_volume = _volume.reach(blob)
    try:
        return os.stat(bname, dir_fd=bfd, follow_symlinks=False)
    finally:
        os.close(bfd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _copy_checked(src: str, dst: str, want: _File, git_sha1: str | None) -> None:
    """Write a copy of ``src`` at the new name ``dst``, verified as it is copied; on a mismatch
    (or a source that is gone, or no regular file) nothing is left and :class:`_UnusableError`
    is raised."""
    try:
        source, st = _store.open_regular_stat(src)
    except FileNotFoundError:
        raise _UnusableError(f"{src} is missing") from None
    except OSError as exc:  # a link, FIFO, device or directory: never followed or read
        raise _UnusableError(f"{src}: {exc.strerror}") from None
    try:
        if st.st_size != want.size:  # another size cannot be its bytes: not read
            raise _UnusableError(f"{src} holds {st.st_size} bytes, its record {want.size}")
        fd = _store.open_regular(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _store.share(fd, os.path.dirname(dst))
            sha, blob = _hashers(want.size, git_sha1)
            size = 0
            while size <= want.size and (chunk := os.read(source, _CHUNK)):
                sha.update(chunk)
                if blob is not None:
                    blob.update(chunk)
                _write_all(fd, chunk)
                size += len(chunk)
            good = size == want.size and sha.hexdigest() == want.sha256
            good = good and (blob is None or blob.hexdigest() == git_sha1)
            if good:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink(dst)
            raise
        os.close(fd)
    finally:
        os.close(source)
    if not good:
        _unlink(dst)
        raise _UnusableError(f"{src} does not match its record (sha256 {sha.hexdigest()})")


@contextlib.contextmanager
def _here(l1_dir: str) -> Iterator[str]:
    """This host's directory ``l1_dir``, reached from the cache root and made without following
    a link (a planted one is refused: :class:`OSError`), as a path that no rename or link above
    it can redirect while the block runs."""
    fd = _volume.reach(os.path.join(l1_dir, "-"), create=True)[0]
    try:
        yield _shared.fd_path(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _held(l2_dir: str) -> Iterator[str]:
    """The shared tier's directory ``l2_dir``, reached and made without following a link (a
    planted one is refused: :class:`OSError`), as a path that no rename or link above it can
    redirect while the block runs (:func:`.._shared.fd_path`)."""
    top, rel = _shared.top_of(os.path.join(l2_dir, "-"))
    fd = _shared.open_below(top, rel, create=True)
    try:
        yield _shared.fd_path(fd)
    finally:
        os.close(fd)


def _publish_copy(src: str, final: str, want: _File, git_sha1: str | None) -> None:
    """Publish a verified copy of ``src`` at ``final`` unless something is there already."""
    tmp = _store.partial_path(final)
    _copy_checked(src, tmp, want, git_sha1)
    _shared.publish_new(tmp, final, durable=False)


# -- the Hugging Face layout ------------------------------------------------------------------


def _blob_name(link: str, repo_dir: str, *, here: bool = False) -> str:
    """The blob a snapshot link points to, which must be a hub blob of its own repository;
    ``here``: a link of this host's, read in its directory reached from the cache root and held
    (:func:`_readlink_here`)."""
    try:
        target = _readlink_here(link) if here else os.readlink(link)
    except FileNotFoundError:
        raise _UnusableError(f"{link} is missing") from None
    except OSError:  # not a link: a copy, which no blob name vouches for
        raise _UnusableError(f"{link} is not a link to a blob") from None
    where = os.path.normpath(os.path.join(os.path.dirname(link), target))
    name = os.path.basename(where)
    if os.path.dirname(where) != os.path.join(repo_dir, "blobs") or not (
        _SHA256.fullmatch(name) or _GIT_SHA1.fullmatch(name)
    ):
        raise _UnusableError(f"{link} does not point to a blob of its repository")
    return name


def _readlink_here(link: str) -> str:
    """The target of this host's link ``link``, read in its directory reached from the cache
    root without following a link (:class:`OSError` when it is not one, or unreachable)."""
    fd, name, _on_volume = _volume.reach(link)
    try:
        return os.readlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _holds(path: str, want: _File) -> bool:
    """Whether this host's file ``path`` holds ``want``'s bytes, opened in its directory
    reached from the cache root and held (:func:`_matches`); a missing or unreachable
    directory holds nothing."""
    try:
        fd, name, _on_volume = _volume.reach(path)
    except OSError:
        return False
    try:
        return _matches(_volume.held_path(fd, name), want, None)
    finally:
        os.close(fd)


def _git_sha1(name: str, want: _File) -> str | None:
    """What the blob's name vouches for beyond the record's sha256: the git blob sha1 of a small
    file (``None`` for an LFS blob, whose name must then be the sha256 itself)."""
    if _GIT_SHA1.fullmatch(name):
        return name
    if name != want.sha256:
        raise _UnusableError(f"blob {name} is named for other bytes than {want.path}")
    return None


def _place(snapshot_dir: str, makers: dict[str, _Maker], *, mine: bool) -> None:
    """Create each ``rel -> make(path)`` under ``snapshot_dir``: a directory that does not exist
    yet appears whole (a private partial directory beside it, filled, then renamed);
    into an existing one each name is published alone, never replacing what is there unless the
    tier is ``mine`` (this host's, where a wrong name may be replaced).

    ``snapshot_dir``'s parent is reached and held (:func:`.._held.reach`: from the cache root
    without following a link; a held path of the shared tier as given), and every name below
    it is made (``path``: a name in its held directory that no rename or link above can
    redirect), renamed or published through held descriptors. On this host a planted object
    that is no directory in the snapshot directory's place is removed (the name is the hub
    client's own); on the shared tier it is refused.
    """
    pfd, name, _on_volume = _volume.reach(snapshot_dir, create=True)
    try:
        st = _volume.lstat_quiet(name, pfd)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            if not mine:
                raise OSError(
                    errno.ELOOP,
                    f"expected a directory, found {_store.kind(st.st_mode)}",
                    snapshot_dir,
                )
            _volume.remove_tree(pfd, name)
            st = None
        if st is None and _staged(pfd, name, snapshot_dir, makers):
            return
        sfd = _volume.subdir(pfd, name)
    finally:
        os.close(pfd)
    try:
        for rel, make in makers.items():
            dfd, leaf = _below(sfd, rel)
            try:
                tmp = os.path.basename(_store.partial_path(leaf))
                there = _volume.lstat_quiet(leaf, dfd) if mine else None
                if there is not None and stat.S_ISDIR(there.st_mode):
                    _volume.remove_tree(dfd, leaf)  # planted: it would stop the rename
                try:
                    make(dfd, tmp)
                    if mine:
                        _rename_at(dfd, tmp, leaf)
                    else:
                        _shared.publish_new(tmp, leaf, durable=False, dir_fd=dfd)
                except BaseException:
                    _volume.remove(dfd, tmp, directory=False)  # never left in the snapshot
                    raise
            finally:
                if dfd != sfd:
                    os.close(dfd)
        _store.fsync_dir(snapshot_dir, dir_fd=sfd)
    finally:
        os.close(sfd)


def _staged(pfd: int, name: str, snapshot_dir: str, makers: dict[str, _Maker]) -> bool:
    """Make the snapshot directory ``name`` in the held ``pfd`` whole: a private partial
    directory filled by ``makers``, then renamed; whether ours was published (another may have
    been first)."""
    stage = os.path.basename(_store.partial_path(snapshot_dir))
    label = os.path.join(os.path.dirname(snapshot_dir), stage)
    sfd, mode = _volume.make_partial(pfd, stage, label)
    try:
        for rel, make in makers.items():
            dfd, _leaf = _below(sfd, rel)
            try:
                make(dfd, _leaf)
            finally:
                if dfd != sfd:
                    os.close(dfd)
        os.fchmod(sfd, _store.SHARED_DIR if _store.shared("", dir_fd=pfd) else mode)
        return _volume.publish(pfd, stage, name, sfd, replace=False, out=snapshot_dir)
    except BaseException:
        _volume.drop_stage(pfd, stage, sfd)
        raise
    finally:
        os.close(sfd)


def _below(top: int, rel: str) -> tuple[int, str]:
    """``(held directory, name)`` of ``rel`` below the held ``top``: its directories opened
    (made where missing) without following a link. The caller closes it unless it is ``top``."""
    *dirs, leaf = rel.split("/")
    fd = top
    for part in dirs:
        try:
            child = _volume.subdir(fd, part, create=True, share=True)
        finally:
            if fd != top:
                os.close(fd)
        fd = child
    return fd, leaf


def _link_maker(target: str) -> _Maker:
    return lambda dir_fd, name: _volume.symlink(dir_fd, target, name)


def _copy_maker(src: str, want: _File, git_sha1: str | None = None) -> _Maker:
    return lambda dir_fd, name: _copy_checked(src, _volume.fd_path(dir_fd, name), want, git_sha1)


def _on_both(tier: Tiers, relative: str) -> tuple[str, str]:
    """``relative`` (a repository, or a snapshot of one) on the shared tier and on this host."""
    return os.path.join(tier.shared_hub, relative), os.path.join(tier.hub, relative)


def _hf_pull(tier: Tiers, snapshot: str, files: list[_File]) -> None:
    repo = snapshot.split("/", maxsplit=1)[0]
    shared_repo, repo_dir = _on_both(tier, repo)
    shared_dir, snapshot_dir = _on_both(tier, snapshot)
    links: dict[str, _Maker] = {}
    # This host's blobs are written through their directory, reached from the cache root and
    # held: a planted link above them is refused, never followed.
    with _here(os.path.join(repo_dir, "blobs")) as blobs:
        for want in files:
            name = _blob_name(os.path.join(shared_dir, *want.path.split("/")), shared_repo)
            git_sha1 = _git_sha1(name, want)
            here = os.path.join(snapshot_dir, *want.path.split("/"))
            blob, held = os.path.join(repo_dir, "blobs", name), os.path.join(blobs, name)
            if _links_to(here, blob) and _matches(held, want, None):
                continue
            if os.path.lexists(held) and not _matches(held, want, git_sha1):
                _clear_name(held)  # damaged (or planted) here: the verified copy replaces it
            if not os.path.lexists(held):
                _publish_copy(os.path.join(shared_repo, "blobs", name), held, want, git_sha1)
            links[want.path] = _link_maker(os.path.relpath(blob, os.path.dirname(here)))
        _store.fsync_dir(blobs)
    _place(snapshot_dir, links, mine=True)
    with contextlib.suppress(OSError), _here(os.path.join(repo_dir, "trees")) as trees:
        _copy_tree_listing(os.path.join(shared_repo, "trees"), trees, snapshot)


def _hf_push(tier: Tiers, snapshot: str, files: list[_File]) -> None:
    repo = snapshot.split("/", maxsplit=1)[0]
    shared_repo, repo_dir = _on_both(tier, repo)
    shared_dir, snapshot_dir = _on_both(tier, snapshot)
    links: dict[str, _Maker] = {}
    # Written through held directories: a directory of the shared tier swapped for a link
    # is refused, never followed (the shared tier is written by other jobs).
    # This host's blobs are read through their directory, reached from the cache root and held.
    with (
        _held(os.path.join(shared_repo, "blobs")) as blobs,
        _here(os.path.join(repo_dir, "blobs")) as mine,
    ):
        for want in files:
            link = os.path.join(snapshot_dir, *want.path.split("/"))
            name = _blob_name(link, repo_dir, here=True)
            shared_blob = os.path.join(shared_repo, "blobs", name)
            if not os.path.lexists(os.path.join(blobs, name)):
                _publish_copy(os.path.join(mine, name), os.path.join(blobs, name), want, None)
            there = os.path.join(shared_dir, *want.path.split("/"))
            if not os.path.lexists(there):
                target = os.path.relpath(shared_blob, os.path.dirname(there))
                links[want.path] = _link_maker(target)
        _store.fsync_dir(blobs)
    if links:
        with _held(os.path.dirname(shared_dir)) as parent:
            _place(os.path.join(parent, os.path.basename(shared_dir)), links, mine=False)
    with _held(os.path.join(shared_repo, "trees")) as trees:
        _copy_tree_listing(os.path.join(repo_dir, "trees"), trees, snapshot)


def _copy_tree_listing(src_trees: str, dst_trees: str, snapshot: str) -> None:
    """Carry huggingface_hub's cached listing of the commit (``trees/<commit>.json``) along:
    immutable, so never replaced; one that does not parse is left behind."""
    name = f"{snapshot.rsplit('/', 1)[-1]}.json"
    src, dst = os.path.join(src_trees, name), os.path.join(dst_trees, name)
    if os.path.exists(dst) or read_record(src) is None:
        return
    with contextlib.suppress(OSError):
        _store.makedirs(os.path.dirname(dst))
        _shared.copy_new(src, dst)


# -- the ModelScope layout --------------------------------------------------------------------


def _ms_pull(tier: Tiers, snapshot: str, files: list[_File]) -> None:
    shared_dir, snapshot_dir = _on_both(tier, snapshot)
    copies: dict[str, _Maker] = {}
    for want in files:
        if _holds(os.path.join(snapshot_dir, *want.path.split("/")), want):
            continue
        copies[want.path] = _copy_maker(os.path.join(shared_dir, *want.path.split("/")), want)
    _place(snapshot_dir, copies, mine=True)


def _ms_push(tier: Tiers, snapshot: str, files: list[_File]) -> None:
    shared_dir, snapshot_dir = _on_both(tier, snapshot)
    # This host's files are read through its snapshot directory, reached from the cache root
    # and held (each file's own directories below it taken as the client made them).
    with _here(snapshot_dir) as mine:
        copies: dict[str, _Maker] = {}
        for want in files:
            if not os.path.lexists(os.path.join(shared_dir, *want.path.split("/"))):
                src = os.path.join(mine, *want.path.split("/"))
                copies[want.path] = _copy_maker(src, want)
        if copies:
            with _held(os.path.dirname(shared_dir)) as parent:
                _place(os.path.join(parent, os.path.basename(shared_dir)), copies, mine=False)


# -- the two directions -----------------------------------------------------------------------


def pull(tier: Tiers, identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """Copy the revision ``identity`` names from the shared tier into this host's hub cache.

    Returns the record to write for this host (its files' ``stat`` filled in), or ``None`` when
    the shared tier has no complete, verified copy; the caller writes the record, last.
    """
    record = read_record(tier.shared_record)
    if record is None:
        return None
    try:
        snapshot, files = _revision(record, identity)
        if identity["hub"] == "hf":
            _hf_pull(tier, snapshot, files)
        else:
            _ms_pull(tier, snapshot, files)
    except _UnusableError as why:
        log.warning(
            "%s on the shared tier is not used (%s): the hub is asked instead",
            tier.shared_record,
            why,
        )
        return None
    mine = {k: v for k, v in record.items() if k != "files"}
    mine["files"] = []
    for want in files:
        st = _stat_here(os.path.join(tier.hub, snapshot, *want.path.split("/")))
        entry = {"path": want.path, "size": want.size, "sha256": want.sha256}
        mine["files"].append({**entry, "stat": [st.st_size, st.st_mtime_ns, st.st_ino]})
    return mine


def push(tier: Tiers, record: Mapping[str, Any], identity: Mapping[str, Any]) -> bool:
    """Publish this host's complete revision (its ``record`` just written) on the shared tier.

    Blobs and links first, the record last and never replacing one that is there. Returns
    whether this host's record is now the shared one.
    """
    if os.path.lexists(tier.shared_record):
        return False
    try:
        snapshot, files = _revision(record, identity)
        if identity["hub"] == "hf":
            _hf_push(tier, snapshot, files)
        else:
            _ms_push(tier, snapshot, files)
    except (_UnusableError, OSError) as why:
        log.warning("snapshot %s not written to the shared tier: %s", tier.record, why)
        return False
    shared = {k: v for k, v in record.items() if k != "files"}
    shared["files"] = [{k: v for k, v in f.items() if k not in _LOCAL} for f in record["files"]]
    try:
        with _held(os.path.dirname(tier.shared_record)) as parent:
            final = os.path.join(parent, os.path.basename(tier.shared_record))
            tmp = _store.partial_path(final)
            fd = _store.open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                _store.share(fd, parent)
                _write_all(fd, json.dumps(shared, indent=1, sort_keys=True).encode())
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                _unlink(tmp)
                raise
            os.close(fd)
            return _shared.publish_new(tmp, final)
    except OSError as why:
        log.warning("snapshot %s not written to the shared tier: %s", tier.record, why)
        return False


def fill(
    tier: Tiers,
    identity: Mapping[str, Any],
    download: Callable[[], dict[str, Any]],
    write: Callable[[dict[str, Any]], None],
    *,
    timeout: float | None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Make the revision complete on this host: from the shared tier, or by ``download()``
    (which returns the record it wrote) under the revision's lease, then written through.

    ``write`` stores a record pulled from the shared tier. Returns :data:`.._shared.SHARED` or
    :data:`.._shared.LOCAL`.
    """
    downloaded: list[dict[str, Any]] = []

    def pulled() -> bool:
        record = pull(tier, identity)
        if record is None:
            return False
        write(record)
        return True

    served = _shared.fill_entry(
        tier.shared_record,
        pull=pulled,
        ready=lambda: os.path.exists(tier.shared_record),
        produce=lambda: downloaded.append(download()),
        push=lambda: push(tier, downloaded[-1], identity),
        timeout=timeout,
        environ=environ,
    )
    if served == _shared.SHARED:
        log.info("%s@%s: copied from the shared tier", identity["repo_id"], identity["revision"])
    return served
