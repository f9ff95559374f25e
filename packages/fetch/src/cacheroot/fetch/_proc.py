"""Who a process is, precisely enough to tell later whether it is still running.

A pid alone is not enough: pids are reused, containers on one host have their own pid
namespaces, and a host reboots. A process is identified by its machine (host name, boot id, pid
namespace) plus its pid and the start time the kernel records for it (``/proc/<pid>/stat``,
field 22, in clock ticks since boot).

A process is judged dead only when this process can see its whole pid space for certain: the
holder ran in this very pid namespace, ``/proc`` here is the procfs of that namespace (a
``unshare --pid`` without ``--mount-proc`` keeps the parent's, whose pids mean other
processes), and that procfs shows other users' processes (``hidepid=`` hides them, and a hidden
process looks exactly like a dead one). Where any of that is uncertain, liveness is unknown
(``None``) and the callers fall back to ages and timeouts: a live process is never taken for a
dead one.
"""

from __future__ import annotations

import hashlib
import os
import socket

#: Bit of ``CAP_SYS_PTRACE`` in ``CapEff``: with it (in the initial user namespace) ``hidepid``
#: hides nothing from this process.
_CAP_SYS_PTRACE = 1 << 19
_INITIAL_USERNS = ["0", "0", "4294967295"]


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or ``None`` if not visible."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall; fields here start at field 3
    except (IndexError, ValueError):
        return None


def machine() -> str:
    """Host name, boot id and pid namespace: processes with equal values share a pid space."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return f"{socket.gethostname()}|{boot}|{pidns}"


def machine_tag() -> str:
    """A short, file-name-safe digest of :func:`machine`."""
    return hashlib.sha256(machine().encode()).hexdigest()[:8]


def me() -> dict[str, object]:
    """This process's identity record (JSON-ready)."""
    pid = os.getpid()
    return {"pid": pid, "machine": machine(), "start": start_time(pid)}


def _status_field(text: str, name: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return None


def _proc_mount_options() -> list[str] | None:
    """The super options of the procfs mounted on ``/proc`` here, ``None`` if it is not one."""
    found: list[str] | None = None
    for line in _read("/proc/self/mountinfo").splitlines():
        # ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or fields[4] != "/proc" or not rest:
            continue
        # Mounts stacked on /proc are listed in mount order: the last one is what paths see.
        found = rest[2].split(",") if rest[0] == "proc" and len(rest) > 2 else None
    return found


def blind_spot() -> str:
    """Why ``/proc`` here may hide a live process of this pid namespace, or ``""`` if it cannot.

    Empty means: ``/proc`` is the procfs of this process's own pid namespace and it shows every
    process of it, so a pid missing there belongs to no running process.
    """
    status = _read("/proc/self/status")
    nspid = _status_field(status, "NSpid")
    if nspid is None:
        return "/proc cannot show which pid namespace it belongs to (no NSpid)"
    if nspid.split() != [str(os.getpid())]:
        return "/proc here belongs to another pid namespace (unshare --pid without --mount-proc?)"
    options = _proc_mount_options()
    if options is None:
        return "/proc is not a procfs"
    return _hidden_by(options, status)


def _hidden_by(options: list[str], status: str) -> str:
    """Why the procfs mounted with ``options`` hides processes from this one, or ``""``."""
    values = {}
    for option in options:
        key, _, value = option.partition("=")
        values[key] = value
    hidepid = values.get("hidepid", "0")
    if hidepid in ("0", "off"):
        return ""
    gid = values.get("gid")
    if gid is not None and gid.isdigit() and int(gid) in (os.getegid(), *os.getgroups()):
        return ""  # members of hidepid's gid= group see every process
    caps = int(_status_field(status, "CapEff") or "0", 16)
    if caps & _CAP_SYS_PTRACE and _read("/proc/self/uid_map").split() == _INITIAL_USERNS:
        return ""  # ptrace rights over every process: hidepid hides nothing from it
    return f"/proc is mounted with hidepid={hidepid}, which hides other users' processes"


def _no_such_process(pid: int) -> bool:
    """Whether no process has ``pid`` in this pid namespace (signal 0 delivers nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # EPERM: it exists, and belongs to someone else
    return False


def gone(pid: int) -> bool:
    """Whether ``pid`` of this pid namespace certainly runs no process now.

    ``False`` when it runs, and also when this process cannot be sure (see :func:`blind_spot`).
    """
    return not blind_spot() and start_time(pid) is None and _no_such_process(pid)


def alive(record: dict[str, object]) -> bool | None:
    """Whether the process ``record`` describes still runs: ``None`` when this process cannot tell.

    Only a process of the same machine (same host, boot and pid namespace) can be judged, and only
    where ``/proc`` shows this whole pid namespace (:func:`blind_spot`). It is dead when its pid
    runs nothing, or runs a process that started at another time.
    """
    pid, where, start = record.get("pid"), record.get("machine"), record.get("start")
    if not isinstance(pid, int) or not isinstance(where, str) or where != machine():
        return None
    if blind_spot():
        return None
    now = start_time(pid)
    if now is None:
        return False if _no_such_process(pid) else None
    if start is None:
        return True
    return now == start


def unknown_reason(record: dict[str, object]) -> str:
    """Why :func:`alive` cannot judge ``record`` (``""`` when it can)."""
    where = record.get("machine")
    if not isinstance(where, str) or not isinstance(record.get("pid"), int):
        return "its record names no process"
    if where != machine():
        mine = machine().split("|")
        theirs = where.split("|")
        if theirs[:2] == mine[:2]:
            return "it runs in another pid namespace"
        return "it runs on another machine (or before a reboot)"
    return blind_spot()
