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

import errno
import functools
import hashlib
import json
import os
import stat
import sys
import time
import types
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from cacheroot.envs._shared_tier import shared_url

from ._archive import _describe_winner, _digest, _take
from ._cachedir import cache_dir
from ._errors import DownloadError
from ._held import drop_stage, held_path, lstat, make_partial, publish, reach
from ._lock import PathLock
from ._naming import check_filename, check_namespace
from ._shared import fill_dir
from ._store import (
    SHARED_DIR,
    kind,
    lock_path,
    partial_path,
    remove_planted,
    shared,
    signature,
    write_meta,
)
from ._used import forget, touch_used

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
    the builder raises (nothing is published), :class:`LockTimeout` after ``lock_timeout``
    seconds of waiting for another process's build, or :class:`DownloadError` (a
    :class:`FetchError` and an :class:`OSError`) when the entry's directory cannot be reached
    without following a link, its name holds a regular file, or the built tree cannot be
    recorded or published (nothing is published then either).

    The namespace directory is reached from the cache root one component at a time without
    following a link and held: the lock, the private build directory, the record and the
    rename that publishes the tree all go through it.
    """
    dest = str(built_path(key, builder, namespace=namespace, inputs=inputs))
    if _still_seen(dest):
        touch_used(dest)
        return Path(dest)
    try:
        dfd, name, _on_volume = reach(dest, create=True)
    except OSError as exc:
        raise _unreachable(dest, exc) from None
    try:
        if not _present(dest, name, dfd):
            lock = PathLock(held_path(dfd, lock_path(dest)), timeout=lock_timeout)
            _take(lock, dest, dest, f"cannot build {dest}")
            try:
                if not _present(dest, name, dfd):
                    # With a shared tier (CACHEROOT_SHARED): its copy first, one host building.
                    build = functools.partial(_build, key, builder, dest, inputs, dfd)
                    if shared_url(os.environ) is not None:
                        from ._bucket.trees import fill_dir as fill_tree  # noqa: PLC0415

                        fill_tree(dest, build, timeout=lock_timeout)
                    else:
                        fill_dir(dest, build, timeout=lock_timeout)
                    _seen.pop(dest, None)
                    _present(dest, name, dfd)
            finally:
                lock.release()
        held = held_path(dfd, dest)
        touch_used(held)
        if held != dest:
            forget(held)
    finally:
        os.close(dfd)
    return Path(dest)


def _unreachable(dest: str, exc: OSError) -> DownloadError:
    """The error for the tree ``dest`` whose directory could not be reached (``exc``)."""
    where = exc.filename if isinstance(exc.filename, str) else os.path.dirname(dest)
    why = (
        "is a symbolic link or not a directory, not followed (another job may have planted "
        "it; remove it if it is not yours)"
        if exc.errno in (errno.ELOOP, errno.ENOTDIR)
        else str(exc.strerror or exc)
    )
    return DownloadError(dest, f"cannot build {dest}: {where} {why}", err=exc.errno)


#: Trees this process found in place: ``dest`` -> their ``lstat`` signature then. A hit costs
#: one ``lstat`` by name (a directory swapped on the way shows another inode, a link is a link).
_seen: dict[str, tuple[int, int, int, int]] = {}


def _still_seen(dest: str) -> bool:
    """Whether the tree ``dest`` is the very directory this process found in place before."""
    seen = _seen.get(dest)
    if seen is None:
        return False
    try:
        return signature(os.lstat(dest)) == seen
    except OSError:
        return False


def _present(dest: str, name: str, dir_fd: int) -> bool:
    """Whether the tree ``name`` is in the directory held at ``dir_fd`` (remembered then).
    Anything else there (a link, FIFO, socket, device) is removed, unfollowed: the name is
    cacheroot's own; a regular file there is refused."""
    st = lstat(name, dir_fd)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        if stat.S_ISREG(st.st_mode) or not remove_planted(dest, dir_fd=dir_fd):
            what = "a file" if stat.S_ISREG(st.st_mode) else kind(st.st_mode)
            raise DownloadError(
                dest,
                f"cannot build {dest}: it is {what}, not a directory (another job may have "
                "planted it; remove it if it is not yours), then build again",
                err=errno.EEXIST,
            )
        st = None
    if st is None:
        return False
    _seen[dest] = signature(st)
    return True


def _build(
    key: str, builder: Callable[[Path], object], dest: str, inputs: object, dir_fd: int
) -> None:
    """Build into a private (``0700``) directory made in the directory held at ``dir_fd``,
    record the tree and publish it there by one rename, unless a tree got there first."""
    started = time.time()
    name = os.path.basename(dest)
    stage = os.path.basename(partial_path(dest))
    label = os.path.join(os.path.dirname(dest), stage)
    sfd, mode = make_partial(dir_fd, stage, label)
    try:
        builder(Path(_held_dir(sfd, label)))
        try:
            tree, size, files = _digest(sfd, label, sync=True, own_names=True)
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
            # The record goes first, as for files: a crash before the rename leaves a record
            # that describes nothing, never a tree without one.
            write_meta(name, record, dir_fd=dir_fd)
            os.fchmod(sfd, SHARED_DIR if shared("", dir_fd=dir_fd) else mode)
            published = publish(dir_fd, stage, name, sfd, replace=False, out=dest)
        except OSError as exc:
            raise _not_published(dest, exc) from exc
    except BaseException:
        drop_stage(dir_fd, stage, sfd)
        raise
    finally:
        os.close(sfd)
    if not published:
        # The lock did not hold (some network file systems): describe the tree that won.
        _describe_winner(dir_fd, name, dest, record, own_names=False)


def _not_published(dest: str, exc: OSError) -> DownloadError:
    """The error for a built tree that could not be recorded or published (``exc``)."""
    where = f" ({exc.filename})" if isinstance(exc.filename, str) else ""
    return DownloadError(
        dest,
        f"could not publish the tree built for {dest}: {exc.strerror or exc}{where}; nothing "
        "was published (a link, FIFO, device or hard link in its place or in the tree?)",
        err=exc.errno,
    )


def _held_dir(fd: int, path: str) -> str:
    """A path of the directory held at ``fd`` that no rename or link can redirect:
    ``/proc/<pid>/fd/<fd>``, which a builder's own subprocesses can use as well (``self`` would
    name theirs); ``path`` where the system names no descriptors by path."""
    held = held_path(fd, path)
    return f"/proc/{os.getpid()}/fd/{fd}" if held != path else path
