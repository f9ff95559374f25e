"""Which modules open, create, rename, remove or change names by themselves.

Everything cacheroot does on the volume must go through descriptors held from the top down,
without following a link (see ``docs/explanation/threat-model.md``). That is easy to keep in the
few modules built for it and easy to lose anywhere else: one ``open(path, "w")`` or
``os.rename`` on a path under the root undoes it. This test reads the packages' sources and
counts, per module, the calls that act on a name by themselves (``open``, ``os.open``,
``os.rename``/``replace``/``unlink``/``remove``/``rmdir``/``mkdir``/``makedirs``/``chmod``/
``chown``/``utime``/``link``/``symlink``/``mkfifo``/``truncate``, ``shutil``'s removals and
copies, and ``pathlib``'s writing methods). A call into a primitive's module by its name
(``_held.rename``) is the primitive's, not counted.

- :data:`PRIMITIVES` are the modules that implement the walk and the checks: they may.
- :data:`ELSEWHERE` touch only names that are not on the volume, each for the reason given.

A module in neither list may make none: new code goes through the primitives. A name imported
from ``os`` or ``shutil`` would hide a call from the count, so no module imports one.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("packages", "sitecustomize")

_OS = frozenset(
    {
        "chmod",
        "chown",
        "lchown",
        "link",
        "makedirs",
        "mkdir",
        "mkfifo",
        "mknod",
        "open",
        "remove",
        "removedirs",
        "rename",
        "renames",
        "replace",
        "rmdir",
        "symlink",
        "truncate",
        "unlink",
        "utime",
    }
)
_SHUTIL = frozenset(
    {
        "copy",
        "copy2",
        "copyfile",
        "copymode",
        "copystat",
        "copytree",
        "move",
        "rmtree",
    }
)
#: pathlib's methods that act on their path (``open`` and ``replace`` left out: too many other
#: objects have them, strings first).
_PATH = frozenset(
    {
        "chmod",
        "hardlink_to",
        "mkdir",
        "read_bytes",
        "read_text",
        "rename",
        "rmdir",
        "symlink_to",
        "touch",
        "unlink",
        "write_bytes",
        "write_text",
    }
)

#: The primitives' modules as their callers import them (``from .. import _held``): a call
#: through one of these names is the primitive's, whatever it is called.
_PRIMITIVE_MODULES = frozenset({"_held", "_shared", "_store", "_volume"})

#: The volume's primitives: descriptors held from the top down, ``O_NOFOLLOW``, ``O_EXCL``,
#: regular files with one name, records read only once ``fstat`` says they are small.
PRIMITIVES = {
    "packages/fetch/src/cacheroot/fetch/_store.py": "open_regular, read_small, Partial, publish",
    "packages/fetch/src/cacheroot/fetch/_shared.py": "open_below, publish_new, copy_new",
    "packages/fetch/src/cacheroot/fetch/_held.py": "reach, subdir, remove_tree, publish",
    "packages/fetch/src/cacheroot/fetch/_upkeep/in_use.py": "walk_held, open_seen",
    "packages/fetch/src/cacheroot/fetch/_lock.py": "the lock file, by its held directory",
    "packages/fetch/src/cacheroot/fetch/_used.py": "the .used stamp: O_EXCL|O_NOFOLLOW, one name",
    "packages/mediacache/src/cacheroot/mediacache/_volume.py": "the media cache's Directory",
}

#: Modules whose calls act on names off the volume.
ELSEWHERE = {
    "packages/envs/src/_cacheroot_audit.py": "the run-time audit's session directory is private "
    "(mkdtemp, or pytest's base temporary directory), never on the volume",
    "packages/envs/src/cacheroot/envs/_audit_report.py": "the audit report the user names",
    "packages/envs/src/cacheroot/envs/_audit/sources.py": "reads the wheels, sdists and "
    "installed packages the user asks it to audit",
    "packages/envs/src/_cacheroot_layout.py": "the pin file of the Python environment",
    "packages/envs/src/cacheroot/envs/_doctor.py": "the writability probe of a directory it "
    "checks (O_EXCL, a name of its own), and /proc's mount table",
    "packages/envs/src/cacheroot/envs/_shared_tier.py": "the writability probe of the tier's top",
    "packages/fetch/src/cacheroot/fetch/_http.py": "the file a file:// URL names, read only",
    "packages/fetch/src/cacheroot/fetch/_proc.py": "/proc",
    "packages/fetch/src/cacheroot/fetch/_tier/view.py": "the merged view the operator names "
    "(`tier up MERGED`), the overlay's work directory beside L1, and L1 itself where it is "
    "missing; /proc/filesystems",
    "packages/fetch/src/cacheroot/fetch/_warm/manifest.py": "the manifest the user names",
    "packages/fetch/src/cacheroot/fetch/_plugin/figures.py": "the figures file pytest is told",
    "packages/fetch/src/cacheroot/fetch/_plugin/hub_report.py": "CI's step summary file",
    "packages/fetch/src/cacheroot/fetch/_plugin/report.py": "the report file pytest is told",
    "sitecustomize/src/_cacheroot_hook.py": "the pin in the Python environment's own etc/",
}


def _calls(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name):
            count += f.id == "open"
        elif isinstance(f, ast.Attribute):
            base = f.value.id if isinstance(f.value, ast.Name) else None
            if base == "os":
                count += f.attr in _OS
            elif base == "shutil":
                count += f.attr in _SHUTIL
            elif base in ("io", "builtins"):
                count += f.attr == "open"
            elif base in _PRIMITIVE_MODULES:
                continue  # a primitive's own function (``_held.rename``), not a path's method
            else:
                count += f.attr in _PATH
    return count


def found() -> Counter[str]:
    """Per module (its path from the repository's root), the calls counted."""
    counts: Counter[str] = Counter()
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            n = _calls(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if n:
                counts[path.relative_to(ROOT).as_posix()] = n
    return counts


def test_the_counter_sees_each_kind_of_call() -> None:
    source = """
import os, shutil
from pathlib import Path
open("a", "w"); os.open("a", 0); os.rename("a", "b"); os.unlink("a"); shutil.rmtree("d")
Path("a").write_text("x"); p.unlink(); os.path.join("a", "b"); os.listdir("d"); f.open()
_held.rename(fd, "a", "b"); _store.unlink("a")
"""
    assert _calls(ast.parse(source)) == 7


def test_only_the_listed_modules_act_on_names() -> None:
    counts = found()
    listed = set(PRIMITIVES) | set(ELSEWHERE)
    over = {m: n for m, n in counts.items() if m not in listed}
    assert over == {}, (
        "these modules act on names by themselves (module: calls found): go through the "
        "volume's primitives, or list the module with its reason"
    )


def test_the_lists_name_only_modules_that_act_on_names() -> None:
    counts = found()
    stale = sorted(m for m in [*PRIMITIVES, *ELSEWHERE] if not counts.get(m))
    assert stale == [], "these modules make no such call now: take them off the lists"


def _hidden(tree: ast.AST) -> list[str]:
    """The counted names a module imports from ``os`` or ``shutil`` (a call to one would not
    be counted)."""
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil")
        for alias in node.names
        if alias.name in (_OS if node.module == "os" else _SHUTIL)
    ]


def test_the_import_check_sees_a_hidden_call() -> None:
    source = "from os import unlink as u, path\nfrom shutil import rmtree\nfrom os.path import join"
    assert _hidden(ast.parse(source)) == ["os.unlink", "shutil.rmtree"]


def test_no_module_imports_a_counted_name() -> None:
    hidden = {
        path.relative_to(ROOT).as_posix(): names
        for top in SOURCES
        for path in sorted((ROOT / top).rglob("*.py"))
        if (names := _hidden(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert hidden == {}, "call these through their module (os.unlink), where the count sees them"
