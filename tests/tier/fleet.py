"""Simulated hosts for the shared-tier tests: the toolkit's hosts (``tests/hosts``) fetching.

Each host has its own host name, pid space and ``/proc``, and a private tmpfs as its L1
(``host_driver.py`` says what it does there). The hosts share one L2 on another file system (the
test's directory), or, for the network case, each mounts the L2 over sshfs itself: one client per
host, so locks taken on one client mean nothing to the others, as on NFS.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests import hosts
    from tests.hosts import namespaces_missing, need_namespaces, wait_for
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    import hosts
    from hosts import namespaces_missing, need_namespaces, wait_for

__all__ = [
    "DRIVER",
    "Host",
    "hidden_partials",
    "namespaces_missing",
    "need_namespaces",
    "visible_files",
    "wait_for",
]

DRIVER = str(Path(__file__).with_name("host_driver.py"))


class Host(hosts.Host):
    """One simulated host running :data:`DRIVER` with a job, on the shared tier ``l2``."""

    def __init__(self, name: str, work: Path, l2: str, **job: Any) -> None:
        super().__init__(name, work, DRIVER, l2=l2, l1_size="512m", **job)


def visible_files(top: str) -> dict[str, bytes]:
    """Every non-hidden regular file under ``top`` (relative path -> bytes)."""
    found: dict[str, bytes] = {}
    for here, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if not name.startswith("."):
                path = os.path.join(here, name)
                found[os.path.relpath(path, top)] = Path(path).read_bytes()
    return found


def hidden_partials(top: str) -> list[str]:
    """Partial files and staging directories left under ``top``."""
    found = [
        os.path.join(here, name)
        for here, dirs, names in os.walk(top)
        for name in names + dirs
        if ".partial" in name
    ]
    return sorted(found)
