"""The tier wing: a fleet's shared volume (L2) joined to the caches libraries write themselves.

cacheroot's own entries reach the shared tier file by file through the download core
(:mod:`.._shared`, :mod:`.._lease`): every miss looks there before the origin, so that client is
part of the core. The caches the layout points libraries at (Hugging Face, Triton, Inductor,
...) know nothing of tiers; this wing joins them around the run instead: an overlay or a seed
before it, a sync after it (:mod:`.layers`), and ``cacheroot tier`` over both (:mod:`.cli`);
with a bucket as the shared tier, the same verbs over the bucket's entries (:mod:`.bucket`).

What it may import: the download core (the bucket client :mod:`.._bucket` included, imported
only when the shared tier is a bucket) and :mod:`cacheroot.envs`; of the other wings, only
:mod:`.._upkeep.budget`, :mod:`.._upkeep.survey` and :mod:`.._upkeep.in_use` (a seed stays
within the host's budget, and a sync skips files a process is still writing).
"""
