"""Findings read off one module's syntax directly, with no value followed to a write: test code
that overrides a layout variable, URLs fetched into memory on every call, temporary names made
anew on every run. Each comes with the node it was made at."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .downloaders import fetched_url
from .findings import Finding
from .kinds import is_test_file
from .names import ENVIRON, LAYOUT_NAMES, LAYOUT_OVERRIDE, THROWAWAY, UNCACHED_DOWNLOAD, call_name
from .names import dotted as _dotted
from .values import GETTEMPDIR
from .writes import fetched_in_memory, sink_paths

if TYPE_CHECKING:
    from .index import Scope
    from .modules import Module

#: A finding, and the node it was made at.
Noted = tuple[Finding, ast.AST]


#: ``tempfile`` makers of a named file or directory, and the position of their ``dir``.
_TEMP_MAKERS = {
    "mkdtemp": 2,
    "mkstemp": 2,
    "TemporaryDirectory": 2,
    "NamedTemporaryFile": 6,
}


def overrides(m: Module, dist: str, version: str, file: str) -> list[Noted]:
    """Test code that sets a layout variable: ``monkeypatch.setenv(NAME, ...)``,
    ``os.environ[NAME] = ...``, ``os.environ.update(...)``, ``mock.patch.dict(os.environ,
    ...)``, an ``env=`` mapping of a child: the layout's value is overridden."""
    test = is_test_file(file)
    if test:
        nodes: list[ast.AST] = [*m.item_sets, *m.candidates]
    else:  # outside test code, only monkeypatch's setenv says it is a test
        nodes = [n for n in m.candidates if isinstance(n, ast.Call) and call_name(n) == "setenv"]
    sets = [each for node in nodes for each in _sets(m, node, test=test)]
    if test:
        sets += env_entries(m)
    out: list[Noted] = []
    for name, value, _ in sets:
        if name not in LAYOUT_NAMES:
            continue
        scope = m.scope_of.get(value, m.tree)
        text = m.render(value, scope).text or "{...}"
        found = Finding(
            dist, version, file, value.lineno, name, text, "", (),
            kind=LAYOUT_OVERRIDE,
            reason=f"test code sets {name}: the layout's value is overridden",
        )  # fmt: skip
        out.append((found, value))
    return out


#: A variable set: its name, the value given, and the node that sets it.
_Set = tuple[str, ast.expr, ast.AST]


def _sets(m: Module, node: ast.AST, *, test: bool) -> list[_Set]:
    """The variables ``node`` sets: ``os.environ[NAME] = value`` (in test code), or a call."""
    scope = m.scope_of.get(node, m.tree)
    if isinstance(node, ast.Assign):
        return [
            (name, node.value, node)
            for target in node.targets
            if isinstance(target, ast.Subscript) and _dotted(target.value) in ENVIRON
            if (name := m.string(target.slice, scope)) is not None and test
        ]
    return _call_sets(m, node, scope, test=test) if isinstance(node, ast.Call) else []


def _call_sets(m: Module, node: ast.Call, scope: Scope, *, test: bool) -> list[_Set]:
    """The variables a call sets: ``setenv(NAME, value)`` (monkeypatch's anywhere), and in test
    code ``os.putenv``, ``os.environ.update(...)``, ``mock.patch.dict(os.environ, ...)``,
    ``monkeypatch.setitem(os.environ, NAME, value)``."""
    name_of = _dotted(node.func)
    args = node.args
    callee = call_name(node)
    if callee == "setenv" and len(args) > 1:
        return _named(m, node, scope, 0) if test or "monkeypatch" in name_of else []
    if not test:
        return []
    if name_of == "os.putenv" and len(args) > 1:
        return _named(m, node, scope, 0)
    if name_of == "os.environ.update":
        given = [each for value in args[:1] for each in mapping_entries(m, value, scope)]
        return given + [(k.arg, k.value, node) for k in node.keywords if k.arg]
    if callee in ("dict", "setitem") and len(args) > 1 and _dotted(args[0]) in ENVIRON:
        setitem = callee == "setitem" and len(args) > 2  # (else ``patch.dict(os.environ, {...})``)
        return _named(m, node, scope, 1) if setitem else mapping_entries(m, args[1], scope)
    return []


def _named(m: Module, node: ast.Call, scope: Scope, at: int) -> list[_Set]:
    """The variable the argument ``at`` of a call names, set to the argument after it."""
    name = m.string(node.args[at], scope)
    return [(name, node.args[at + 1], node)] if name is not None else []


def env_entries(m: Module) -> list[tuple[str, ast.expr, ast.AST]]:
    """``(name, value, node)`` of every entry of an ``env=`` mapping given to a call (a
    dict literal, directly or through a name, or ``dict(..., NAME=value)``)."""
    out: list[tuple[str, ast.expr, ast.AST]] = []
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "env":
                continue
            scope = m.scope_of.get(node, m.tree)
            value: ast.expr | None = keyword.value
            if isinstance(value, ast.Name):
                value = m.value_of(value.id, scope)
            out += mapping_entries(m, value, scope)
    return out


def mapping_entries(
    m: Module, value: ast.expr | None, scope: Scope
) -> list[tuple[str, ast.expr, ast.AST]]:
    """``(name, value, node)`` of each entry of a mapping literal or ``dict(NAME=value)``."""
    out: list[tuple[str, ast.expr, ast.AST]] = []
    if isinstance(value, ast.Dict):
        for key, item in zip(value.keys, value.values, strict=True):
            name = m.string(key, scope) if key is not None else None
            if name is not None:
                out.append((name, item, value))
    elif isinstance(value, ast.Call) and call_name(value) == "dict":
        out += [(k.arg, k.value, value) for k in value.keywords if k.arg]
    return out


def uncached(m: Module, dist: str, version: str, file: str) -> list[Noted]:
    """URLs read into memory (or an anonymous file) on every call, where the function
    writes no file that could keep them."""

    writing: set[int] = set()
    for node in m.candidates:
        if isinstance(node, ast.Call) and sink_paths(node, _dotted(node.func)):
            writing.add(id(m.scope_of.get(node, m.tree)))
    out: list[Noted] = []
    calls = [n for n in m.candidates if isinstance(n, ast.Call)]
    for each in [*m.in_memory, *calls]:
        url = fetched_in_memory(m, each)
        scope = m.scope_of.get(each, m.tree)
        if url is None or id(scope) in writing:
            continue
        text = m.render(url, scope).text
        line = getattr(url, "lineno", 0) or getattr(each, "lineno", 0)  # where it is fetched
        found = Finding(
            dist, version, file, line, None, text, "", (),
            kind=UNCACHED_DOWNLOAD,
            reason="fetched from the network on every call: no cache keeps it",
        )  # fmt: skip
        if m.package is not None and m.package.own:
            found.fetched = fetched_url(m, url, line)
        out.append((found, each))
    return out


def temporary(m: Module, dist: str, version: str, file: str) -> list[Noted]:
    """A temporary file or directory made in the system temporary directory (no ``dir=``):
    a new name on every run, listed as ``throwaway``."""
    out: list[Noted] = []
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        where = _TEMP_MAKERS.get(name.removeprefix("tempfile."))
        if where is None or not (name.startswith("tempfile.") or name in m.imported):
            continue
        given = next((k.value for k in node.keywords if k.arg == "dir"), None)
        if given is None and len(node.args) > where:
            given = node.args[where]
        if given is not None and not (isinstance(given, ast.Constant) and given.value is None):
            continue  # made inside a place of its own, found where that place is
        found = Finding(
            dist, version, file, node.lineno, None,
            f"$TMPDIR/{{{name.rpartition('.')[2]}()}}", "$TMPDIR", (GETTEMPDIR,),
            kind=THROWAWAY, reason="a temporary name made anew on every run",
        )  # fmt: skip
        out.append((found, node))
    return out
