"""What a value is, in the audit's notation: ``${NAME:-default}/sub``, so that a reader sees at a
glance what moves a location. Names are followed to what they are given, calls of the module's
own functions to what they return, joins and f-strings part by part; what is built at run time
shows as ``{...}``."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from .._readers import FUNCTIONS
from .index import Index, Scope, returns
from .limits import CONSTANT_HOPS, RENDER_DEPTH
from .names import (
    BASES,
    JOINERS,
    PATH_METHODS,
    TMP_DIRS,
    TMP_PREFIXES,
    USER_CACHE,
    WRAPPERS,
    XDG,
    call_name,
)
from .names import dotted as _dotted
from .reads import HOME_CALLS, TMP_CALLS, EnvRead, Reads

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


_OPAQUE_MAX = 48

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
        if t.startswith(("$TMPDIR", *TMP_PREFIXES)) or t in TMP_DIRS:
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


def conditional_arms(m: Index, part: ast.AST, top: ast.AST) -> list[tuple[int, ast.expr]]:
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


class Values(Reads):
    """A module's index, asked what its expressions are."""

    def __init__(self, tree: ast.Module, file: str = "", name: str = "") -> None:
        super().__init__(tree, file, name)
        self._resolving: set[str] = set()
        #: While a place is rendered from one of its parts: the arm of each conditional
        #: expression on the way that the part lies in (by the conditional's id).
        self._arms: dict[int, ast.expr] = {}
        #: While a path is rendered as one of its origins makes it (:meth:`render_via`): that
        #: origin, whose value a name given several is rendered with.
        self._via: ast.AST | None = None
        loads = self._base_loads()
        self.base_loads: frozenset[ast.expr] = frozenset(loads)
        self.candidates += loads
        self.candidates.sort(key=lambda n: (n.lineno, n.col_offset))
        self.define_functions()

    def _base_loads(self) -> list[ast.expr]:
        """Uses of a name given a bare base once (``home = os.path.expanduser("~")``): the
        place is built where the name is used (``os.path.join(home, ".x")``)."""
        found: list[ast.expr] = []
        for scope, names in self.assigns.items():
            for name, values in names.items():
                if len(values) != 1 or not self.base_call(_unwrapped(values[0])):
                    continue
                if not trivial(self.render(values[0], scope).text):
                    continue  # a whole location, reported where it is made
                found.extend(
                    load
                    for load in self.loads.get(name, [])
                    if scope is self.tree or self.scope_of.get(load) is scope
                )
        return found

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

    def render(self, node: ast.AST | None, scope: Scope, depth: int = 0) -> Rendered:
        """``node`` in the audit's notation (``{...}`` for what cannot be followed)."""
        if node is None:
            return Rendered("")
        if depth > RENDER_DEPTH:
            return opaque(node)
        if isinstance(node, ast.Constant):
            return _constant(node)
        read = self.env_read(node)
        if read is not None:
            return self._render_read(read, depth + 1)
        how = self._RENDERERS.get(type(node))
        rendered = how(self, node, scope, depth + 1) if how is not None else None
        return rendered if rendered is not None else opaque(node)

    # One method per kind of node :meth:`render` follows (:data:`_RENDERERS`): each is given
    # the node, its scope and the depth reached, and returns ``None`` for what it cannot follow.

    def _render_name(self, node: ast.Name, scope: Scope, d: int) -> Rendered | None:
        if node.id == "__file__":
            return Rendered("{__file__}")
        value = self.value_of(node.id, scope)
        if value is None and self._via is not None:
            value = self._toward(node.id, scope, self._via)
        if value is None or isinstance(value, ast.Lambda) or node.id in self._resolving:
            return None
        self._resolving.add(node.id)
        try:
            return self.render(value, self.scope_of.get(value, self.tree), d)
        finally:
            self._resolving.discard(node.id)

    def _render_binop(self, node: ast.BinOp, scope: Scope, d: int) -> Rendered | None:
        if not isinstance(node.op, ast.Div | ast.Add):
            return None
        left = self.render(node.left, scope, d)
        right = self.render(node.right, scope, d)
        sep = "/" if isinstance(node.op, ast.Div) else ""
        return _join([left, right], sep)

    def _render_joined(self, node: ast.JoinedStr, scope: Scope, d: int) -> Rendered:
        parts = [
            self.render(v.value if isinstance(v, ast.FormattedValue) else v, scope, d)
            for v in node.values
        ]
        return _join(parts, "")

    def _render_choice(self, node: ast.IfExp, scope: Scope, d: int) -> Rendered:
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

    def _render_boolop(self, node: ast.BoolOp, scope: Scope, d: int) -> Rendered | None:
        return self.render_or(node.values, scope, d) if isinstance(node.op, ast.Or) else None

    def _render_lambda(self, node: ast.Lambda, _scope: Scope, d: int) -> Rendered:
        return self.render(node.body, node, d)

    def _render_attribute(self, node: ast.Attribute, scope: Scope, d: int) -> Rendered | None:
        if node.attr == "parent":
            inner = self.render(node.value, scope, d)
            return Rendered(f"{inner.text}/..", inner.variables, inner.style)
        if self.reader_call(node) and isinstance(node.value, ast.Call):
            return self._render_user_cache(node.value, scope, d)
        return None

    def render_or(self, values: list[ast.expr], scope: Scope, depth: int = 0) -> Rendered | None:
        """``A or B or c`` as ``${A:-${B:-c}}``: each variable read with no default of its own
        takes the rest of the chain as its default (``None`` when a part that is not the last
        is no such read)."""
        first = self.render(values[0], scope, depth)
        if len(values) == 1:
            return first
        rest = self.render_or(values[1:], scope, depth)
        if rest is not None and not first.variables and first.text == rest.text:
            return first  # bases that are one place (``TMPDIR or TEMP or TMP``)
        if rest is None or not (
            first.text.startswith("$") and ":-" not in first.text and first.variables
        ):
            return None
        name = first.variables[0]
        return Rendered(
            f"${{{name}:-{rest.text}}}", (name, *rest.variables), first.style | rest.style
        )

    def render_via(self, node: ast.AST, scope: Scope, origin: ast.AST) -> Rendered:
        """``node`` rendered as it is when its value comes from ``origin`` (one of its
        :func:`.summaries.origins`): a name given several values (``base = read(...)``, later
        ``base = "/tmp/x"``) is rendered with the one that leads to ``origin``."""
        kept = self._via
        self._via = origin
        try:
            return self.render(node, scope)
        finally:
            self._via = kept

    def _toward(self, name: str, scope: Scope, origin: ast.AST) -> ast.expr | None:
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
        self._arms = dict(conditional_arms(self, part, top))
        try:
            return self.render(top, self.scope_of.get(top, self.tree))
        finally:
            self._arms = kept

    def _render_read(self, read: EnvRead, depth: int) -> Rendered:
        if read.name in BASES:
            base = BASES[read.name]
            return Rendered(base, style=frozenset({HOME_VAR}) if base == "~" else frozenset())
        default = self.render(read.default, read.scope, depth)
        style = default.style | ({XDG_HONOURED} if read.name == XDG else set())
        if not default.text:
            return Rendered(f"${read.name}", (read.name,), style)
        return Rendered(f"${{{read.name}:-{default.text}}}", (read.name, *default.variables), style)

    def _render_call(self, node: ast.Call, scope: Scope, depth: int) -> Rendered:
        rendered = self._render_base(node, scope, depth)
        if rendered is None:
            rendered = self._render_path(node, scope, depth)
        func = node.func
        if rendered is None and isinstance(func, ast.Name) and func.id in self.functions:
            returned = _single_return(self.functions[func.id])
            if returned is not None:
                rendered = self.render(returned, self.functions[func.id], depth)
        return rendered if rendered is not None else opaque(node)

    def _render_base(self, node: ast.Call, scope: Scope, depth: int) -> Rendered | None:
        """A call that is a base: the home or temporary directory, the user's cache
        directory, a known reader's location."""
        name = _dotted(node.func)
        if name in HOME_CALLS:
            return Rendered("~", style=frozenset({PATH_HOME}))
        if name in TMP_CALLS:
            return Rendered("$TMPDIR", style=frozenset({GETTEMPDIR}))
        if call_name(node) in USER_CACHE:
            return self._render_user_cache(node, scope, depth)
        known = FUNCTIONS.get(name)
        if known is None:
            return None
        location = known.location
        if "{0}" in location:  # the place depends on the first argument (a project name)
            first = self.render(node.args[0], scope, depth).text if node.args else "{project}"
            location = location.replace("{0}", first)
        return Rendered(location, known.variables, frozenset({KNOWN_READER}))

    def _render_path(self, node: ast.Call, scope: Scope, depth: int) -> Rendered | None:
        """A call that builds a path from its arguments, or keeps its argument's."""
        name = _dotted(node.func)
        args = node.args
        if name in JOINERS or (name.endswith(".join") and "path" in name):
            return (
                _join([self.render(a, scope, depth) for a in args], "/") if args else Rendered(".")
            )
        if name in WRAPPERS and args:
            return _expanded(name, self.render(args[0], scope, depth))
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in PATH_METHODS:
            inner = self.render(func.value, scope, depth)
            if func.attr == "joinpath":
                return _join([inner, *(self.render(a, scope, depth) for a in args)], "/")
            return _expanded(func.attr, inner)
        return None

    def _render_user_cache(self, node: ast.Call, scope: Scope, depth: int) -> Rendered:
        """``user_cache_dir("x")`` or ``PlatformDirs("x")``: ``$XDG_CACHE_HOME/x``."""
        args = node.args
        first = (
            args[0] if args else next((k.value for k in node.keywords if k.arg == "appname"), None)
        )
        app = self.render(first, scope, depth).text
        return Rendered(
            f"${XDG}/{app}".rstrip("/"), (XDG,), frozenset({PLATFORMDIRS, XDG_HONOURED})
        )

    _RENDERERS: ClassVar[dict[type[ast.AST], Callable[..., Rendered | None]]] = {
        ast.Call: _render_call,
        ast.Name: _render_name,
        ast.BinOp: _render_binop,
        ast.JoinedStr: _render_joined,
        ast.IfExp: _render_choice,
        ast.BoolOp: _render_boolop,
        ast.Lambda: _render_lambda,
        ast.Attribute: _render_attribute,
    }


def _single_return(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    """The returned expression of a function with exactly one ``return`` (not in a nested one)."""
    found = returns(fn)
    return found[0] if len(found) == 1 else None


def _unwrapped(node: ast.expr) -> ast.expr:
    """What a wrapper that keeps its argument's place is given (``normpath(expanduser("~"))``:
    ``expanduser("~")``), down to the expansion itself."""
    while isinstance(node, ast.Call) and node.args:
        name = _dotted(node.func)
        if name not in WRAPPERS or name.endswith("expanduser"):
            break
        node = node.args[0]
    return node


def _constant(node: ast.Constant) -> Rendered:
    if node.value is None:
        return Rendered("")
    if isinstance(node.value, bytes):
        return Rendered(node.value.decode("utf-8", "replace"))
    text = str(node.value)
    style = frozenset({TMP_LITERAL}) if text.startswith(TMP_PREFIXES) else frozenset()
    return Rendered(text, style=style)


def _expanded(name: str, inner: Rendered) -> Rendered:
    """What ``name`` (a call or a method) makes of ``inner``: ``~`` expanded is noted."""
    if name.endswith("expanduser") and inner.text.startswith("~"):
        return Rendered(inner.text, inner.variables, inner.style | {EXPANDUSER})
    return inner


def opaque(node: ast.AST) -> Rendered:
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


#: Separators at the end of a rendered place (``home + os.sep``): no name of its own.
_TRAILING_SEPARATORS = re.compile(r"(?:\{os\.sep\}|\{os\.path\.sep\})+$")


def trivial(text: str) -> bool:
    """A bare base with no fixed name of its own (``~``, ``$TMPDIR``, ``~{os.sep}``): not a
    location yet."""
    text = _TRAILING_SEPARATORS.sub("", text) or text
    return text in ("~", "~/", "$TMPDIR", f"${XDG}", f"${{{XDG}:-~/.cache}}", *TMP_DIRS)


def style_of(rendered: Rendered) -> tuple[str, ...]:
    style = set(rendered.style)
    if rendered.text.startswith("~/.cache") and XDG not in rendered.variables:
        style.add(XDG_IGNORED)
    if XDG in rendered.variables:
        style.add(XDG_HONOURED)
    return tuple(sorted(style))
