"""Whether hosts can be simulated here, and the command that enters a new one."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

#: Mount, pid and uts namespaces of its own, with a ``/proc`` that shows only its processes.
UNSHARE = ["unshare", "--mount", "--pid", "--uts", "--fork", "--mount-proc"]


def namespaces_missing() -> str:
    """Why hosts cannot be simulated here (``""`` when they can)."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    if os.geteuid() != 0:
        return "simulated hosts need root (mount and pid namespaces, tmpfs mounts)"
    probe = [*UNSHARE, "true"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        return "mount, pid and uts namespaces are not permitted here"
    return ""


def need_namespaces() -> None:
    """Skip the calling test where hosts cannot be simulated."""
    why = namespaces_missing()
    if why:
        pytest.skip(why)


def enter(name: str) -> list[str]:
    """The command that runs the command after it as a new host called ``name``.

    Its mounts do not propagate back (``--propagation private``): a host's tmpfs and sshfs
    mounts vanish with it and no other host sees them.
    """
    rename = ["sh", "-c", 'hostname "$0" && exec "$@"', name]
    return [*UNSHARE, "--propagation", "private", *rename]
