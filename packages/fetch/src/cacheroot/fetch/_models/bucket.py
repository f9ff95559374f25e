"""Model snapshots through a bucket tier (``CACHEROOT_SHARED=s3://BUCKET/PREFIX``): what
:mod:`.shared` does on a shared file system, for a fleet that shares only an object store.

A pinned revision that another host of the fleet already downloaded is copied, verified, from
the bucket instead of asked of the hub; one host per revision asks the hub (the bucket's lease,
:mod:`.._bucket.lease`), and writes its complete revision through. The objects, below the
bucket's prefix:

- ``snapshots/<h>.json``: a complete revision's record, ``<h>`` the sha256 of the path of this
  host's record relative to the cache root (the path the file tier uses, hashed as an entry's
  name is, :func:`.._bucket.names.entry_hash`). It holds what the host's record holds but its
  files' ``stat`` (this host's inodes), and for Hugging Face two fields more: ``blobs``, each
  file's blob name in the hub layout (its ETag: the sha256 of an LFS file, the git blob sha1 of
  a small one), which a bucket has no links to read it from; and ``tree``, huggingface_hub's
  cached listing of the commit (``trees/<commit>.json``), when it has one. Written last,
  created only if absent (``If-None-Match: *`` where the bucket honours it).
- the files, named by their content: ``blobs/sha256/<hex>`` (Hugging Face's LFS files, every
  ModelScope file) and ``blobs/git-sha1/<hex>`` (Hugging Face's small files), the very objects
  the hub cache's files are (:mod:`.._bucket.hub`), so a file shared by both is stored once.
- ``leases/<h>``: who downloads the revision now (:func:`.._bucket.names.lease_name` of the
  same path).

Nothing in the bucket is trusted: the record is read bounded (:data:`.shared.MAX_RECORD`) and
checked as the file tier's is (:func:`.shared._revision`: the same revision and selection, safe
paths, a per-revision snapshot directory, the hub's listing); each blob name must be a sha256
or a git blob sha1, and an LFS file's must be its sha256. Each file is streamed into a private
partial of this host's hub layout, hashed on the way, and published only when its size, its
sha256 (the record's) and its name (the sha256, or the git blob sha1) all match; then the
snapshot's links (Hugging Face), and the host's own record last, by the caller. One file that
does not verify (or is missing) and none of the shared copy is used: the revision comes from
the hub, with one warning, and a host that may write replaces the damaged object with its
verified copy.

The trust tiers are the fetch entries' (:mod:`.._bucket.tier`): ``rw`` reads, leases and writes
through; ``ro`` reads only (no probe, no lease, no object written); ``off`` ignores the bucket.
A bucket that fails (down, denied, slow down, refused credentials) costs one note per cause
(:meth:`.._bucket.tier.Bucket.failed`) and never a warm the hub can serve.

Credentials: a gated repository's files are shared as the file tier shares them (the warm does
not know whether the hub's client sent a token): a fleet whose bucket is readable by jobs that
may not read a gated model should not warm it with ``rw``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _held, _store
from .._bucket.names import SNAPSHOTS, blob_name, entry_hash, git_blob_name, lease_name
from .._bucket.tier import LOCAL, SHARED, Bucket, bucket_of
from .shared import (
    _LOCAL,
    MAX_RECORD,
    _blob_name,
    _clear_name,
    _File,
    _git_sha1,
    _holds,
    _link_maker,
    _links_to,
    _matches,
    _place,
    _revision,
    _stat_here,
    _UnusableError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from obstore.store import ObjectStore

__all__ = ["SNAPSHOTS", "Revision", "fill", "pull", "record_object", "tiers"]

log = logging.getLogger("cacheroot.fetch")

#: Fields of the bucket's record that only the bucket's copy needs (never in a host's record).
_CARRIED = ("blobs", "tree")


def record_object(rel: str) -> str:
    """The record object of the snapshot recorded at ``rel`` (relative to the cache root)."""
    return f"{SNAPSHOTS}/{entry_hash(rel)}.json"


class Revision(NamedTuple):
    """One snapshot on this host (its record, its hub cache) and in the bucket."""

    bucket: Bucket
    hub: str
    record: str
    name: str
    lease: str


def tiers(record: str, hub_root: str, environ: Mapping[str, str] | None = None) -> Revision | None:
    """The snapshot recorded at ``record`` (hub cache ``hub_root``) on this host and in the
    environment's bucket; ``None`` without a usable bucket (off, down, said once), or when the
    record lies outside the cache root."""
    found = bucket_of(environ)
    if found is None:
        return None
    bucket, root = found
    rel = os.path.relpath(os.path.abspath(record), root)
    if rel in (".", "..") or rel.startswith(".." + os.sep):
        return None
    rel = "/".join(rel.split(os.sep))
    return Revision(bucket, hub_root, record, record_object(rel), lease_name(rel))


# -- bytes ------------------------------------------------------------------------------------


def _object_of(name: object) -> str:
    """The object of the hub blob ``name`` (a sha256 or a git blob sha1); else unusable."""
    shown = repr(name)[:80]  # read from the bucket: never shown whole
    if not isinstance(name, str):
        raise _UnusableError(f"blob name {shown}")
    try:
        return blob_name(name) if len(name) == 64 else git_blob_name(name)
    except ValueError:
        raise _UnusableError(f"blob name {shown}") from None


def _fetch(
    store: ObjectStore,
    name: str,
    final: str,
    want: _File,
    git_sha1: str | None,
    *,
    dir_fd: int | None = None,
) -> None:
    """Publish the object ``name`` at ``final`` (replacing what is there), streamed into a
    private partial and checked first: its size and sha256 ``want``'s, its git blob sha1
    ``git_sha1`` when given. Anything else, or no such object: :class:`_UnusableError`.

    ``final`` lies in the directory held at ``dir_fd`` (the partial is made, and renamed over
    the name, relative to it), or is a held path (:func:`.shared._place`'s): never a path that
    a link planted above it could redirect."""
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import NotFoundError  # noqa: PLC0415

    from .._bucket.transfer import BAD, hasher_for, publish_checked  # noqa: PLC0415

    if name in BAD:
        raise _UnusableError(f"object {name} was found damaged")
    try:
        got = obstore.get(store, name)
    except (FileNotFoundError, NotFoundError):
        raise _UnusableError(f"object {name} is missing") from None
    held = int(got.meta["size"])
    if held != want.size:
        BAD.add(name)
        raise _UnusableError(f"object {name} holds {held} bytes, the record says {want.size}")
    blob = None if git_sha1 is None else hasher_for(git_sha1, want.size)
    part = _store.Partial(final, dir_fd=dir_fd)

    def judge() -> str:
        if part.sha256 != want.sha256:
            return f"does not hold {want.path} (sha256 {part.sha256})"
        if blob is not None and blob.hexdigest() != git_sha1:
            return f"does not hold the bytes it is named by (git blob sha1 {blob.hexdigest()})"
        return ""

    # The hub's layout keeps only the file.
    why = publish_checked(
        got, part, want.size, judge, lambda: part.commit(sidecar=False), also=blob
    )
    if why:
        BAD.add(name)
        raise _UnusableError(f"object {name} {why}")


def _send(store: ObjectStore, name: str, path: str, size: int, *, conditional: bool) -> None:
    """Write the file ``path`` (``size`` bytes) to the object ``name`` unless it is there (and
    not found damaged): hashed to the name's digest (sha256 or git blob sha1) before its last
    part is handed over. Errors of the bucket are raised; a file that changed, :class:`OSError`."""
    from .._bucket.transfer import put_blob  # noqa: PLC0415 - the client is there

    # This host's file, opened in its directory reached from the cache root and held.
    parent, leaf, _on_volume = _held.reach(path)
    try:
        fd, st = _store.open_regular_stat(leaf, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        if st.st_size != size:
            raise _UnusableError(f"{path} no longer holds the {size} bytes recorded")
        put_blob(store, fd, size, name.rsplit("/", 1)[1], conditional=conditional)
    finally:
        os.close(fd)


# -- the two layouts --------------------------------------------------------------------------


def _hf_pull(
    store: ObjectStore, tier: Revision, record: Mapping[str, Any], snapshot: str, files: list[_File]
) -> None:
    repo = snapshot.split("/", maxsplit=1)[0]
    repo_dir, snapshot_dir = os.path.join(tier.hub, repo), os.path.join(tier.hub, snapshot)
    names = record.get("blobs")
    if not isinstance(names, dict):
        raise _UnusableError("no blob names in the record")
    links: dict[str, Callable[[int, str], None]] = {}
    fetched = False
    # This host's blobs are written through their directory, reached from the cache root and
    # held (made where missing): a link planted above them is refused, never followed.
    fd = _held.reach(os.path.join(repo_dir, "blobs", "-"), create=True)[0]
    try:
        for want in files:
            name = names.get(want.path)
            obj = _object_of(name)
            leaf = obj.rsplit("/", 1)[1]
            git_sha1 = _git_sha1(leaf, want)
            here = os.path.join(snapshot_dir, *want.path.split("/"))
            blob, held = os.path.join(repo_dir, "blobs", leaf), _held.held_path(fd, leaf)
            if _links_to(here, blob) and _matches(held, want, None):
                continue
            if not _matches(held, want, git_sha1):
                # Missing, damaged or planted: the verified copy replaces it (a directory
                # there would stop the rename).
                st = _held.lstat_quiet(leaf, fd)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    _clear_name(held)
                _fetch(store, obj, blob, want, git_sha1, dir_fd=fd)
                fetched = True
            links[want.path] = _link_maker(os.path.relpath(blob, os.path.dirname(here)))
        if fetched:
            _store.fsync_dir(os.path.join(repo_dir, "blobs"), dir_fd=fd)
    finally:
        os.close(fd)
    _place(snapshot_dir, links, mine=True)
    _write_tree(record, os.path.join(repo_dir, "trees"), snapshot)


def _write_tree(record: Mapping[str, Any], trees: str, snapshot: str) -> None:
    """huggingface_hub's listing of the commit, carried by the record: written where the client
    caches it unless it is there (a commit's listing never changes). One that does not name
    every file of the record's listing is left out."""
    tree, listing = record.get("tree"), record.get("listing")
    if not isinstance(tree, dict) or not isinstance(tree.get("files"), dict):
        return
    if not isinstance(listing, list) or not set(listing) <= set(tree["files"]):
        return
    final = os.path.join(trees, f"{snapshot.rsplit('/', 1)[-1]}.json")
    with contextlib.suppress(OSError):
        # Written in the directory reached from the cache root and held (made where missing).
        fd = _held.reach(os.path.join(trees, "-"), create=True)[0]
        try:
            if _held.lstat_quiet(os.path.basename(final), fd) is not None:
                return
            part = _store.Partial(final, dir_fd=fd)
            try:
                part.write(json.dumps(tree, indent=1, sort_keys=True).encode("utf-8"))
                part.commit(sidecar=False)
            except BaseException:
                part.discard()
                raise
        finally:
            os.close(fd)


def _ms_pull(store: ObjectStore, tier: Revision, snapshot: str, files: list[_File]) -> None:
    snapshot_dir = os.path.join(tier.hub, snapshot)
    copies: dict[str, Callable[[int, str], None]] = {}
    for want in files:
        if _holds(os.path.join(snapshot_dir, *want.path.split("/")), want):
            continue
        copies[want.path] = _maker(store, want)
    _place(snapshot_dir, copies, mine=True)


def _maker(store: ObjectStore, want: _File) -> Callable[[int, str], None]:
    return lambda dir_fd, name: _fetch(
        store, blob_name(want.sha256), _held.fd_path(dir_fd, name), want, None
    )


def _sources(
    tier: Revision, identity: Mapping[str, Any], snapshot: str, files: list[_File]
) -> list[tuple[_File, str, str]]:
    """``(file, its object, its path on this host)`` of each file of this host's revision."""
    snapshot_dir = os.path.join(tier.hub, snapshot)
    found: list[tuple[_File, str, str]] = []
    if identity["hub"] != "hf":
        for want in files:
            here = os.path.join(snapshot_dir, *want.path.split("/"))
            found.append((want, blob_name(want.sha256), here))
        return found
    repo_dir = os.path.join(tier.hub, snapshot.split("/", maxsplit=1)[0])
    for want in files:
        name = _blob_name(os.path.join(snapshot_dir, *want.path.split("/")), repo_dir, here=True)
        _git_sha1(name, want)  # an LFS blob is named by the very sha256 recorded
        found.append((want, _object_of(name), os.path.join(repo_dir, "blobs", name)))
    return found


# -- the two directions -----------------------------------------------------------------------


def _tree_here(path: str) -> dict[str, Any] | None:
    """huggingface_hub's cached listing ``path`` on this host, read in its directory reached
    from the cache root and held, only once ``fstat`` says it is a regular file with one name of
    at most :data:`.shared.MAX_RECORD` bytes; ``None`` when it is missing, unreachable, larger,
    not JSON or not an object."""
    try:
        fd, name, _on_volume = _held.reach(path)
    except OSError:
        return None
    try:
        data = json.loads(_store.read_small(name, dir_fd=fd, limit=MAX_RECORD))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def _read(tier: Revision) -> dict[str, Any] | None:
    """The bucket's record of the revision (``None``: there is none); one that is too large or
    no JSON object is unusable. Errors of the bucket are raised."""
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import NotFoundError  # noqa: PLC0415

    try:
        got = obstore.get(tier.bucket.clients.control, tier.name)
    except (FileNotFoundError, NotFoundError):
        return None
    if int(got.meta["size"]) > MAX_RECORD:
        raise _UnusableError(f"a record over {MAX_RECORD} bytes")
    try:
        data = json.loads(bytes(got.bytes()))
    except ValueError:
        raise _UnusableError("a record that is not JSON") from None
    if not isinstance(data, dict):
        raise _UnusableError("a record that is not a JSON object")
    return data


def _present(tier: Revision) -> bool:
    """Whether the bucket has a record of the revision (one request)."""
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import NotFoundError  # noqa: PLC0415

    try:
        obstore.head(tier.bucket.clients.control, tier.name)
    except (FileNotFoundError, NotFoundError):
        return False
    return True


def _pull(tier: Revision, identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """Copy the revision from the bucket into this host's hub cache; the record to write for
    this host, or ``None`` when the bucket has none. :class:`_UnusableError` when it has one that
    is not used; errors of the bucket and of this host's cache are raised."""
    record = _read(tier)
    if record is None:
        return None
    snapshot, files = _revision(record, identity)
    store = tier.bucket.clients.data
    if identity["hub"] == "hf":
        _hf_pull(store, tier, record, snapshot, files)
    else:
        _ms_pull(store, tier, snapshot, files)
    mine = {k: v for k, v in record.items() if k != "files" and k not in _CARRIED}
    mine["files"] = []
    for want in files:
        st = _stat_here(os.path.join(tier.hub, snapshot, *want.path.split("/")))
        entry = {"path": want.path, "size": want.size, "sha256": want.sha256}
        mine["files"].append({**entry, "stat": [st.st_size, st.st_mtime_ns, st.st_ino]})
    return mine


def _not_used(tier: Revision, why: BaseException) -> None:
    log.warning(
        "%s/%s in the bucket is not used (%s): the hub is asked instead",
        tier.bucket.url.rstrip("/"),
        tier.name,
        why,
    )


def pull(tier: Revision, identity: Mapping[str, Any]) -> dict[str, Any] | None:
    """Copy the revision ``identity`` names from the bucket into this host's hub cache (a
    cache-only run: no lease, nothing written to the bucket).

    Returns the record to write for this host, or ``None`` when the bucket has no complete,
    verified copy (a copy not used, and a bucket that fails, are said). Errors of this host's
    cache (:class:`OSError`) are raised."""
    try:
        return _pull(tier, identity)
    except _UnusableError as why:
        _not_used(tier, why)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the run
        tier.bucket.failed(exc, "serve this snapshot")
    return None


def push(
    tier: Revision,
    record: Mapping[str, Any],
    identity: Mapping[str, Any],
    *,
    conditional: bool,
    heal: bool = False,
) -> bool:
    """Write this host's complete revision (its ``record`` just written) through: each file's
    object unless it is there, then the record, created only if absent when the bucket honours
    ``conditional`` writes. A revision the bucket has a record of is left alone, unless one of
    its objects was found damaged or ``heal`` (the bucket's copy was not used: an object may be
    missing): each object is then looked at, and a missing or damaged one sent. Returns whether
    this host's record is now the bucket's. Errors of the bucket are raised; a revision that
    cannot be shared is said (``False``)."""
    import obstore  # noqa: PLC0415 - the client is there: the bucket opened
    from obstore.exceptions import AlreadyExistsError, PreconditionError  # noqa: PLC0415

    from .._bucket.transfer import BAD  # noqa: PLC0415

    clients = tier.bucket.clients
    try:
        snapshot, files = _revision(record, identity)
        sources = _sources(tier, identity, snapshot, files)
        # Shared already, and nothing of it found damaged or missing: nothing to send.
        damaged = heal or any(obj in BAD for _want, obj, _path in sources)
        if _present(tier) and not damaged:
            return False
        for want, obj, path in sources:
            _send(clients.data, obj, path, want.size, conditional=conditional)
    except (_UnusableError, OSError) as why:
        log.warning("snapshot %s not written to the bucket: %s", tier.record, why)
        return False
    doc = {k: v for k, v in record.items() if k != "files"}
    doc["files"] = [{k: v for k, v in f.items() if k not in _LOCAL} for f in record["files"]]
    if identity["hub"] == "hf":
        doc["blobs"] = {want.path: obj.rsplit("/", 1)[1] for want, obj, _path in sources}
        repo_dir = os.path.join(tier.hub, snapshot.split("/", maxsplit=1)[0])
        tree = _tree_here(os.path.join(repo_dir, "trees", f"{snapshot.rsplit('/', 1)[-1]}.json"))
        if tree is not None:
            doc["tree"] = tree
    body = json.dumps(doc, sort_keys=True).encode("utf-8")
    if len(body) > MAX_RECORD:
        log.warning("snapshot %s not written to the bucket: its record is too large", tier.record)
        return False
    try:
        obstore.put(clients.control, tier.name, body, mode="create" if conditional else "overwrite")
    except (AlreadyExistsError, PreconditionError):
        return False
    return True


def fill(
    tier: Revision,
    identity: Mapping[str, Any],
    download: Callable[[], dict[str, Any]],
    write: Callable[[dict[str, Any]], None],
    *,
    timeout: float | None,
) -> str:
    """Make the revision complete on this host: from the bucket, or by ``download()`` (which
    returns the record it wrote) under the revision's lease, then written through (``rw``).

    ``write`` stores a record pulled from the bucket. Returns :data:`.._bucket.tier.SHARED` or
    :data:`.._bucket.tier.LOCAL` (the same words as :data:`.._shared.SHARED` and ``LOCAL``).
    """
    bucket = tier.bucket
    refused = False  # the bucket's copy was found and not used: not tried again by this warm

    def served() -> bool:
        nonlocal refused
        if refused:
            return False
        try:
            record = _pull(tier, identity)
        except _UnusableError as why:
            refused = True
            _not_used(tier, why)
            return False
        if record is None:
            return False
        write(record)
        log.info("%s@%s: copied from the shared tier", identity["repo_id"], identity["revision"])
        return True

    lease = None
    writes: str | None = None
    try:
        try:
            if served():
                return SHARED
            writes = bucket.writes()
            if writes == "conditional":
                from .._bucket.lease import Lease  # noqa: PLC0415 - only a bucket tier loads it

                lease = Lease(bucket.clients.control, tier.lease)
                outcome = lease.acquire(lambda: not refused and _present(tier), timeout)
                if outcome != "held":
                    lease = None
                # The record may have come while this host waited, or between its first look
                # and the lease.
                if outcome != "timeout" and served():
                    return SHARED
        except OSError as exc:  # this host's cache (the bucket's errors are not OSErrors)
            log.warning("%s: not copied from the bucket (%s)", tier.record, exc)
        except Exception as exc:  # noqa: BLE001 - a bucket that fails costs a note, not the warm
            bucket.failed(exc, "serve this snapshot")
            writes = None
        record = download()
        if writes is not None and not bucket.down:
            try:
                push(tier, record, identity, conditional=writes == "conditional", heal=refused)
            except Exception as exc:  # noqa: BLE001 - the revision is here; sharing it failed
                bucket.failed(exc, "take this snapshot")
    finally:
        if lease is not None:
            lease.release()
    return LOCAL
