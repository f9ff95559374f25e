"""The names of the tier's objects below the bucket's prefix.

- ``blobs/sha256/<hex>``: an entry's bytes, named by their content, so that two hosts writing
  the same blob write the same bytes and no blob is ever replaced by other ones; the hub cache's
  files named by their sha256 (:mod:`.hub`) are these very objects;
- ``blobs/git-sha1/<hex>``: the hub cache's small files, named by their git blob sha1 (the
  name the Hub gives them); no record names them;
- ``records/<h>.json``: an entry's record (:mod:`.records`), written after its blob, so that a
  reader never takes a blob that is still being written;
- ``leases/<h>``: who is downloading the entry now (:mod:`.lease`);
- ``probes/<owner>``: a process's start-up check of conditional writes (:mod:`.probe`);
- ``snapshots/<h>.json``: a model snapshot's record (written by the models' bucket tier), after
  the files it names (``blobs/...``);
- ``trees/<h>.json``: a ``build_once`` tree's record (:mod:`.trees`), after its archive;
- ``answers/<h>``: a hub cache's signed answer to an API request (:mod:`.hub`), ``<h>`` naming
  its path in the hub's store as for an entry.

``<h>`` is the sha256 of the entry's path relative to the cache root, the path the file tier
uses: two hosts with the same layout name an entry alike, and a name in the bucket is always a
plain hex string, whatever characters the URL's file name had.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "ANSWERS",
    "BLOBS",
    "GIT_BLOBS",
    "LEASES",
    "PROBES",
    "RECORDS",
    "SNAPSHOTS",
    "answer_name",
    "blob_name",
    "entry_hash",
    "git_blob_name",
    "lease_name",
    "probe_name",
    "record_name",
]

BLOBS = "blobs/sha256"
GIT_BLOBS = "blobs/git-sha1"
RECORDS = "records"
LEASES = "leases"
PROBES = "probes"
ANSWERS = "answers"
SNAPSHOTS = "snapshots"
_HEX = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


def entry_hash(rel: str) -> str:
    """The hex name of the entry at ``rel`` (its path relative to the cache root)."""
    return hashlib.sha256(rel.encode("utf-8", "surrogatepass")).hexdigest()


def answer_name(rel: str) -> str:
    """The hub cache's answer kept at ``rel`` (its path relative to the cache root)."""
    return f"{ANSWERS}/{entry_hash(rel)}"


def blob_name(sha256: str) -> str:
    """The blob of the bytes whose sha256 is ``sha256``; :class:`ValueError` for anything but
    64 lowercase hex digits (a record's digest is read from the bucket: never a path)."""
    if not _HEX.fullmatch(sha256):
        raise ValueError(f"sha256 {sha256!r}: expected 64 lowercase hex digits")
    return f"{BLOBS}/{sha256}"


def git_blob_name(sha1: str) -> str:
    """The hub file whose git blob sha1 is ``sha1``; :class:`ValueError` for anything but 40
    lowercase hex digits."""
    if not _SHA1.fullmatch(sha1):
        raise ValueError(f"git blob sha1 {sha1!r}: expected 40 lowercase hex digits")
    return f"{GIT_BLOBS}/{sha1}"


def record_name(rel: str) -> str:
    """The record of the entry at ``rel``."""
    return f"{RECORDS}/{entry_hash(rel)}.json"


def lease_name(rel: str) -> str:
    """The lease of the entry at ``rel``."""
    return f"{LEASES}/{entry_hash(rel)}"


def probe_name(owner: str) -> str:
    """The probe object of the process ``owner``."""
    return f"{PROBES}/{owner}"
