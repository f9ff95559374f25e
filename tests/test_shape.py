"""The shape of the code: no import circles, and public APIs that change only on purpose.

The import graph is read from the sources with :mod:`ast` (nothing is imported): every
``cacheroot.*`` module and every ``_cacheroot_*`` module of ``packages/*/src`` and
``sitecustomize/src``. An import counts wherever it is, at the top or inside a function, except
under ``if TYPE_CHECKING:``: a function-local import that closes a circle only postpones it to
the first call, so it is a circle too.

The ``__all__`` lists are written out here, so that a change to a public API shows up in review
as a change to this file.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _sources(roots: list[Path]) -> dict[str, Path]:
    """Module name -> file, for the project's own modules under ``roots``."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if parts and (parts[0] == "cacheroot" or parts[0].startswith("_cacheroot_")):
                found[name] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` that runs (``if TYPE_CHECKING:`` bodies skipped)."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _type_checking_only(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def import_graph(roots: list[Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports at run time."""
    sources = _sources(roots)
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                subs = [f"{module}.{alias.name}" for alias in node.names]
                targets = [s for s in subs if s in sources]
                if len(targets) < len(subs):  # some names are attributes of ``module`` itself
                    targets.append(module)
            for target in targets:
                # ``import a.b.c`` runs a.b.c: the deepest module of ours that it names.
                found = target
                while found and found not in sources:
                    found = found.rpartition(".")[0]
                if found and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def _roots() -> list[Path]:
    return [*sorted(ROOT.glob("packages/*/src")), ROOT / "sitecustomize" / "src"]


#: The hub wing (``cacheroot.fetch._hub``) builds on these modules of the download core, and on
#: nothing else of ``cacheroot.fetch``; only these modules outside the wing import it.
HUB_WING = "cacheroot.fetch._hub"
HUB_USES = {
    # A bucket as the shared tier: the hub's files travel through it (imported only then).
    "cacheroot.fetch._bucket.hub",
    "cacheroot.fetch._cli",
    "cacheroot.fetch._errors",
    # The volume's primitives: names renamed and removed in directories the store holds.
    "cacheroot.fetch._held",
    "cacheroot.fetch._httpvalues",
    "cacheroot.fetch._lock",
    "cacheroot.fetch._proc",
    "cacheroot.fetch._progress",
    "cacheroot.fetch._shared",
    "cacheroot.fetch._store",
}
HUB_SEAMS = {
    "cacheroot.fetch._plugin.hub",
    "cacheroot.fetch._plugin.offline",
    # A manifest with ``hub_cache = true``: warm asks the suite's metadata calls through a hub
    # cache on the volume's store, so that a run through the hub answers them with the Hub gone.
    "cacheroot.fetch._warm.hubanswers",
    # ``cacheroot cache prune`` and ``tier evict`` weigh the hub cache's store with the other
    # caches under the root, through the hub's own safe listing and removal.
    "cacheroot.fetch._upkeep.budget",
    "cacheroot.fetch._upkeep.survey",
}


def _in_wing(module: str, wing: str) -> bool:
    return module == wing or module.startswith(wing + ".")


def test_the_hub_wing_imports_the_core_only_and_is_reached_through_its_seams() -> None:
    graph = import_graph(_roots())
    wing = {m for m in graph if _in_wing(m, HUB_WING)}
    assert f"{HUB_WING}.server" in wing  # the graph is the real one
    uses = {
        target
        for module in wing
        for target in graph[module]
        if target.startswith("cacheroot.fetch") and not _in_wing(target, HUB_WING)
    }
    assert uses <= HUB_USES, sorted(uses - HUB_USES)
    callers = {
        module
        for module, targets in graph.items()
        if not _in_wing(module, HUB_WING) and any(_in_wing(t, HUB_WING) for t in targets)
    }
    assert callers == HUB_SEAMS


#: The wings of ``cacheroot.fetch``: private subpackages, one per concept, built on the download
#: core (the package's top-level modules). The core imports no wing; only the package itself (its
#: public API) imports the wings, and a wing imports another only through these seams.
WINGS = ("_hub", "_models", "_plugin", "_tier", "_upkeep", "_warm")
FETCH = "cacheroot.fetch"
SEAMS = {
    ("cacheroot.fetch._plugin.fixtures", "cacheroot.fetch._models.model"),
    ("cacheroot.fetch._plugin.fixtures", "cacheroot.fetch._models.snapshot"),
    ("cacheroot.fetch._plugin.hub", "cacheroot.fetch._hub.cli"),
    ("cacheroot.fetch._plugin.hub", "cacheroot.fetch._hub.service"),
    ("cacheroot.fetch._plugin.offline", "cacheroot.fetch._hub.service"),
    ("cacheroot.fetch._plugin.offline", "cacheroot.fetch._warm.warm"),
    ("cacheroot.fetch._tier.cli", "cacheroot.fetch._upkeep.budget"),
    ("cacheroot.fetch._tier.cli", "cacheroot.fetch._upkeep.survey"),
    ("cacheroot.fetch._tier.layers", "cacheroot.fetch._upkeep.in_use"),
    ("cacheroot.fetch._upkeep.budget", "cacheroot.fetch._hub.prune"),
    ("cacheroot.fetch._upkeep.survey", "cacheroot.fetch._hub.prune"),
    ("cacheroot.fetch._upkeep.cli", "cacheroot.fetch._warm.manifest"),
    ("cacheroot.fetch._upkeep.cli", "cacheroot.fetch._warm.warm"),
    # ``hub_cache = true``: the warm asks through a hub cache (found or started) and writes the
    # answers that pin a branch to the warmed commit; the Hub's API stays the hub wing's.
    ("cacheroot.fetch._warm.hubanswers", "cacheroot.fetch._hub.answers"),
    ("cacheroot.fetch._warm.manifest", "cacheroot.fetch._models.model"),
}


def _wing_of(module: str) -> str | None:
    """The wing ``module`` belongs to; ``None`` for the core, the package and other packages."""
    parts = module.split(".")
    if module.startswith(FETCH + ".") and parts[2] in WINGS:
        return parts[2]
    return None


def test_the_wings_import_the_core_and_each_other_only_through_named_seams() -> None:
    graph = import_graph(_roots())
    wings = {w for m in graph if (w := _wing_of(m)) is not None}
    assert wings == set(WINGS)  # the graph is the real one: every wing has modules
    crossing = {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if _wing_of(target) is not None
        and _wing_of(module) != _wing_of(target)
        and module != FETCH  # the public API imports what it exports
    }
    assert crossing == SEAMS, (sorted(crossing - SEAMS), sorted(SEAMS - crossing))
    core = {m for m in graph if m.startswith(FETCH + ".") and _wing_of(m) is None}
    assert {"cacheroot.fetch._fetcher", "cacheroot.fetch._shared", "cacheroot.fetch.store"} <= core


@pytest.mark.parametrize("wing", WINGS)
def test_each_wing_says_what_it_owns_and_what_it_may_import(wing: str) -> None:
    init = ROOT / "packages/fetch/src/cacheroot/fetch" / wing / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    assert "What it may import" in doc, f"{init}: the docstring says what the wing may import"
    for module, target in SEAMS:
        if _wing_of(module) == wing:
            seam = "." + target.removeprefix(FETCH)
            assert seam in doc, f"{init}: the docstring names the seam {seam}"


def test_no_import_circles() -> None:
    graph = import_graph(_roots())
    # The graph is the real one: these modules and edges exist.
    assert {"cacheroot.fetch", "cacheroot.fetch._upkeep.cache", "_cacheroot_layout"} <= set(graph)
    assert "cacheroot.fetch._warm.warm" in graph["cacheroot.fetch._upkeep.cli"]
    assert "cacheroot.fetch.store" in graph["cacheroot.mediacache._store"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_the_circle_finder_sees_local_imports_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "cacheroot" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text("from ._b import thing\n")
    (pkg / "_b.py").write_text("def thing():\n    from . import _c\n")
    (pkg / "_c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import x\n"
    )
    graph = import_graph([tmp_path])
    assert graph["cacheroot.demo._a"] == {"cacheroot.demo._b"}
    assert graph["cacheroot.demo._b"] == {"cacheroot.demo._c"}
    assert graph["cacheroot.demo._c"] == set()
    assert find_cycle(graph) is None
    (pkg / "_c.py").write_text("import cacheroot.demo._a\n")
    cycle = find_cycle(import_graph([tmp_path]))
    assert cycle == [
        "cacheroot.demo._a",
        "cacheroot.demo._b",
        "cacheroot.demo._c",
        "cacheroot.demo._a",
    ]


PUBLIC = {
    "cacheroot.fetch": [
        "ArchiveError",
        "Asset",
        "CacheMissError",
        "ChecksumError",
        "DownloadError",
        "EmptyDownloadError",
        "FetchError",
        "FetchEvent",
        "Fetcher",
        "LockTimeout",
        "Manifest",
        "ManifestError",
        "Model",
        "SnapshotReport",
        "UnpinnedRevisionWarning",
        "build_once",
        "built_path",
        "cache_dir",
        "check_snapshot",
        "default_fetcher",
        "extract",
        "fetch",
        "load_manifest",
        "offline_snapshot_path",
        "parse_manifest",
        "reset_stats",
        "stats",
        "warm_manifest",
        "warm_snapshot",
    ],
    "cacheroot.fetch.store": [
        "MAX_RECORD",
        "SHARED_DIR",
        "SHARED_FILE",
        "NotRegularFileError",
        "Partial",
        "PathLock",
        "Secret",
        "Staging",
        "atomic_write",
        "check_filename",
        "check_namespace",
        "current_meta",
        "entry_name",
        "entry_path",
        "extract_entry",
        "forget_locals",
        "forgets_locals",
        "fsync_dir",
        "holder",
        "kind",
        "lock_path",
        "open_regular",
        "open_regular_stat",
        "parse_http_date",
        "partial_abandoned",
        "partials",
        "printable",
        "publish_dir",
        "read_meta",
        "redact_url",
        "remove_abandoned",
        "remove_planted",
        "retry_after",
        "sha256_file",
        "staged_dir",
        "touch_used",
        "write_meta",
    ],
    "cacheroot.mediacache": [
        "MediaCache",
        "MediaCacheError",
        "ResponseTooLarge",
        "URLRefused",
        "acached_or",
        "cached_or",
        "entry_name",
        "freshness_lifetime",
        "normalise_url",
        "not_storable",
        "parse_cache_control",
        "reset_stats",
        "stats",
        "url_key",
    ],
    "cacheroot.envs": [
        "BUILDKITE",
        "BUILDKITE_PARALLEL_JOB",
        "BUILDKITE_PARALLEL_JOB_COUNT",
        "CACHEROOT",
        "CACHEROOT_APPLIED",
        "CACHEROOT_AUDIT",
        "CACHEROOT_AUDIT_ALLOW",
        "CACHEROOT_AUDIT_DIR",
        "CACHEROOT_AUDIT_REPORT",
        "CACHEROOT_AUTH_TOKENS",
        "CACHEROOT_DISABLE",
        "CACHEROOT_HUB_KEY_FILE",
        "CACHEROOT_HUB_OWNER",
        "CACHEROOT_MEDIA_CACHE",
        "CACHEROOT_MIRRORS",
        "CACHEROOT_OFFLINE",
        "CACHEROOT_OPT_IN",
        "CACHEROOT_PIN_FILE",
        "CACHEROOT_SCENARIO_ORIGIN",
        "CACHEROOT_SCENARIO_ROOT",
        "CACHEROOT_SHARED",
        "CACHEROOT_SHARED_MODE",
        "CACHEROOT_TAG",
        "CACHEROOT_VERIFY",
        "CI",
        "DEFAULT_SOURCE",
        "DERIVED",
        "EXPLICIT",
        "FORMATS",
        "GITHUB_STEP_SUMMARY",
        "HF_ENDPOINT",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "INVALID",
        "LEGACY",
        "MODELSCOPE_CACHE",
        "MODELSCOPE_DOMAIN",
        "MODELSCOPE_ENDPOINT",
        "OPT_IN_OFF",
        "PINNED",
        "PIN_FILE",
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "SECRET_ENDINGS",
        "SECRET_NAMES",
        "SECRET_PARTS",
        "TABLE",
        "TAGS",
        "VLLM_CACHE_ROOT",
        "VLLM_MEDIA_CACHE",
        "VLLM_MEDIA_CACHE_MAX_SIZE_MB",
        "VLLM_MEDIA_CACHE_TTL_HOURS",
        "VLLM_TEST_CACHE",
        "VLLM_TEST_CACHE_LEGACY",
        "VLLM_TEST_CACHE_ONLY",
        "XDG_CACHE_HOME",
        "Layout",
        "Setting",
        "Variable",
        "apply",
        "docker_args",
        "export",
        "hook",
        "path_problem",
        "pin_path",
        "read_pin",
        "resolve",
        "secret_name",
        "secret_variable",
        "shared_root",
        "truthy",
    ],
    "cacheroot.envs.units": ["format_age", "format_size", "parse_age", "parse_size"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_api_is_what_this_file_says(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == PUBLIC[module]
    # Sorted as ruff's RUF022 sorts: CONSTANTS, then Classes, then functions.
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"


def test_the_top_level_of_fetch_hides_the_building_blocks() -> None:
    fetch = importlib.import_module("cacheroot.fetch")
    store = importlib.import_module("cacheroot.fetch.store")
    assert not set(fetch.__all__) & set(store.__all__)
    leaked = sorted(n for n in store.__all__ if n in vars(fetch))
    assert not leaked, f"building blocks reachable from cacheroot.fetch: {leaked}"
    assert sys.modules["cacheroot.fetch.store"] is store
