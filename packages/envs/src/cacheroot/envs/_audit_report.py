"""The run-time audit's report: the session's records, grouped by directory, with the scan's finds.

Every audited process appended its records to the session's ``records.jsonl``
(:mod:`_cacheroot_audit`); the process that made the session reads them once everything has
finished (pytest's controller at the end of the session, any other command at its exit, through
:func:`report_at_exit`, which the start-up hook registers with :mod:`atexit`). Writes
are checked again against the final allowed places (pytest's temporary directory is known only
after the first records were written), grouped by directory (a directory inside another
group's joins it), and listed with the test that was running and the line that wrote.

The scan compares ``HOME`` and the temporary directory with what they held when the session
began. What it finds that no audited process wrote was written by something the hook cannot
see: a process started with a scrubbed environment, or a program that is not Python. Such a
find is attributed by time to the tests that were running when it was last modified, and to the
processes those tests started. Three kinds of change are not the tests' and are left out: the
files the session's processes held open from before it began (where its output goes:
``pytest > log``, ``| tee log``), the audit's own files (its report), and what a live process
outside the session's process tree holds open or works in (another job's ``pip install`` in
``/tmp``), which is listed apart as not from this session. What remains is matched by time
alone, so on a machine shared with other jobs it may still hold their writes: the report says
so, and a job of its own ``TMPDIR`` avoids it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import _cacheroot_audit as audit
from _cacheroot_layout import CACHEROOT_AUDIT_DIR, CACHEROOT_AUDIT_REPORT

__all__ = ["build_report", "escapes", "report_at_exit", "summary_lines", "write_report"]

#: Paths listed per group in the summary lines (the JSON report has them all).
SHOWN = 5
#: Slack around a test's start and end when a scan find's mtime is matched to it, in seconds.
SLACK = 1.0


def _records(directory: str) -> list[dict[str, Any]]:
    try:
        with open(os.path.join(directory, audit.RECORDS), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a record cut short by a killed process
        if isinstance(record, dict):
            out.append(record)
    return out


def _test(record: dict[str, Any]) -> tuple[str, str]:
    """``(node id, phase)`` from a record's ``PYTEST_CURRENT_TEST`` (``id (call)``)."""
    raw = str(record.get("test") or "")
    node, sep, phase = raw.rpartition(" (")
    return (node, phase.rstrip(")")) if sep else (raw, "")


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return (path + os.sep).startswith(prefixes)


def _group(paths: list[str]) -> dict[str, list[str]]:
    """Paths by their directory; a directory inside another group's joins that group."""
    keys = sorted({os.path.dirname(p) for p in paths}, key=len)
    tops: list[str] = []
    for key in keys:
        if not any(key == t or key.startswith(t.rstrip(os.sep) + os.sep) for t in tops):
            tops.append(key)
    groups: dict[str, list[str]] = {t: [] for t in sorted(tops)}
    for path in sorted(paths):
        for top in tops:
            if path.startswith(top.rstrip(os.sep) + os.sep):
                groups[top].append(path)
                break
    return groups


def _scan_finds(
    before: dict[str, tuple[bool, int]],
    bases: tuple[str, ...],
    skip: list[str],
    written: dict[str, Any],
    *,
    held: frozenset[str] = frozenset(),
    own: tuple[str, ...] = (),
) -> tuple[list[dict[str, Any]], bool, list[str]]:
    """What changed since ``before`` that no audited process wrote: the topmost entry of each
    new tree, and modified files; whether the scan was cut short; the changed paths left out.

    A new directory an audited process made does not hide what another writer put inside it (a
    scrubbed child's ``~/.cache/vllm`` in the ``~/.cache`` a test made). Left out: the ``held``
    files (open from before the session) and the audit's ``own`` files (a path, its temporary
    siblings ``PATH.*`` and what is under it).
    """
    after = audit.scan(bases, skip)
    truncated = "" in after or "" in before
    skipped = audit._prefixes(skip)  # noqa: SLF001 - one prefix rule for hook and report
    # A directory that only holds an allowed place (pytest-of-USER above the base temp) is
    # neither new content nor a write of the tests.
    holders = {os.path.dirname(p.rstrip(os.sep)) for p in skipped}
    changed: dict[str, dict[str, Any]] = {}
    mine = tuple(f"{o}{tail}" for o in own for tail in (".", os.sep))
    left_out: list[str] = []
    for path, (is_dir, mtime) in sorted(after.items()):
        if not path or path in written or _under(path, skipped) or path in holders:
            continue
        old = before.get(path)
        if old is None:
            changed[path] = {"path": path, "change": "new", "directory": is_dir, "mtime": mtime}
        elif not is_dir and old[1] != mtime:
            changed[path] = {"path": path, "change": "modified", "directory": False}
            changed[path]["mtime"] = mtime
        else:
            continue
        if path in held or path in own or path.startswith(mine):
            left_out.append(path)
            changed[path]["change"] = ""  # not a find, and no parent of one
    finds = [
        find
        for path, find in changed.items()
        if find["change"]
        and not (find["change"] == "new" and changed.get(os.path.dirname(path), {}).get("change"))
    ]
    return finds, truncated, left_out


def _stat_parent(pid: str) -> int | None:
    """The parent of ``pid``, from ``/proc/PID/stat`` (``None`` where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
        return int(text.rpartition(")")[2].split()[1])  # the command may hold spaces and ")"
    except (OSError, ValueError, IndexError):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return "?"
    return audit.redact_command([os.fsdecode(a) for a in argv[:8] if a])[:300] or "?"


def _joined(pid: int, directory: str) -> bool:
    """Whether ``pid`` was started in the session (its environment names the session)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            names = f.read().split(b"\0")
    except OSError:
        return False
    return f"{CACHEROOT_AUDIT_DIR}={directory}".encode() in names


def _outside(
    paths: list[str], directory: str, audited: set[int]
) -> dict[str, list[dict[str, Any]]]:
    """Which of ``paths`` live processes outside the session hold open or work in.

    The session is this process, every process that joined it (``audited``) and their
    descendants; a process whose environment names the session (reparented when its parent
    ended) is in it too. A path that a process of the session holds as well stays the
    session's. Read from ``/proc``; elsewhere nothing is found.
    """
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return {}
    parents = {int(e): _stat_parent(e) for e in entries}
    inside = {os.getpid(), *audited}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in inside} - inside
        inside |= more
        grew = bool(more)
    tops = tuple(paths)
    held_inside: set[str] = set()
    outside: dict[str, list[dict[str, Any]]] = {}
    for pid in parents:
        targets = [t for _, t in audit.fd_links(pid)]
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/cwd"))
        hits = {p for p in tops for t in targets if t == p or t.startswith(p + os.sep)}
        if not hits:
            continue
        if pid in inside or _joined(pid, directory):
            held_inside |= hits
            continue
        for hit in hits:
            outside.setdefault(hit, []).append({"pid": pid, "command": _command(pid)})
    return {p: holders for p, holders in outside.items() if p not in held_inside}


def build_report(
    directory: str,
    *,
    places: list[str] | None = None,
    mode: str = audit.WARN,
    before: dict[str, tuple[bool, int]] | None = None,
    bases: tuple[str, ...] = (),
    held: tuple[str, ...] = (),
    own: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The session's report as a JSON-ready mapping (see the module docstring).

    ``held`` are the files open from before the session and ``own`` the audit's own files (the
    report's path): the scan leaves both out. Without ``before``, this process's scan, taken when
    it made the session, is compared, with the files it held then.
    """
    if places is None:
        places = audit.read_places(directory)
    if before is None:
        before, bases, held = audit.BEFORE, audit.SCAN_BASES, (*held, *audit.HELD)
    places = audit.safe(places)
    allowed = audit._prefixes([directory, *places])  # noqa: SLF001 - the hook's rule
    records = _records(directory)
    writes: dict[str, dict[str, Any]] = {}
    spawns: list[dict[str, Any]] = []
    windows: list[tuple[str, float, float]] = []
    processes = set()
    for record in records:
        kind = record.get("kind")
        if kind == "process":
            processes.add(record.get("pid"))
        elif kind == "test":
            windows.append((str(record["test"]), float(record["start"]), float(record["end"])))
        elif kind == "spawn":
            node, phase = _test(record)
            spawns.append({**record, "test": node, "phase": phase})
        elif kind == "write":
            path = str(record.get("path", ""))
            if not path or path in writes or _under(path, allowed):
                continue
            if _under(os.path.realpath(path), allowed):
                continue
            node, phase = _test(record)
            writes[path] = {
                "path": path,
                "event": record.get("event", ""),
                "test": node,
                "phase": phase,
                "caller": record.get("caller", ""),
                "origin": record.get("origin", ""),
                "pid": record.get("pid"),
                "exists": os.path.lexists(path),
            }
    written = writes
    # Written and removed again before the end (a library's temporary file, pytest's capture
    # files): listed, not counted.
    transient = [w for w in written.values() if not w["exists"]]
    writes = {p: w for p, w in written.items() if w["exists"]}
    groups = [
        {"directory": top, "writes": [writes[p] for p in paths]}
        for top, paths in _group(list(writes)).items()
    ]
    scanned: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    left_out: list[str] = []
    truncated = False
    if before is not None and bases:
        # Asked again now: a `| tee log` that opened its file after the session began.
        late = audit.held_files(own_files=False)
        finds, truncated, left_out = _scan_finds(
            before,
            bases,
            [directory, *places],
            written,
            held=frozenset((*held, *late)),
            own=tuple(os.path.abspath(o) for o in own),
        )
        audited = {int(p) for p in processes if isinstance(p, int)}
        strangers = _outside([f["path"] for f in finds], directory, audited) if finds else {}
        for find in finds:
            if find["path"] in strangers:
                others.append({**find, "holders": strangers[find["path"]]})
                continue
            when = find["mtime"] / 1e9
            tests = sorted({t for t, s, e in windows if s - SLACK <= when <= e + SLACK})
            # Processes started before the find was last written: by its tests, or by anyone
            # where no test was running (a command audited without pytest).
            started = [
                {k: s[k] for k in ("command", "caller", "origin", "scrubbed", "test")}
                for s in spawns
                if float(s.get("time", 0)) <= when + SLACK and (s["test"] in tests or not tests)
            ]
            scanned.append({**find, "tests": tests, "started": started})
    return {
        "mode": mode,
        "session": directory,
        "allowed": list(dict.fromkeys(places)),
        "processes": len(processes),
        "escapes": len(writes) + len(scanned),
        "groups": groups,
        "transient": transient,
        "scan": {
            "bases": list(bases),
            "truncated": truncated,
            "finds": scanned,
            "others": others,
            "left_out": left_out,
        },
        "scrubbed": [s for s in spawns if s.get("scrubbed")],
        "notes": [*audit.REFUSED, *_notes(left_out, others, scanned)],
    }


def _notes(
    left_out: list[str], others: list[dict[str, Any]], finds: list[dict[str, Any]]
) -> list[str]:
    """What the reader of the report should know about the scan's finds."""
    notes = []
    if left_out:
        notes.append(
            f"not counted: {', '.join(left_out[:SHOWN])}"
            + (f" and {len(left_out) - SHOWN} more" if len(left_out) > SHOWN else "")
            + ": changed during the session, but held open by its processes from before it "
            "began (where its output goes: > log, | tee log) or written by the audit itself"
        )
    if others:
        notes.append(
            f"not counted: {len(others)} new path{'s' if len(others) != 1 else ''} in HOME or the "
            "temporary directory held open by live processes outside this session (another "
            "job on this machine)"
        )
    if finds:
        notes.append(
            "the scan's finds are matched to tests by time: on a machine shared with other "
            "jobs they may be those jobs' writes; give each job its own TMPDIR "
            "(TMPDIR=$(mktemp -d)) to keep them apart"
        )
    return notes


def escapes(report: dict[str, Any]) -> int:
    """How many paths the report lists as written outside the allowed places."""
    return int(report["escapes"])


def write_report(report: dict[str, Any], path: str) -> None:
    """Write ``report`` as JSON to ``path`` (through a temporary file, then renamed)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _who(item: dict[str, Any]) -> str:
    where = item.get("caller") or item.get("origin") or "no Python frame"
    test = item.get("test")
    phase = f" ({item['phase']})" if item.get("phase") else ""
    return f"{where}" + (f" in {test}{phase}" if test else "")


def summary_lines(report: dict[str, Any], path: str | None = None) -> list[str]:
    """The report as terminal lines: one summary, then each group and scan find."""
    count = escapes(report)
    where = f" (report: {path})" if path else ""
    processes = f"{report['processes']} process{'es' if report['processes'] != 1 else ''}"
    if not count:
        line = "cacheroot audit: no writes outside the cache root and allowed places, "
        return [line + f"{processes} audited{where}", *_apart(report)]
    groups = len(report["groups"]) + len(report["scan"]["finds"])
    head = (
        f"cacheroot audit: {count} path{'s' if count != 1 else ''} written outside the cache root "
        f"and allowed places, in {groups} place{'s' if groups != 1 else ''}; "
        f"{processes} audited{where}"
    )
    lines = [head]
    for group in report["groups"]:
        writes = group["writes"]
        lines.append(f"  {group['directory']}{os.sep} ({len(writes)})")
        for item in writes[:SHOWN]:
            name = os.path.relpath(item["path"], group["directory"])
            lines.append(f"    {name} ({item['event']}) by {_who(item)}")
        if len(writes) > SHOWN:
            lines.append(f"    ... and {len(writes) - SHOWN} more (see the JSON report)")
    for find in report["scan"]["finds"]:
        tests = ", ".join(find["tests"]) or "no test running"
        lines.append(
            f"  {find['path']} ({find['change']}; found by the scan, no audited Python wrote it) "
            f"during {tests}"
        )
        for spawn in find["started"]:
            scrubbed = ", environment without the audit" if spawn.get("scrubbed") else ""
            lines.append(f"    started there: {spawn['command']!r} by {_who(spawn)}{scrubbed}")
    if report["transient"]:
        count = len(report["transient"])
        lines.append(f"  and {count} written outside and removed again (transient; not counted)")
    if report["scan"]["truncated"]:
        lines.append(f"  (the scan stopped at {audit.SCAN_CAP} entries)")
    return lines + _apart(report)


def _apart(report: dict[str, Any]) -> list[str]:
    """The scan's finds that are not this session's, and the report's notes."""
    lines = []
    for other in report["scan"]["others"]:
        holders = "; ".join(f"pid {h['pid']} {h['command']!r}" for h in other["holders"][:3])
        lines.append(
            f"  {other['path']} ({other['change']}; not from this session, not counted: "
            f"open in {holders})"
        )
    lines += [f"  note: {note}" for note in report["notes"]]
    return lines


def report_at_exit() -> None:
    """At the exit of a command audited without pytest: write the report and say its summary.

    Registered by the start-up hook (``_cacheroot_hook.audit()``) in the process that made the
    session; does nothing once the pytest plugin has taken the report over
    (``REPORT_AT_EXIT`` cleared). The report goes to ``CACHEROOT_AUDIT_REPORT``, or to
    ``report.json`` in the session directory; the exit never fails on it.
    """
    auditor = audit.AUDITOR
    if not audit.REPORT_AT_EXIT or auditor is None:
        return
    auditor.enabled = False  # the report itself may be written anywhere
    try:
        path = os.environ.get(CACHEROOT_AUDIT_REPORT, "").strip() or os.path.join(
            auditor.directory, "report.json"
        )
        report = build_report(auditor.directory, own=(path,))
        write_report(report, path)
        for line in summary_lines(report, path):
            sys.stderr.write(line + "\n")
    except Exception as exc:  # noqa: BLE001 - exit must not fail on the report
        sys.stderr.write(f"cacheroot audit: no report: {exc!r}\n")
