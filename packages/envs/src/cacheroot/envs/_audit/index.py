"""One parsed file, indexed: scopes, parents, assignments, imports, classes and functions, and
the candidate nodes the later stages read. It knows the syntax tree only: it resolves no value
and reads no other module, so that every later stage asks one index instead of walking the tree.

Aliases of the modules the audit knows are spelled in full first (:func:`canonical`), so that
every later stage matches ``os.path.join`` however it was imported."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, ClassVar

from .._readers import FUNCTIONS
from .names import (
    ENVS_MODULES,
    LAYOUT_MODULES,
    LAYOUT_NAMES,
    TMP_DIRS,
    TMP_PREFIXES,
    USER_CACHE,
)
from .names import dotted as _dotted

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


#: The value of a name bound in a way that cannot be followed (a parameter, a loop variable).
UNFOLLOWED = ast.Constant(None)
#: The scheme of a socket address that is a path (ZMQ's ``ipc://``).
IPC_SCHEME = "ipc://"
#: Standard-library modules: a call of theirs is not a helper left unread.
_STDLIB_ROOTS = frozenset({"os", "sys", "re", "json", "hashlib", "time", "functools", "io"})


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


Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
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


def returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """Every expression ``fn`` returns (not those of a nested function)."""
    found: list[ast.expr] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return found


class Index:
    """One parsed file: scopes, parents, simple assignments, imports, classes and functions, and
    the candidates (environment reads, calls, ``/tmp`` literals) the later stages look at."""

    def __init__(self, tree: ast.Module, file: str = "", name: str = "") -> None:
        self.tree = tree
        self.file = file
        #: The module's dotted name (relative imports are made absolute from it).
        self.name = name
        #: Names bound by ``from M import N`` (local name -> ``M.N``, relative imports made
        #: absolute), and by ``import M`` (the first part, and ``local -> M`` in full).
        self.imported: dict[str, str] = {}
        self.modules: set[str] = set()
        self.module_names: dict[str, str] = {}
        #: Parameters, by function and name; values a name gains by ``+=``, ``.append``,
        #: ``.extend``, ``.insert`` (followed as values, never taken as the one value).
        self.params: dict[tuple[Scope, str], ast.arg] = {}
        self.more: dict[tuple[Scope, str], list[ast.expr]] = {}
        #: Methods by class, classes by name (top level), and what ``self.NAME`` is given in
        #: a class's methods.
        self.methods: dict[ast.ClassDef, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.attributes: dict[tuple[ast.ClassDef, str], list[ast.expr]] = {}
        #: ``with E as NAME``: what ``NAME`` was made from, by scope and name.
        self.with_values: dict[tuple[Scope, str], ast.expr] = {}
        #: ``X[...] = ...`` statements, and ``.content``/``.raw`` reads (a download in memory).
        self.item_sets: list[ast.Assign] = []
        self.in_memory: list[ast.Attribute] = []
        self.parent: dict[ast.AST, ast.AST] = {}
        self.scope_of: dict[ast.AST, Scope] = {}
        self.assigns: dict[Scope, dict[str, list[ast.expr]]] = {}
        self.loads: dict[str, list[ast.Name]] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.calls: dict[str, list[ast.Call]] = {}
        self.candidates: list[ast.expr] = []
        #: What follows ``"ipc://"`` in an address built from it (``"ipc://" + prefix``): a
        #: place processes meet at.
        self.ipc_addresses: list[ast.expr] = []
        #: What a loop or comprehension variable runs over, by scope and name.
        self.iterables: dict[tuple[Scope, str], list[ast.expr]] = {}
        self._index(tree, tree)

    def define_functions(self) -> None:
        """Note the top-level functions, which the later stages follow calls into. Done once
        the bare bases are known (:class:`.values.Values`): a base is what a name is given
        directly, never what a function returns."""
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[stmt.name] = stmt

    def _index(self, node: ast.AST, scope: Scope) -> None:
        self._globals: list[tuple[Scope, str]] = []
        self._walk(node, scope)
        for sc, name in self._globals:  # ``global NAME`` in a function: the module's NAME
            values = self.assigns.get(sc, {}).pop(name, [])
            self.assigns.setdefault(self.tree, {}).setdefault(name, []).extend(values)

    def _walk(self, node: ast.AST, scope: Scope) -> None:
        stack: list[tuple[ast.AST, Scope]] = [(node, scope)]
        while stack:
            current, sc = stack.pop()
            self.scope_of[current] = sc
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner: Scope = current
            else:
                inner = sc
            if type(current) not in _PLAIN:  # (a plain node: nothing to note but its place)
                note = self._NOTES.get(type(current))
                if note is not None:
                    note(self, current, sc, inner)
                if isinstance(current, ast.If) and _dotted(current.test).endswith("TYPE_CHECKING"):
                    continue  # annotations only: never run
            for child in ast.iter_child_nodes(current):
                if type(child) not in _LEAVES:
                    self.parent[child] = current
                    stack.append((child, inner))

    # One method per kind of node the index notes something of (:data:`_NOTES`): each is
    # given the node, the scope it lies in, and the scope its children lie in.

    def _note_assign(self, node: ast.Assign | ast.AnnAssign, sc: Scope, _inner: Scope) -> None:
        if node.value is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in targets):
            self.item_sets.append(node)
        for target in targets:
            self._note_target(target, node.value, sc)

    def _note_target(self, target: ast.expr, value: ast.expr, sc: Scope) -> None:
        if isinstance(target, ast.Name):
            self.assigns.setdefault(sc, {}).setdefault(target.id, []).append(value)
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
        ):  # ``a, b = os.getenv("A"), os.getenv("B")``
            for name, each in zip(target.elts, value.elts, strict=True):
                if isinstance(name, ast.Name):
                    self.assigns.setdefault(sc, {}).setdefault(name.id, []).append(each)
        elif isinstance(target, ast.Tuple | ast.List):
            self._unfollowable(sc, target)
        elif isinstance(target, ast.Attribute) and _dotted(target.value) == "self":
            owner = self.owner(sc)  # ``self.NAME = value`` in a method
            if owner is not None:
                self.attributes.setdefault((owner, target.attr), []).append(value)

    def _note_global(self, node: ast.Global, sc: Scope, _inner: Scope) -> None:
        if sc is not self.tree:
            self._globals += [(sc, name) for name in node.names]

    def _note_named(self, node: ast.NamedExpr, sc: Scope, _inner: Scope) -> None:
        self.assigns.setdefault(sc, {}).setdefault(node.target.id, []).append(node.value)

    def _note_with(self, node: ast.withitem, sc: Scope, _inner: Scope) -> None:
        self._unfollowable(sc, node.optional_vars)
        if isinstance(node.optional_vars, ast.Name):
            self.with_values[(sc, node.optional_vars.id)] = node.context_expr

    def _note_import_from(self, node: ast.ImportFrom, _sc: Scope, _inner: Scope) -> None:
        module = absolute(self.name, self.file, node.level, node.module)
        for alias in node.names if module else ():
            self.imported[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _note_import(self, node: ast.Import, _sc: Scope, _inner: Scope) -> None:
        self.modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        for a in node.names:
            local = a.asname or a.name.split(".")[0]
            self.module_names[local] = a.name if a.asname else local

    def _note_rebind(
        self, node: ast.AugAssign | ast.For | ast.AsyncFor, sc: Scope, _inner: Scope
    ) -> None:
        self._unfollowable(sc, node.target)
        if not isinstance(node, ast.AugAssign):
            self._iterates(sc, node.target, node.iter)
        elif isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add):
            self.more.setdefault((sc, node.target.id), []).append(node.value)

    def _note_class(self, node: ast.ClassDef, sc: Scope, _inner: Scope) -> None:
        if sc is self.tree:
            self.classes[node.name] = node
        self.methods[node] = {
            f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        }

    def _note_comprehension(self, node: ast.comprehension, sc: Scope, _inner: Scope) -> None:
        self._iterates(sc, node.target, node.iter)

    def _note_arguments(self, node: ast.arguments, _sc: Scope, inner: Scope) -> None:
        for arg in (*node.posonlyargs, *node.args, *node.kwonlyargs):
            self._unfollowable(inner, ast.Name(arg.arg, ast.Store()))
            self.params[(inner, arg.arg)] = arg

    def _note_name(self, node: ast.Name, _sc: Scope, _inner: Scope) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loads.setdefault(node.id, []).append(node)
            if self._imported_read(node.id) is not None:
                self.candidates.append(node)

    def _note_attribute(self, node: ast.Attribute, _sc: Scope, _inner: Scope) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.attr in USER_CACHE or node.attr in LAYOUT_NAMES:
            self.candidates.append(node)
        elif node.attr in ("content", "raw"):
            self.in_memory.append(node)

    def _note_call(self, node: ast.Call, sc: Scope, _inner: Scope) -> None:
        self.candidates.append(node)
        if isinstance(node.func, ast.Name):
            self.calls.setdefault(node.func.id, []).append(node)
        elif isinstance(node.func, ast.Attribute):
            self._grows(sc, node)

    def _note_subscript(self, node: ast.Subscript, _sc: Scope, _inner: Scope) -> None:
        self.candidates.append(node)

    def _note_constant(self, node: ast.Constant, _sc: Scope, _inner: Scope) -> None:
        value = node.value
        if isinstance(value, str) and (
            value.startswith(("~/", *TMP_PREFIXES)) or value in TMP_DIRS
        ):
            self.candidates.append(node)
        elif value == IPC_SCHEME:
            part = _after(node, self.parent.get(node))
            if part is not None:
                self.ipc_addresses.append(part)

    #: What the index notes of each kind of node (:meth:`_walk`); other kinds only hold others.
    _NOTES: ClassVar[dict[type[ast.AST], Callable[..., None]]] = {
        ast.Assign: _note_assign,
        ast.AnnAssign: _note_assign,
        ast.Global: _note_global,
        ast.NamedExpr: _note_named,
        ast.withitem: _note_with,
        ast.ImportFrom: _note_import_from,
        ast.Import: _note_import,
        ast.AugAssign: _note_rebind,
        ast.For: _note_rebind,
        ast.AsyncFor: _note_rebind,
        ast.ClassDef: _note_class,
        ast.comprehension: _note_comprehension,
        ast.arguments: _note_arguments,
        ast.Name: _note_name,
        ast.Attribute: _note_attribute,
        ast.Call: _note_call,
        ast.Subscript: _note_subscript,
        ast.Constant: _note_constant,
    }

    def helper(self, node: ast.Call) -> bool:
        """Whether ``node`` calls a function of another module, which the audit does not read
        (``from demo.paths import default_root``; ``demo_paths.default_root()``)."""
        func = node.func
        if isinstance(func, ast.Name):
            source = self.imported.get(func.id, "")
            return bool(source) and source.split(".")[0] not in _ALIAS_ROOTS
        root = _dotted(func).split(".")[0]
        return root in self.modules and root not in _ALIAS_ROOTS and root not in _STDLIB_ROOTS

    def _grows(self, scope: Scope, call: ast.Call) -> None:
        """``NAME.append(x)``, ``.extend(xs)``, ``.insert(i, x)``: ``x`` is one more value."""
        func = call.func
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
            return
        index = {"append": 0, "extend": 0, "insert": 1}.get(func.attr)
        if index is not None and len(call.args) > index:
            self.more.setdefault((scope, func.value.id), []).append(call.args[index])

    def owner(self, scope: Scope) -> ast.ClassDef | None:
        """The class ``scope`` is a method of."""
        parent = self.parent.get(scope) if not isinstance(scope, ast.Module) else None
        return parent if isinstance(parent, ast.ClassDef) else None

    def _local(self, name: str, scope: Scope) -> bool:
        return any(name in self.assigns.get(sc, {}) for sc in (scope, self.tree))

    def _iterates(self, scope: Scope, target: ast.AST, over: ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.iterables.setdefault((scope, node.id), []).append(over)

    def _unfollowable(self, scope: Scope, target: ast.AST | None) -> None:
        """Names bound in a way whose value cannot be followed (parameters, loops, ``+=``)."""
        if target is None:
            return
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.assigns.setdefault(scope, {}).setdefault(node.id, []).extend(
                    [UNFOLLOWED, UNFOLLOWED]  # two values: never followed as one
                )

    def value_of(self, name: str, scope: Scope) -> ast.expr | None:
        """The one value ``name`` is given in ``scope`` (else at module level), or ``None``."""
        for sc in (scope, self.tree):
            values = self.assigns.get(sc, {}).get(name)
            if values is not None:
                return values[0] if len(values) == 1 else None
        return None

    def values_of(self, name: str, scope: Scope) -> list[ast.expr] | None:
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

    def _imported_read(self, name: str) -> str | None:
        """A layout variable imported from a project's ``envs`` module (vLLM's ``from vllm.envs
        import VLLM_CACHE_ROOT``): a read of that variable wherever it is used."""
        source = self.imported.get(name, "")
        module, _, attr = source.rpartition(".")
        if attr in LAYOUT_NAMES and module.rpartition(".")[2] in ENVS_MODULES:
            return attr if module not in LAYOUT_MODULES else None
        return None


def _after(node: ast.Constant, parent: ast.AST | None) -> ast.expr | None:
    """The part that follows ``node`` in the string ``parent`` builds (``node + part``,
    ``f"{node}{part}"``), if any."""
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add) and parent.left is node:
        return parent.right
    if isinstance(parent, ast.JoinedStr) and len(parent.values) > 1 and parent.values[0] is node:
        after = parent.values[1]
        return after.value if isinstance(after, ast.FormattedValue) else None
    return None
