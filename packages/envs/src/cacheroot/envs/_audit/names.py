"""The static audit's shared vocabulary: the classes of a finding, the platforms, the calls that
build paths, and the environment names and bases every stage recognises. The first stage of the
pipeline: it imports no other module of the audit."""

from __future__ import annotations

import ast

from _cacheroot_layout import TABLE

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


#: Calls that read an environment variable: ``(name, default)`` are their first two arguments.
#: (``from os import environ, getenv`` is read as ``os.environ``, ``os.getenv``: a bare
#: ``environ`` of another origin, such as a parameter, is a mapping the audit cannot know.)
ENV_CALLS = frozenset({"os.getenv", "os.environ.get", "os.environ.setdefault"})
ENVIRON = frozenset({"os.environ"})
#: Names of bases, rendered as ``~`` or ``$TMPDIR`` rather than reported on their own.
BASES = {"HOME": "~", "USERPROFILE": "~", "TMPDIR": "$TMPDIR", "TEMP": "$TMPDIR", "TMP": "$TMPDIR"}
XDG = "XDG_CACHE_HOME"
#: Endings of configuration files (a file so named under the home directory that the package
#: only reads is configuration, whatever else its name says).
CONFIG_SUFFIXES = (".ini", ".cfg", ".conf", ".toml", ".yaml", ".yml", ".json")


USER_CACHE = frozenset({"user_cache_dir", "user_cache_path"})
TMP_PREFIXES = ("/tmp/", "/var/tmp/")  # noqa: S108 - the literals this audit looks for
TMP_DIRS = ("/tmp", "/var/tmp")  # noqa: S108
SHM = "/dev/shm"  # noqa: S108 - shared memory: where processes meet, a place once written
#: Every name the layout table knows: a read of one is always a finding (covered by its row).
LAYOUT_NAMES = frozenset({v.name for v in TABLE} | {n for v in TABLE for n in v.legacy})
#: The modules that spell the layout's names (their constants hold the names).
LAYOUT_MODULES = frozenset({"cacheroot.envs", "_cacheroot_layout"})
#: Last parts of a project's module of environment variables, read by attribute (``envs.X``).
ENVS_MODULES = frozenset({"envs", "env", "environment_variables"})


#: Calls that build a path from their arguments (joined with ``/``).
JOINERS = frozenset(
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
WRAPPERS = frozenset(
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
PATH_METHODS = frozenset(
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


def call_name(node: ast.Call) -> str:
    """The last name of what is called (``EnvVar`` for ``env.EnvVar(...)``)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""
