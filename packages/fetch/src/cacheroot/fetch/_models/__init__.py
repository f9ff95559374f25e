"""The models wing: model snapshots from Hugging Face and ModelScope, warmed once per volume.

A model is a repository of many files fetched by its hub's own client into the cache that
client reads, so this wing does not download through the core's :class:`~.._fetcher.Fetcher`:
it drives the hub's client under the core's lock, and records what a complete snapshot is so
that an offline run can check it. What it owns: what a snapshot entry names (:mod:`.model`),
the two hubs behind one interface (:mod:`.hubs`), warming and checking (:mod:`.snapshot`), and
revisions copied through the shared tier (:mod:`.shared`).

What it may import: the download core and :mod:`cacheroot.envs`; no other wing.
"""
