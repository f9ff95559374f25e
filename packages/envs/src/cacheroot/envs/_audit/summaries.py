"""Per function, what its result depends on and which of its parameters reach a write.

:func:`origins` follows a path value back to where it may come from: environment reads, fixed
bases, ``__file__``, parameters, helpers that cannot be read; through every value a name is
given, in every branch, into the functions and constants of the package's other modules.
:func:`summarise` notes, per function, the parameters whose value reaches a write or a download
inside it, a few calls deep, so that a call of that function with a path is a write too."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from .index import returns
from .limits import ORIGIN_DEPTH, SUMMARY_ROUNDS
from .names import JOINERS, PATH_METHODS, WRAPPERS
from .names import dotted as _dotted
from .platforms import runs_on
from .writes import (
    FETCHED,
    PER_RUN,
    SINK_RANK,
    WRITE,
    download_paths,
    fetches,
    per_run,
    sink_paths,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .index import Scope
    from .modules import Leaf, Module


#: Methods of a string or a path that keep the place their object names.
_SAME_PLACE = frozenset({*PATH_METHODS, "with_name", "parent", "split", "strip", "rstrip"})


def origins(m: Module, node: ast.AST | None, scope: Scope) -> list[Leaf]:
    """Where a path value may come from: environment reads, fixed bases, ``__file__``, the
    parameters of the function it is in, calls to helpers that cannot be read (the leaves the
    walk stops at), over every branch and every value a name is given (``+=``, ``.append``,
    a loop over a list), into the functions and constants of the package's other modules.

    The answer does not depend on the order of the code: a node already followed is skipped
    only when it was reached in as few steps, and a function's returns are followed once per
    depth (:func:`_returned`) and given each call's own arguments, never skipped because
    another call of it was followed first. Each leaf once, in the order first found."""
    return list(_once(_origins(m, node, scope, 0, {})))


def _origins(
    m: Module, node: ast.AST | None, scope: Scope, depth: int, seen: dict[int, int]
) -> list[Leaf]:
    """:func:`origins` from ``depth`` steps on; ``seen``: the fewest steps each node (by id)
    was reached in by this walk. A node is followed again when reached in fewer, so that
    everything within :data:`ORIGIN_DEPTH` steps is found, whichever way was taken first."""
    if node is None or depth > ORIGIN_DEPTH or seen.get(id(node), depth + 1) <= depth:
        return []
    seen[id(node)] = depth
    d = depth + 1
    if isinstance(node, ast.Call):
        return _call_origins(m, node, scope, d, seen)
    if _leaf(m, node):
        return [(m, node)]
    if isinstance(node, ast.Name):
        return _name_origins(m, node, scope, d, seen)
    if isinstance(node, ast.Attribute):
        return _attribute_origins(m, node, scope, d, seen)
    parts = _PARTS.get(type(node))
    return [o for part in (parts(node) if parts else ()) for o in _origins(m, part, scope, d, seen)]


def _leaf(m: Module, node: ast.AST) -> bool:
    """Where the walk stops: an environment read, a bare base, a known reader's location, an
    absolute, home-relative or explicitly relative (``./x``) literal."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith(("/", "~", "./"))
    return m.env_read(node) is not None or m.base_call(node) or m.reader_call(node)


#: Values a path list is made longer with (``paths + [extra]``).
_LISTS = (ast.List, ast.Tuple, ast.ListComp, ast.Name, ast.Call)
#: Per kind of value, the parts whose origins are its own. Only the head of a path is where it
#: lies: ``base / name``, ``f"{base}/{user}"``, ``join(base, user)`` lie in ``base``; a variable
#: in a later part names a component. ``Path(__file__).parents[1]`` lies where its path does.
_PARTS: dict[type[ast.AST], Callable[[Any], list[ast.expr]]] = {
    ast.BinOp: lambda n: (
        [n.left, n.right]  # a list made longer
        if isinstance(n.op, ast.Add) and isinstance(n.right, _LISTS)
        else [n.left]
    ),
    ast.JoinedStr: lambda n: n.values[:1],
    ast.FormattedValue: lambda n: [n.value],
    ast.Starred: lambda n: [n.value],
    ast.IfExp: lambda n: [n.body, n.orelse],
    ast.BoolOp: lambda n: n.values,
    ast.List: lambda n: n.elts,
    ast.Tuple: lambda n: n.elts,
    ast.Set: lambda n: n.elts,
    ast.ListComp: lambda n: [n.elt],
    ast.GeneratorExp: lambda n: [n.elt],
    ast.SetComp: lambda n: [n.elt],
    ast.Subscript: lambda n: [n.value] if isinstance(n.value, ast.Attribute) else [],
}


def _attribute_origins(
    m: Module, node: ast.Attribute, scope: Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:
    """``self.NAME``: every value the class's methods give it; ``x.parent``: where ``x`` lies;
    a name another module of the package defines: its values there."""
    owner = m.owner(scope) if isinstance(node.value, ast.Name) and node.value.id == "self" else None
    if owner is not None:
        values = m.attributes.get((owner, node.attr), [])
        return [o for v in values for o in _origins(m, v, m.scope_of.get(v, m.tree), d, seen)]
    if node.attr in ("parent", "parents"):
        return _origins(m, node.value, scope, d, seen)
    found = m.values_at(node, scope)
    if found is None:
        return []
    other, values = found
    return [o for v in values for o in _origins(other, v, other.tree, d, seen)]


def _returned(
    m: Module, fn: ast.FunctionDef | ast.AsyncFunctionDef, depth: int
) -> tuple[Leaf, ...]:
    """The origins of everything ``fn`` (of ``m``) returns, from ``depth`` steps on: its own
    parameters among them, for each call to give its own arguments. Followed in a walk of its
    own, so that one call of a helper never hides another's, and kept on ``m`` by function and
    depth: what lies within the limit depends on nothing else. (A recursive call is followed
    like any other, each time a step deeper, until the limit.)"""
    key = (id(fn), depth)
    known = m.returned.get(key)
    if known is None:
        seen: dict[int, int] = {}
        known = _once([o for r in returns(fn) for o in _origins(m, r, fn, depth, seen)])
        m.returned[key] = known
    return known


def _once(leaves: list[Leaf]) -> tuple[Leaf, ...]:
    """Each leaf once, in the order first found."""
    kept: dict[tuple[int, int], Leaf] = {}
    for where, leaf in leaves:
        kept.setdefault((id(where), id(leaf)), (where, leaf))
    return tuple(kept.values())


def _platform_place(m: Module, value: ast.expr) -> bool:
    """Whether a name's value is a place of its own: a path built with a fixed part on one
    platform's branch (``join(home, "Library", "Caches")`` for macOS), from no variable
    read there (that read is the place)."""
    if isinstance(value, ast.Call):
        name = _dotted(value.func)
        if not (name in JOINERS or name in WRAPPERS or name.endswith("path.join")):
            return False
    elif not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div)):
        return False
    inside = list(ast.walk(value))
    if any(m.env_read(n) is not None for n in inside):
        return False
    fixed = any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in inside)
    return fixed and bool(runs_on(m, value))


def _name_origins(
    m: Module, node: ast.Name, scope: Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:
    if node.id == "__file__":
        return [(m, node)]
    out: list[Leaf] = []
    for value in m.values_of(node.id, scope) or ():
        out += _origins(m, value, m.scope_of.get(value, m.tree), d, seen)
        if _platform_place(m, value):
            out.append((m, value))
    for sc in (scope, m.tree):
        for value in m.more.get((sc, node.id), ()):
            out += _origins(m, value, sc, d, seen)
        for over in m.iterables.get((sc, node.id), ()):
            out += _origins(m, over, sc, d, seen)
    param = m.params.get((scope, node.id))
    if param is not None:
        out.append((m, param))
        default = _default_of(param, scope)
        if default is not None:  # the value it has when the caller gives none
            out += _origins(m, default, m.scope_of.get(default, m.tree), d, seen)
    if not out:
        found = m.values_at(node, scope)
        if found is not None:
            other, values = found
            out += [o for v in values for o in _origins(other, v, other.tree, d, seen)]
    return out


def _call_origins(
    m: Module, node: ast.Call, scope: Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:
    """Where the value of a call comes from: what a function of the package returns, an
    environment read, a base, the path a join or a method keeps, a helper that cannot be read."""
    called = m.function_at(node, scope)
    if called is not None:
        return _returned_here(m, node, scope, d, seen, called=called)
    read = m.env_read(node)
    if read is not None:
        out: list[Leaf] = [(m, node)]
        default = read.default
        if isinstance(default, ast.Call) and m.function_at(default, scope) is not None:
            # A default a function of the package computes: that function's places are
            # reached too (a default written inline is part of the read's own place).
            out += _origins(m, default, scope, d, seen)
        return out
    if m.base_call(node) or m.reader_call(node):
        return [(m, node)]
    return _kept_origins(m, node, scope, d, seen)


def _kept_origins(
    m: Module, node: ast.Call, scope: Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:
    """A call that keeps the place of its argument or object (a join, ``str()``,
    ``.resolve()``): where that lies; a helper of another module: the call itself."""
    name = _dotted(node.func)
    if name in JOINERS or name in WRAPPERS or name.endswith("path.join"):
        return _origins(m, node.args[0], scope, d, seen) if node.args else []
    if name in ("os.path.dirname", "os.fspath", "str", "list", "tuple", "sorted"):
        return [o for a in node.args[:1] for o in _origins(m, a, scope, d, seen)]
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _SAME_PLACE:
        return _origins(m, func.value, scope, d, seen)
    return [(m, node)] if m.helper(node) else []


def _returned_here(
    m: Module,
    node: ast.Call,
    scope: Scope,
    d: int,
    seen: dict[int, int],
    *,
    called: tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef],
) -> list[Leaf]:
    """The origins of what ``called`` returns, given this call's arguments; the call itself
    too where it names a place with a fixed name (a location function)."""
    other, fn = called
    given = dict(bind(node, fn))
    out = []
    for where, leaf in _returned(other, fn, d):
        if isinstance(leaf, ast.arg) and where.scope_of.get(leaf) is fn:
            # A parameter returned: what this call gives it (its default was followed).
            out += _origins(m, given.get(leaf.arg), scope, d, seen)
        else:
            out.append((where, leaf))
    first = node.args[0] if node.args else None
    if (
        isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and any(_a_place(where, leaf) for where, leaf in out)
    ):
        out.append((m, node))  # a location function given a fixed name: a place too
    return out


def bind(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    """``(parameter, argument)`` for each argument of ``call`` to ``fn``."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    out = [(p, a) for p, a in zip(params, call.args, strict=False)]
    out += [(k.arg, k.value) for k in call.keywords if k.arg]
    return out


def _default_of(param: ast.arg, fn: Scope) -> ast.expr | None:
    """The default value of a parameter of ``fn``, if it has one."""
    if isinstance(fn, ast.Module):
        return None
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    if param in positional:
        index = positional.index(param) - (len(positional) - len(args.defaults))
        return args.defaults[index] if index >= 0 else None
    if param in args.kwonlyargs:
        return args.kw_defaults[args.kwonlyargs.index(param)]
    return None


def _a_place(m: Module, leaf: ast.AST) -> bool:
    """Whether a leaf is a place: not a parameter, nor a helper that could not be read."""
    if isinstance(leaf, ast.arg):
        return False
    return not isinstance(leaf, ast.Call) or m.base_call(leaf) or m.reader_call(leaf)


Sink = tuple[ast.Call, ast.expr, str, str]
_Function = ast.FunctionDef | ast.AsyncFunctionDef


#: Per function (by id), the parameters whose value reaches a write: name -> (kind, how).
Summaries = dict[int, dict[str, tuple[str, str]]]


def _direct(m: Module, known: dict[int, list[Sink]]) -> list[Sink]:
    """The writes and downloads of a module's own calls; a write inside a function that
    fetches from the network is a download (remembered in ``known``, by module)."""
    if id(m) in known:
        return known[id(m)]
    fetching: dict[int, bool] = {}
    out: list[Sink] = []
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        found = sink_paths(node, name) + download_paths(node, name)
        if not found:
            continue
        scope = m.scope_of.get(node, m.tree)
        if id(scope) not in fetching:
            fetching[id(scope)] = not isinstance(scope, ast.Module) and fetches(m, scope)
        for path, sink, how in found:
            if sink == WRITE and per_run(m, path, scope):
                out.append((node, path, PER_RUN, f"{how}, under a name made on every run"))
            elif sink == WRITE and fetching[id(scope)]:
                out.append((node, path, FETCHED, f"{how} in a function that downloads"))
            else:
                out.append((node, path, sink, how))
    known[id(m)] = out
    return out


def sinks_of(
    m: Module, summaries: Summaries, known: dict[int, list[Sink]], names: set[str]
) -> list[Sink]:
    """A module's writes: its own, and the arguments it gives to a parameter of a function of
    the package that reaches a write (``names``: the names of such functions)."""
    out = list(_direct(m, known))
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else _dotted(func)
        if callee not in names:
            continue  # (resolving every call would read every module it names)
        called = m.function_at(node, m.scope_of.get(node, m.tree))
        if called is None:
            continue
        summary = summaries.get(id(called[1]))
        if not summary:
            continue
        for param, value in bind(node, called[1]):
            if param in summary:
                sink, how = summary[param]
                out.append((node, value, sink, f"{how}, through {called[1].name}({param}=)"))
    return out


def summarise(modules: list[Module], known: dict[int, list[Sink]], names: set[str]) -> Summaries:
    """Which parameters of each function reach a write, carried :data:`SUMMARY_ROUNDS` calls deep
    (``names`` gains the names of those functions). Each round reads only what the rounds
    before it found, so that how far a write is carried does not depend on the order of the
    modules (a module read early would otherwise carry its callees' writes one call further
    in the same round)."""
    summaries: Summaries = {}
    for _ in range(SUMMARY_ROUNDS):
        changed = False
        before = {key: dict(summary) for key, summary in summaries.items()}
        named = set(names)
        for m in modules:
            for call, path, sink, how in sinks_of(m, before, known, named):
                scope = m.scope_of.get(call, m.tree)
                for module, leaf in origins(m, path, scope):
                    if not isinstance(leaf, ast.arg):
                        continue
                    # The parameter's own function: that of the write, or a method that kept
                    # it in ``self`` (``__init__``).
                    owner = module.scope_of.get(leaf)
                    if not isinstance(owner, ast.FunctionDef | ast.AsyncFunctionDef):
                        continue
                    summary = summaries.setdefault(id(owner), {})
                    old = summary.get(leaf.arg)
                    if old is None or SINK_RANK[old[0]] < SINK_RANK[sink]:
                        summary[leaf.arg] = (sink, how)
                        names.add(owner.name)
                        made = module.owner(owner) if owner.name == "__init__" else None
                        if made is not None:  # ``Store(folder)`` calls ``Store.__init__``
                            names.add(made.name)
                        changed = True
        if not changed:
            break
    return summaries
