"""The doctor: where each cache resolves, why, and whether it can be used.

Unlike :func:`~cacheroot.envs.resolve`, the doctor looks at the disk (exists, writable, free
space, the file system's type), so it lives off the start-up path. Whether a directory is
writable is tried, with a file created and removed at once (:func:`write_problem`): the one
trace the doctor leaves, and only for that instant.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from importlib.util import find_spec
from typing import TYPE_CHECKING

from _cacheroot_layout import (
    BY_NAME,
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_PIN_FILE,
    CACHEROOT_SHARED,
    CACHEROOT_SHARED_MODE,
    CACHEROOT_TAG,
    HF_ENDPOINT,
    INVALID,
    NEVER,
    PINNED,
    TABLE,
    XDG_CACHE_HOME,
    Layout,
    pin_path,
    read_pin,
    resolve,
    shared_root,
    truthy,
)

from ._shared_tier import (
    OFF,
    RO,
    overlap_problem,
    read_only_mount,
    shared_mode,
    shared_root_problem,
    shared_url,
)
from .units import format_size

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The module the installed hook's ``.pth`` line imports (shipped by cacheroot-sitecustomize).
HOOK_MODULE = "_cacheroot_hook"
#: Where ``cacheroot-fetch`` offers the doctor's line about a bucket tier (this distribution
#: loads no object-store client): an entry point ``(url, mode, timeout) -> (line, problem)``.
DOCTOR_ENTRY_POINTS = "cacheroot.doctor"


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


#: Where the kernel mounts its own virtual file systems, by path: a root there is refused even
#: where something else is mounted over part of it (a container's ``/sys/fs/cgroup`` tmpfs).
VIRTUAL_PREFIXES = {"/proc": "proc", "/sys": "sysfs"}
#: File system types (``/proc/self/mountinfo``) whose files the kernel makes up: a write there
#: is a request to the kernel, never a file kept for the next run.
VIRTUAL_TYPES = frozenset(
    {
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devpts",
        "efivarfs",
        "fusectl",
        "mqueue",
        "nsfs",
        "proc",
        "pstore",
        "securityfs",
        "sysfs",
        "tracefs",
    }
)


def _nearest_existing(path: str) -> str:
    current = path
    while not os.path.lexists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def virtual_fs(path: str) -> str:
    """The virtual file system (``proc``, ``sysfs``, ...) that ``path`` lies on, or ``""``.

    Judged by the path (also after links) and by the type of the mount that holds its nearest
    existing ancestor, so ``/proc/nope`` and a ``proc`` mounted elsewhere are both found.
    """
    for candidate in (os.path.normpath(path), os.path.realpath(path)):
        for prefix, kind in VIRTUAL_PREFIXES.items():
            if candidate == prefix or candidate.startswith(prefix + "/"):
                return kind
    kind = fs_type(_nearest_existing(path))
    return kind if kind in VIRTUAL_TYPES else ""


def write_problem(directory: str) -> str:
    """Why no file can be created in ``directory`` (``""`` when one can), as the end of a
    sentence whose subject is ``directory``.

    Tried, not asked of :func:`os.access`: root passes every permission check, and a full file
    system, a server that squashes root or a virtual file system answers otherwise than the
    permission bits. The probe is a new file (``O_EXCL``, never through a link), removed at once.
    """
    kind = virtual_fs(directory)
    if kind:
        return f"is on a virtual file system ({kind})"
    if not os.path.isdir(directory):
        return "is not a directory"
    if read_only_mount(directory):
        return "is on a read-only mount"
    probe = os.path.join(directory, f".cacheroot-doctor-{os.getpid()}-{os.urandom(4).hex()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(probe, flags, 0o600))
    except OSError as exc:
        return f"is not writable by uid {os.getuid()} ({exc.strerror or exc})"
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return ""


def check(path: str, root: str | None, probed: dict[str, str] | None = None) -> Check:
    """Inspect ``path``; a missing directory is judged by its nearest existing ancestor.

    ``probed`` holds :func:`write_problem`'s answers by directory, so that one report tries
    each directory once however many variables lie in it.
    """
    exists = os.path.exists(path)
    is_dir = os.path.isdir(path)
    anchor = path if exists else _nearest_existing(path)
    probed = {} if probed is None else probed
    if anchor not in probed:
        probed[anchor] = write_problem(anchor)
    try:
        st = os.statvfs(anchor)
        free: int | None = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    under = root is not None and (path == root or path.startswith(root.rstrip("/") + "/"))
    writable = not probed[anchor]
    return Check(exists=exists, is_dir=is_dir, writable=writable, free=free, under_root=under)


def _found(path: str) -> str:
    """What sits at ``path`` where a directory was expected, in words."""
    try:
        st = os.lstat(path)
    except OSError:
        return "nothing readable"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link to nothing" if not os.path.exists(path) else "a symbolic link"
    return "a regular file" if stat.S_ISREG(st.st_mode) else "a special file"


def root_problem(root: str, probed: dict[str, str] | None = None) -> str:
    """Why nothing can be cached under ``root`` (a valid absolute path), or ``""``.

    The order is the order of the fixes: a root on a virtual file system can never work; a file
    where a directory is expected must go first; only then do permissions and mounts count.
    """
    kind = virtual_fs(root)
    if kind:
        return (
            f"the root {root!r} is on a virtual file system ({kind}), whose files the kernel "
            "makes up: expected a directory on a disk, where files persist between runs; point "
            f"{CACHEROOT} at one (nothing can be cached there)"
        )
    if os.path.lexists(root) and not os.path.isdir(root):
        return (
            f"the root {root!r} is not a directory: expected a directory, found "
            f"{_found(root)}; point {CACHEROOT} at a directory, or remove the file"
        )
    anchor = _nearest_existing(root)
    if not os.path.isdir(anchor):
        return (
            f"the root {root!r} cannot be created: {anchor!r} is not a directory (expected a "
            f"directory, found {_found(anchor)}); point {CACHEROOT} elsewhere, or remove the file"
        )
    probed = {} if probed is None else probed
    if anchor not in probed:
        probed[anchor] = write_problem(anchor)
    why = probed[anchor]
    if not why:
        return ""
    where = "it" if anchor == root else f"its nearest existing ancestor {anchor!r}"
    fix = (
        "remount it read-write"
        if why == "is on a read-only mount"
        else "fix its permissions (or free space)"
    )
    return (
        f"the root {root!r} is not writable: expected a directory this user (uid {os.getuid()}) "
        f"can create files in, found that {where} {why}; {fix}, or point {CACHEROOT} elsewhere"
    )


def diagnose(layout: Layout, probed: dict[str, str] | None = None) -> list[str]:
    """Problems that make the layout unusable: the resolver's, plus the disk's."""
    problems = list(layout.problems)
    if layout.root is not None:
        problem = root_problem(layout.root, probed)
        if problem:
            problems.append(problem)
    return problems


def root_caused(layout: Layout) -> list[str]:
    """The variables left unset only because the root is unusable (parents before children):
    the doctor names the root's problem once, not once for each of them."""
    if layout.root is not None:
        return []
    found: list[str] = []
    for s in layout.settings.values():
        if s.source != INVALID or s.value is not None:
            continue  # set, off, or the user's own unusable value (its note names it)
        parent = BY_NAME[s.name].parent
        if (not parent and s.reason.startswith("the root is unusable")) or parent in found:
            found.append(s.name)
    return found


def hook_note(layout: Layout, environ: Mapping[str, str]) -> str:
    """What the start-up hook does where the root is unusable (``""`` where it is usable).

    It is what :func:`~_cacheroot_layout.apply` does, and the start-up modules do the same
    (``tests/envs/test_start.py``): no other root is tried, nothing is derived from the root,
    and a value a parent process's hook derived is removed rather than left pointing there.
    The hook says none of this itself: it runs in every interpreter and never writes.
    """
    if layout.root is not None:
        return ""
    if truthy(environ.get(CACHEROOT_DISABLE)):
        return f"the start-up hook is off ({CACHEROOT_DISABLE}): it changes no variable"
    fallback = (
        f" (there is no fallback to {XDG_CACHE_HOME} or ~/.cache)"
        if layout.root_source in (CACHEROOT, PINNED)
        else ""
    )
    applied = layout.applied()
    sets = (
        f"sets only {', '.join(applied)} (from values set explicitly)"
        if applied
        else "sets no variable"
    )
    return (
        f"the start-up hook uses no root{fallback}: it {sets}, and removes what a parent "
        "process's hook derived; each library then uses its own default location"
    )


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
    doctor must still answer. A bucket (``s3://...``) is asked through ``cacheroot-fetch``
    (:func:`_bucket_line`): whether it answers, and whether this process may list, read, write.
    """
    url = shared_url(environ)
    if url is not None:
        return _bucket_line(environ, url, timeout)
    return _volume_line(environ, timeout, root)


def _volume_line(environ: Mapping[str, str], timeout: float, root: str | None) -> tuple[str, str]:
    """:func:`shared_line` for a shared volume (a directory)."""
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
        free = check(l2, None, {l2: ""}).free  # just probed: not written to again
        return f"shared: {l2} ({fs_type(l2)}, writable, {format_size(free)} free)", ""

    found: list[tuple[str, str]] = []
    worker = threading.Thread(target=lambda: found.append(look()), daemon=True)
    worker.start()
    worker.join(timeout)
    if not found:
        problem = f"the shared tier {l2!r} did not answer within {timeout:.0f} s (a hung mount?)"
        return f"shared: {l2} (not reachable)", problem
    return found[0]


def _bucket_line(environ: Mapping[str, str], url: str, timeout: float) -> tuple[str, str]:
    """The shared tier's line when it is a bucket: asked of ``cacheroot-fetch``'s bucket client
    (:data:`DOCTOR_ENTRY_POINTS`), which says what the bucket lets this process do."""
    from importlib.metadata import entry_points  # noqa: PLC0415 - only the doctor needs it

    try:
        mode = shared_mode(environ)
    except ValueError as exc:
        return f"shared: (invalid) {exc}", str(exc)
    if mode == OFF:
        return f"shared: {url} (ignored: {CACHEROOT_SHARED_MODE}=off)", ""
    found = [ep for ep in entry_points(group=DOCTOR_ENTRY_POINTS) if ep.name == "bucket"]
    if not found:
        problem = (
            f"{CACHEROOT_SHARED}={url} is a bucket, which needs cacheroot-fetch with its "
            "object-store client: pip install 'cacheroot-fetch[s3]'"
        )
        return f"shared: {url} (bucket; not usable)", problem
    line: tuple[str, str] = found[0].load()(url, mode, timeout, environ)
    return line


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

    __slots__ = (
        "hook_note",
        "hub",
        "layout",
        "notes",
        "pin",
        "pin_file",
        "probed",
        "problems",
        "shared",
        "tier",
        "why",
    )

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
            self.shared = shared_url(env) or shared_root(env)
        except ValueError:
            self.shared = None
        self.probed: dict[str, str] = {}
        problems = diagnose(self.layout, self.probed) + ([self.tier[1]] if self.tier[1] else [])
        # Reported even with CACHEROOT set: a child started without it would take this pin.
        if self.why:
            problems.append(f"the pin is ignored: {self.why}")
        self.problems = problems
        # An unusable root is named once, with what the hook does about it, instead of once
        # for each variable it leaves unset.
        hidden = set(root_caused(self.layout))
        self.notes = [
            (s.name, s.reason)
            for s in self.layout.settings.values()
            if s.reason and s.name not in hidden
        ]
        self.hook_note = hook_note(self.layout, env)
        if self.hook_note:
            self.notes.insert(0, (CACHEROOT, self.hook_note))


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
            c = check(s.value, layout.root, found.probed)
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
        "hook_note": found.hook_note or None,
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
        c = check(s.value, root, found.probed)
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
    if found.notes:
        out += ["", "notes:"] + [f"  {name}: {reason}" for name, reason in found.notes]
    out += ["", "not set on purpose:"]
    out += [f"  {v.name}: {v.purpose}" for v in TABLE if v.mode == NEVER]
    problems = found.problems
    if problems:
        out += ["", "problems:"] + [f"  - {p}" for p in problems]
    return "\n".join(out) + "\n", 1 if problems else 0
