"""The static audit over one distribution at a time: values followed across its modules.

A location is often decided in one module and used in another: a directory function in
``config.py`` whose result a download in ``http.py`` lands in, a constant imported relatively
(``from .utils import CACHE_DIR``), a module read by attribute (``config.CACHE``). Each
distribution is read as a :class:`Package`: its modules are named from their paths, imports
(relative ones too) resolve to the package's own modules, and every write or download of every
module is followed back through them (:func:`._audit_flow.origins`) to the place its path comes
from, in whichever module that lies.

Writes are found three ways: a call that writes or downloads into a path
(:func:`._audit_flow.sink_paths`, :func:`._audit_flow.download_paths`); a call of a function of
the package whose parameter reaches such a write inside it (each function's parameters are
summarised first, a few rounds deep); and a write inside a function that fetches from the
network, which makes it a download.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ._audit_ast import Finding, Unfollowed, _Module, _Visitor, canonical
from ._audit_downloaders import KnownDownload, known_downloads
from ._audit_flow import (
    FETCHED,
    PER_RUN,
    SINK_RANK,
    WRITE,
    bind,
    download_paths,
    fetches,
    origins,
    per_run,
    sink_paths,
)
from ._audit_names import dotted

if TYPE_CHECKING:
    from collections.abc import Iterable

#: A sink: the call, the path it writes, the kind of sink, how.
Sink = tuple[ast.Call, ast.expr, str, str]
_Function = ast.FunctionDef | ast.AsyncFunctionDef
#: How many times a parameter's write is carried to the callers of its function.
_ROUNDS = 3


def module_name(file: str) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; ``pkg/__init__.py`` -> ``pkg``."""
    parts = file.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class Package:
    """The Python files of one distribution (or source tree), parsed when first needed.

    ``own`` says the files are a source tree given to the audit: code of one's own, whose
    downloads the report tells how to rewrite (an installed library's cannot be).
    """

    def __init__(
        self, dist: str, version: str, sources: dict[str, bytes], *, own: bool = False
    ) -> None:
        self.dist, self.version = dist, version
        self.own = own
        self.data = sources
        self.files = {module_name(f): f for f in sources}
        #: A module also by every dotted tail of its name (``src.demo.x`` as ``demo.x``), when
        #: no other module has that tail.
        self._tails: dict[str, str | None] = {}
        for name in self.files:
            parts = name.split(".")
            for i in range(1, len(parts)):
                tail = ".".join(parts[i:])
                self._tails[tail] = None if tail in self._tails else name
        self._loaded: dict[str, _Module | None] = {}
        self.unparsable: list[str] = []

    def module(self, name: str) -> _Module | None:
        """The module ``name`` of the package, parsed and indexed (``None``: none, or it does
        not parse)."""
        if name not in self._loaded:
            file = self.files[name]
            try:
                tree = ast.parse(self.data[file], filename=file)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self.unparsable.append(file)
                self._loaded[name] = None
            else:
                self._loaded[name] = _Module(canonical(tree), file, name, self)
        return self._loaded[name]

    def find(self, name: str) -> str | None:
        """The package's module called ``name`` (in full, or by a tail only it has)."""
        if name in self.files:
            return name
        return self._tails.get(name)

    def symbol(self, name: str) -> tuple[_Module, str] | None:
        """``(module, attribute)`` for ``pkg.mod.attr``; ``(module, "")`` for ``pkg.mod``."""
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            found = self.find(".".join(parts[:i]))
            if found is None:
                continue
            rest = parts[i:]
            module = self.module(found)
            if module is None or len(rest) > 1:
                return None
            return module, rest[0] if rest else ""
        return None


def analyse_package(
    package: Package, files: Iterable[str]
) -> tuple[list[Finding], list[Unfollowed]]:
    """Every finding of ``files`` (modules of ``package``), by file and line, with every write
    of the package followed, and what could not be followed."""
    visitors: dict[int, _Visitor] = {}
    for file in files:
        module = package.module(module_name(file))
        if module is not None:
            visitor = _Visitor(module, package.dist, package.version, file)
            visitors[id(module)] = visitor
            visitor.collect()
    known: dict[int, list[Sink]] = {}
    names: set[str] = set()
    summaries = _summaries(list(visitors.values()), known, names)
    for visitor in list(visitors.values()):
        for call, path, sink, how in _sinks(visitor, summaries, known, names):
            scope = visitor.m.scope_of.get(call, visitor.m.tree)
            for module, leaf in origins(visitor.m, path, scope):
                owner = visitors.get(id(module))
                if owner is None:  # a module parsed only to follow a value through it
                    owner = _Visitor(module, package.dist, package.version, module.file)
                    owner.collect()
                    visitors[id(module)] = owner
                owner.reached(leaf, call=call, path=path, sink=(sink, how), where=visitor)
    found: list[Finding] = []
    unfollowed: list[Unfollowed] = []
    for visitor in visitors.values():
        found += visitor.finish()
        unfollowed += visitor.unfollowed
    found.sort(key=lambda f: (f.file, f.line, f.variable or ""))
    unfollowed.sort(key=lambda u: (u.file, u.line, u.what))
    return found, unfollowed


def downloads(package: Package, files: Iterable[str]) -> list[KnownDownload]:
    """Every call of a known downloader in ``files`` (modules of ``package``), by file and
    line."""
    found: list[KnownDownload] = []
    for file in files:
        module = package.module(module_name(file))
        if module is not None:
            found += known_downloads(module, package.dist, package.version, file)
    return sorted(found, key=lambda d: (d.file, d.line))


#: Per function (by id), the parameters whose value reaches a write: name -> (kind, how).
Summaries = dict[int, dict[str, tuple[str, str]]]


def _direct(visitor: _Visitor, known: dict[int, list[Sink]]) -> list[Sink]:
    """The writes and downloads of a module's own calls; a write inside a function that
    fetches from the network is a download (remembered in ``known``, by module)."""
    m = visitor.m
    if id(m) in known:
        return known[id(m)]
    fetching: dict[int, bool] = {}
    out: list[Sink] = []
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
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


def _sinks(
    visitor: _Visitor, summaries: Summaries, known: dict[int, list[Sink]], names: set[str]
) -> list[Sink]:
    """A module's writes: its own, and the arguments it gives to a parameter of a function of
    the package that reaches a write (``names``: the names of such functions)."""
    m = visitor.m
    out = list(_direct(visitor, known))
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else dotted(func)
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


def _summaries(
    visitors: list[_Visitor], known: dict[int, list[Sink]], names: set[str]
) -> Summaries:
    """Which parameters of each function reach a write, carried :data:`_ROUNDS` calls deep
    (``names`` gains the names of those functions). Each round reads only what the rounds
    before it found, so that how far a write is carried does not depend on the order of the
    modules (a module read early would otherwise carry its callees' writes one call further
    in the same round)."""
    summaries: Summaries = {}
    for _ in range(_ROUNDS):
        changed = False
        before = {key: dict(summary) for key, summary in summaries.items()}
        named = set(names)
        for visitor in visitors:
            m = visitor.m
            for call, path, sink, how in _sinks(visitor, before, known, named):
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
