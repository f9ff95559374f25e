"""Resolving the table against an environment: which value each variable gets, and why.

:func:`resolve` is pure (a mapping in, a :class:`Layout` out) and touches no file system, so the
start-up hook can call it in every process for the price of a few string operations. Whether a
directory exists or is writable is the doctor's business, not the hook's.

Like :mod:`._table`, this module imports only :mod:`os`: it runs at interpreter start-up.
"""

from __future__ import annotations

import os

from ._table import (
    BY_NAME,
    CACHEROOT,
    CACHEROOT_DISABLE,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    DEFAULT,
    OPT_IN,
    TABLE,
    TAGS,
    XDG_CACHE_HOME,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only; never imported at run time
    from collections.abc import Mapping, MutableMapping

#: Provenance of a value: the user set it.
EXPLICIT = "explicit"
#: Derived from an explicit ``CACHEROOT`` (or from a parent variable the user set).
DERIVED = "derived"
#: Derived from the fallback root (``XDG_CACHE_HOME`` or ``~/.cache``).
DEFAULT_SOURCE = "default"
#: An opt-in variable that was not asked for: left unset.
OPT_IN_OFF = "opt-in (off)"
#: Unusable: nothing is derived from it, and the doctor says why.
INVALID = "invalid"

#: Longest path Linux accepts (PATH_MAX includes the terminating NUL) and longest name.
_PATH_MAX = 4095
_NAME_MAX = 255
_TRUE = frozenset({"1", "true", "yes", "on"})


class Setting:
    """The value one variable gets, with where it came from and, when unusable, why."""

    __slots__ = ("name", "reason", "source", "value")

    def __init__(self, name: str, value: str | None, source: str, reason: str = "") -> None:
        self.name = name
        self.value = value
        self.source = source
        self.reason = reason

    def __repr__(self) -> str:
        return f"Setting({self.name!r}, {self.value!r}, {self.source!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Setting):
            return NotImplemented
        return (self.name, self.value, self.source, self.reason) == (
            other.name,
            other.value,
            other.source,
            other.reason,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    @property
    def applies(self) -> bool:
        """Whether :func:`apply` writes this value into the environment."""
        return self.source in (DERIVED, DEFAULT_SOURCE)


class Layout:
    """The resolved layout: the root, the tag, and one :class:`Setting` per variable."""

    __slots__ = ("problems", "root", "root_reason", "root_source", "settings", "tag")

    def __init__(
        self,
        *,
        root: str | None,
        root_source: str,
        root_reason: str,
        tag: str | None,
        settings: dict[str, Setting],
        problems: list[str],
    ) -> None:
        self.root = root
        self.root_source = root_source
        self.root_reason = root_reason
        self.tag = tag
        self.settings = settings
        self.problems = problems

    def __repr__(self) -> str:
        return f"Layout(root={self.root!r}, tag={self.tag!r}, settings={len(self.settings)})"

    @property
    def valid(self) -> bool:
        """True when nothing in the layout is invalid."""
        return not self.problems

    def applied(self) -> dict[str, str]:
        """The variables that :func:`apply` sets, by name."""
        return {s.name: s.value for s in self.settings.values() if s.applies and s.value}


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def truthy(value: str | None) -> bool:
    """Whether a switch variable is on (``1``, ``true``, ``yes``, ``on``; any case)."""
    return value is not None and value.strip().lower() in _TRUE


def path_problem(value: str) -> str:
    """Why ``value`` cannot be a cache directory, or ``""`` when it can.

    Only string checks: the hook calls this at start-up and must not touch the disk.
    """
    if "\x00" in value or "\n" in value:
        return "contains a NUL or newline character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not decodable as UTF-8 (tools that export or log it would mangle it)"
    if not os.path.isabs(value):
        return "is not an absolute path"
    if len(value.encode("utf-8")) > _PATH_MAX:
        return f"is longer than {_PATH_MAX} bytes (PATH_MAX)"
    if any(len(part.encode("utf-8")) > _NAME_MAX for part in value.split("/")):
        return f"has a path component longer than {_NAME_MAX} bytes (NAME_MAX)"
    return ""


def _norm(path: str) -> str:
    """``normpath``, but POSIX's implementation-defined leading ``//`` becomes ``/``."""
    path = os.path.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _root(environ: Mapping[str, str]) -> tuple[str | None, str, str]:
    """The root, which variable it came from, and why it is invalid (or ``""``)."""
    raw = environ.get(CACHEROOT)
    if not _blank(raw):
        assert raw is not None  # noqa: S101 - narrowed by _blank
        value = os.path.expanduser(raw.strip())
        problem = path_problem(value)
        if problem:
            return None, CACHEROOT, f"{CACHEROOT}={raw!r} {problem}; set it to an absolute path"
        return _norm(value), CACHEROOT, ""
    xdg = environ.get(XDG_CACHE_HOME)
    if not _blank(xdg) and xdg is not None and not path_problem(xdg.strip()):
        return _norm(xdg.strip()), XDG_CACHE_HOME, ""
    home = environ.get("HOME")
    base = home if not _blank(home) and home is not None else os.path.expanduser("~")
    value = os.path.join(base.strip(), ".cache")
    problem = path_problem(value)
    if problem:
        return None, "~/.cache", f"the default root {value!r} {problem}; set {CACHEROOT}"
    return _norm(value), "~/.cache", ""


def _tag(environ: Mapping[str, str], tag: str | None, problems: list[str]) -> str | None:
    raw = tag if tag is not None else environ.get(CACHEROOT_TAG)
    if _blank(raw):
        return None
    assert raw is not None  # noqa: S101 - narrowed by _blank
    value = raw.strip().lower()
    if value not in TAGS:
        problems.append(
            f"{CACHEROOT_TAG}={raw!r} is not a known tag: expected one of {', '.join(TAGS)}; "
            "vendor caches are left unset"
        )
        return None
    return value


def _opted_in(environ: Mapping[str, str], problems: list[str]) -> frozenset[str]:
    raw = environ.get(CACHEROOT_OPT_IN) or ""
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if "all" in names:
        return frozenset(v.name for v in TABLE if v.mode == OPT_IN)
    unknown = sorted(n for n in names if n not in BY_NAME or BY_NAME[n].mode != OPT_IN)
    if unknown:
        allowed = ", ".join(v.name for v in TABLE if v.mode == OPT_IN)
        problems.append(
            f"{CACHEROOT_OPT_IN} names {', '.join(unknown)}, which cannot be opted into: "
            f"expected a comma-separated list of {allowed} (or 'all')"
        )
    return frozenset(names)


def resolve(environ: Mapping[str, str], tag: str | None = None) -> Layout:
    """Resolve the layout for ``environ`` without changing it.

    A variable is derived only where it is unset or blank: an explicit value always wins.
    ``tag`` (``cuda`` or ``rocm``) overrides ``CACHEROOT_TAG``.
    """
    problems: list[str] = []
    root, root_source, root_reason = _root(environ)
    if root_reason:
        problems.append(root_reason)
    the_tag = _tag(environ, tag, problems)
    opted = _opted_in(environ, problems)
    base_source = DERIVED if root_source == CACHEROOT else DEFAULT_SOURCE
    settings: dict[str, Setting] = {}
    for var in TABLE:
        if var.mode not in (DEFAULT, OPT_IN) or (var.tags != TAGS and the_tag not in var.tags):
            continue
        raw = environ.get(var.name)
        if not _blank(raw):
            assert raw is not None  # noqa: S101 - narrowed by _blank
            problem = path_problem(raw.strip())
            if problem and var.name != XDG_CACHE_HOME:
                settings[var.name] = Setting(
                    var.name, raw, INVALID, f"{var.name}={raw!r} {problem}"
                )
                problems.append(f"{var.name}={raw!r} {problem}; set it to an absolute path")
                continue
            if not problem:
                settings[var.name] = Setting(var.name, raw, EXPLICIT)
                continue
            # XDG says a relative XDG_CACHE_HOME is ignored: it is replaced like a blank one.
        if var.mode == OPT_IN and var.name not in opted:
            settings[var.name] = Setting(
                var.name, None, OPT_IN_OFF, f"add it to {CACHEROOT_OPT_IN} to derive it"
            )
            continue
        parent = settings.get(var.parent) if var.parent else None
        if var.parent and (parent is None or parent.source == INVALID or not parent.value):
            reason = f"its parent {var.parent} is unusable"
            settings[var.name] = Setting(var.name, None, INVALID, reason)
            continue
        if parent is not None and parent.value:
            base, source = (
                parent.value.strip(),
                (DERIVED if parent.source == EXPLICIT else parent.source),
            )
        elif root is not None:
            base, source = root, base_source
        else:
            settings[var.name] = Setting(
                var.name, None, INVALID, f"the root is unusable: {root_reason}"
            )
            continue
        value = os.path.join(base, var.path) if var.path else base
        problem = path_problem(value)
        if problem:
            settings[var.name] = Setting(var.name, None, INVALID, f"{value!r} {problem}")
            problems.append(f"{var.name} would be {value!r}, which {problem}")
            continue
        settings[var.name] = Setting(var.name, _norm(value), source)
    return Layout(
        root=root,
        root_source=root_source,
        root_reason=root_reason,
        tag=the_tag,
        settings=settings,
        problems=problems,
    )


def apply(environ: MutableMapping[str, str] | None = None, tag: str | None = None) -> Layout:
    """Set every variable that :func:`resolve` derived; leave everything else alone."""
    env = os.environ if environ is None else environ
    layout = resolve(env, tag)
    for name, value in layout.applied().items():
        env[name] = value
    return layout


def hook(environ: MutableMapping[str, str] | None = None) -> None:
    """The start-up hook's entry point: :func:`apply`, unless disabled; never raises."""
    env = os.environ if environ is None else environ
    try:
        if not truthy(env.get(CACHEROOT_DISABLE)):
            apply(env)
    except Exception:  # noqa: BLE001, S110 - an interpreter must always start; the doctor reports
        pass
