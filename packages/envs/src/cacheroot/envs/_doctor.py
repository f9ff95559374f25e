"""The doctor: where each cache resolves, why, and whether it can be used.

Unlike :func:`~cacheroot.envs.resolve`, the doctor looks at the disk (exists, writable, free
space), so it lives off the start-up path.
"""

from __future__ import annotations

import os
import re
from importlib.util import find_spec
from typing import TYPE_CHECKING

from _cacheroot_layout import (
    CACHEROOT,
    CACHEROOT_PIN_FILE,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    CACHEROOT_TAG,
    HF_ENDPOINT,
    INVALID,
    NEVER,
    PINNED,
    TABLE,
    Layout,
    pin_path,
    read_pin,
    resolve,
    shared_root,
)

from ._shared_tier import (
    OFF,
    RO,
    overlap_problem,
    read_only_mount,
    shared_mode,
    shared_root_problem,
)
from .units import format_size

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The module the installed hook's ``.pth`` line imports (shipped by cacheroot-sitecustomize).
HOOK_MODULE = "_cacheroot_hook"


class Check:
    """What the doctor found for one directory."""

    __slots__ = ("exists", "free", "is_dir", "under_root", "writable")

    def __init__(
        self, *, exists: bool, is_dir: bool, writable: bool, free: int | None, under_root: bool
    ) -> None:
        self.exists = exists
        self.is_dir = is_dir
        self.writable = writable
        self.free = free
        self.under_root = under_root


def _nearest_existing(path: str) -> str:
    current = path
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def check(path: str, root: str | None) -> Check:
    """Inspect ``path``; a missing directory is judged by its nearest existing ancestor."""
    exists = os.path.exists(path)
    is_dir = os.path.isdir(path)
    anchor = path if exists else _nearest_existing(path)
    writable = os.path.isdir(anchor) and os.access(anchor, os.W_OK | os.X_OK)
    try:
        st = os.statvfs(anchor)
        free: int | None = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    under = root is not None and (path == root or path.startswith(root.rstrip("/") + "/"))
    return Check(exists=exists, is_dir=is_dir, writable=writable, free=free, under_root=under)


def diagnose(layout: Layout) -> list[str]:
    """Problems that make the layout unusable: the resolver's, plus the disk's."""
    problems = list(layout.problems)
    if layout.root is not None:
        c = check(layout.root, layout.root)
        if c.exists and not c.is_dir:
            problems.append(
                f"the root {layout.root!r} exists but is not a directory; "
                "point CACHEROOT at a directory (or remove the file)"
            )
        elif not c.writable:
            problems.append(
                f"the root {layout.root!r} is not writable by this user "
                f"(uid {os.getuid()}); fix its permissions or point CACHEROOT elsewhere"
            )
    return problems


def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The file system type of the mount that holds ``path`` (``nfs4``, ``fuse.sshfs``, ...),
    ``"?"`` where ``mountinfo`` cannot be read."""
    real = os.path.realpath(path)
    best, kind = -1, "?"
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return kind
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        # Mount points escape blanks as octal (\040); decode them before comparing.
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, kind = len(point), right.split()[0]
    return kind


def shared_line(
    environ: Mapping[str, str], timeout: float = 10.0, root: str | None = None
) -> tuple[str, str]:
    """The doctor's line about the shared tier and its problem (``""`` when none): the same
    rules as the downloads and ``cacheroot tier`` (:mod:`._shared_tier`), overlap with ``root``
    (the resolved host root) included.

    The probe runs on a helper thread: a hung network mount blocks ``stat`` forever, and the
    doctor must still answer.
    """
    import threading  # noqa: PLC0415 - only the doctor needs it

    try:
        l2 = shared_root(environ)
        mode = shared_mode(environ)
    except ValueError as exc:
        return f"shared: (invalid) {exc}", str(exc)
    if l2 is None:
        return f"shared: none ({CACHEROOT_SHARED} is unset: one tier)", ""
    if mode == OFF:
        return f"shared: {l2} (ignored: {CACHEROOT_SHARED_MODE}=off)", ""
    overlap = overlap_problem(root, l2) if root else ""
    if overlap:
        return f"shared: {l2} (overlaps the root)", overlap
    probe = os.path.join(l2, f".cacheroot-doctor-{os.getpid()}")

    def look() -> tuple[str, str]:
        if mode == RO or read_only_mount(l2):
            return _read_only_line(l2, mode)
        problem = shared_root_problem(l2, probe)
        if problem:
            return f"shared: {l2} (not usable)", problem
        free = check(l2, None).free
        return f"shared: {l2} ({fs_type(l2)}, writable, {format_size(free)} free)", ""

    found: list[tuple[str, str]] = []
    worker = threading.Thread(target=lambda: found.append(look()), daemon=True)
    worker.start()
    worker.join(timeout)
    if not found:
        problem = f"the shared tier {l2!r} did not answer within {timeout:.0f} s (a hung mount?)"
        return f"shared: {l2} (not reachable)", problem
    return found[0]


def _read_only_line(l2: str, mode: str) -> tuple[str, str]:
    """The shared tier's line when it is only read (``ro``, or a read-only mount)."""
    why = f"{CACHEROOT_SHARED_MODE}=ro" if mode == RO else "mounted read-only"
    if not os.path.isdir(l2):
        problem = f"{CACHEROOT_SHARED}={l2} is not a directory: mount the shared volume there"
        return f"shared: {l2} (not usable)", problem
    return f"shared: {l2} ({fs_type(l2)}, read only: {why}; never written)", ""


def hub_line(environ: Mapping[str, str], timeout: float = 2.0) -> str:
    """The doctor's line about ``HF_ENDPOINT``: unset, a cacheroot hub cache (with its counts,
    asked of it within ``timeout``), or another endpoint."""
    import json  # noqa: PLC0415 - only the doctor needs these
    import urllib.request  # noqa: PLC0415

    endpoint = environ.get(HF_ENDPOINT, "").strip().rstrip("/")
    if not endpoint:
        return (
            f"hub:  none ({HF_ENDPOINT} is unset: clients ask the Hub directly; "
            "`pytest --cacheroot-hub` or `cacheroot hub serve` puts a hub cache in front)"
        )
    if not endpoint.startswith(("http://", "https://")):
        return f"hub:  {endpoint} ({HF_ENDPOINT} is not an http:// or https:// URL)"
    try:
        with urllib.request.urlopen(endpoint + "/.cacheroot/hub", timeout=timeout) as resp:  # noqa: S310 - scheme checked above
            found = json.loads(resp.read(1 << 16))
        counts = found["counts"]
        upstream = found["upstream"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"hub:  {endpoint} (not a cacheroot hub cache, or it did not answer)"
    mode = "store-only" if found.get("offline") else f"in front of {upstream}"
    asked = int(counts.get("requests", 0))
    requests = f"{asked} request{'' if asked == 1 else 's'}"
    return (
        f"hub:  {endpoint} (a cacheroot hub cache {mode}: {requests}, "
        f"{counts.get('stale', 0)} served stale, {counts.get('upstream', 0)} sent upstream)"
    )


def _pin_line(pin_file: str, pin: Mapping[str, str], *, used: bool, why: str) -> str:
    if not pin_file:
        return f"pin:  none ({CACHEROOT_PIN_FILE} is set but blank)"
    if why:
        return f"pin:  ignored: {why}"
    if not pin:
        return f"pin:  none ({pin_file} absent; `cacheroot hook pin ROOT` records one)"
    tag = f", tag {pin[CACHEROOT_TAG]}" if pin.get(CACHEROOT_TAG) else ""
    why = "in use: CACHEROOT is unset" if used else f"not used: {CACHEROOT} is set"
    return f"pin:  {pin.get(CACHEROOT, '-')}{tag} from {pin_file} ({why})"


class _Findings:
    """What both renderings of the doctor show: the layout, the pin, the shared tier, problems."""

    __slots__ = ("hub", "layout", "pin", "pin_file", "problems", "shared", "tier", "why")

    def __init__(
        self, environ: Mapping[str, str] | None, tag: str | None, pin_file: str | None
    ) -> None:
        env = os.environ if environ is None else environ
        self.pin_file = pin_path() if pin_file is None else pin_file
        why: list[str] = []
        self.pin = read_pin(self.pin_file, why)
        self.why = "".join(why[:1])
        # As the hook: the pin stands in for an unset CACHEROOT only (its tag goes with its root).
        self.layout = resolve(env, tag, self.pin)
        self.tier = shared_line(env, root=self.layout.root)
        self.hub = hub_line(env)
        try:
            self.shared = shared_root(env)
        except ValueError:
            self.shared = None
        problems = diagnose(self.layout) + ([self.tier[1]] if self.tier[1] else [])
        # Reported even with CACHEROOT set: a child started without it would take this pin.
        if self.why:
            problems.append(f"the pin is ignored: {self.why}")
        self.problems = problems


def report_json(
    environ: Mapping[str, str] | None = None,
    tag: str | None = None,
    pin_file: str | None = None,
) -> tuple[str, int]:
    """What :func:`report` shows, as one JSON document, and the same exit status."""
    import json  # noqa: PLC0415 - only for --json

    found = _Findings(environ, tag, pin_file)
    layout = found.layout
    variables: dict[str, dict[str, object]] = {}
    for s in layout.settings.values():
        entry: dict[str, object] = {
            "value": s.value,
            "source": s.source,
            "reason": s.reason or None,
        }
        if s.value is not None and s.source != INVALID:
            c = check(s.value, layout.root)
            entry |= {
                "exists": c.exists,
                "writable": c.writable,
                "free": c.free,
                "under_root": c.under_root,
            }
        variables[s.name] = entry
    document = {
        "root": layout.root,
        "root_source": layout.root_source,
        "tag": layout.tag,
        "pin": {
            "file": found.pin_file,
            "values": found.pin,
            "used": layout.root_source == PINNED,
            "ignored": found.why or None,
        },
        "shared": {"root": found.shared, "problem": found.tier[1] or None},
        "hub": found.hub.removeprefix("hub:").strip(),
        "hook_installed": find_spec(HOOK_MODULE) is not None,
        "variables": variables,
        "not_set_on_purpose": {v.name: v.purpose for v in TABLE if v.mode == NEVER},
        "problems": found.problems,
    }
    return json.dumps(document, indent=2) + "\n", 1 if found.problems else 0


def report(
    environ: Mapping[str, str] | None = None,
    tag: str | None = None,
    pin_file: str | None = None,
) -> tuple[str, int]:
    """The doctor's table and its exit status (1 when anything is invalid).

    ``pin_file`` defaults to this environment's (:func:`~_cacheroot_layout.pin_path`).
    """
    found = _Findings(environ, tag, pin_file)
    layout, where, pin, tier = found.layout, found.pin_file, found.pin, found.tier
    root = layout.root
    source = f"{PINNED} in {where}" if layout.root_source == PINNED else layout.root_source
    out = [
        f"root: {root or '(invalid)'}  (from {source})",
        _pin_line(where, pin, used=layout.root_source == PINNED, why=found.why),
        f"tag:  {layout.tag or '(none: vendor JIT caches left alone)'}",
        tier[0],
        found.hub,
        f"hook: {'installed' if find_spec(HOOK_MODULE) else 'not installed'} in this environment",
        "",
    ]
    header = ("variable", "value", "provenance", "exists", "writable", "free", "under root")
    rows = [header]
    for s in layout.settings.values():
        if s.value is None or s.source == INVALID:
            rows.append((s.name, s.value or "-", s.source, "", "", "", ""))
            continue
        c = check(s.value, root)
        rows.append(
            (
                s.name,
                s.value,
                s.source,
                "yes" if c.exists else "no",
                "yes" if c.writable else "NO",
                format_size(c.free),
                "yes" if c.under_root else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out += [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    notes = [s for s in layout.settings.values() if s.reason]
    if notes:
        out += ["", "notes:"] + [f"  {s.name}: {s.reason}" for s in notes]
    out += ["", "not set on purpose:"]
    out += [f"  {v.name}: {v.purpose}" for v in TABLE if v.mode == NEVER]
    problems = found.problems
    if problems:
        out += ["", "problems:"] + [f"  - {p}" for p in problems]
    return "\n".join(out) + "\n", 1 if problems else 0
