"""Which platforms a branch runs on: ``sys.platform``, ``os.name`` and ``platform.system()``
tests, read off one module's index."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .limits import PLATFORM_TEST_DEPTH
from .names import PLATFORMS
from .names import dotted as _dotted

if TYPE_CHECKING:
    from .index import Index


_SYSTEM = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}


def _platform_value(node: ast.AST, platform: str) -> str | None:

    name = _dotted(node.func) if isinstance(node, ast.Call) else _dotted(node)
    if name == "sys.platform":
        return platform
    if name == "os.name":
        return "nt" if platform == "win32" else "posix"
    if isinstance(node, ast.Call) and name == "platform.system":
        return _SYSTEM[platform]
    return None


def _strings(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        out = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [o for o in out if isinstance(o, str)] if len(out) == len(node.elts) else None
    return None


def platform_test(m: Index, test: ast.AST, platform: str, depth: int = 0) -> bool | None:
    """What ``test`` is on ``platform`` (``True``/``False``), or ``None`` when it does not
    depend on the platform alone."""
    if depth > PLATFORM_TEST_DEPTH:
        return None
    d = depth + 1
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = platform_test(m, test.operand, platform, d)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        return _combined(test, [platform_test(m, v, platform, d) for v in test.values])
    if isinstance(test, ast.Name):
        assigned = m.value_of(test.id, m.tree)
        if assigned is not None and not isinstance(assigned, ast.Constant):
            return platform_test(m, assigned, platform, d)
        return None
    return _compared(test, platform)


def _combined(test: ast.BoolOp, values: list[bool | None]) -> bool | None:
    """An ``and``/``or`` of tests whose values on the platform are ``values``."""
    if isinstance(test.op, ast.And):
        return False if False in values else (True if all(values) else None)
    return True if True in values else (False if all(v is False for v in values) else None)


def _compared(test: ast.AST, platform: str) -> bool | None:
    """A comparison with the platform (``sys.platform == "linux"``, ``os.name in ("nt",)``,
    ``sys.platform.startswith("win")``) on ``platform``; ``None`` for any other test."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        value = _platform_value(left, platform)
        if value is None:
            value, right = _platform_value(right, platform), left
        strings = _strings(right)
        if value is None or strings is None:
            return None
        if isinstance(op, ast.Eq | ast.In):
            return value in strings
        return value not in strings if isinstance(op, ast.NotEq | ast.NotIn) else None
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Attribute)
        and test.func.attr == "startswith"
        and test.args
    ):
        value = _platform_value(test.func.value, platform)
        strings = _strings(test.args[0])
        if value is not None and strings is not None:
            return value.startswith(tuple(strings))
    return None


def runs_on(m: Index, node: ast.AST) -> tuple[str, ...]:
    """The platforms on whose branches ``node`` lies (``()``: every one)."""

    allowed = set(PLATFORMS)
    child: ast.AST = node
    parent = m.parent.get(node)
    while parent is not None:
        if isinstance(parent, ast.If | ast.IfExp) and child is not parent.test:
            in_body = child in parent.body if isinstance(parent, ast.If) else child is parent.body
            for platform in PLATFORMS:
                value = platform_test(m, parent.test, platform)
                if value is not None and value != in_body:
                    allowed.discard(platform)
        child, parent = parent, m.parent.get(parent)
    return () if len(allowed) == len(PLATFORMS) else tuple(sorted(allowed))
