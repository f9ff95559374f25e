"""``sitecustomize`` for images that put this folder on ``PYTHONPATH``.

Python imports only the first ``sitecustomize`` on ``sys.path``, so this one would shadow the
image's own (Debian ships one in ``/usr/lib/python3.X``). It applies the cacheroot layout (and
installs the run-time audit when ``CACHEROOT_AUDIT`` is set, as the ``.pth`` line does), then
finds the next ``sitecustomize`` on ``sys.path`` and runs it, so nothing the image did is lost.
"""

from __future__ import annotations

import os
import sys


def _apply() -> None:
    """What the ``.pth`` line does: the layout, then the audit only when it is asked for (once
    per interpreter: not again where the line already ran)."""
    try:
        from _cacheroot_start import start  # noqa: PLC0415 - a broken install is caught here
    except Exception:  # noqa: BLE001 - an interpreter must always start
        return
    start()


#: Attribute of :mod:`sys` that holds the real paths of the copies of this file already run, so
#: that the folder on ``PYTHONPATH`` twice (a symlinked spelling, a copied image layer) chains
#: to the image's own ``sitecustomize`` once instead of to itself until ``RecursionError``.
_SEEN = "_cacheroot_sitecustomize_seen"


def _chain() -> None:
    from importlib.machinery import PathFinder  # noqa: PLC0415 - only this image hook needs it
    from importlib.util import module_from_spec  # noqa: PLC0415

    seen = getattr(sys, _SEEN, None)
    if not isinstance(seen, set):
        seen = set()
        setattr(sys, _SEEN, seen)
    seen.add(os.path.realpath(__file__))
    rest = list(sys.path)
    while True:
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None or not spec.origin:
            return
        origin = os.path.realpath(spec.origin)
        if origin not in seen:
            break
        # A copy of this file (or this file under another spelling): skip its folder.
        folder = os.path.dirname(origin)
        rest = [p for p in rest if os.path.realpath(p or os.curdir) != folder]
    seen.add(origin)
    module = module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - the shadowed hook failing must not stop the interpreter
        import traceback  # noqa: PLC0415 - only on failure

        traceback.print_exc()


_apply()
_chain()
