"""Where Python source decides a cache location, found with :mod:`ast`.

A *finding* is one place that decides where something is cached: an environment variable read
whose name or default looks like a cache directory (``os.environ.get("X_CACHE_DIR", ...)``,
``os.getenv``, ``os.environ[...]``, a project's own ``EnvVar("X_CACHE_DIR", ...)`` wrapper), or
a location built from a fixed base with no variable at all (``Path.home() / ".x"``,
``os.path.expanduser("~/.x")``, ``tempfile.gettempdir()`` joined with a fixed name,
``platformdirs.user_cache_dir("x")``, a ``"/tmp/..."`` literal). Each is rendered in one
shell-like notation, ``${NAME:-default}/sub``, so that a reader sees at a glance what moves it.

Only the syntax tree is read: nothing is imported or run. What is built at run time (a name in
an f-string, a path from a configuration file) shows as ``{...}`` or is not seen.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import _cacheroot_layout as _layout
from _cacheroot_layout import TABLE

from ._audit_downloaders import Fetched, fetched, fetched_url
from ._audit_flow import (
    DOWNLOAD,
    FETCHED,
    SINK_RANK,
    fetched_in_memory,
    is_test_file,
    kind_of,
    origins,
    returns,
    runs_on,
    sink_paths,
    words,
)
from ._audit_names import (
    _JOINERS,
    _PATH_METHODS,
    _WRAPPERS,
    CACHE,
    GATING,
    LAYOUT_OVERRIDE,
    THROWAWAY,
    UNCACHED_DOWNLOAD,
)
from ._audit_names import DOWNLOAD as DOWNLOAD_KIND
from ._audit_names import dotted as _dotted
from ._readers import FUNCTIONS, VARIABLES

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._audit_flow import Leaf
    from ._audit_package import Package


#: Calls that read an environment variable: ``(name, default)`` are their first two arguments.
#: (``from os import environ, getenv`` is read as ``os.environ``, ``os.getenv``: a bare
#: ``environ`` of another origin, such as a parameter, is a mapping the audit cannot know.)
_ENV_CALLS = frozenset({"os.getenv", "os.environ.get", "os.environ.setdefault"})
_ENVIRON = frozenset({"os.environ"})
#: Names of bases, rendered as ``~`` or ``$TMPDIR`` rather than reported on their own.
_BASES = {"HOME": "~", "USERPROFILE": "~", "TMPDIR": "$TMPDIR", "TEMP": "$TMPDIR", "TMP": "$TMPDIR"}
XDG = "XDG_CACHE_HOME"
_ENV_NAME = re.compile(r"_*[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
#: Last words of a variable that names a location.
_PATH_WORDS = frozenset(
    {"DIR", "DIRS", "DIRECTORY", "PATH", "ROOT", "HOME", "CACHE", "BASE", "FOLDER", "LOCATION"}
)
#: Words that make a location variable a cache (rather than, say, an install prefix).
_CACHE_WORDS = frozenset({"CACHE", "CACHES", "CACHEDIR", "JIT", "AOT", "TMP", "TEMP", "WORKSPACE"})
#: Words of settings that are not caches: configuration is deliberately left where it is.
_NOT_CACHE_WORDS = frozenset(
    {
        "CONFIG",
        "CONF",
        "CFG",
        "NO",
        "DISABLE",
        "DISABLED",
        "ENABLE",
        "ENABLED",
        "USE",
        "SKIP",
        "CLEAR",
        "EMPTY",
        "MEMORY",
        "REMOTE",
        "MOUNT",  # a mount point: provided by the platform and read, not decided here
    }
)

_HOME_CALLS = frozenset({"Path.home", "pathlib.Path.home", "PosixPath.home"})
_TMP_CALLS = frozenset({"tempfile.gettempdir", "gettempdir", "tempfile.gettempdirb"})
_USER_CACHE = frozenset({"user_cache_dir", "user_cache_path"})
_TMP_PREFIXES = ("/tmp/", "/var/tmp/")  # noqa: S108 - the literals this audit looks for
_TMP_DIRS = ("/tmp", "/var/tmp")  # noqa: S108
_SHM = "/dev/shm"  # noqa: S108 - shared memory: a place once something is written there
#: Every name the layout table knows: a read of one is always a finding (covered by its row).
_LAYOUT_NAMES = frozenset({v.name for v in TABLE} | {n for v in TABLE for n in v.legacy})
#: The modules that spell the layout's names (their constants hold the names).
_LAYOUT_MODULES = frozenset({"cacheroot.envs", "_cacheroot_layout"})
#: Last parts of a project's module of environment variables, read by attribute (``envs.X``).
_ENVS_MODULES = frozenset({"envs", "env", "environment_variables"})
#: The value of a name bound in a way that cannot be followed (a parameter, a loop variable).
UNFOLLOWED = ast.Constant(None)
#: Where a ``/tmp`` literal is data, not a place written to (docstrings, tests, containers).
_NOT_A_USE = (ast.Expr, ast.Compare, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Subscript)
#: Words of a keyword argument that make a ``/tmp`` literal given to a class a place all the
#: same (``Config(cache_dir="/tmp/x")``); any other keyword of a class holds data
#: (``Variable(..., replaces="/tmp/x")``, ``Option(help="...")``).
_PLACE_KEYWORD_WORDS = frozenset(
    {
        "base",
        "cache",
        "default",
        "dest",
        "destination",
        "dir",
        "directory",
        "dirname",
        "dirs",
        "dump",
        "file",
        "filename",
        "folder",
        "home",
        "location",
        "log",
        "out",
        "output",
        "path",
        "prefix",
        "root",
        "save",
        "target",
        "temp",
        "tmp",
        "tmpdir",
        "workspace",
    }
)
#: Names of credential files (requests' ``NETRC_FILES``): not caches, however they are built.
_CREDENTIAL_NAMES = frozenset({"netrc", ".netrc", "_netrc"})
#: Endings of configuration files: under the home directory, not caches unless a part of the
#: path says cache (``~/pip/pip.ini`` is configuration, ``~/.cache/x/index.json`` is not).
_CONFIG_SUFFIXES = (".ini", ".cfg", ".conf", ".toml", ".yaml", ".yml", ".json")
#: Fixed places under the home directory that are not caches: configuration, data, shell
#: start-up files, and other platforms' folders (CI runs Linux).
_NOT_CACHE_PLACES = (
    "~/.config",
    "~/.local/",
    "~/.ssh",
    "~/.bashrc",
    "~/.zshrc",
    "~/.profile",
    "~/.bash_profile",
    "~/Library/",
    "~/AppData/",
    "~/Desktop",
    "~/Documents",
    "~/Downloads",
    "~/Pictures",
    "~/Movies",
    "~/Music",
    "~/Videos",
    "~/.pypirc",
    "~/.netrc",
    "~/.bash_completion",
)
#: Words of a name given to a fixed place that make it a search path of installed things.
_INSTALL_WORDS = frozenset({"LIB", "LIBS", "BIN", "BINS", "INCLUDE", "INCLUDES", "PREFIX"})
#: Words of a variable that holds a setting, never a place, whatever call it is given to.
_SETTING_WORDS = frozenset(
    {"TIMEOUT", "RETRIES", "RETRY", "SIZE", "LIMIT", "TTL", "MAX", "MIN", "SECONDS", "LEVEL"}
    | {"VERBOSITY", "URL", "ENDPOINT", "TOKEN", "KEY", "HOST", "PORT", "USER", "PASSWORD"}
)
#: Words of a variable that holds a value other than a place (a version, an address, a name):
#: it is no place unless its name ends in a place's word or its default is a path.
_VALUE_WORDS = frozenset(
    {"VERSION", "URL", "URI", "NAME", "ENDPOINT", "HOST", "PORT", "BRANCH", "REVISION", "TAG"}
)
#: A URL of another host (``file://`` names a place).
_REMOTE_URL = re.compile(r"(?!file://)[A-Za-z][A-Za-z0-9+.-]*://")
#: A version (PEP 440-ish: ``1.5.0``, ``v2.1``, ``1.0rc1``, ``2.0.post1``).
_VERSION = re.compile(r"[vV]?[0-9]+(?:\.[0-9]+)+(?:[-._+]?[A-Za-z]+[0-9]*)*")
#: ``tempfile`` makers of a named file or directory, and the position of their ``dir``.
_TEMP_MAKERS = {
    "mkdtemp": 2,
    "mkstemp": 2,
    "TemporaryDirectory": 2,
    "NamedTemporaryFile": 6,
}
#: XDG variables that are not the cache home.
_OTHER_XDG = frozenset({"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"})
#: Defaults that make a ``X_CACHE`` variable a switch or a size, not a place.
_SWITCH_VALUES = re.compile(r"-?[0-9.]+|true|false|yes|no|on|off|none", re.IGNORECASE)
_NESTED_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-(.*)\}")
_OPAQUE_MAX = 48
# Limits of the walks of this module: each written once, here.
#: How many steps :meth:`_Module.render` follows an expression (names, calls, joins).
RENDER_DEPTH = 24
#: How many re-exports (``from .util import f`` in an ``__init__``) a name is followed through.
REEXPORT_HOPS = 4
#: How many names a constant string is followed through (``NAME = OTHER = "X_DIR"``).
CONSTANT_HOPS = 3
#: How many parents of a location are read for the names it is given.
TARGET_PARENTS = 6

#: How a default was formed (the ``style`` of a finding).
EXPANDUSER = "expanduser"
PATH_HOME = "Path.home()"
HOME_VAR = "$HOME"
GETTEMPDIR = "gettempdir()"
TMP_LITERAL = "/tmp literal"  # noqa: S108 - a label, not a path
PLATFORMDIRS = "platformdirs.user_cache_dir"
XDG_HONOURED = "XDG_CACHE_HOME honoured"
XDG_IGNORED = "XDG_CACHE_HOME ignored"
KNOWN_READER = "known reader"
#: What an :class:`Unfollowed` is.
RUN_TIME_NAME = "environment name built at run time"
HELPER = "helper in another module"
#: Classes of platformdirs and appdirs whose attributes name directories.
_DIRS_CLASSES = frozenset({"PlatformDirs", "AppDirs"})
#: Standard-library modules: a call of theirs is not a helper left unread.
_STDLIB_ROOTS = frozenset({"os", "sys", "re", "json", "hashlib", "time", "functools", "io"})


@dataclass(frozen=True)
class Unfollowed:
    """A place the analysis could not follow: a name built at run time, a helper in another
    module. Counted per package, so that nothing found never reads as nothing there."""

    dist: str
    file: str
    line: int
    what: str
    text: str


@dataclass
class Finding:
    """One place that decides where something is cached.

    ``variable`` is the environment variable that moves it (``None``: nothing does);
    ``expression`` is the whole location as the code builds it, ``default`` where it lies when
    the variable is unset (``""``: not decided in this expression). ``fallback_of`` names the
    variable read earlier in the same function (or in its caller) that this location is the
    fallback of, with that read's line.
    """

    dist: str
    version: str
    file: str
    line: int
    variable: str | None
    expression: str
    default: str
    style: tuple[str, ...]
    fallback_of: tuple[str, int] | None = None
    #: What lies there (:data:`KINDS`), and why the audit says so.
    kind: str = CACHE
    reason: str = ""
    #: The platforms (``sys.platform`` values) on whose branch it lies; ``()``: every one.
    runs_on: tuple[str, ...] = ()
    #: In a source tree of one's own, the download that lands there (what to call instead).
    fetched: Fetched | None = None
    #: The fixed places the variable falls back on besides its own default, folded into this
    #: finding (``default`` holds the whole chain: ``~/.x, else /tmp/.x``).
    fallbacks: tuple[str, ...] = ()

    @property
    def upstream(self) -> str:
        """Where it is read, as the layout table's ``upstream`` entries spell it."""
        return f"{self.dist}=={self.version} {self.file}" if self.version else self.file


@dataclass(frozen=True)
class Rendered:
    """An expression in the audit's notation, with the variables and styles it involves."""

    text: str
    variables: tuple[str, ...] = ()
    style: frozenset[str] = frozenset()

    @property
    def root(self) -> str:
        """What the location hangs from: ``home``, ``tmp``, ``xdg``, ``var``, ``abs`` or ``""``."""
        t = self.text
        if t.startswith("~"):
            return "home"
        if t.startswith("$TMPDIR") or t in _TMP_DIRS or t.startswith(_TMP_PREFIXES):
            return "tmp"
        if t.startswith((f"${{{XDG}", f"${XDG}")):
            return "xdg"
        if t.startswith("$"):
            return "var"
        if t.startswith("/"):
            return "abs"
        return ""

    @property
    def first_variable(self) -> str | None:
        """The variable the location hangs from, when it starts with one."""
        return self.variables[0] if self.variables and self.text.startswith("$") else None


def _callee(node: ast.Call) -> str:
    """The last name of what is called (``EnvVar`` for ``env.EnvVar(...)``)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


#: Modules whose aliases are followed (``import os.path as osp``, ``from pathlib import Path
#: as P``): every name of theirs the audit knows is spelled in full in the sets above.
_ALIAS_ROOTS = frozenset(
    {"os", "pathlib", "tempfile", "platformdirs", "appdirs", "urllib", "torch", "requests"}
    | {"sys", "shutil", "subprocess", "platform", "io", "httpx"}
)
#: Names of ``os`` that are always read in full, aliased or not.
_OS_NAMES = frozenset({"environ", "getenv", "path", "makedirs", "mkdir", "putenv"})


class _Aliases(ast.NodeTransformer):
    """Spells every alias of a followed module in full (``osp.join`` -> ``os.path.join``)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        target = self.names.get(node.id)
        if target is None or not isinstance(node.ctx, ast.Load):
            return node
        parts = target.split(".")
        new: ast.expr = ast.Name(parts[0], ast.Load())
        for part in parts[1:]:
            new = ast.Attribute(new, part, ast.Load())
        for child in ast.walk(new):
            ast.copy_location(child, node)
        return new


def _statements(tree: ast.Module) -> Iterable[ast.stmt]:
    """Every statement of ``tree``, at any depth (expressions are not entered)."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, ()) or ():
                if isinstance(child, ast.stmt):
                    stack.append(child)
                else:  # an except handler or a match case: its body
                    stack.extend(getattr(child, "body", ()))


def canonical(tree: ast.Module) -> ast.Module:
    """``tree`` with the aliases of the modules the audit knows spelled in full, and the known
    location functions imported by name (``from torch.hub import get_dir``, ``from torch import
    hub``) spelled as the known readers' table has them (``torch.hub.get_dir``)."""
    names: dict[str, str] = {}
    known = _known_prefixes()
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.asname != a.name and a.name.split(".")[0] in _ALIAS_ROOTS:
                    names[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            aliased = node.module.split(".")[0] in _ALIAS_ROOTS
            for a in node.names:
                local = a.asname or a.name
                full = f"{node.module}.{a.name}"
                if full in known or (
                    aliased and (local != a.name or (node.module == "os" and a.name in _OS_NAMES))
                ):
                    names[local] = full
    if names:
        _Aliases(names).visit(tree)
    return tree


def _known_prefixes() -> frozenset[str]:
    """The known location functions' dotted names (:data:`._readers.FUNCTIONS`), and every
    module above each (``torch.hub`` of ``torch.hub.get_dir``)."""
    out: set[str] = set()
    for name in FUNCTIONS:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return frozenset(out)


_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
#: Nodes the index notes nothing of but their place (scope, parent): only their children.
_PLAIN = frozenset(
    {
        ast.Expr, ast.Return, ast.BinOp, ast.BoolOp, ast.UnaryOp, ast.Compare, ast.keyword,
        ast.JoinedStr, ast.FormattedValue, ast.Tuple, ast.List, ast.Dict, ast.Set, ast.Starred,
        ast.IfExp, ast.Await, ast.Yield, ast.YieldFrom, ast.Raise, ast.Try, ast.While, ast.With,
        ast.AsyncWith, ast.ExceptHandler, ast.Delete, ast.Assert, ast.Pass, ast.Break,
        ast.Continue, ast.Slice, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
    }
)  # fmt: skip
#: Children never indexed: contexts and operators (shared, and no place of their own).
_LEAVES = frozenset(
    {ast.Load, ast.Store, ast.Del}
    | {type(op) for op in (ast.Add(), ast.Sub(), ast.Mult(), ast.Div(), ast.Mod(), ast.Pow())}
    | {ast.FloorDiv, ast.BitOr, ast.BitAnd, ast.BitXor, ast.LShift, ast.RShift, ast.MatMult}
    | {ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Invert}
    | {ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn}
)


def absolute(name: str, file: str, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` names in module ``name``
    (``""`` when it climbs above the top)."""
    if not level:
        return module or ""
    parts = name.split(".") if name else []
    if not file.endswith("__init__.py"):
        parts = parts[:-1]  # a module's package
    if level - 1 > len(parts) or (level - 1 == len(parts) and not module):
        return ""
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([module] if module else [])])


@dataclass
class _EnvRead:
    node: ast.AST
    name: str
    default: ast.expr | None
    scope: _Scope


def _arms(m: _Module, part: ast.AST, top: ast.AST) -> list[tuple[int, ast.expr]]:
    """``(id of a conditional expression, its arm)`` for each conditional expression between
    ``part`` and ``top`` (``top`` included) that ``part`` lies in an arm of."""
    out: list[tuple[int, ast.expr]] = []
    child = part
    while child is not top:
        parent = m.parent.get(child)
        if parent is None:
            break
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            out.append((id(parent), parent.body if child is parent.body else parent.orelse))
        child = parent
    return out


class _Module:
    """One parsed file: scopes, simple assignments, local functions, and the findings."""

    def __init__(
        self, tree: ast.Module, file: str = "", name: str = "", package: Package | None = None
    ) -> None:
        self.tree = tree
        self.file = file
        #: The module's dotted name, and the package whose other modules its names may name.
        self.name = name
        self.package = package
        #: Names bound by ``from M import N`` (local name -> ``M.N``, relative imports made
        #: absolute), and by ``import M`` (the first part, and ``local -> M`` in full).
        self.imported: dict[str, str] = {}
        self.modules: set[str] = set()
        self.module_names: dict[str, str] = {}
        #: Parameters, by function and name; values a name gains by ``+=``, ``.append``,
        #: ``.extend``, ``.insert`` (followed as values, never taken as the one value).
        self.params: dict[tuple[_Scope, str], ast.arg] = {}
        self.more: dict[tuple[_Scope, str], list[ast.expr]] = {}
        #: Methods by class, classes by name (top level), and what ``self.NAME`` is given in
        #: a class's methods.
        self.methods: dict[ast.ClassDef, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.attributes: dict[tuple[ast.ClassDef, str], list[ast.expr]] = {}
        #: ``with E as NAME``: what ``NAME`` was made from, by scope and name.
        self.with_values: dict[tuple[_Scope, str], ast.expr] = {}
        #: ``X[...] = ...`` statements, and ``.content``/``.raw`` reads (a download in memory).
        self.item_sets: list[ast.Assign] = []
        self.in_memory: list[ast.Attribute] = []
        self.parent: dict[ast.AST, ast.AST] = {}
        self.scope_of: dict[ast.AST, _Scope] = {}
        self.assigns: dict[_Scope, dict[str, list[ast.expr]]] = {}
        self.loads: dict[str, list[ast.Name]] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.calls: dict[str, list[ast.Call]] = {}
        self.candidates: list[ast.expr] = []
        #: What a loop or comprehension variable runs over, by scope and name.
        self.iterables: dict[tuple[_Scope, str], list[ast.expr]] = {}
        self._resolving: set[str] = set()
        #: What each function returns, by function and depth (:func:`._audit_flow._returned`).
        self.returned: dict[tuple[int, int], tuple[Leaf, ...]] = {}
        #: While a place is rendered from one of its parts: the arm of each conditional
        #: expression on the way that the part lies in (by the conditional's id).
        self._arms: dict[int, ast.expr] = {}
        #: While a path is rendered as one of its origins makes it (:meth:`render_via`): that
        #: origin, whose value a name given several is rendered with.
        self._via: ast.AST | None = None
        self._index(tree, tree)
        loads = self._base_loads()
        self.base_loads: frozenset[ast.expr] = frozenset(loads)
        self.candidates += loads
        self.candidates.sort(key=lambda n: (n.lineno, n.col_offset))
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[stmt.name] = stmt

    def _index(self, node: ast.AST, scope: _Scope) -> None:
        self._globals: list[tuple[_Scope, str]] = []
        self._walk(node, scope)
        for sc, name in self._globals:  # ``global NAME`` in a function: the module's NAME
            values = self.assigns.get(sc, {}).pop(name, [])
            self.assigns.setdefault(self.tree, {}).setdefault(name, []).extend(values)

    def _walk(self, node: ast.AST, scope: _Scope) -> None:  # noqa: PLR0912, PLR0915 - one per kind
        stack: list[tuple[ast.AST, _Scope]] = [(node, scope)]
        while stack:
            current, sc = stack.pop()
            self.scope_of[current] = sc
            inner = sc
            if type(current) in _PLAIN:  # nothing to note: its children only
                for child in ast.iter_child_nodes(current):
                    if type(child) not in _LEAVES:
                        self.parent[child] = current
                        stack.append((child, sc))
                continue
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = current
            if isinstance(current, ast.Assign | ast.AnnAssign) and current.value is not None:
                targets = current.targets if isinstance(current, ast.Assign) else [current.target]
                if isinstance(current, ast.Assign) and any(
                    isinstance(t, ast.Subscript) for t in targets
                ):
                    self.item_sets.append(current)
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.assigns.setdefault(sc, {}).setdefault(target.id, []).append(
                            current.value
                        )
                    elif (
                        isinstance(target, ast.Tuple)
                        and isinstance(current.value, ast.Tuple)
                        and len(target.elts) == len(current.value.elts)
                    ):  # ``a, b = os.getenv("A"), os.getenv("B")``
                        for name, value in zip(target.elts, current.value.elts, strict=True):
                            if isinstance(name, ast.Name):
                                self.assigns.setdefault(sc, {}).setdefault(name.id, []).append(
                                    value
                                )
                    elif isinstance(target, ast.Tuple | ast.List):
                        self._unfollowable(sc, target)
                    elif isinstance(target, ast.Attribute) and _dotted(target.value) == "self":
                        owner = self.owner(sc)  # ``self.NAME = value`` in a method
                        if owner is not None:
                            key = (owner, target.attr)
                            self.attributes.setdefault(key, []).append(current.value)
            elif isinstance(current, ast.Global) and sc is not self.tree:
                self._globals += [(sc, name) for name in current.names]
            elif isinstance(current, ast.NamedExpr):
                self.assigns.setdefault(sc, {}).setdefault(current.target.id, []).append(
                    current.value
                )
            elif isinstance(current, ast.withitem):
                self._unfollowable(sc, current.optional_vars)
                if isinstance(current.optional_vars, ast.Name):
                    self.with_values[(sc, current.optional_vars.id)] = current.context_expr
            elif isinstance(current, ast.ImportFrom):
                module = absolute(self.name, self.file, current.level, current.module)
                for alias in current.names if module else ():
                    self.imported[alias.asname or alias.name] = f"{module}.{alias.name}"
            elif isinstance(current, ast.Import):
                self.modules.update((a.asname or a.name).split(".")[0] for a in current.names)
                for a in current.names:
                    local = a.asname or a.name.split(".")[0]
                    self.module_names[local] = a.name if a.asname else local
            elif isinstance(current, ast.AugAssign | ast.For | ast.AsyncFor):
                self._unfollowable(sc, current.target)
                if not isinstance(current, ast.AugAssign):
                    self._iterates(sc, current.target, current.iter)
                elif isinstance(current.target, ast.Name) and isinstance(current.op, ast.Add):
                    self.more.setdefault((sc, current.target.id), []).append(current.value)
            elif isinstance(current, ast.ClassDef):
                if sc is self.tree:
                    self.classes[current.name] = current
                self.methods[current] = {
                    f.name: f
                    for f in current.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                }
            elif isinstance(current, ast.comprehension):
                self._iterates(sc, current.target, current.iter)
            elif isinstance(current, ast.arguments):
                for arg in (*current.posonlyargs, *current.args, *current.kwonlyargs):
                    self._unfollowable(inner, ast.Name(arg.arg, ast.Store()))
                    self.params[(inner, arg.arg)] = arg
            elif isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
                self.loads.setdefault(current.id, []).append(current)
                if self._imported_read(current.id) is not None:
                    self.candidates.append(current)
            elif isinstance(current, ast.Attribute) and isinstance(current.ctx, ast.Load):
                if current.attr in _USER_CACHE or current.attr in _LAYOUT_NAMES:
                    self.candidates.append(current)
                elif current.attr in ("content", "raw"):
                    self.in_memory.append(current)
            elif isinstance(current, ast.Call | ast.Subscript):
                self.candidates.append(current)
                if isinstance(current, ast.Call) and isinstance(current.func, ast.Name):
                    self.calls.setdefault(current.func.id, []).append(current)
                elif isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
                    self._grows(sc, current)
            elif (
                isinstance(current, ast.Constant)
                and isinstance(current.value, str)
                and (current.value.startswith(("~/", *_TMP_PREFIXES)) or current.value in _TMP_DIRS)
            ):
                self.candidates.append(current)
            if isinstance(current, ast.If) and _dotted(current.test).endswith("TYPE_CHECKING"):
                continue  # annotations only: never run
            for child in ast.iter_child_nodes(current):
                if type(child) not in _LEAVES:
                    self.parent[child] = current
                    stack.append((child, inner))

    def base_call(self, node: ast.AST) -> bool:
        """Whether ``node`` is a bare base: ``Path.home()``, ``expanduser("~...")``,
        ``gettempdir()``, ``user_cache_dir(...)`` (``PlatformDirs(...).user_cache_dir`` too),
        ``os.environ["HOME"]``, or a known reader's function (``torch.hub.get_dir()``)."""
        if self.reader_call(node):
            return True
        if isinstance(node, ast.Subscript | ast.Call):
            read = self.env_read(node)
            if read is not None:
                return read.name in _BASES
        if not isinstance(node, ast.Call):
            return False
        name = _dotted(node.func)
        if name in _HOME_CALLS or name in _TMP_CALLS or _callee(node) in _USER_CACHE:
            return True
        if name.endswith("expanduser") and node.args:
            text = self.string(node.args[0], self.scope_of.get(node, self.tree))
            return text is not None and text.startswith("~")
        return False

    def reader_call(self, node: ast.AST) -> bool:
        """A call of the known readers' table, or a platformdirs/appdirs object's cache
        directory (``PlatformDirs("x").user_cache_dir``)."""
        if isinstance(node, ast.Call):
            return _dotted(node.func) in FUNCTIONS
        return (
            isinstance(node, ast.Attribute)
            and node.attr in _USER_CACHE
            and isinstance(node.value, ast.Call)
            and _callee(node.value) in _DIRS_CLASSES
        )

    def helper(self, node: ast.Call) -> bool:
        """Whether ``node`` calls a function of another module, which the audit does not read
        (``from demo.paths import default_root``; ``demo_paths.default_root()``)."""
        func = node.func
        if isinstance(func, ast.Name):
            source = self.imported.get(func.id, "")
            return bool(source) and source.split(".")[0] not in _ALIAS_ROOTS
        root = _dotted(func).split(".")[0]
        return root in self.modules and root not in _ALIAS_ROOTS and root not in _STDLIB_ROOTS

    def _base_loads(self) -> list[ast.expr]:
        """Uses of a name given a bare base once (``home = os.path.expanduser("~")``): the
        place is built where the name is used (``os.path.join(home, ".x")``)."""
        found: list[ast.expr] = []
        for scope, names in self.assigns.items():
            for name, values in names.items():
                if len(values) != 1 or not self.base_call(values[0]):
                    continue
                if not _trivial(self.render(values[0], scope).text):
                    continue  # a whole location, reported where it is made
                found.extend(
                    load
                    for load in self.loads.get(name, [])
                    if scope is self.tree or self.scope_of.get(load) is scope
                )
        return found

    def _grows(self, scope: _Scope, call: ast.Call) -> None:
        """``NAME.append(x)``, ``.extend(xs)``, ``.insert(i, x)``: ``x`` is one more value."""
        func = call.func
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
            return
        index = {"append": 0, "extend": 0, "insert": 1}.get(func.attr)
        if index is not None and len(call.args) > index:
            self.more.setdefault((scope, func.value.id), []).append(call.args[index])

    # -- other modules of the package -------------------------------------------------------

    def owner(self, scope: _Scope) -> ast.ClassDef | None:
        """The class ``scope`` is a method of."""
        parent = self.parent.get(scope) if not isinstance(scope, ast.Module) else None
        return parent if isinstance(parent, ast.ClassDef) else None

    def instance_of(self, name: str, scope: _Scope) -> tuple[_Module, ast.ClassDef] | None:
        """The package's class ``name`` holds an instance of (``cache = Cache(...)``)."""
        values = self.values_of(name, scope) or []
        made = self.with_values.get((scope, name))
        if made is not None:
            values = [*values, made]
        if len(values) != 1 or not isinstance(values[0], ast.Call):
            return None
        return self._class_at(values[0].func, scope)

    def _class_at(self, func: ast.expr, scope: _Scope) -> tuple[_Module, ast.ClassDef] | None:
        """The package's class a called name is."""
        if isinstance(func, ast.Name) and func.id in self.classes:
            return self, self.classes[func.id]
        found = self.target(func, scope)
        for _ in range(REEXPORT_HOPS):
            if found is None or not found[1]:
                return None
            module, attr = found
            if attr in module.classes:
                return module, module.classes[attr]
            found = module.reexport(attr)
        return None

    def _local(self, name: str, scope: _Scope) -> bool:
        return any(name in self.assigns.get(sc, {}) for sc in (scope, self.tree))

    def target(self, node: ast.AST, scope: _Scope) -> tuple[_Module, str] | None:
        """The module of the package, and the name in it, that a name or a dotted attribute
        (``config.CACHE``, ``nltk.data.path``) refers to; ``(module, "")`` for a module."""
        dotted = _dotted(node)
        if not dotted or self.package is None:
            return None
        head, _, rest = dotted.partition(".")
        if self._local(head, scope):
            return None
        source = self.imported.get(head) or self.module_names.get(head)
        if source is None:
            return None
        return self.package.symbol(f"{source}.{rest}" if rest else source)

    def function_at(  # noqa: PLR0911 - one per way of naming a function
        self, call: ast.Call, scope: _Scope
    ) -> tuple[_Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The function of the package ``call`` calls: of this module, a method of the
        enclosing class (``self.x()``), or of another module."""
        func = call.func
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self, self.functions[func.id]
        made = self._class_at(func, scope)
        if made is not None:  # ``Cache(cache_dir)``: its ``__init__``
            init = made[0].methods[made[1]].get("__init__")
            return (made[0], init) if init is not None else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("self", "cls"):
                owner = self.owner(scope)
                fn = self.methods[owner].get(func.attr) if owner is not None else None
                return (self, fn) if fn is not None else None
            instance = self.instance_of(func.value.id, scope)
            if instance is not None:  # ``cache = Cache(); cache.get_path()``
                fn = instance[0].methods[instance[1]].get(func.attr)
                return (instance[0], fn) if fn is not None else None
        found = self.target(func, scope)
        if found is None or not found[1]:
            return None
        module, attr = found
        for _ in range(REEXPORT_HOPS):  # ``from .util import f`` in an ``__init__``: f is util's
            fn = module.functions.get(attr)
            if fn is not None:
                return module, fn
            again = module.reexport(attr)
            if again is None:
                return None
            module, attr = again
        return None

    def reexport(self, attr: str) -> tuple[_Module, str] | None:
        """Where a name this module imports from another module of the package is defined."""
        source = self.imported.get(attr)
        if source is None or self.package is None:
            return None
        found = self.package.symbol(source)
        return found if found is not None and found[1] else None

    def values_at(self, node: ast.AST, scope: _Scope) -> tuple[_Module, list[ast.expr]] | None:
        """The module-level values of a name another module of the package defines."""
        found = self.target(node, scope)
        if found is None or not found[1]:
            return None
        module, attr = found
        for _ in range(REEXPORT_HOPS):
            if attr in module.assigns.get(module.tree, {}):
                break
            again = module.reexport(attr)
            if again is None:
                return None
            module, attr = again
        values = module.assigns.get(module.tree, {}).get(attr, [])
        values = [v for v in values if v is not UNFOLLOWED]
        values += module.more.get((module.tree, attr), [])
        return (module, values) if values else None

    def _iterates(self, scope: _Scope, target: ast.AST, over: ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.iterables.setdefault((scope, node.id), []).append(over)

    def credential(self, top: ast.AST) -> bool:
        """Whether a path names a ``netrc`` file through its variables: a name or attribute
        that says ``netrc``, or a loop variable that runs over one (``for n in NETRC_FILES``, or
        a tuple of such names)."""
        scope = self.scope_of.get(top, self.tree)
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute) and "netrc" in node.attr.lower():
                return True
            if not isinstance(node, ast.Name):
                continue
            if "netrc" in node.id.lower():
                return True
            for over in self.iterables.get((scope, node.id), []):
                value = self.value_of(over.id, scope) if isinstance(over, ast.Name) else None
                for part in (over, value):
                    if part is not None and "netrc" in ast.unparse(part).lower():
                        return True
        return False

    def _unfollowable(self, scope: _Scope, target: ast.AST | None) -> None:
        """Names bound in a way whose value cannot be followed (parameters, loops, ``+=``)."""
        if target is None:
            return
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.assigns.setdefault(scope, {}).setdefault(node.id, []).extend(
                    [UNFOLLOWED, UNFOLLOWED]  # two values: never followed as one
                )

    # -- names and constants --------------------------------------------------------------

    def value_of(self, name: str, scope: _Scope) -> ast.expr | None:
        """The one value ``name`` is given in ``scope`` (else at module level), or ``None``."""
        for sc in (scope, self.tree):
            values = self.assigns.get(sc, {}).get(name)
            if values is not None:
                return values[0] if len(values) == 1 else None
        return None

    def values_of(self, name: str, scope: _Scope) -> list[ast.expr] | None:
        """Every value ``name`` is given in ``scope`` (else at module level), in every branch,
        less those that cannot be followed (a parameter's, a loop variable's): a parameter given
        its default in the body (``if root is None: root = os.getenv(...)``) has that default
        followed, the caller's value being no place decided here. ``None`` when no value is
        left."""
        for sc in (scope, self.tree):
            values = self.assigns.get(sc, {}).get(name)
            if values is not None:
                return [v for v in values if v is not UNFOLLOWED] or None
        return None

    def string(self, node: ast.expr | None, scope: _Scope) -> str | None:
        """The string ``node`` is, directly or through one constant name (a layout name
        imported from another module included)."""
        for _ in range(CONSTANT_HOPS):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return node.value
            if not isinstance(node, ast.Name):
                return None
            value = self.value_of(node.id, scope)
            if value is None:
                return self._imported_name(node.id)
            node = value
        return None

    def _imported_name(self, name: str) -> str | None:
        """The variable name an imported constant holds: the layout's own constants by their
        value (``VLLM_TEST_CACHE`` is ``"_VLLM_TEST_CACHE"``), a layout name of another module
        by itself."""
        source = self.imported.get(name)
        if source is None:
            return None
        module = source.rpartition(".")[0]
        if module in _LAYOUT_MODULES:
            value = getattr(_layout, source.rpartition(".")[2], None)
            return value if isinstance(value, str) and _ENV_NAME.fullmatch(value) else None
        return name if name in _LAYOUT_NAMES else None

    def _imported_read(self, name: str) -> str | None:
        """A layout variable imported from a project's ``envs`` module (vLLM's ``from vllm.envs
        import VLLM_CACHE_ROOT``): a read of that variable wherever it is used."""
        source = self.imported.get(name, "")
        module, _, attr = source.rpartition(".")
        if attr in _LAYOUT_NAMES and module.rpartition(".")[2] in _ENVS_MODULES:
            return attr if module not in _LAYOUT_MODULES else None
        return None

    # -- environment reads ----------------------------------------------------------------

    def env_read(self, node: ast.AST) -> _EnvRead | None:  # noqa: PLR0911 - one per form
        """The environment read ``node`` is, if any."""
        scope = self.scope_of.get(node, self.tree)
        if isinstance(node, ast.Attribute) and node.attr in _LAYOUT_NAMES:
            # ``envs.VLLM_CACHE_ROOT``: a project's module of variables, read by attribute.
            owner = _dotted(node.value).rpartition(".")[2]
            return _EnvRead(node, node.attr, None, scope) if owner in _ENVS_MODULES else None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            name = self._imported_read(node.id)
            return _EnvRead(node, name, None, scope) if name else None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _dotted(node.value) in _ENVIRON:
                name = self.string(node.slice, scope)
                return _EnvRead(node, name, None, scope) if name else None
            return None
        if not isinstance(node, ast.Call) or not node.args:
            return None
        name = self.string(node.args[0], scope)
        if name is None or not _ENV_NAME.fullmatch(name):
            return None
        default: ast.expr | None = None
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if _dotted(node.func) in _ENV_CALLS:
            default = node.args[1] if len(node.args) > 1 else keywords.get("default")
            return _EnvRead(node, name, default, scope)
        callee = _callee(node).lower()
        if "env" not in callee and "xdg" not in callee:
            return None
        if callee.startswith(("set", "put", "del", "unset", "update")):
            return None  # monkeypatch.setenv(NAME, value) writes the variable
        # A project's own wrapper (``EnvVar(name, default)``, ``_readenv(name, type, default)``):
        # its default is the first later argument that is not a bare type.
        for arg in node.args[1:]:
            if not (isinstance(arg, ast.Name) and arg.id in {"str", "int", "bool", "float"}):
                default = arg
                break
        else:
            default = keywords.get("default")
        return _EnvRead(node, name, default, scope)

    # -- rendering -------------------------------------------------------------------------

    def render(  # noqa: PLR0911, PLR0912 - one case per kind of node
        self, node: ast.AST | None, scope: _Scope, depth: int = 0
    ) -> Rendered:
        """``node`` in the audit's notation (``{...}`` for what cannot be followed)."""
        if node is None:
            return Rendered("")
        if depth > RENDER_DEPTH:
            return _opaque(node)
        d = depth + 1
        if isinstance(node, ast.Constant):
            if node.value is None:
                return Rendered("")
            if isinstance(node.value, bytes):
                return Rendered(node.value.decode("utf-8", "replace"))
            text = str(node.value)
            style = frozenset({TMP_LITERAL}) if text.startswith(_TMP_PREFIXES) else frozenset()
            return Rendered(text, style=style)
        read = self.env_read(node)
        if read is not None:
            return self._render_read(read, d)
        if isinstance(node, ast.Call):
            return self._render_call(node, scope, d)
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return Rendered("{__file__}")
            value = self.value_of(node.id, scope)
            if value is None and self._via is not None:
                value = self._toward(node.id, scope, self._via)
            if value is None or isinstance(value, ast.Lambda) or node.id in self._resolving:
                return _opaque(node)
            self._resolving.add(node.id)
            try:
                return self.render(value, self.scope_of.get(value, self.tree), d)
            finally:
                self._resolving.discard(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.Add):
            left = self.render(node.left, scope, d)
            right = self.render(node.right, scope, d)
            sep = "/" if isinstance(node.op, ast.Div) else ""
            return _join([left, right], sep)
        if isinstance(node, ast.JoinedStr):
            parts = [
                self.render(v.value if isinstance(v, ast.FormattedValue) else v, scope, d)
                for v in node.values
            ]
            return _join(parts, "")
        if isinstance(node, ast.IfExp):
            arm = self._arms.get(id(node))
            if arm is None and self._via is not None:
                via = self._via
                arm = next((a for a in (node.body, node.orelse) if self.leads(a, via)), None)
            if arm is not None:  # the arm the place being rendered lies in
                return self.render(arm, scope, d)
            # Otherwise the first branch is taken to be the usual one.
            body = self.render(node.body, scope, d)
            other = self.render(node.orelse, scope, d)
            return Rendered(body.text, body.variables, body.style | other.style)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            chained = self.render_or(node.values, scope, d)
            return chained if chained is not None else _opaque(node)
        if isinstance(node, ast.Lambda):
            return self.render(node.body, node, d)
        if isinstance(node, ast.Attribute):
            if node.attr == "parent":
                inner = self.render(node.value, scope, d)
                return Rendered(f"{inner.text}/..", inner.variables, inner.style)
            if self.reader_call(node) and isinstance(node.value, ast.Call):
                return self._render_user_cache(node.value, scope, d)
        return _opaque(node)

    def render_or(self, values: list[ast.expr], scope: _Scope, depth: int = 0) -> Rendered | None:
        """``A or B or c`` as ``${A:-${B:-c}}``: each variable read with no default of its own
        takes the rest of the chain as its default (``None`` when a part that is not the last
        is no such read)."""
        first = self.render(values[0], scope, depth)
        if len(values) == 1:
            return first
        rest = self.render_or(values[1:], scope, depth)
        if rest is None or not (
            first.text.startswith("$") and ":-" not in first.text and first.variables
        ):
            return None
        name = first.variables[0]
        return Rendered(
            f"${{{name}:-{rest.text}}}", (name, *rest.variables), first.style | rest.style
        )

    def render_via(self, node: ast.AST, scope: _Scope, origin: ast.AST) -> Rendered:
        """``node`` rendered as it is when its value comes from ``origin`` (one of its
        :func:`._audit_flow.origins`): a name given several values (``base = read(...)``, later
        ``base = "/tmp/x"``) is rendered with the one that leads to ``origin``."""
        kept = self._via
        self._via = origin
        try:
            return self.render(node, scope)
        finally:
            self._via = kept

    def _toward(self, name: str, scope: _Scope, origin: ast.AST) -> ast.expr | None:
        """The value of ``name`` (in ``scope``) that leads to ``origin``, if one does."""
        for value in self.values_of(name, scope) or ():
            if self.leads(value, origin):
                return value
        return None

    def leads(self, node: ast.AST, origin: ast.AST) -> bool:
        """Whether ``origin`` lies in ``node``, or in a value of a name ``node`` uses, a few
        names deep (:data:`CONSTANT_HOPS`)."""
        seen: set[tuple[int, str]] = set()
        todo: list[tuple[ast.AST, int]] = [(node, 0)]
        while todo:
            current, depth = todo.pop()
            for part in ast.walk(current):
                if part is origin:
                    return True
                if depth >= CONSTANT_HOPS or not isinstance(part, ast.Name):
                    continue
                sc = self.scope_of.get(part, self.tree)
                if (id(sc), part.id) in seen:
                    continue
                seen.add((id(sc), part.id))
                todo += [(v, depth + 1) for v in self.values_of(part.id, sc) or ()]
        return False

    def render_from(self, part: ast.AST, top: ast.AST) -> Rendered:
        """``top`` rendered as the place ``part`` (a node inside it) lies in: where ``top``
        chooses between two values (``a if flag else b``), the one ``part`` lies in, so that
        each arm is a place of its own whichever comes first."""
        kept = self._arms
        self._arms = dict(_arms(self, part, top))
        try:
            return self.render(top, self.scope_of.get(top, self.tree))
        finally:
            self._arms = kept

    def _render_read(self, read: _EnvRead, depth: int) -> Rendered:
        if read.name in _BASES:
            base = _BASES[read.name]
            return Rendered(base, style=frozenset({HOME_VAR}) if base == "~" else frozenset())
        default = self.render(read.default, read.scope, depth)
        style = default.style | ({XDG_HONOURED} if read.name == XDG else set())
        if not default.text:
            return Rendered(f"${read.name}", (read.name,), style)
        return Rendered(f"${{{read.name}:-{default.text}}}", (read.name, *default.variables), style)

    def _render_call(  # noqa: PLR0911, PLR0912 - one case per kind of call
        self, node: ast.Call, scope: _Scope, depth: int
    ) -> Rendered:
        name = _dotted(node.func)
        args = node.args
        if name in _HOME_CALLS:
            return Rendered("~", style=frozenset({PATH_HOME}))
        if name in _TMP_CALLS:
            return Rendered("$TMPDIR", style=frozenset({GETTEMPDIR}))
        if _callee(node) in _USER_CACHE:
            return self._render_user_cache(node, scope, depth)
        known = FUNCTIONS.get(name)
        if known is not None:
            location = known.location
            if "{0}" in location:  # the place depends on the first argument (a project name)
                first = self.render(args[0], scope, depth).text if args else "{project}"
                location = location.replace("{0}", first)
            return Rendered(location, known.variables, frozenset({KNOWN_READER}))
        if name in _JOINERS or (name.endswith(".join") and "path" in name):
            if not args:
                return Rendered(".")
            return _join([self.render(a, scope, depth) for a in args], "/")
        if name in _WRAPPERS and args:
            inner = self.render(args[0], scope, depth)
            if name.endswith("expanduser") and inner.text.startswith("~"):
                return Rendered(inner.text, inner.variables, inner.style | {EXPANDUSER})
            return inner
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _PATH_METHODS:
            inner = self.render(func.value, scope, depth)
            if func.attr == "joinpath":
                return _join([inner, *(self.render(a, scope, depth) for a in args)], "/")
            if func.attr == "expanduser" and inner.text.startswith("~"):
                return Rendered(inner.text, inner.variables, inner.style | {EXPANDUSER})
            return inner
        if isinstance(func, ast.Name) and func.id in self.functions:
            returned = _single_return(self.functions[func.id])
            if returned is not None:
                return self.render(returned, self.functions[func.id], depth)
        return _opaque(node)

    def _render_user_cache(self, node: ast.Call, scope: _Scope, depth: int) -> Rendered:
        """``user_cache_dir("x")`` or ``PlatformDirs("x")``: ``$XDG_CACHE_HOME/x``."""
        args = node.args
        first = (
            args[0] if args else next((k.value for k in node.keywords if k.arg == "appname"), None)
        )
        app = self.render(first, scope, depth).text
        return Rendered(
            f"${XDG}/{app}".rstrip("/"), (XDG,), frozenset({PLATFORMDIRS, XDG_HONOURED})
        )


def _single_return(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The returned expression of a function with exactly one ``return`` (not in a nested one)."""
    found = returns(fn)
    return found[0] if len(found) == 1 else None


def _opaque(node: ast.AST) -> Rendered:
    try:
        text = ast.unparse(node)
    except (ValueError, AttributeError, RecursionError):  # pragma: no cover - malformed trees
        text = type(node).__name__
    text = " ".join(text.split())
    if len(text) > _OPAQUE_MAX:
        text = text[: _OPAQUE_MAX - 3] + "..."
    return Rendered(f"{{{text}}}")


def _join(parts: Iterable[Rendered], sep: str) -> Rendered:
    items = [p for p in parts if p.text]
    text = ""
    for part in items:
        if sep and text and part.text.startswith("/"):
            text = part.text  # os.path.join drops everything before an absolute part
        elif sep and text:
            text = f"{text.rstrip('/')}{sep}{part.text}"
        else:
            text += part.text
    variables = tuple(v for p in items for v in p.variables)
    style = frozenset().union(*(p.style for p in items)) if items else frozenset()
    return Rendered(text, variables, style)


def place_like(name: str, default: Rendered) -> bool:
    """Whether a variable may name a place: ``X_DIR``, ``X_PATH``, ``X_HOME``, ``X_ROOT``,
    ``X_CACHE``, ... that is not configuration (``X_CONFIG_DIR``), a switch
    (``X_CACHE_ENABLED``, a default of ``0``) nor a base the audit renders (``HOME``)."""
    if name in _LAYOUT_NAMES:
        return True  # the layout decided about it (VLLM_CONFIG_ROOT: never set, on purpose)
    if name in _BASES or name in _OTHER_XDG or _switch(default.text):
        return False
    if holds_a_value(name, default):
        return False  # a URL or a version (``X_MIRROR_PATH=https://...``)
    words = name.split("_")
    return words[-1] in _PATH_WORDS and _NOT_CACHE_WORDS.isdisjoint(words)


def interesting(name: str, default: Rendered) -> bool:
    """Whether a place-like variable (:func:`place_like`) is a cache by itself: by its name
    (``X_CACHE_DIR``, ``X_JIT_DIR``, ``X_TMP_DIR``, ``X_WORKSPACE_BASE``), by its default (under
    the home or temporary directory: ``CUDA_HOME=/usr/local/cuda`` is not), or by the layout
    knowing it."""
    if name in _LAYOUT_NAMES:
        return True
    words = name.split("_")
    if _CACHE_WORDS.intersection(words) or "CACHE" in words[-1]:
        return True
    if default.root == "var" and default.variables:
        # ``X_HOME`` whose default is a cache variable (``${X_HOME:-$HF_HOME}``).
        first = default.variables[0]
        return first in _LAYOUT_NAMES or "CACHE" in first
    return default.root in ("home", "tmp", "xdg")


def holds_a_value(name: str, default: Rendered) -> bool:
    """Whether a variable holds a value that is no path, whatever it is given to: its default
    is a URL of a host or a version (``1.5.0``), or its name says version, URL, name, host,
    port, branch, ... (``STANZA_RESOURCES_VERSION``, ``X_MODEL_NAME``) and its default is no
    path. A name that ends in a place's word (``X_VERSION_DIR``) is a place all the same."""
    if name in _LAYOUT_NAMES:
        return False
    text = default.text
    if _REMOTE_URL.match(text) or _VERSION.fullmatch(text):
        return True
    words = name.split("_")
    if words[-1] in _PATH_WORDS or _VALUE_WORDS.isdisjoint(words):
        return False
    return not _path_like(default)


def _path_like(default: Rendered) -> bool:
    """Whether a default may be a path: under a base, absolute, relative with a ``/`` or a
    leading dot, or another variable's value that is no value of the same kind."""
    text = default.text
    if default.root == "var":
        first = default.variables[0] if default.variables else ""
        return _VALUE_WORDS.isdisjoint(first.split("_"))
    return bool(default.root) or "/" in text or text.startswith(".")


def _switch(text: str) -> bool:
    """Whether a default is a flag or a number (``${A:-${B:-0}}`` included), not a place."""
    while (match := _NESTED_DEFAULT.fullmatch(text)) is not None:
        text = match[1]
    return _SWITCH_VALUES.fullmatch(text) is not None


def not_a_cache(text: str) -> bool:
    """Whether a fixed place is configuration, data, a credential file or another platform's
    folder: a known place, a ``netrc`` file anywhere, or a configuration file (``.ini``,
    ``.cfg``, ``.conf``, ``.toml``, ``.yaml``, ``.json``) under the home directory whose path
    does not say cache."""
    if text.startswith(_NOT_CACHE_PLACES):
        return True
    parts = text.rstrip("/").split("/")
    if _CREDENTIAL_NAMES.intersection(parts):
        return True
    return (
        text.startswith("~/")
        and parts[-1].lower().endswith(_CONFIG_SUFFIXES)
        and "cache" not in text.lower()
    )


def _constructor_data(keyword: ast.keyword, call: ast.AST | None) -> bool:
    """Whether a literal given as ``keyword`` to ``call`` is data: a keyword argument of a class
    (a callee named in CamelCase, not a path class), whose name does not say place."""
    if not isinstance(call, ast.Call) or keyword.arg is None:
        return False
    callee = _callee(call)
    if not callee[:1].isupper() or _dotted(call.func) in _JOINERS or callee.isupper():
        return False
    return _PLACE_KEYWORD_WORDS.isdisjoint(keyword.arg.lower().split("_"))


def _place_key(m: _Module, part: ast.AST, top: ast.AST) -> tuple[int, ...]:
    """Which place ``part`` makes of ``top``: ``top``, and the arm ``part`` lies in of each
    conditional expression on the way (``a if flag else b``: two places)."""
    return (id(top), *(id(arm) for _, arm in _arms(m, part, top)))


def _trivial(text: str) -> bool:
    """A bare base with no fixed name of its own (``~``, ``$TMPDIR``): not a location yet."""
    return text in ("~", "~/", "$TMPDIR", f"${XDG}", f"${{{XDG}:-~/.cache}}", *_TMP_DIRS)


class _Visitor:
    """Collects the findings of one :class:`_Module`."""

    def __init__(self, module: _Module, dist: str, version: str, file: str) -> None:
        self.m = module
        self.dist, self.version, self.file = dist, version, file
        self._extra: list[Finding] = []
        self.unfollowed: list[Unfollowed] = []
        self.node_of: dict[int, ast.AST] = {}
        self.sink_of: dict[int, tuple[str, str]] = {}
        self.note_of: dict[int, str] = {}
        #: The download each finding's chosen sink is, where the code is one's own.
        self.fetched_of: dict[int, Fetched] = {}
        self._beside: set[tuple[int, int]] = set()
        #: The names of the written paths a leaf reached, and those of a finding.
        self._written: dict[int, set[str]] = {}
        self.written_as: dict[int, set[str]] = {}
        #: Filled by :meth:`collect`: the reads, the fixed places, and the findings by node.
        self.overrides: list[Finding] = []
        self.reads: list[tuple[_EnvRead, Finding, bool]] = []
        self.paths: list[tuple[ast.AST, Finding]] = []
        self.by_source: dict[int, Finding] = {}
        #: The finding of each place, by :func:`_place_key`.
        self.by_top: dict[tuple[int, ...], Finding] = {}
        self.by_read: dict[int, Finding] = {}
        self.promoted: set[int] = set()
        #: Per write reached (by the ids of its call and path): the module it is in, the call,
        #: the path, and the origins of this module that reached it.
        self._writes: dict[tuple[int, int], tuple[_Visitor, ast.Call, ast.expr, list[ast.AST]]]
        self._writes = {}
        #: Whether a place (by id) falls back on a variable's finding (by id).
        self._fallback_of: dict[tuple[int, int], bool] = {}

    def _composing(self, child: ast.AST) -> ast.AST | None:  # noqa: PLR0911 - one per form
        """The node that builds a larger path from ``child``, or ``None``."""
        parent = self.m.parent.get(child)
        if parent is None:
            return None
        if isinstance(parent, ast.Attribute) and parent.attr in _PATH_METHODS:
            call = self.m.parent.get(parent)
            if isinstance(call, ast.Call) and call.func is parent:
                return call
            return None
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div | ast.Add):
            return parent
        if isinstance(parent, ast.JoinedStr | ast.FormattedValue | ast.IfExp):
            return parent
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            return parent
        if isinstance(parent, ast.keyword):
            call = self.m.parent.get(parent)
            read = self.m.env_read(call) if call is not None else None
            if read is not None and read.default is child:
                return call
            return None
        if isinstance(parent, ast.Call) and child in parent.args:
            name = _dotted(parent.func)
            if name in _JOINERS or name in _WRAPPERS or name.endswith("path.join"):
                return parent
            read = self.m.env_read(parent)
            if read is not None and read.default is child:
                return parent
        return None

    def _outermost(self, node: ast.AST) -> tuple[ast.AST, bool]:
        """The largest path built from ``node``; and whether it passed through a variable's
        default (then that variable's read is the finding, not ``node``)."""
        nested = False
        while True:
            up = self._composing(node)
            if up is None:
                return node, nested
            if self.m.env_read(up) is not None or self._or_default(node, up) is not None:
                nested = True
            node = up

    def _or_default(self, child: ast.AST, up: ast.AST) -> ast.expr | None:
        """The variable read ``child`` is the default of in an ``or``-chain (``A or B or c``:
        ``B`` and ``c`` are ``A``'s), if any."""
        if not isinstance(up, ast.BoolOp) or not isinstance(up.op, ast.Or):
            return None
        first = up.values[0]
        if child is first:
            return None
        read = self.m.env_read(first)
        return first if read is not None and read.name not in _BASES else None

    def _used_by_name(self, top: ast.AST) -> bool:
        """Whether ``top`` is given a name that other code then uses (reported there)."""
        parent = self.m.parent.get(top)
        if not isinstance(parent, ast.Assign | ast.AnnAssign):
            return False
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        for name in names:
            for load in self.m.loads.get(name, []):
                if self._inside_env_read(load):
                    return True
        return False

    def _inside_env_read(self, node: ast.AST) -> bool:
        current: ast.AST | None = node
        while current is not None:
            parent = self.m.parent.get(current)
            if parent is not None and self.m.env_read(parent) is not None:
                return True
            current = parent
        return False

    def _is_source(self, node: ast.AST) -> bool:
        """A place where a fixed base enters a path (``Path.home()``, ``gettempdir()``, ...)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if not (value.startswith(_TMP_PREFIXES) or value in _TMP_DIRS):
                return value.startswith("~/") and self._expanded(node)
            parent = self.m.parent.get(node)
            if isinstance(parent, ast.keyword):
                return not _constructor_data(parent, self.m.parent.get(parent))
            return not isinstance(parent, _NOT_A_USE)
        return self.m.base_call(node) or node in self.m.base_loads

    def _expanded(self, node: ast.Constant) -> bool:
        """A ``"~/..."`` literal counts where it is expanded (``expanduser``) or is a default."""
        parent = self.m.parent.get(node)
        if isinstance(parent, ast.Call):
            name = _dotted(parent.func)
            if name.endswith("expanduser") or name in _JOINERS:
                return True
            read = self.m.env_read(parent)
            return read is not None and read.default is node
        return isinstance(parent, ast.Assign | ast.AnnAssign)

    def findings(self) -> list[Finding]:
        """Every finding of the module on its own, by line (:attr:`unfollowed` holds what was
        not seen): :meth:`collect`, the writes of this module followed, :meth:`finish`."""
        self.collect()
        for call, path, sink, how in self.sinks():
            scope = self.m.scope_of.get(call, self.m.tree)
            for module, leaf in origins(self.m, path, scope):
                if module is self.m:
                    self.reached(leaf, call=call, path=path, sink=(sink, how), where=self)
        return self.finish()

    def sinks(self) -> list[tuple[ast.Call, ast.expr, str, str]]:
        """``(call, path, kind of sink, how)`` of every write and download of the module."""
        out = []
        for node in self.m.candidates:
            if isinstance(node, ast.Call):
                out += [(node, *each) for each in sink_paths(node, _dotted(node.func))]
        return out

    def collect(self) -> None:  # noqa: PLR0912, PLR0915 - one pass, one case each
        """The module's places and reads, before values are followed to their writes."""
        self.overrides = overrides = self._overrides()
        hidden = {id(n) for f in overrides for n in ast.walk(self.node_of[id(f)])}
        self.reads = reads = []
        self.paths = paths = []
        seen: set[tuple[int, ...]] = set()
        self.by_source = by_source = {}
        self.by_read = {}
        self.promoted = set()
        by_top = self.by_top
        for node in self.m.candidates:
            if id(node) in hidden:
                continue
            read = self.m.env_read(node)
            if read is not None and read.name not in _BASES:
                found = self._read_finding(read)
                if found is not None:
                    reads.append((read, *found))
                continue
            self._runtime_name(node)
            if not self._is_source(node):
                continue
            top, nested = self._outermost(node)
            if nested or self._inside_env_read(top):
                continue
            key = _place_key(self.m, node, top)
            if key in seen:
                if key in by_top:
                    by_source[id(node)] = by_top[key]
                continue
            seen.add(key)
            if self._used_by_name(top):
                continue
            rendered = self.m.render_from(node, top)
            known = self.m.reader_call(node)
            if (rendered.root not in ("home", "tmp", "xdg") and not known) or _trivial(
                rendered.text
            ):
                continue
            if not_a_cache(rendered.text) or self.m.credential(top):
                continue
            if _INSTALL_WORDS & words(*self._targets(top)):
                continue  # where libraries or programs are looked for (``user_lib_dirs``)
            variable = rendered.first_variable if rendered.root in ("xdg", "var") else None
            line = getattr(top, "lineno", 0)
            text, style = rendered.text, _style(rendered)
            found_path = Finding(
                self.dist, self.version, self.file, line, variable, text, text, style
            )
            if known:
                reader = FUNCTIONS.get(_dotted(node.func)) if isinstance(node, ast.Call) else None
                if reader is not None:
                    found_path.kind = reader.kind
                    found_path.reason = f"read by {reader.source}"
            paths.append((top, found_path))
            by_top[key] = found_path
            self.node_of[id(found_path)] = top
            by_source[id(node)] = found_path
        self.by_read = {id(r.node): f for r, f, _ in reads}

    def finish(self) -> list[Finding]:
        """The findings, once every write of the package has been followed, classified."""
        tied = self._attribute(self.reads, self.paths)
        # A read whose name alone does not say "cache" counts once a fixed place falls back on
        # it (``TORCH_EXTENSIONS_DIR``, whose default is built in another function), or once its
        # value reaches a write.
        out = [f for _, f, keep in self.reads if keep or id(f) in tied or id(f) in self.promoted]
        out += [f for _, f in self.paths] + self.overrides + self._children() + self._uncached()
        out += self._temporary()
        for each in out:
            self._classify(each)
        folded = self._fold()
        out = [f for f in out if id(f) not in folded]
        return sorted(out, key=lambda f: (f.line, f.variable or ""))

    # -- fallbacks ------------------------------------------------------------------------

    def _fold(self) -> set[int]:
        """Fold the fixed places a variable falls back on into its finding (once classified);
        the ids of the findings folded.

        Where a written path comes from one variable and from fixed places besides it, on the
        same platforms, each put there only when the variable is unset or its place is no good
        (``base = os.environ.get("X_HOME", "~/.x")``, then ``base = "/tmp/.x"`` under ``if not
        os.access(base, os.W_OK)``; ``if "X_HOME" in os.environ: ... else: ...``), those places
        are the variable's defaults. Where the variable's place gates, its finding's default
        becomes the chain (``~/.x, else /tmp/.x``), and a fixed place's own (gating) finding is
        dropped when every write it reaches is such a one of the same variable. Places that do
        not gate are listed as they are.
        """
        chains: dict[int, list[tuple[int, int, str]]] = {}
        variables: dict[int, Finding] = {}
        owner: dict[int, Finding | None] = {}  # id of a fixed place's finding -> its variable's
        fixed_findings: dict[int, Finding] = {}
        for where, _, path, leaves in self._writes.values():
            variable, fixed = self._alternatives(leaves)
            if variable is not None and variable.kind not in GATING:
                variable = None
            texts: dict[int, tuple[int, int, str]] = {}
            if variable is not None:
                falling = [
                    (leaf, held)
                    for leaf, held in fixed
                    if all(f.kind in GATING for f in held) and self._falls_back(leaf, variable)
                ]
                texts = self._fallback_texts(variable, where, path, falling)
                variables[id(variable)] = variable
                chains.setdefault(id(variable), []).extend(texts.values())
            for leaf, held in fixed:
                into = variable if id(leaf) in texts else None
                for found in held:
                    fixed_findings[id(found)] = found
                    # Folded only while every write it reaches folds it into the same one.
                    same = into is not None and owner.get(id(found), into) is into
                    owner[id(found)] = into if same else None
        for key, found in variables.items():
            self._chain(found, [text for _, _, text in sorted(set(chains[key]))])
        folded: set[int] = set()
        for key, into in owner.items():
            if into is not None:
                folded.add(key)
                into.style = tuple(sorted({*into.style, *fixed_findings[key].style}))
        return folded

    def _alternatives(
        self, leaves: list[ast.AST]
    ) -> tuple[Finding | None, list[tuple[ast.AST, list[Finding]]]]:
        """Of the origins that reached one write: the one variable's finding (``None`` when
        there is none, or more than one), and each fixed place with its findings (none for a
        base no finding holds), on the variable's platforms."""
        variables: list[Finding] = []
        fixed: list[tuple[ast.AST, list[Finding]]] = []
        for leaf in leaves:
            read = self.m.env_read(leaf)
            if read is not None and read.name not in _BASES:
                found = self.by_read.get(id(leaf))
                if found is not None and not any(found is v for v in variables):
                    variables.append(found)
                continue
            if isinstance(leaf, ast.arg) or (isinstance(leaf, ast.Name) and leaf.id == "__file__"):
                continue
            if isinstance(leaf, ast.Call) and not self.m.base_call(leaf):
                continue  # a helper or a location function of the package: not a fixed place
            held = [self.by_source[id(leaf)]] if id(leaf) in self.by_source else []
            held = held or self._held_by(leaf)
            if any(f.variable for f in held):  # a place under another variable (XDG)
                variables += [f for f in held if not any(f is v for v in variables)]
                continue
            fixed.append((leaf, held))
        if len(variables) != 1:
            return None, fixed
        variable = variables[0]
        platforms = runs_on(self.m, self.node_of[id(variable)])
        same = [(leaf, held) for leaf, held in fixed if runs_on(self.m, leaf) == platforms]
        if len(same) != len(fixed):
            return None, fixed  # another platform's place: listed apart
        inside = {id(n) for n in ast.walk(self.node_of[id(variable)])}
        return variable, [(leaf, held) for leaf, held in fixed if id(leaf) not in inside]

    def _falls_back(self, leaf: ast.AST, variable: Finding) -> bool:
        """Whether ``leaf`` is put in place only when ``variable`` is unset or its value is no
        good: it, or a value given to a name that carries it and not the variable (``base =
        FALLBACK``), lies in a branch of an ``if`` whose test reads the variable, asks whether
        it is set, or uses a name its value is given to (``if not os.access(base, os.W_OK)``)."""
        key = (id(leaf), id(variable))
        if key not in self._fallback_of:
            self._fallback_of[key] = self._falls_back_at(leaf, variable)
        return self._fallback_of[key]

    def _falls_back_at(self, leaf: ast.AST, variable: Finding) -> bool:
        read = self.node_of[id(variable)]
        if self._guarded(leaf, variable, read):
            return True
        return any(
            self._guarded(value, variable, read)
            for names in self.m.assigns.values()
            for values in names.values()
            for value in values
            if value is not UNFOLLOWED
            and value is not leaf
            and self.m.leads(value, leaf)
            and not self.m.leads(value, read)
        )

    def _guarded(self, node: ast.AST, variable: Finding, read: ast.AST) -> bool:
        """Whether ``node`` lies in a branch of an ``if`` (in its function) whose test reads
        ``variable``, asks whether it is set, or uses a name its value is given to."""
        child: ast.AST = node
        parent = self.m.parent.get(node)
        while parent is not None and not isinstance(parent, ast.Module):
            if isinstance(parent, ast.If | ast.IfExp) and child is not parent.test:
                for part in ast.walk(parent.test):
                    named = self._presence_or_read(part)
                    if named is not None and named.name == variable.variable:
                        return True
                    if isinstance(part, ast.Name) and self.m.leads(part, read):
                        return True
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return False
            child, parent = parent, self.m.parent.get(parent)
        return False

    def _fallback_texts(
        self,
        variable: Finding,
        where: _Visitor,
        path: ast.expr,
        fixed: list[tuple[ast.AST, list[Finding]]],
    ) -> dict[int, tuple[int, int, str]]:
        """Each fixed place as the variable's default: the written path rendered through it,
        less what the write adds to the variable's place (``/models`` of ``join(base,
        "models")``); a place's own finding where the write is in another module. By the id
        of each place whose text is more than a bare base, ``(line, column, text)``, for the
        order they are written in."""
        suffix: str | None = None
        if where is self:
            scope = self.m.scope_of.get(path, self.m.tree)
            through = self.m.render_via(path, scope, self.node_of[id(variable)]).text
            if through.startswith(variable.expression):
                suffix = through[len(variable.expression) :]
        out: dict[int, tuple[int, int, str]] = {}
        for leaf, held in fixed:
            text = ""
            if suffix is not None:
                scope = self.m.scope_of.get(path, self.m.tree)
                through = self.m.render_via(path, scope, leaf).text
                if through.endswith(suffix):
                    text = through[: len(through) - len(suffix)] if suffix else through
            if not text and held:
                text = held[0].expression
            if text and not _trivial(text):
                line, column = getattr(leaf, "lineno", 0), getattr(leaf, "col_offset", 0)
                out[id(leaf)] = (line, column, text)
        return out

    def _chain(self, found: Finding, texts: list[str]) -> None:
        """Give a variable's finding the fixed places it falls back on: its default becomes
        the chain (``~/.x, else /tmp/.x``); a bare ``$X`` becomes ``${X:-<first of them>}``."""
        chain = [found.default] if found.default else []
        chain += [t for t in texts if t not in chain and t != found.expression]
        if not chain or chain == [found.default]:
            return
        if found.variable and found.expression == f"${found.variable}":
            found.expression = f"${{{found.variable}:-{chain[0]}}}"
        found.fallbacks = tuple(t for t in chain if t != found.default)
        found.default = ", else ".join(chain)

    # -- following values -----------------------------------------------------------------

    def _mark(
        self,
        found: Finding,
        sink: tuple[str, str],
        leaf: ast.AST | None = None,
        got: Fetched | None = None,
    ) -> None:
        """Note the sink a finding's value reaches (a download says more than a write), with
        the download it is (``got``), and the names of the paths written (``lock_dir``)."""
        if leaf is not None:
            self.written_as.setdefault(id(found), set()).update(self._written.get(id(leaf), ()))
        known = self.sink_of.get(id(found))
        if known is None or SINK_RANK.get(known[0], 0) < SINK_RANK.get(sink[0], 0):
            self.sink_of[id(found)] = sink
            if got is not None:
                self.fetched_of[id(found)] = got
            else:
                self.fetched_of.pop(id(found), None)

    def reached(
        self,
        leaf: ast.AST,
        *,
        call: ast.Call,
        path: ast.expr,
        sink: tuple[str, str],
        where: _Visitor,
    ) -> None:
        """Note that ``leaf`` (of this module) reached the write ``call`` (of ``where``'s
        module): mark its finding, make one for a read no name made a place, for a bare base,
        for a path beside the source file, for a location function given a fixed name; count a
        helper."""
        line = f"line {call.lineno}" if where is self else f"{where.file}:{call.lineno}"
        how = (sink[0], f"{sink[1]} ({line})")
        self._note_write(where, call, path, leaf)
        got = where.download(call, path, sink[0], line)
        self._written.setdefault(id(leaf), set()).update(_identifiers(path))
        read = self.m.env_read(leaf)
        if read is not None and read.name not in _BASES:
            found = self.by_read.get(id(leaf))
            if found is None:
                made = self._read_finding(read, force=True)
                if made is None:
                    return
                found = made[0]
                self.reads.append((read, found, True))
                self.by_read[id(leaf)] = found
            self.promoted.add(id(found))
            self._mark(found, how, leaf, got)
        elif isinstance(leaf, ast.Name) and leaf.id == "__file__" and where is self:
            top = self._beside_top(leaf)
            inside = any(n is top for n in ast.walk(call))
            named = top is not leaf and not self._bare_source_dir(top)
            if not inside and named:
                # ``DATA = Path(__file__).parent / "data"``: the place is where it is named.
                found = self._place_at(top, how, got)
                if found is not None:
                    self.note_of.setdefault(id(found), f"beside the source file: {sink[1]}")
                return
            if (id(call), id(path)) in self._beside:
                return
            self._beside.add((id(call), id(path)))
            scope = self.m.scope_of.get(call, self.m.tree)
            text = self.m.render(path, scope).text
            found = Finding(self.dist, self.version, self.file, call.lineno, None, text, text, ())
            self.note_of[id(found)] = f"beside the source file: {sink[1]} ({line})"
            self.node_of[id(found)] = call
            self._mark(found, (sink[0], ""), got=got)
            self.by_source[id(call)] = found
            self._extra.append(found)
        elif isinstance(leaf, ast.Name) and leaf.id == "__file__":
            # Written from another module: the place is the path built beside the source here.
            found = self._place_at(self._beside_top(leaf), how, got)
            if found is not None:
                self.note_of.setdefault(id(found), "beside the source file")
        elif id(leaf) in self.by_source:
            self._mark(self.by_source[id(leaf)], how, leaf, got)
        elif self._bare(leaf) or (isinstance(leaf, ast.expr) and runs_on(self.m, leaf)):
            # (the value given on one platform's branch, :func:`._audit_flow.origins` says)
            self._place_at(leaf, how, got)
        elif isinstance(leaf, ast.Call) and self.m.helper(leaf):
            self._unfollowed(leaf, HELPER)

    def _note_write(self, where: _Visitor, call: ast.Call, path: ast.expr, leaf: ast.AST) -> None:
        """Note that ``leaf`` reached the write ``call`` (of ``where``'s module) of ``path``."""
        reaching = self._writes.setdefault((id(call), id(path)), (where, call, path, []))[3]
        if not any(leaf is known for known in reaching):
            reaching.append(leaf)

    def download(self, call: ast.Call, path: ast.expr, sink: str, at: str) -> Fetched | None:
        """The download a write or download of this module (``at``) is, in a source tree of
        one's own (the audit tells what to call instead only there)."""
        if sink not in (DOWNLOAD, FETCHED) or self.m.package is None or not self.m.package.own:
            return None
        return fetched(self.m, call, path, fetching=sink == FETCHED, at=at)

    def _beside_top(self, leaf: ast.AST) -> ast.AST:
        """The path built from ``__file__`` around ``leaf``: through ``dirname``, ``Path``,
        ``.parent`` and joins; the source file's own directory when nothing is added to it."""
        top: ast.AST = leaf
        bare: ast.AST = leaf
        while True:
            up = self.m.parent.get(top)
            if isinstance(up, ast.Call) and top in up.args:
                name = _dotted(up.func)
                if not (name in _JOINERS or name in _WRAPPERS or name == "os.path.dirname"):
                    break
                if len(up.args) == 1:
                    bare = up
            elif isinstance(up, ast.Attribute) and up.attr in ("parent", "parents"):
                bare = up
            elif not (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div) and top is up.left):
                break
            top = up
        return bare if top is bare else top

    def _bare_source_dir(self, top: ast.AST) -> bool:
        """Whether a path built from ``__file__`` adds no fixed name (``Path(__file__).parent``)."""
        return not any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(top)
        )

    def _held_by(self, leaf: ast.AST) -> list[Finding]:
        """The findings made where a name given ``leaf`` as its one value is used."""
        parent = self.m.parent.get(leaf)
        if not isinstance(parent, ast.Assign | ast.AnnAssign) or parent.value is not leaf:
            return []
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return [
            self.by_source[id(load)]
            for name in names
            for load in self.m.loads.get(name, [])
            if id(load) in self.by_source
        ]

    def _bare(self, leaf: ast.AST) -> bool:
        """A base no finding holds yet (``expanduser("~")``, ``"/var/tmp"``, a location
        function of the package given a fixed name): a place once a write reaches it."""
        if isinstance(leaf, ast.Constant):
            return isinstance(leaf.value, str) and (
                leaf.value in (*_TMP_DIRS, _SHM) or leaf.value.startswith(_TMP_PREFIXES)
            )
        if isinstance(leaf, ast.Call):
            return (
                self.m.base_call(leaf)
                or self.m.function_at(leaf, self.m.scope_of.get(leaf, self.m.tree)) is not None
            )
        return False

    def _place_at(
        self, leaf: ast.AST, how: tuple[str, str], got: Fetched | None = None
    ) -> Finding | None:
        """The finding of the place built from ``leaf``, made if there is none, marked."""
        held = self._held_by(leaf)
        if held:  # ``home = os.getenv("HOME")``: the places are where ``home`` is used
            for found in held:
                self._mark(found, how, leaf, got)
            return held[0]
        top, nested = self._outermost(leaf)
        outer = self._first_outer_read(leaf) if nested else None
        if outer is not None:  # in a variable's default: that read's place
            if id(outer) in self.by_read:
                self._mark(self.by_read[id(outer)], how, leaf, got)
                return self.by_read[id(outer)]
            return None
        key = _place_key(self.m, leaf, top)
        known = self.by_top.get(key)
        if known is None and len(key) == 1:
            known = self.by_source.get(id(top))
        if known is not None:
            self._mark(known, how, leaf, got)
            return known
        rendered = self.m.render_from(leaf, top)
        variable = rendered.first_variable if rendered.root in ("xdg", "var") else None
        text = rendered.text
        found = Finding(
            self.dist, self.version, self.file, getattr(top, "lineno", 0), variable, text, text,
            _style(rendered),
        )  # fmt: skip
        self.node_of[id(found)] = top
        self.by_source[id(leaf)] = self.by_top[key] = found
        if len(key) == 1:  # (a place in one arm of a conditional is not the whole of it)
            self.by_source[id(top)] = found
        self.paths.append((top, found))
        self._mark(found, how, leaf, got)
        return found

    def _children(self) -> list[Finding]:
        """A path beside the source file handed to a child through ``env=``; and what
        :meth:`_reached` made for writes beside it."""

        out = list(self._extra)
        for key, value, _ in self._env_entries():
            scope = self.m.scope_of.get(value, self.m.tree)
            if not any(
                isinstance(o, ast.Name) and o.id == "__file__"
                for _, o in origins(self.m, value, scope)
            ):
                continue
            text = self.m.render(value, scope).text
            found = Finding(self.dist, self.version, self.file, value.lineno, key, text, text, ())
            self.note_of[id(found)] = f"beside the source file, handed to a child as {key}"
            self.node_of[id(found)] = value
            out.append(found)
        return out

    def _env_entries(self) -> list[tuple[str, ast.expr, ast.AST]]:
        """``(name, value, node)`` of every entry of an ``env=`` mapping given to a call (a
        dict literal, directly or through a name, or ``dict(..., NAME=value)``)."""
        out: list[tuple[str, ast.expr, ast.AST]] = []
        for node in self.m.candidates:
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg != "env":
                    continue
                scope = self.m.scope_of.get(node, self.m.tree)
                value: ast.expr | None = keyword.value
                if isinstance(value, ast.Name):
                    value = self.m.value_of(value.id, scope)
                out += self._mapping_entries(value, scope)
        return out

    def _mapping_entries(
        self, value: ast.expr | None, scope: _Scope
    ) -> list[tuple[str, ast.expr, ast.AST]]:
        out: list[tuple[str, ast.expr, ast.AST]] = []
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=True):
                name = self.m.string(key, scope) if key is not None else None
                if name is not None:
                    out.append((name, item, value))
        elif isinstance(value, ast.Call) and _callee(value) == "dict":
            out += [(k.arg, k.value, value) for k in value.keywords if k.arg]
        return out

    def _overrides(self) -> list[Finding]:  # noqa: PLR0912 - one case per way of setting
        """Test code that sets a layout variable: ``monkeypatch.setenv(NAME, ...)``,
        ``os.environ[NAME] = ...``, ``os.environ.update(...)``, ``mock.patch.dict(os.environ,
        ...)``, an ``env=`` mapping of a child: the layout's value is overridden."""

        test = is_test_file(self.file)
        sets: list[tuple[str, ast.expr, ast.AST]] = []
        nodes: list[ast.AST] = [*self.m.item_sets, *self.m.candidates] if test else []
        if not test:  # outside test code, only monkeypatch's setenv says it is a test
            nodes = [n for n in self.m.candidates if isinstance(n, ast.Call)]
            nodes = [n for n in nodes if _callee(n) == "setenv"]  # type: ignore[arg-type]
        for node in nodes:
            scope = self.m.scope_of.get(node, self.m.tree)
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and _dotted(target.value) in _ENVIRON:
                        name = self.m.string(target.slice, scope)
                        if name is not None and test:
                            sets.append((name, node.value, node))
            if not isinstance(node, ast.Call):
                continue
            name_of = _dotted(node.func)
            args = node.args
            if _callee(node) == "setenv" and len(args) > 1:
                name = self.m.string(args[0], scope)
                if name is not None and (test or "monkeypatch" in name_of):
                    sets.append((name, args[1], node))
            elif test and name_of in ("os.putenv",) and len(args) > 1:
                name = self.m.string(args[0], scope)
                if name is not None:
                    sets.append((name, args[1], node))
            elif test and name_of == "os.environ.update":
                for value in args[:1]:
                    sets += self._mapping_entries(value, scope)
                sets += [(k.arg, k.value, node) for k in node.keywords if k.arg]
            elif (
                test
                and _callee(node) in ("dict", "setitem")
                and len(args) > 1
                and _dotted(args[0]) in _ENVIRON
            ):
                if _callee(node) == "setitem" and len(args) > 2:
                    name = self.m.string(args[1], scope)
                    if name is not None:
                        sets.append((name, args[2], node))
                else:
                    sets += self._mapping_entries(args[1], scope)
        if test:
            sets += self._env_entries()
        out = []
        for name, value, _ in sets:
            if name not in _LAYOUT_NAMES:
                continue
            scope = self.m.scope_of.get(value, self.m.tree)
            text = self.m.render(value, scope).text or "{...}"
            found = Finding(
                self.dist, self.version, self.file, value.lineno, name, text, "", (),
                kind=LAYOUT_OVERRIDE,
                reason=f"test code sets {name}: the layout's value is overridden",
            )  # fmt: skip
            self.node_of[id(found)] = value
            out.append(found)
        return out

    def _uncached(self) -> list[Finding]:
        """URLs read into memory (or an anonymous file) on every call, where the function
        writes no file that could keep them."""

        writing: set[int] = set()
        for node in self.m.candidates:
            if isinstance(node, ast.Call) and sink_paths(node, _dotted(node.func)):
                writing.add(id(self.m.scope_of.get(node, self.m.tree)))
        out = []
        calls = [n for n in self.m.candidates if isinstance(n, ast.Call)]
        for each in [*self.m.in_memory, *calls]:
            url = fetched_in_memory(self.m, each)
            scope = self.m.scope_of.get(each, self.m.tree)
            if url is None or id(scope) in writing:
                continue
            text = self.m.render(url, scope).text
            line = getattr(url, "lineno", 0) or getattr(each, "lineno", 0)  # where it is fetched
            found = Finding(
                self.dist, self.version, self.file, line, None, text, "", (),
                kind=UNCACHED_DOWNLOAD,
                reason="fetched from the network on every call: no cache keeps it",
            )  # fmt: skip
            if self.m.package is not None and self.m.package.own:
                found.fetched = fetched_url(self.m, url, line)
            self.node_of[id(found)] = each
            out.append(found)
        return out

    def _temporary(self) -> list[Finding]:
        """A temporary file or directory made in the system temporary directory (no ``dir=``):
        a new name on every run, listed as ``throwaway``."""
        out = []
        for node in self.m.candidates:
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            where = _TEMP_MAKERS.get(name.removeprefix("tempfile."))
            if where is None or not (name.startswith("tempfile.") or name in self.m.imported):
                continue
            given = next((k.value for k in node.keywords if k.arg == "dir"), None)
            if given is None and len(node.args) > where:
                given = node.args[where]
            if given is not None and not (isinstance(given, ast.Constant) and given.value is None):
                continue  # made inside a place of its own, found where that place is
            found = Finding(
                self.dist, self.version, self.file, node.lineno, None,
                f"$TMPDIR/{{{name.rpartition('.')[2]}()}}", "$TMPDIR", (GETTEMPDIR,),
                kind=THROWAWAY, reason="a temporary name made anew on every run",
            )  # fmt: skip
            self.node_of[id(found)] = node
            out.append(found)
        return out

    def _runtime_name(self, node: ast.AST) -> None:
        """Count an environment read whose name is built at run time."""
        scope = self.m.scope_of.get(node, self.m.tree)
        name: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = node.slice if _dotted(node.value) in _ENVIRON else None
        elif isinstance(node, ast.Call) and _dotted(node.func) in _ENV_CALLS and node.args:
            name = node.args[0]
        if name is not None and self.m.string(name, scope) is None:
            self._unfollowed(node, RUN_TIME_NAME)

    def _unfollowed(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        if any(u.line == line and u.what == what for u in self.unfollowed):
            return
        self.unfollowed.append(
            Unfollowed(self.dist, self.file, line, what, _opaque(node).text[1:-1])
        )

    def _classify(self, found: Finding) -> None:
        """Set the finding's class (unless known already), reason and platforms."""

        node = self.node_of.get(id(found))
        if node is not None:
            found.runs_on = runs_on(self.m, node)
        note = self.note_of.get(id(found), "")
        if found.kind != CACHE or found.reason:
            return
        reader = VARIABLES.get(found.variable or "")
        if reader is not None:
            found.kind, found.reason = reader.kind, f"read by {reader.source}"
            return
        sink, how = self.sink_of.get(id(found), ("", ""))
        names = (found.variable or "", *self._targets(node))
        beside = self.note_of.get(id(found), "").startswith("beside the source")
        written = tuple(sorted(self.written_as.get(id(found), ())))
        found.kind, found.reason = kind_of(
            names, found.expression, sink, beside_source=beside, written=written
        )
        found.reason += "".join(f"; {t}" for t in (note, how) if t)
        if found.kind == DOWNLOAD_KIND:
            found.fetched = self.fetched_of.get(id(found))

    def _targets(self, node: ast.AST | None) -> list[str]:
        """The names a location is given (``PROFILE = ...``; ``output_dir=...``)."""
        out: list[str] = []
        current = node
        for _ in range(TARGET_PARENTS):
            parent = self.m.parent.get(current) if current is not None else None
            if parent is None:
                break
            if (
                isinstance(parent, ast.keyword)
                and parent.arg
                and not parent.arg.startswith("cache")
            ):
                out.append(parent.arg)  # (cache_dir= says where a download goes, not what)
            if isinstance(parent, ast.Assign | ast.AnnAssign):
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                out += [t.id for t in targets if isinstance(t, ast.Name)]
                out += [t.attr for t in targets if isinstance(t, ast.Attribute)]
                break
            if isinstance(parent, ast.stmt):
                break
            current = parent
        return out

    def _read_finding(self, read: _EnvRead, *, force: bool = False) -> tuple[Finding, bool] | None:
        """The finding of a read, and whether it counts on its own; ``None``: not a place
        (with ``force``: its value reaches a write, so it is one unless it is a switch)."""
        node = read.node
        top, nested = self._outermost(node)
        if nested and top is not node and self._first_outer_read(node) is not None:
            # A read inside another read's default (``XDG_CACHE_HOME`` under ``HF_HOME``) is
            # part of that one's default.
            return None
        default_node = read.default
        parent = self.m.parent.get(node)
        chain: list[ast.expr] = []
        if (
            default_node is None
            and isinstance(parent, ast.BoolOp)
            and isinstance(parent.op, ast.Or)
            and parent.values[0] is node
        ):
            chain = parent.values[1:]  # os.environ.get("X") or os.environ.get("Y") or default
            default_node = chain[0]
        rendered = self.m.render_or(chain, read.scope) if len(chain) > 1 else None
        default = rendered or self.m.render(default_node, read.scope)
        known = read.name in VARIABLES
        if force:
            if _switch(default.text) or read.name in _OTHER_XDG:
                return None
            if _SETTING_WORDS.intersection(read.name.split("_")) or (
                not known and holds_a_value(read.name, default)
            ):
                return None  # a timeout, a size, a URL, a version: given to a download
        elif not known and not place_like(read.name, default):
            # The default, not the name, may say it is a place (``~/.demo/models``).
            if default.root not in ("home", "tmp", "xdg") or _trivial(default.text):
                return None
            if not_a_cache(default.text) or read.name in _BASES or read.name in _OTHER_XDG:
                return None
        elif default_node is not None and not known:
            for each in chain or [default_node]:
                self._helpers_in(each, read.scope)
        expression = self.m.render_from(node, top)
        found = Finding(
            self.dist,
            self.version,
            self.file,
            getattr(node, "lineno", 0),
            read.name,
            expression.text or f"${read.name}",
            default.text,
            _style(Rendered(default.text, (read.name, *default.variables), default.style)),
        )
        self.node_of[id(found)] = node
        return found, known or interesting(read.name, default)

    def _helpers_in(self, node: ast.AST, scope: _Scope) -> None:

        for module, leaf in origins(self.m, node, scope):
            if module is self.m and isinstance(leaf, ast.Call) and self.m.helper(leaf):
                self._unfollowed(leaf, HELPER)

    def _first_outer_read(self, node: ast.AST) -> ast.AST | None:
        current = node
        while True:
            up = self._composing(current)
            if up is None:
                return None
            read = self.m.env_read(up)
            if read is not None and read.name not in _BASES:
                return up
            first = self._or_default(current, up)
            if first is not None:
                return first
            current = up

    def _attribute(
        self, reads: list[tuple[_EnvRead, Finding, bool]], paths: list[tuple[ast.AST, Finding]]
    ) -> set[int]:
        """Tie fallbacks to the variable read before them; the ids of the reads tied to.

        A fixed location in a function that read a cache variable earlier (or in a function
        whose caller did, before the call) is that variable's default; so is another variable
        read in the ``else`` of an ``if`` that tested the first (tiktoken's legacy name).
        """
        by_scope: dict[_Scope, list[Finding]] = {}
        by_node: dict[ast.AST, Finding] = {}
        for read, found, _ in reads:
            by_scope.setdefault(read.scope, []).append(found)
            by_node[read.node] = found
        # Module constants that hold a read (``CACHE_DIR = os.getenv("X_CACHE_DIR")``): a
        # function that uses one has read that variable where it uses it.
        held: dict[str, Finding] = {}
        for name, values in self.m.assigns.get(self.m.tree, {}).items():
            if len(values) == 1:
                inner = next((by_node[n] for n in ast.walk(values[0]) if n in by_node), None)
                if inner is not None:
                    held[name] = inner
        tied: set[int] = set()

        def before(scope: _Scope, line: int) -> Finding | None:
            if isinstance(scope, ast.Module):
                return None
            earlier = [f for f in by_scope.get(scope, []) if f.line <= line]
            for name, read in held.items():
                uses = self.m.loads.get(name, [])
                if any(self.m.scope_of.get(u) is scope and u.lineno <= line for u in uses):
                    earlier.append(read)
            return max(earlier, key=lambda f: f.line) if earlier else None

        for top, found in paths:
            scope = self.m.scope_of.get(top, self.m.tree)
            first = before(scope, found.line)
            if first is None and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                for call in self.m.calls.get(scope.name, []):
                    first = before(self.m.scope_of.get(call, self.m.tree), call.lineno)
                    if first is not None:
                        break
            if first is not None and first.variable:
                found.fallback_of = (first.variable, first.line)
                tied.add(id(first))
        for read, found, _ in reads:
            test = self._guarding_test(read.node)
            if test is None:
                continue
            names = [
                r.name
                for n in ast.walk(test)
                if (r := self._presence_or_read(n)) is not None and r.name != read.name
            ]
            if names:
                found.fallback_of = (names[0], test.lineno)
        return tied

    def _presence_or_read(self, node: ast.AST) -> _EnvRead | None:
        """A read, or ``"NAME" in os.environ``."""
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and _dotted(node.comparators[0]) in _ENVIRON
        ):
            scope = self.m.scope_of.get(node, self.m.tree)
            name = self.m.string(node.left, scope)
            return _EnvRead(node, name, None, scope) if name else None
        return self.m.env_read(node)

    def _guarding_test(self, node: ast.AST) -> ast.expr | None:
        """The test of the ``if`` in whose ``else`` branch ``node`` lies, if any."""
        child: ast.AST = node
        parent = self.m.parent.get(node)
        while parent is not None and not isinstance(parent, ast.FunctionDef | ast.Module):
            if isinstance(parent, ast.If) and child in parent.orelse:
                return parent.test
            child, parent = parent, self.m.parent.get(parent)
        return None


def _identifiers(node: ast.AST) -> set[str]:
    """The names and attributes a path expression is written with (``lock_dir``)."""
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }


def _style(rendered: Rendered) -> tuple[str, ...]:
    style = set(rendered.style)
    if rendered.text.startswith("~/.cache") and XDG not in rendered.variables:
        style.add(XDG_IGNORED)
    if XDG in rendered.variables:
        style.add(XDG_HONOURED)
    return tuple(sorted(style))


def analyse(
    tree: ast.Module, *, dist: str, version: str, file: str
) -> tuple[list[Finding], list[Unfollowed]]:
    """Every finding of one parsed file, by line, and what it could not follow."""
    visitor = _Visitor(_Module(canonical(tree), file), dist, version, file)
    found = visitor.findings()
    return found, sorted(visitor.unfollowed, key=lambda u: (u.line, u.what))


def places(tree: ast.Module, *, dist: str, version: str, file: str) -> list[Finding]:
    """Every finding of one parsed file, by line."""
    return analyse(tree, dist=dist, version=version, file=file)[0]
