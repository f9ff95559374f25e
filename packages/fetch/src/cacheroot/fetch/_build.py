"""Generated artifacts built once per volume: ``build_once(key, builder)``.

Test suites generate artifacts (a dummy model: a tiny ``config.json`` and ``safetensors``
weights) in every worker of every job. ``build_once`` runs the builder once for everyone that
shares the cache: the first caller takes the entry's lock and builds into a private directory,
which is published with one rename; the others wait on the lock and find it there. A builder
that raises publishes nothing and the next caller builds again.

The entry's name carries a fingerprint of what the builder would produce: ``inputs`` (any
JSON-like value: sizes, seeds, a format version) and the builder itself: its qualified name,
bytecode, constants and names, and those of its defaults and captured values that are immutable
(numbers, strings, tuples, frozensets); not its line numbers. Editing the builder or its inputs
therefore builds a new entry rather than reusing a stale one. Helpers the builder calls are not
followed: put a version number in ``inputs`` when they change.
Bytecode differs between Python versions, so each version builds its own copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
import types
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from cacheroot.envs._shared_tier import shared_url

from ._archive import tree_digest
from ._lock import PathLock
from ._naming import check_filename, check_namespace
from ._shared import fill_dir
from ._store import lock_path, staged_dir, write_meta
from ._used import touch_used

if TYPE_CHECKING:
    from collections.abc import Callable

_SIMPLE = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis))


def _const(value: object) -> str:  # noqa: PLR0911 - one case per kind of constant
    """A stable text for a constant: the same in every process (no addresses, no set order)."""
    if isinstance(value, types.CodeType):
        return "code:" + _code(value)
    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ",".join(_const(v) for v in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(_const(v) for v in value)) + "}"
    if isinstance(value, PurePath):
        return f"path:{value}"
    if isinstance(value, types.FunctionType):
        return f"fn:{value.__module__}.{value.__qualname__}:{_code(value.__code__)}"
    # An object's repr may hold its address, and a mutable value captured by a builder (a list
    # of calls, a cache) changes between calls: only its type is stable.
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _code(code: types.CodeType) -> str:
    h = hashlib.sha256()
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for c in code.co_consts:
        h.update(_const(c).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def _callable_text(builder: object) -> str:
    if isinstance(builder, functools.partial):
        return (
            f"partial({_callable_text(builder.func)};{_const(builder.args)};"
            f"{_const(builder.keywords)})"
        )
    if isinstance(builder, types.MethodType):
        return f"method({_callable_text(builder.__func__)})"
    if isinstance(builder, types.FunctionType):
        cells = tuple(c.cell_contents for c in builder.__closure__ or ())
        return (
            f"{builder.__module__}.{builder.__qualname__}|{_code(builder.__code__)}|"
            f"{_const(builder.__defaults__)}|{_const(builder.__kwdefaults__)}|{_const(cells)}"
        )
    call = getattr(type(builder), "__call__", None)  # noqa: B004 - a class's own __call__
    if isinstance(call, types.FunctionType):
        return f"object({type(builder).__qualname__}|{_callable_text(call)})"
    return f"<{type(builder).__module__}.{type(builder).__qualname__}>"


def _inputs_text(inputs: object) -> str:
    def default(value: object) -> object:
        if isinstance(value, PurePath):
            return str(value)
        if isinstance(value, bytes):
            return {"bytes": value.hex()}
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        raise TypeError(
            f"build_once inputs must be JSON-like (dict, list, str, numbers, bytes, paths), "
            f"found {type(value).__name__}: pass what the artifact depends on, not objects"
        )

    return json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=default)


def fingerprint(builder: Callable[[Path], object], inputs: object = None) -> str:
    """The hex digest that names what ``builder`` would build from ``inputs``."""
    h = hashlib.sha256()
    h.update(sys.implementation.cache_tag.encode() if sys.implementation.cache_tag else b"")
    h.update(b"\x00" + _callable_text(builder).encode("utf-8", "surrogatepass"))
    h.update(b"\x00" + _inputs_text(inputs).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def built_path(
    key: str,
    builder: Callable[[Path], object],
    *,
    namespace: str = "built",
    inputs: object = None,
) -> Path:
    """Where :func:`build_once` puts (or finds) this artifact; builds nothing."""
    from ._fetcher import cache_dir  # noqa: PLC0415 - keeps requests off this path

    name = f"{check_filename(key)}-{fingerprint(builder, inputs)[:16]}"
    check_filename(name)
    return Path(cache_dir(), check_namespace(namespace), name)


def build_once(
    key: str,
    builder: Callable[[Path], object],
    *,
    namespace: str = "built",
    inputs: object = None,
    lock_timeout: float | None = 1800.0,
) -> Path:
    """The directory holding what ``builder(directory)`` writes, built once per volume.

    ``key`` names the artifact (a file name: letters, digits, ``.``, ``_``, ``-``); the entry is
    ``$_VLLM_TEST_CACHE/<namespace>/<key>-<fingerprint>``. ``builder`` receives an empty private
    directory (a :class:`~pathlib.Path`) and fills it; its return value is ignored. Raises what
    the builder raises (nothing is published), or :class:`LockTimeout` after ``lock_timeout``
    seconds of waiting for another process's build.
    """
    dest = str(built_path(key, builder, namespace=namespace, inputs=inputs))
    if os.path.isdir(dest):
        touch_used(dest)
        return Path(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with PathLock(lock_path(dest), timeout=lock_timeout):
        if not os.path.isdir(dest):
            # With a shared tier (CACHEROOT_SHARED): its copy first, one host building.
            build = functools.partial(_build, key, builder, dest, inputs)
            if shared_url(os.environ) is not None:
                from ._bucket.trees import fill_dir as fill_tree  # noqa: PLC0415 - a bucket's

                fill_tree(dest, build, timeout=lock_timeout)
            else:
                fill_dir(dest, build, timeout=lock_timeout)
    touch_used(dest)
    return Path(dest)


def _build(key: str, builder: Callable[[Path], object], dest: str, inputs: object) -> None:
    started = time.time()
    with staged_dir(dest) as staging:
        builder(Path(staging.path))
        tree, size, files = tree_digest(staging.path)
        record: dict[str, Any] = {
            "kind": "built",
            "key": key,
            "builder": _callable_text(builder)[:200],
            "inputs": json.loads(_inputs_text(inputs)),
            "tree_sha256": tree,
            "size": size,
            "files": files,
            "built": time.time(),
            "build_seconds": round(time.time() - started, 3),
        }
        # The record goes first, as for files: a crash before the rename leaves a record that
        # describes nothing, never a tree without one.
        write_meta(dest, record)
    if not staging.published:
        # The lock did not hold (some network file systems): describe the tree that won.
        tree, size, files = tree_digest(dest)
        write_meta(dest, {**record, "tree_sha256": tree, "size": size, "files": files})
