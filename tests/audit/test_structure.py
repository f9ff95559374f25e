"""The static audit is a one-way pipeline: each module imports only those of earlier stages.

The import graph is read from the sources with :mod:`ast` (nothing is imported), counting every
import wherever it is: at the top, inside a function, under ``if TYPE_CHECKING:``. A function-local
import that closes a circle only postpones it to the first call, and a type-only import of a later
stage says the earlier one knows about it: both would undo the order. The order is written out
here, so that a new stage, or a module moved between stages, shows up in review as a change to
this file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "cacheroot.envs._audit"
SOURCES = ROOT / "packages/envs/src/cacheroot/envs/_audit"

#: The stages, first to last: each module may import the ones before it, never one after it.
STAGES = (
    "names",  # the shared vocabulary
    "limits",  # every depth limit, named once
    "sources",  # read: installed distributions, wheels, sdists, source trees
    "index",  # index: one parsed file's scopes, assignments, imports, definitions
    "platforms",  # which platforms a branch runs on
    "reads",  # what a node reads: environment variables, constants, bare bases
    "values",  # what an expression is, rendered
    "modules",  # where a name leads in the package's other modules
    "writes",  # which calls write, download or fetch, and which path
    "kinds",  # the class of a location, from its words and sink
    "variables",  # what a variable's name and default say: a place, a cache, a value, a switch
    "summaries",  # per function: what a result depends on, which parameters reach a write
    "downloaders",  # the known downloaders, and what to call instead of a download
    "findings",  # what is reported
    "direct",  # findings read off the syntax directly
    "places",  # one module's reads and fixed places
    "reach",  # values followed into writes
    "fallbacks",  # fixed places tied and folded into their variable's finding
    "visitor",  # one module's findings, classified
    "analysis",  # a package's files analysed, every write followed across its modules
    "scan",  # every source read, analysed and counted
    "gate",  # the verdict against the layout
    "report",  # the text, the JSON, the command
)
#: The package itself re-exports the command and the entry points: it comes after every stage.
FACE = "__init__"
#: What the audit may import of the project outside its own package.
OUTSIDE = frozenset({"_cacheroot_layout", "cacheroot.envs._readers"})


def imports(source: str, module: str, package: str, modules: set[str]) -> set[str]:
    """The modules ``module`` (of ``package``) imports anywhere in ``source``: ours by their
    short name (the package itself as :data:`FACE`), others in full."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # ``__init__`` is the package itself: one level up is the package.
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                absolute = ".".join([*base, *([node.module] if node.module else [])])
            else:
                absolute = node.module or ""
            subs = [f"{absolute}.{alias.name}" for alias in node.names]
            ours = [s for s in subs if s == package or s.removeprefix(package + ".") in modules]
            # The rest are attributes of ``absolute``, or modules ``from .. import x`` names.
            rest = [absolute] if node.module else [s for s in subs if s not in ours]
            targets = ours + (rest if len(ours) < len(subs) else [])
        else:
            continue
        for target in targets:
            short = target.removeprefix(package + ".")
            if short in modules:
                found.add(short)
            elif target == package:
                found.add(FACE)
            else:
                found.add(target)
    found.discard(module)
    return found


def import_graph(directory: Path, package: str) -> dict[str, set[str]]:
    """Module (by short name, the package as :data:`FACE`) -> what it imports."""
    files = {p.stem: p for p in sorted(directory.glob("*.py"))}
    modules = set(files)
    return {
        name: imports(path.read_text(encoding="utf-8"), name, package, modules)
        for name, path in files.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle among the graph's own modules (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, set()) & set(graph)):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def backward(graph: dict[str, set[str]], order: tuple[str, ...]) -> list[str]:
    """Every import of a stage that is not earlier than the importer, as ``a -> b``."""
    rank = {name: i for i, name in enumerate((*order, FACE))}
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if target in rank and rank[target] >= rank[module]
    )


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(SOURCES, PACKAGE)


def test_every_module_is_a_stage(graph: dict[str, set[str]]) -> None:
    assert set(graph) == {*STAGES, FACE}
    assert len(set(STAGES)) == len(STAGES)


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_each_stage_imports_only_earlier_stages(graph: dict[str, set[str]]) -> None:
    assert backward(graph, STAGES) == []
    # The graph is the real one: these edges exist.
    assert "index" in graph["values"]
    assert "summaries" in graph["places"]
    assert graph["sources"] & set(STAGES) == set()


def test_the_audit_imports_nothing_else_of_the_project(graph: dict[str, set[str]]) -> None:
    ours = {
        target
        for targets in graph.values()
        for target in targets
        if target.startswith(("cacheroot", "_cacheroot"))
    }
    assert ours <= OUTSIDE


def test_the_checks_see_local_and_type_only_imports(tmp_path: Path) -> None:
    package = "cacheroot.demo._pipe"
    (tmp_path / "__init__.py").write_text("from .b import thing\n")
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import thing\n"
    )
    (tmp_path / "b.py").write_text("def thing():\n    from . import a\n    from .. import x\n")
    graph = import_graph(tmp_path, package)
    assert graph == {"__init__": {"b"}, "a": {"b", "typing"}, "b": {"a", "cacheroot.demo.x"}}
    assert find_cycle(graph) == ["b", "a", "b"]
    assert backward(graph, ("a", "b")) == ["a -> b"]
    (tmp_path / "a.py").write_text("from cacheroot.demo import _pipe\n")
    assert backward(import_graph(tmp_path, package), ("a", "b")) == ["a -> __init__"]


#: A depth limit's name: how deep, how many hops, rounds or parents a walk goes.
_LIMIT = re.compile(r"_(DEPTH|HOPS|ROUNDS|PARENTS)$")


def test_depth_limits_are_named_once_in_limits() -> None:
    defined: dict[str, list[str]] = {}
    for path in sorted(SOURCES.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and _LIMIT.search(target.id):
                    defined.setdefault(path.stem, []).append(target.id)
    assert set(defined) == {"limits"}, defined
    texts = {p.stem: p.read_text(encoding="utf-8") for p in SOURCES.glob("*.py")}
    unused = [
        name
        for name in defined["limits"]
        if not any(re.search(rf"\b{name}\b", t) for s, t in texts.items() if s != "limits")
    ]
    assert unused == []
