"""The static audit (``cacheroot audit``): where Python source decides a cache location, and
whether a row of the layout table moves it into the root.

The table is kept by hand, and the ecosystem moves under it: a new release of vLLM brings new JIT
libraries with caches of their own, and test code keeps writing to ``/tmp``. The audit reads the
source of what is installed (or of the wheels, sdists and directories named) without importing or
running any of it, finds every place that decides a location, and says for each which row covers
it. Its exit status makes it a CI gate: 1 while anything is not covered and not explicitly allowed.

What it owns: everything of the static audit, as a one-way pipeline of passes, each reading what
the ones before it produced and nothing later (``tests/audit/test_structure.py`` holds the order):

1. :mod:`.names` (the shared vocabulary) and :mod:`.limits` (every depth limit, named once);
2. :mod:`.sources` reads distributions, wheels, sdists and source trees;
3. :mod:`.index` indexes one parsed file; :mod:`.platforms` says which platforms a branch runs on;
   :mod:`.reads` says what a node reads, :mod:`.values` what an expression is, and
   :mod:`.modules` where a name leads in the package's other modules;
4. :mod:`.writes` says which calls write, download or fetch; :mod:`.kinds` and :mod:`.variables`
   what the words of a location's names and path say; :mod:`.summaries` summarises each
   function: what its result depends on (:func:`.summaries.origins`) and which of its
   parameters reach a write;
5. :mod:`.downloaders` knows the downloaders whose place the layout decides; :mod:`.findings`
   holds what is reported; :mod:`.direct` reads findings off the syntax directly;
   :mod:`.places`, :mod:`.reach`, :mod:`.fallbacks` and :mod:`.visitor` find, follow, fold and
   classify one module's findings; :mod:`.analysis` does so across a package, :mod:`.scan` for
   every source read;
6. :mod:`.gate` judges each finding against the layout; :mod:`.report` prints and runs the
   command.

What it may import: the layout (``_cacheroot_layout``) and the known readers' table
(:mod:`cacheroot.envs._readers`), nothing else of the project. The run-time audit and its report
(``_cacheroot_audit``, :mod:`cacheroot.envs._audit_report`) are not part of it.
"""

from __future__ import annotations

from .gate import Report, audit, judge
from .report import register, text

__all__ = ["Report", "audit", "judge", "register", "text"]
