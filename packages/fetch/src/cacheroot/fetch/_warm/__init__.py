"""The warm wing: a manifest of what a test suite needs, fetched before the fleet starts.

One step before a fleet of CI jobs starts, ``cacheroot warm MANIFEST`` fills the caches with
everything the manifest lists, so the jobs run offline and a hub outage during the run costs
nothing. What it owns: the manifest's format (:mod:`.manifest`), the command (:mod:`.warm`),
the hub cache's answers a warm keeps (:mod:`.hubanswers`) and the key of a warmed volume
(:mod:`.cachekey`), which CI caches are saved under.

What it may import: the download core and :mod:`cacheroot.envs`; of the other wings, only
:mod:`.._models.model` (a manifest lists model snapshots), :mod:`.._models.snapshot` (which
warms them, imported when a manifest has one) and, from :mod:`.hubanswers` alone,
:mod:`.._hub.answers` (a manifest with ``hub_cache = true`` keeps the answers of the suite's
metadata calls in a hub cache's store: the hub to ask through, and the branch answers it
writes; imported only for such a manifest).
"""
