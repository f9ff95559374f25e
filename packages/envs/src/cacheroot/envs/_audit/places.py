"""Where a module decides a location: environment reads whose name or default looks like a
place (``os.environ.get("X_CACHE_DIR", ...)``, a project's own ``EnvVar(...)``), and places built
from a fixed base with no variable (``Path.home() / ".x"``, ``expanduser("~/.x")``,
``gettempdir()`` joined with a name, ``user_cache_dir("x")``, a ``"/tmp/..."`` literal). Each is
rendered whole, as the largest path built from it, before any value is followed to a write."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .._readers import FUNCTIONS, VARIABLES
from .direct import overrides as direct_overrides
from .findings import HELPER, RUN_TIME_NAME, Finding, Unfollowed
from .kinds import words
from .limits import TARGET_PARENTS
from .names import (
    BASES,
    ENV_CALLS,
    ENVIRON,
    JOINERS,
    PATH_METHODS,
    TMP_DIRS,
    TMP_PREFIXES,
    WRAPPERS,
    call_name,
)
from .names import dotted as _dotted
from .summaries import origins
from .values import Rendered, conditional_arms, opaque, style_of, trivial
from .variables import (
    OTHER_XDG,
    SETTING_WORDS,
    holds_a_value,
    interesting,
    not_a_cache,
    place_like,
    switch,
)

if TYPE_CHECKING:
    from .direct import Noted
    from .index import Scope
    from .modules import Module
    from .reads import EnvRead


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
#: Words of a name given to a fixed place that make it a search path of installed things.
_INSTALL_WORDS = frozenset({"LIB", "LIBS", "BIN", "BINS", "INCLUDE", "INCLUDES", "PREFIX"})


def _constructor_data(keyword: ast.keyword, call: ast.AST | None) -> bool:
    """Whether a literal given as ``keyword`` to ``call`` is data: a keyword argument of a class
    (a callee named in CamelCase, not a path class), whose name does not say place."""
    if not isinstance(call, ast.Call) or keyword.arg is None:
        return False
    callee = call_name(call)
    if not callee[:1].isupper() or _dotted(call.func) in JOINERS or callee.isupper():
        return False
    return _PLACE_KEYWORD_WORDS.isdisjoint(keyword.arg.lower().split("_"))


def _composes(parent: ast.AST | None) -> bool:
    """Whether ``parent`` builds a larger path from each of its parts: ``/`` or ``+``, an
    f-string, a choice, an ``or``."""
    return (
        (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div | ast.Add))
        or isinstance(parent, ast.JoinedStr | ast.FormattedValue | ast.IfExp)
        or (isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or))
    )


def place_key(m: Module, part: ast.AST, top: ast.AST) -> tuple[int, ...]:
    """Which place ``part`` makes of ``top``: ``top``, and the arm ``part`` lies in of each
    conditional expression on the way (``a if flag else b``: two places)."""
    return (id(top), *(id(arm) for _, arm in conditional_arms(m, part, top)))


class Places:
    """The places and reads of one :class:`.modules.Module`, each a finding, before any value
    is followed to a write (:meth:`collect`)."""

    def __init__(self, module: Module, dist: str, version: str, file: str) -> None:
        self.m = module
        self.dist, self.version, self.file = dist, version, file
        self.unfollowed: list[Unfollowed] = []
        #: The node each finding (by id) was made at.
        self.node_of: dict[int, ast.AST] = {}
        #: Filled by :meth:`collect`: the reads, the fixed places, and the findings by node.
        self.overrides: list[Finding] = []
        self.reads: list[tuple[EnvRead, Finding, bool]] = []
        self.paths: list[tuple[ast.AST, Finding]] = []
        self.by_source: dict[int, Finding] = {}
        #: The finding of each place, by :func:`place_key`.
        self.by_top: dict[tuple[int, ...], Finding] = {}
        self.by_read: dict[int, Finding] = {}
        self.promoted: set[int] = set()

    def noted(self, found: list[Noted]) -> list[Finding]:
        """The findings of ``found``, each noted with the node it was made at."""
        for each, node in found:
            self.node_of[id(each)] = node
        return [each for each, _ in found]

    def _composing(self, child: ast.AST) -> ast.AST | None:
        """The node that builds a larger path from ``child``, or ``None``."""
        parent = self.m.parent.get(child)
        if isinstance(parent, ast.Attribute) and parent.attr in PATH_METHODS:
            call = self.m.parent.get(parent)
            return call if isinstance(call, ast.Call) and call.func is parent else None
        if _composes(parent):
            return parent
        if isinstance(parent, ast.keyword):
            call = self.m.parent.get(parent)
            return call if call is not None and self._default_is(call, child) else None
        if isinstance(parent, ast.Call) and child in parent.args:
            name = _dotted(parent.func)
            if name in JOINERS or name in WRAPPERS or name.endswith("path.join"):
                return parent
            return parent if self._default_is(parent, child) else None
        return None

    def _default_is(self, node: ast.AST, child: ast.AST) -> bool:
        """Whether ``node`` reads a variable whose default is ``child``."""
        read = self.m.env_read(node)
        return read is not None and read.default is child

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
        return first if read is not None and read.name not in BASES else None

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
            if not (value.startswith(TMP_PREFIXES) or value in TMP_DIRS):
                return value.startswith("~/") and self._expanded(node)
            parent = self.m.parent.get(node)
            if isinstance(parent, ast.keyword):
                return not _constructor_data(parent, self.m.parent.get(parent))
            return not isinstance(parent, _NOT_A_USE)
        return self.m.base_call(node) or node in self.m.base_loads

    def _expanded(self, node: ast.Constant) -> bool:
        """A ``"~/..."`` literal counts where it is expanded (``expanduser``) or is a default;
        so does one that begins an f-string so expanded (``expanduser(f"~/.x/{name}.json")``)."""
        parent = self.m.parent.get(node)
        if isinstance(parent, ast.JoinedStr) and parent.values[0] is node:
            parent = self.m.parent.get(parent)
            return isinstance(parent, ast.Call) and _dotted(parent.func).endswith("expanduser")
        if isinstance(parent, ast.Call):
            name = _dotted(parent.func)
            if name.endswith("expanduser") or name in JOINERS:
                return True
            read = self.m.env_read(parent)
            return read is not None and read.default is node
        return isinstance(parent, ast.Assign | ast.AnnAssign)

    def collect(self) -> None:
        """The module's places and reads, before values are followed to their writes."""
        self.overrides = overrides = self.noted(
            direct_overrides(self.m, self.dist, self.version, self.file)
        )
        hidden = {id(n) for f in overrides for n in ast.walk(self.node_of[id(f)])}
        self.reads = []
        self.paths = []
        self.by_source = {}
        self.by_read = {}
        self.promoted = set()
        seen: set[tuple[int, ...]] = set()
        for node in self.m.candidates:
            if id(node) in hidden:
                continue
            read = self.m.env_read(node)
            if read is not None and read.name not in BASES:
                found = self._read_finding(read)
                if found is not None:
                    self.reads.append((read, *found))
                continue
            self._runtime_name(node)
            if self._is_source(node):
                self._fixed_place(node, seen)
        self.by_read = {id(r.node): f for r, f, _ in self.reads}

    def _fixed_place(self, node: ast.AST, seen: set[tuple[int, ...]]) -> None:
        """The finding of the place a fixed base (``node``) enters, made once per place
        (``seen``): the largest path built from it, unless a variable's read holds it, a name
        carries it to where it is used, or it is no cache."""
        top, nested = self._outermost(node)
        if nested or self._inside_env_read(top):
            return
        key = place_key(self.m, node, top)
        if key in seen:
            if key in self.by_top:
                self.by_source[id(node)] = self.by_top[key]
            return
        seen.add(key)
        if self._used_by_name(top):
            return
        rendered = self.m.render_from(node, top)
        known = self.m.reader_call(node)
        if self._no_cache(rendered, top, known=known):
            return
        variable = rendered.first_variable if rendered.root in ("xdg", "var") else None
        line = getattr(top, "lineno", 0)
        text, style = rendered.text, style_of(rendered)
        found_path = Finding(self.dist, self.version, self.file, line, variable, text, text, style)
        if known:
            reader = FUNCTIONS.get(_dotted(node.func)) if isinstance(node, ast.Call) else None
            if reader is not None:
                found_path.kind = reader.kind
                found_path.reason = f"read by {reader.source}"
        self.paths.append((top, found_path))
        self.by_top[key] = found_path
        self.node_of[id(found_path)] = top
        self.by_source[id(node)] = found_path

    def _no_cache(self, rendered: Rendered, top: ast.AST, *, known: bool) -> bool:
        """Whether a fixed place is none the audit reports: not under a base (unless a known
        reader's), a bare base, configuration or a credential file, or a search path."""
        if (rendered.root not in ("home", "tmp", "xdg") and not known) or trivial(rendered.text):
            return True
        if not_a_cache(rendered.text) or self.m.credential(top):
            return True
        # Where libraries or programs are looked for (``user_lib_dirs``).
        return bool(_INSTALL_WORDS & words(*self._targets(top)))

    def _read_finding(self, read: EnvRead, *, force: bool = False) -> tuple[Finding, bool] | None:
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
            if switch(default.text) or read.name in OTHER_XDG:
                return None
            if SETTING_WORDS.intersection(read.name.split("_")) or (
                not known and holds_a_value(read.name, default)
            ):
                return None  # a timeout, a size, a URL, a version: given to a download
        elif not known and not place_like(read.name, default):
            # The default, not the name, may say it is a place (``~/.demo/models``).
            if default.root not in ("home", "tmp", "xdg") or trivial(default.text):
                return None
            if not_a_cache(default.text) or read.name in BASES or read.name in OTHER_XDG:
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
            style_of(Rendered(default.text, (read.name, *default.variables), default.style)),
        )
        self.node_of[id(found)] = node
        return found, known or interesting(read.name, default)

    def _helpers_in(self, node: ast.AST, scope: Scope) -> None:

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
            if read is not None and read.name not in BASES:
                return up
            first = self._or_default(current, up)
            if first is not None:
                return first
            current = up

    def _runtime_name(self, node: ast.AST) -> None:
        """Count an environment read whose name is built at run time."""
        scope = self.m.scope_of.get(node, self.m.tree)
        name: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = node.slice if _dotted(node.value) in ENVIRON else None
        elif isinstance(node, ast.Call) and _dotted(node.func) in ENV_CALLS and node.args:
            name = node.args[0]
        if name is not None and self.m.string(name, scope) is None:
            self._unfollowed(node, RUN_TIME_NAME)

    def _unfollowed(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        if any(u.line == line and u.what == what for u in self.unfollowed):
            return
        self.unfollowed.append(
            Unfollowed(self.dist, self.file, line, what, opaque(node).text[1:-1])
        )

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
