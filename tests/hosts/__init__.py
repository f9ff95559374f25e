"""Simulated hosts for the fleet tests: real namespaces, real mounts, real processes.

``Host(name, work, driver, l2=..., gate=...)`` starts one host: ``unshare --mount --pid --uts
--fork --mount-proc`` gives it its own host name (so its partials and lock records name another
machine), its own pid space and ``/proc``; inside, a private tmpfs is its L1 and the area's
``driver`` does the work the job names; ``host.report()`` waits and returns what it saw. Each
area's fleet composes this with the few behaviours that are its own (the shared tier's fetches and
builds, the hub's snapshots): ``tests/tier/fleet.py``, ``tests/hub/test_snapshot_fleet.py``.

- :mod:`._namespaces`: whether hosts can be simulated here, and the command that enters a host;
- :mod:`._spawn`: the test's side of a host (its job file, its process, its report) and polling;
- :mod:`._inside`: the host's own side, run in its namespaces (mounts, environment, log capture,
  the start gate, the report); it imports neither this package nor pytest.

Importable as ``hosts`` (pytest puts ``tests/`` on ``sys.path``) and as ``tests.hosts`` (from
the repository root, as the benchmarks and the type checker see it): it imports only itself.
"""

from __future__ import annotations

from ._namespaces import namespaces_missing, need_namespaces
from ._spawn import Host, wait_for

__all__ = ["Host", "namespaces_missing", "need_namespaces", "wait_for"]
