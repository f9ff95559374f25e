"""Who a process is, precisely enough to tell later whether it is still running.

A pid alone is not enough: pids are reused, containers on one host have their own pid
namespaces, and a host reboots. A process is identified by its machine (host name, boot id, pid
namespace) plus its pid and the start time the kernel records for it (``/proc/<pid>/stat``,
field 22, in clock ticks since boot). Where ``/proc`` is missing, liveness is unknown and the
callers fall back to ages.
"""

from __future__ import annotations

import hashlib
import os
import socket


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or ``None`` if it is gone."""
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


def alive(record: dict[str, object]) -> bool | None:
    """Whether the process ``record`` describes still runs: ``None`` when this host cannot tell.

    Only a process on the same machine (same host, boot and pid namespace) can be judged. It is
    dead when its pid is gone or now belongs to a process that started at another time.
    """
    pid, where, start = record.get("pid"), record.get("machine"), record.get("start")
    if not isinstance(pid, int) or not isinstance(where, str) or where != machine():
        return None
    now = start_time(pid)
    if now is None:
        return False
    if start is None:
        return True
    return now == start
