"""Where the cache directory is: ``_VLLM_TEST_CACHE`` as the layout derives it now.

Every fetch asks, so the answer is memoised on the values of the variables it depends on (a
tuple of look-ups instead of resolving the whole layout). :data:`DEPENDS` names them once for
every such memo: the fetcher's, and the archive walk's, which also keys the cache root on it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    INVALID,
    TABLE,
    VLLM_TEST_CACHE,
    XDG_CACHE_HOME,
    resolve,
)

from ._errors import FetchError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cacheroot.envs import Layout

#: The layout variable that holds the cache directory.
CACHE_VARIABLE = VLLM_TEST_CACHE


def _ancestry(name: str) -> tuple[str, ...]:
    """``name``, its parents up the table, and the legacy names of each (all read by resolve)."""
    by_name = {v.name: v for v in TABLE}
    names: list[str] = []
    while name:
        names.append(name)
        var = by_name.get(name)
        names.extend(var.legacy if var is not None else ())
        name = var.parent if var is not None else ""
    return tuple(names)


#: Every variable that the cache root and the cache directory depend on: the root's own, the
#: home directory's, and the cache directory's chain of parents. (A pinned root reaches them
#: through the start-up hook, which sets ``CACHEROOT``.)
DEPENDS = (CACHEROOT, CACHEROOT_APPLIED, XDG_CACHE_HOME, "HOME", *_ancestry(CACHE_VARIABLE))
_memo: dict[tuple[object, ...], str] = {}

#: The process environment as it was at import, its mapping of encoded names to encoded values,
#: and :data:`DEPENDS`' names encoded as that mapping keys them: :func:`depends_key` reads it
#: directly. ``os.environ.get`` encodes the name and decodes the value at every call (about
#: 0.5 us each, most of a hit's cost over eight names); the mapping behind it is the same data,
#: kept in step by every change made through ``os.environ``.
_ENVIRON = os.environ
_RAW: dict[object, object] | None = getattr(os.environ, "_data", None)
_RAW_DEPENDS = tuple(map(os.environ.encodekey, DEPENDS)) if isinstance(_RAW, dict) else ()


def depends_key(environ: Mapping[str, str] | None = None) -> tuple[object, ...]:
    """The values of :data:`DEPENDS` in ``environ`` (default: the process environment), as a
    memo key: equal keys mean an equal cache root and cache directory."""
    env = os.environ if environ is None else environ
    if env is _ENVIRON and _RAW is not None and _RAW_DEPENDS:
        return tuple(map(_RAW.get, _RAW_DEPENDS))
    return tuple(map(env.get, DEPENDS))


def cache_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """``_VLLM_TEST_CACHE`` as :func:`cacheroot.envs.resolve` derives it now.

    Resolved at every call (the environment may change between calls), but memoised on
    :data:`DEPENDS`. Raises :class:`FetchError` when the layout makes it unusable.
    """
    env = os.environ if environ is None else environ
    key = depends_key(env)
    found = _memo.get(key)
    if found is not None:
        return found
    layout = resolve(env)
    setting = layout.settings.get(CACHE_VARIABLE)
    if setting is None or not setting.value or setting.source == INVALID:
        raise FetchError(_unusable(layout))
    value = os.path.expanduser(setting.value.strip())
    _memo[key] = value
    return value


def _unusable(layout: Layout) -> str:
    """Why the layout leaves no cache directory, by its first cause up the chain of parents.

    An unusable root is named as the layout names it (``CACHEROOT='rel' is not an absolute
    path``), once, rather than as the last link of the chain ("its parent VLLM_CACHE_ROOT is
    unusable"), which hides what to fix.
    """
    by_name = {v.name: v for v in TABLE}
    cause, name = None, CACHE_VARIABLE
    while name:  # up from the cache directory, while each is unusable for want of its parent
        setting = layout.settings.get(name)
        if setting is None or setting.source != INVALID:
            break
        cause = setting
        if setting.value is not None:
            break  # the user's own unusable value: that one is to fix
        name = by_name[name].parent if name in by_name else ""
    doctor = "`cacheroot doctor` explains the layout"
    if cause is not None and cause.value is None and not name and layout.root is None:
        return (
            f"{CACHE_VARIABLE} cannot be derived: {layout.root_reason} (or set "
            f"{CACHE_VARIABLE} itself); {doctor}"
        )
    reason = cause.reason if cause is not None else "it is not in the layout"
    return (
        f"{CACHE_VARIABLE} is unusable ({reason}); set {CACHEROOT} or {CACHE_VARIABLE} to an "
        f"absolute path ({doctor})"
    )
