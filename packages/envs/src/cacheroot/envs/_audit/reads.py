"""What a node reads: an environment variable (by any of the ways code reads one), a constant
string, a bare base (the home or temporary directory, a known reader's location)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import _cacheroot_layout as _layout

from .._readers import FUNCTIONS
from .index import Index, Scope
from .limits import CONSTANT_HOPS
from .names import (
    BASES,
    ENV_CALLS,
    ENVIRON,
    ENVS_MODULES,
    LAYOUT_MODULES,
    LAYOUT_NAMES,
    USER_CACHE,
    call_name,
)
from .names import dotted as _dotted

_ENV_NAME = re.compile(r"_*[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
HOME_CALLS = frozenset({"Path.home", "pathlib.Path.home", "PosixPath.home"})
TMP_CALLS = frozenset({"tempfile.gettempdir", "gettempdir", "tempfile.gettempdirb"})
#: Classes of platformdirs and appdirs whose attributes name directories.
_DIRS_CLASSES = frozenset({"PlatformDirs", "AppDirs"})


@dataclass
class EnvRead:
    node: ast.AST
    name: str
    default: ast.expr | None
    scope: Scope


class Reads(Index):
    """A module's index, asked what its nodes read."""

    def base_call(self, node: ast.AST) -> bool:
        """Whether ``node`` is a bare base: ``Path.home()``, ``expanduser("~...")``,
        ``gettempdir()``, ``user_cache_dir(...)`` (``PlatformDirs(...).user_cache_dir`` too),
        ``os.environ["HOME"]``, or a known reader's function (``torch.hub.get_dir()``)."""
        if self.reader_call(node):
            return True
        if isinstance(node, ast.Subscript | ast.Call):
            read = self.env_read(node)
            if read is not None:
                return read.name in BASES
        if not isinstance(node, ast.Call):
            return False
        name = _dotted(node.func)
        if name in HOME_CALLS or name in TMP_CALLS or call_name(node) in USER_CACHE:
            return True
        return name.endswith("expanduser") and self._expands_home(node)

    def _expands_home(self, node: ast.Call) -> bool:
        """Whether an ``expanduser`` call is given ``"~..."`` itself, or a name given ``"~"``.
        A name given ``"~/.x"`` is not: that constant is a place where it is written
        (``X_DIR = "~/.x"``), and its expansion elsewhere a use of that place, not a second."""
        if not node.args:
            return False
        text = self.string(node.args[0], self.scope_of.get(node, self.tree))
        if text is None or not text.startswith("~"):
            return False
        return isinstance(node.args[0], ast.Constant) or not text.startswith("~/")

    def reader_call(self, node: ast.AST) -> bool:
        """A call of the known readers' table, or a platformdirs/appdirs object's cache
        directory (``PlatformDirs("x").user_cache_dir``)."""
        if isinstance(node, ast.Call):
            return _dotted(node.func) in FUNCTIONS
        return (
            isinstance(node, ast.Attribute)
            and node.attr in USER_CACHE
            and isinstance(node.value, ast.Call)
            and call_name(node.value) in _DIRS_CLASSES
        )

    def string(self, node: ast.expr | None, scope: Scope) -> str | None:
        """The string ``node`` is, directly or through one constant name (a layout name
        imported from another module included)."""
        for _ in range(CONSTANT_HOPS):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return node.value
            if not isinstance(node, ast.Name):
                return None
            value = self.value_of(node.id, scope)
            if value is None:
                return self._imported_name(node.id)
            node = value
        return None

    def _imported_name(self, name: str) -> str | None:
        """The variable name an imported constant holds: the layout's own constants by their
        value (``VLLM_TEST_CACHE`` is ``"_VLLM_TEST_CACHE"``), a layout name of another module
        by itself."""
        source = self.imported.get(name)
        if source is None:
            return None
        module = source.rpartition(".")[0]
        if module in LAYOUT_MODULES:
            value = getattr(_layout, source.rpartition(".")[2], None)
            return value if isinstance(value, str) and _ENV_NAME.fullmatch(value) else None
        return name if name in LAYOUT_NAMES else None

    def env_read(self, node: ast.AST) -> EnvRead | None:
        """The environment read ``node`` is, if any."""
        scope = self.scope_of.get(node, self.tree)
        if isinstance(node, ast.Call):
            return self._call_read(node, scope)
        name: str | None = None
        if isinstance(node, ast.Attribute) and node.attr in LAYOUT_NAMES:
            # ``envs.VLLM_CACHE_ROOT``: a project's module of variables, read by attribute.
            owner = _dotted(node.value).rpartition(".")[2]
            name = node.attr if owner in ENVS_MODULES else None
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            name = self._imported_read(node.id)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _dotted(node.value) in ENVIRON
        ):
            name = self.string(node.slice, scope)
        return EnvRead(node, name, None, scope) if name else None

    def _call_read(self, node: ast.Call, scope: Scope) -> EnvRead | None:
        """``os.environ.get(NAME, default)``, ``os.getenv``, a project's own wrapper."""
        if not node.args:
            return None
        name = self.string(node.args[0], scope)
        if name is None or not _ENV_NAME.fullmatch(name):
            return None
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if _dotted(node.func) in ENV_CALLS:
            default = node.args[1] if len(node.args) > 1 else keywords.get("default")
            return EnvRead(node, name, default, scope)
        callee = call_name(node).lower()
        if ("env" not in callee and "xdg" not in callee) or callee.startswith(
            ("set", "put", "del", "unset", "update")
        ):
            return None  # (``monkeypatch.setenv(NAME, value)`` writes the variable)
        return EnvRead(node, name, _wrapper_default(node.args[1:], keywords), scope)


def _wrapper_default(args: list[ast.expr], keywords: dict[str, ast.expr]) -> ast.expr | None:
    """The default given to a project's own wrapper (``EnvVar(name, default)``,
    ``_readenv(name, type, default)``): the first later argument that is not a bare type."""
    for arg in args:
        if not (isinstance(arg, ast.Name) and arg.id in {"str", "int", "bool", "float"}):
            return arg
    return keywords.get("default")
