"""The shared tier in a bucket: ``CACHEROOT_SHARED=s3://BUCKET/PREFIX`` (also ``gs://``, ``az://``).

A fleet without a shared file system shares its downloads through an object store instead. The
semantics are the file tier's (:mod:`.._shared`): an L1 miss looks in the bucket before the
origin, the host that downloads writes its verified copy through (trust tier ``rw`` only), ``ro``
never writes, ``off`` ignores the bucket, and a bucket that fails costs a note, never a fetch.

What it owns, one concept a module:

- :mod:`.location`: the URL (``s3://BUCKET/PREFIX``) and the client opened on it, with short,
  bounded timeouts; the client reads its configuration (``AWS_ENDPOINT_URL``, credentials, ...)
  from the environment itself.
- :mod:`.failures`: what a failed request says, in words that name no secret.
- :mod:`.names`: the object names (content-addressed blobs, records, leases, probes).
- :mod:`.records`: the record written last, what it may carry and what a reader trusts.
- :mod:`.lease`: one host downloads an entry while the others wait for its record.
- :mod:`.probe`: whether the server honours conditional writes, and whether we may write.
- :mod:`.transfer`: streamed, bounded, hashed copies between L1 and the bucket.
- :mod:`.tier`: the protocol for one missing entry, and the per-process state behind it.
- :mod:`.hub`: the hub cache's files (named by sha256 or git blob sha1) through the bucket.
- :mod:`.upkeep` and :mod:`.doctor`: ``cacheroot tier`` and ``cacheroot doctor`` on a bucket.

What it may import: the download core's building blocks (:mod:`.._store`, :mod:`.._redact`)
and :mod:`cacheroot.envs`; :mod:`.._shared` only inside a function (for the volume's walk,
``open_below``), since it imports this package when the tier is a bucket. ``obstore`` (the
extra ``cacheroot-fetch[s3]``) is imported by :mod:`.location` only, when a bucket is opened:
the start-up hook and a hit never load it.
"""

from __future__ import annotations
