"""The static audit's shared vocabulary: the classes of a finding, the platforms, and the calls
that build paths. Imported by :mod:`._audit_ast` and :mod:`._audit_flow`; imports neither."""

from __future__ import annotations

import ast

#: The classes of a finding. Only :data:`GATING` ones fail the gate by default.
CACHE = "cache"
DOWNLOAD = "download"
UNCACHED_DOWNLOAD = "uncached-download"
OUTPUT = "output"
IPC = "ipc"
CONFIG = "config"
THROWAWAY = "throwaway"
LAYOUT_OVERRIDE = "layout-override"
KINDS = (CACHE, DOWNLOAD, UNCACHED_DOWNLOAD, OUTPUT, IPC, CONFIG, THROWAWAY, LAYOUT_OVERRIDE)
GATING = frozenset({CACHE, DOWNLOAD, LAYOUT_OVERRIDE})
#: The platforms a branch can be for, as ``sys.platform`` spells them.
PLATFORMS = ("darwin", "linux", "win32")


#: Calls that build a path from their arguments (joined with ``/``).
_JOINERS = frozenset(
    {
        "os.path.join",
        "path.join",
        "join",
        "Path",
        "pathlib.Path",
        "PurePath",
        "PosixPath",
        "pathlib.PurePath",
        "pathlib.PosixPath",
    }
)
#: Calls that return their (first) argument's path, expanded or normalised.
_WRAPPERS = frozenset(
    {
        "str",
        "os.fspath",
        "os.path.abspath",
        "os.path.realpath",
        "os.path.normpath",
        "os.path.expanduser",
        "os.path.expandvars",
        "path.abspath",
        "path.realpath",
        "path.normpath",
        "path.expanduser",
        "path.expandvars",
        "expanduser",
        "abspath",
        "realpath",
    }
)
#: Methods of a path object that return the same place.
_PATH_METHODS = frozenset(
    {"expanduser", "resolve", "absolute", "as_posix", "joinpath", "__fspath__", "expandvars"}
)


def dotted(node: ast.AST) -> str:
    """``os.path.join`` for that attribute chain, ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""
