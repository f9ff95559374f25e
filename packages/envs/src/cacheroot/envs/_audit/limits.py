"""Every depth limit of the static audit, each named once.

The audit follows values through names, calls, imports and branches; each walk stops after a fixed
number of steps, so that a pathological module costs bounded time and what is found within the
limit does not depend on the order the code is read in. Imports nothing."""

from __future__ import annotations

#: How many steps :meth:`.values.Values.render` follows an expression (names, calls, joins).
RENDER_DEPTH = 24
#: How many re-exports (``from .util import f`` in an ``__init__``) a name is followed through.
REEXPORT_HOPS = 4
#: How many names a constant string is followed through (``NAME = OTHER = "X_DIR"``).
CONSTANT_HOPS = 3
#: How many parents of a location are read for the names it is given.
TARGET_PARENTS = 6
#: How many steps :func:`.summaries.origins` follows a value back from where it is used (each
#: node on the way is a step: a name, a call, a join, the return of a helper, an argument given
#: to it).
ORIGIN_DEPTH = 24
#: How many steps :func:`.writes.per_run` follows the parts of a written path, through names and
#: the arguments callers give a parameter.
PER_RUN_DEPTH = 6
#: How deeply :func:`.platforms.platform_test` reads a test (``not``, ``and``/``or``, a name
#: given one).
PLATFORM_TEST_DEPTH = 6
#: How many times a parameter's write is carried to the callers of its function
#: (:func:`.summaries.summarise`).
SUMMARY_ROUNDS = 3
#: How many fallbacks (``A`` when ``B`` is unset, ``B`` when ``C`` is) a cover is chained
#: through (:func:`.gate.judge`).
FALLBACK_DEPTH = 4
#: How many names a written path is followed through to tell whether it adds a part of its own
#: to the place it lies in (:meth:`.visitor.Visitor._temporary`).
WRITTEN_PATH_HOPS = 3
