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

from _cacheroot_layout import TABLE

if TYPE_CHECKING:
    from collections.abc import Iterable


#: Calls that read an environment variable: ``(name, default)`` are their first two arguments.
_ENV_CALLS = frozenset(
    {
        "os.getenv",
        "getenv",
        "os.environ.get",
        "environ.get",
        "os.environ.setdefault",
        "environ.setdefault",
    }
)
_ENVIRON = frozenset({"os.environ", "environ"})
#: Names of bases, rendered as ``~`` or ``$TMPDIR`` rather than reported on their own.
_BASES = {"HOME": "~", "USERPROFILE": "~", "TMPDIR": "$TMPDIR", "TEMP": "$TMPDIR", "TMP": "$TMPDIR"}
XDG = "XDG_CACHE_HOME"
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
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
    }
)

#: Calls that build a path from their arguments (joined with ``/``).
_JOINERS = frozenset(
    {
        "os.path.join",
        "path.join",
        "join",
        "Path",
        "pathlib.Path",
        "PurePath",
        "PosixPath",
        "pathlib.PurePath",
        "pathlib.PosixPath",
    }
)
#: Calls that return their (first) argument's path, expanded or normalised.
_WRAPPERS = frozenset(
    {
        "str",
        "os.fspath",
        "os.path.abspath",
        "os.path.realpath",
        "os.path.normpath",
        "os.path.expanduser",
        "os.path.expandvars",
        "path.abspath",
        "path.realpath",
        "path.normpath",
        "path.expanduser",
        "path.expandvars",
        "expanduser",
        "abspath",
        "realpath",
    }
)
#: Methods of a path object that return the same place.
_PATH_METHODS = frozenset(
    {"expanduser", "resolve", "absolute", "as_posix", "joinpath", "__fspath__", "expandvars"}
)
_HOME_CALLS = frozenset({"Path.home", "pathlib.Path.home", "PosixPath.home"})
_TMP_CALLS = frozenset({"tempfile.gettempdir", "gettempdir", "tempfile.gettempdirb"})
_USER_CACHE = frozenset({"user_cache_dir", "user_cache_path"})
_TMP_PREFIXES = ("/tmp/", "/var/tmp/")  # noqa: S108 - the literals this audit looks for
_TMP_DIRS = ("/tmp", "/var/tmp")  # noqa: S108
#: Every name the layout table knows: a read of one is always a finding (covered by its row).
_LAYOUT_NAMES = frozenset({v.name for v in TABLE} | {n for v in TABLE for n in v.legacy})
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
#: XDG variables that are not the cache home.
_OTHER_XDG = frozenset({"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"})
#: Defaults that make a ``X_CACHE`` variable a switch or a size, not a place.
_SWITCH_VALUES = re.compile(r"-?[0-9.]+|true|false|yes|no|on|off|none", re.IGNORECASE)
_NESTED_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-(.*)\}")
_OPAQUE_MAX = 48
_DEPTH = 24

#: How a default was formed (the ``style`` of a finding).
EXPANDUSER = "expanduser"
PATH_HOME = "Path.home()"
HOME_VAR = "$HOME"
GETTEMPDIR = "gettempdir()"
TMP_LITERAL = "/tmp literal"  # noqa: S108 - a label, not a path
PLATFORMDIRS = "platformdirs.user_cache_dir"
XDG_HONOURED = "XDG_CACHE_HOME honoured"
XDG_IGNORED = "XDG_CACHE_HOME ignored"


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


def _dotted(node: ast.AST) -> str:
    """``os.path.join`` for that attribute chain, ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _callee(node: ast.Call) -> str:
    """The last name of what is called (``EnvVar`` for ``env.EnvVar(...)``)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass
class _EnvRead:
    node: ast.AST
    name: str
    default: ast.expr | None
    scope: _Scope


class _Module:
    """One parsed file: scopes, simple assignments, local functions, and the findings."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
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
        self._index(tree, tree)
        loads = self._base_loads()
        self.base_loads: frozenset[ast.expr] = frozenset(loads)
        self.candidates += loads
        self.candidates.sort(key=lambda n: (n.lineno, n.col_offset))
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[stmt.name] = stmt

    def _index(self, node: ast.AST, scope: _Scope) -> None:  # noqa: PLR0912 - one per kind
        stack: list[tuple[ast.AST, _Scope]] = [(node, scope)]
        while stack:
            current, sc = stack.pop()
            self.scope_of[current] = sc
            inner = sc
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = current
            if isinstance(current, ast.Assign | ast.AnnAssign) and current.value is not None:
                targets = current.targets if isinstance(current, ast.Assign) else [current.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.assigns.setdefault(sc, {}).setdefault(target.id, []).append(
                            current.value
                        )
            elif isinstance(current, ast.NamedExpr):
                self.assigns.setdefault(sc, {}).setdefault(current.target.id, []).append(
                    current.value
                )
            elif isinstance(current, ast.withitem):
                self._unfollowable(sc, current.optional_vars)
            elif isinstance(current, ast.AugAssign | ast.For | ast.AsyncFor):
                self._unfollowable(sc, current.target)
                if not isinstance(current, ast.AugAssign):
                    self._iterates(sc, current.target, current.iter)
            elif isinstance(current, ast.comprehension):
                self._iterates(sc, current.target, current.iter)
            elif isinstance(current, ast.arguments):
                for arg in (*current.posonlyargs, *current.args, *current.kwonlyargs):
                    self._unfollowable(inner, ast.Name(arg.arg, ast.Store()))
            elif isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
                self.loads.setdefault(current.id, []).append(current)
            elif isinstance(current, ast.Call | ast.Subscript):
                self.candidates.append(current)
                if isinstance(current, ast.Call) and isinstance(current.func, ast.Name):
                    self.calls.setdefault(current.func.id, []).append(current)
            elif (
                isinstance(current, ast.Constant)
                and isinstance(current.value, str)
                and (current.value.startswith(("~/", *_TMP_PREFIXES)) or current.value in _TMP_DIRS)
            ):
                self.candidates.append(current)
            if isinstance(current, ast.If) and _dotted(current.test).endswith("TYPE_CHECKING"):
                continue  # annotations only: never run
            for child in ast.iter_child_nodes(current):
                self.parent[child] = current
                stack.append((child, inner))

    def base_call(self, node: ast.AST) -> bool:
        """Whether ``node`` is a bare base: ``Path.home()``, ``expanduser("~...")``,
        ``gettempdir()``, ``user_cache_dir(...)``."""
        if not isinstance(node, ast.Call):
            return False
        name = _dotted(node.func)
        if name in _HOME_CALLS or name in _TMP_CALLS or _callee(node) in _USER_CACHE:
            return True
        if name.endswith("expanduser") and node.args:
            text = self.string(node.args[0], self.scope_of.get(node, self.tree))
            return text is not None and text.startswith("~")
        return False

    def _base_loads(self) -> list[ast.expr]:
        """Uses of a name given a bare base once (``home = os.path.expanduser("~")``): the
        place is built where the name is used (``os.path.join(home, ".x")``)."""
        found: list[ast.expr] = []
        for scope, names in self.assigns.items():
            for name, values in names.items():
                if len(values) != 1 or not self.base_call(values[0]):
                    continue
                found.extend(
                    load
                    for load in self.loads.get(name, [])
                    if scope is self.tree or self.scope_of.get(load) is scope
                )
        return found

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
                    [ast.Constant(None), ast.Constant(None)]  # two values: never followed
                )

    # -- names and constants --------------------------------------------------------------

    def value_of(self, name: str, scope: _Scope) -> ast.expr | None:
        """The one value ``name`` is given in ``scope`` (else at module level), or ``None``."""
        for sc in (scope, self.tree):
            values = self.assigns.get(sc, {}).get(name)
            if values is not None:
                return values[0] if len(values) == 1 else None
        return None

    def string(self, node: ast.expr | None, scope: _Scope) -> str | None:
        """The string ``node`` is, directly or through one constant name."""
        for _ in range(3):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return node.value
            if not isinstance(node, ast.Name):
                return None
            node = self.value_of(node.id, scope)
        return None

    # -- environment reads ----------------------------------------------------------------

    def env_read(self, node: ast.AST) -> _EnvRead | None:  # noqa: PLR0911 - one per form
        """The environment read ``node`` is, if any."""
        scope = self.scope_of.get(node, self.tree)
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
        if depth > _DEPTH:
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
            value = self.value_of(node.id, scope)
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
        if isinstance(node, ast.IfExp):  # the first branch is taken to be the usual one
            body = self.render(node.body, scope, d)
            other = self.render(node.orelse, scope, d)
            return Rendered(body.text, body.variables, body.style | other.style)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            first = self.render(node.values[0], scope, d)
            rest = self.render(node.values[1], scope, d)
            if first.text.startswith("$") and ":-" not in first.text and first.variables:
                name = first.variables[0]
                return Rendered(
                    f"${{{name}:-{rest.text}}}",
                    (name, *rest.variables),
                    first.style | rest.style,
                )
            return _opaque(node)
        if isinstance(node, ast.Lambda):
            return self.render(node.body, node, d)
        return _opaque(node)

    def _render_read(self, read: _EnvRead, depth: int) -> Rendered:
        if read.name in _BASES:
            base = _BASES[read.name]
            return Rendered(base, style=frozenset({HOME_VAR}) if base == "~" else frozenset())
        default = self.render(read.default, read.scope, depth)
        style = default.style | ({XDG_HONOURED} if read.name == XDG else set())
        if not default.text:
            return Rendered(f"${read.name}", (read.name,), style)
        return Rendered(f"${{{read.name}:-{default.text}}}", (read.name, *default.variables), style)

    def _render_call(  # noqa: PLR0911 - one case per kind of call
        self, node: ast.Call, scope: _Scope, depth: int
    ) -> Rendered:
        name = _dotted(node.func)
        args = node.args
        if name in _HOME_CALLS:
            return Rendered("~", style=frozenset({PATH_HOME}))
        if name in _TMP_CALLS:
            return Rendered("$TMPDIR", style=frozenset({GETTEMPDIR}))
        if _callee(node) in _USER_CACHE:
            first = (
                args[0]
                if args
                else next((k.value for k in node.keywords if k.arg == "appname"), None)
            )
            app = self.render(first, scope, depth).text
            return Rendered(
                f"${XDG}/{app}".rstrip("/"), (XDG,), frozenset({PLATFORMDIRS, XDG_HONOURED})
            )
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


def _single_return(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The returned expression of a function with exactly one ``return`` (not in a nested one)."""
    found: list[ast.expr] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
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
    return default.root in ("home", "tmp", "xdg")


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


def _trivial(text: str) -> bool:
    """A bare base with no fixed name of its own (``~``, ``$TMPDIR``): not a location yet."""
    return text in ("~", "~/", "$TMPDIR", f"${XDG}", f"${{{XDG}:-~/.cache}}", *_TMP_DIRS)


class _Visitor:
    """Collects the findings of one :class:`_Module`."""

    def __init__(self, module: _Module, dist: str, version: str, file: str) -> None:
        self.m = module
        self.dist, self.version, self.file = dist, version, file

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
            if self.m.env_read(up) is not None:
                nested = True
            node = up

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
        """Every finding of the module, by line."""
        reads: list[tuple[_EnvRead, Finding, bool]] = []
        paths: list[tuple[ast.AST, Finding]] = []
        seen: set[int] = set()
        for node in self.m.candidates:
            read = self.m.env_read(node)
            if read is not None:
                found = self._read_finding(read)
                if found is not None:
                    reads.append((read, *found))
                continue
            if not self._is_source(node):
                continue
            top, nested = self._outermost(node)
            if nested or id(top) in seen or self._inside_env_read(top):
                continue
            seen.add(id(top))
            if self._used_by_name(top):
                continue
            rendered = self.m.render(top, self.m.scope_of.get(top, self.m.tree))
            if rendered.root not in ("home", "tmp", "xdg") or _trivial(rendered.text):
                continue
            if not_a_cache(rendered.text) or self.m.credential(top):
                continue
            variable = rendered.first_variable if rendered.root == "xdg" else None
            line = getattr(top, "lineno", 0)
            text, style = rendered.text, _style(rendered)
            paths.append(
                (
                    top,
                    Finding(self.dist, self.version, self.file, line, variable, text, text, style),
                )
            )
        tied = self._attribute(reads, paths)
        # A read whose name alone does not say "cache" counts once a fixed place falls back on
        # it (``TORCH_EXTENSIONS_DIR``, whose default is built in another function).
        out = [f for _, f, keep in reads if keep or id(f) in tied] + [f for _, f in paths]
        return sorted(out, key=lambda f: (f.line, f.variable or ""))

    def _read_finding(self, read: _EnvRead) -> tuple[Finding, bool] | None:
        """The finding of a read, and whether it counts on its own; ``None``: not a place."""
        node = read.node
        top, nested = self._outermost(node)
        if nested and top is not node and self._first_outer_read(node) is not None:
            # A read inside another read's default (``XDG_CACHE_HOME`` under ``HF_HOME``) is
            # part of that one's default.
            return None
        default_node = read.default
        parent = self.m.parent.get(node)
        if (
            default_node is None
            and isinstance(parent, ast.BoolOp)
            and isinstance(parent.op, ast.Or)
            and parent.values[0] is node
        ):
            default_node = parent.values[1]  # os.environ.get("X") or default
        default = self.m.render(default_node, read.scope)
        if not place_like(read.name, default):
            return None
        expression = self.m.render(top, self.m.scope_of.get(top, self.m.tree))
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
        return found, interesting(read.name, default)

    def _first_outer_read(self, node: ast.AST) -> ast.AST | None:
        current = node
        while True:
            up = self._composing(current)
            if up is None:
                return None
            read = self.m.env_read(up)
            if read is not None and read.name not in _BASES:
                return up
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


def _style(rendered: Rendered) -> tuple[str, ...]:
    style = set(rendered.style)
    if rendered.text.startswith("~/.cache") and XDG not in rendered.variables:
        style.add(XDG_IGNORED)
    if XDG in rendered.variables:
        style.add(XDG_HONOURED)
    return tuple(sorted(style))


def places(tree: ast.Module, *, dist: str, version: str, file: str) -> list[Finding]:
    """Every finding of one parsed file, by line."""
    return _Visitor(_Module(tree), dist, version, file).findings()
