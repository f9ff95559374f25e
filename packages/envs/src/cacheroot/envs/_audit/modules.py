"""The modules of one distribution, and where their names lead: imports (relative ones too)
resolved to the package's own modules, calls to the functions they define, names to the values
other modules give them.

A location is often decided in one module and used in another: a directory function in
``config.py`` whose result a download in ``http.py`` lands in, a constant imported relatively
(``from .utils import CACHE_DIR``), a module read by attribute (``config.CACHE``). Each
distribution is read as a :class:`Package`, whose modules are parsed when first needed."""

from __future__ import annotations

import ast

from .index import UNFOLLOWED, Scope, canonical
from .limits import REEXPORT_HOPS
from .names import dotted as _dotted
from .values import Values

#: A leaf of :func:`.summaries.origins`: the module it lies in, and the node.
Leaf = tuple["Module", ast.AST]


def module_name(file: str) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; ``pkg/__init__.py`` -> ``pkg``."""
    parts = file.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class Module(Values):
    """A module of a package, asked where its names lead in the package's other modules."""

    def __init__(
        self, tree: ast.Module, file: str = "", name: str = "", package: Package | None = None
    ) -> None:
        #: The package whose other modules its names may name.
        self.package = package
        #: What each function returns, by function and depth (:func:`.summaries.origins`).
        self.returned: dict[tuple[int, int], tuple[Leaf, ...]] = {}
        super().__init__(tree, file, name)

    def instance_of(self, name: str, scope: Scope) -> tuple[Module, ast.ClassDef] | None:
        """The package's class ``name`` holds an instance of (``cache = Cache(...)``)."""
        values = self.values_of(name, scope) or []
        made = self.with_values.get((scope, name))
        if made is not None:
            values = [*values, made]
        if len(values) != 1 or not isinstance(values[0], ast.Call):
            return None
        return self._class_at(values[0].func, scope)

    def _class_at(self, func: ast.expr, scope: Scope) -> tuple[Module, ast.ClassDef] | None:
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

    def target(self, node: ast.AST, scope: Scope) -> tuple[Module, str] | None:
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

    def function_at(
        self, call: ast.Call, scope: Scope
    ) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
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
        return self._imported_function(func, scope)

    def _imported_function(
        self, func: ast.expr, scope: Scope
    ) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The function of another module of the package a called name is."""
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

    def reexport(self, attr: str) -> tuple[Module, str] | None:
        """Where a name this module imports from another module of the package is defined."""
        source = self.imported.get(attr)
        if source is None or self.package is None:
            return None
        found = self.package.symbol(source)
        return found if found is not None and found[1] else None

    def values_at(self, node: ast.AST, scope: Scope) -> tuple[Module, list[ast.expr]] | None:
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
        self._loaded: dict[str, Module | None] = {}
        self.unparsable: list[str] = []

    def module(self, name: str) -> Module | None:
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
                self._loaded[name] = Module(canonical(tree), file, name, self)
        return self._loaded[name]

    def find(self, name: str) -> str | None:
        """The package's module called ``name`` (in full, or by a tail only it has)."""
        if name in self.files:
            return name
        return self._tails.get(name)

    def symbol(self, name: str) -> tuple[Module, str] | None:
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
