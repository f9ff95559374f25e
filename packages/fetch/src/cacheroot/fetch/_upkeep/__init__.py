"""The upkeep wing: looking after a volume that many jobs fill, so it stays within its budget.

A cache volume only grows: every job adds entries, nobody removes them, and a full disk fails
the run that happens to hit it. This wing lists, measures, verifies and prunes what the root
holds (``cacheroot cache ls | du | verify | prune``), across every cache of the layout, without
removing what a running process still uses.

What it owns: cacheroot's own entries and their "last used" (:mod:`.cache`), the caches of a
root and what one unit of each is (:mod:`.root_caches`), what the root holds beyond the test
cache as ``ls`` and ``du`` show it (:mod:`.inventory`), whether a file is in use
(:mod:`.in_use`), the survey of what a budget may remove (:mod:`.survey`), the budget itself
(:mod:`.budget`), the prune report (:mod:`.prune_report`) and the command (:mod:`.cli`).

What it may import: the download core (the top-level modules of :mod:`cacheroot.fetch`) and
:mod:`cacheroot.envs`; of the other wings, only :mod:`.._warm.manifest` and :mod:`.._warm.warm`
(``cacheroot cache verify --manifest`` checks what a manifest lists) and :mod:`.._hub.prune`
(``cacheroot cache prune`` weighs the hub cache's store with the other caches, through the
walk and removal of ``cacheroot hub prune``).
"""
