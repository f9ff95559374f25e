"""``sitecustomize`` for images that put this folder on ``PYTHONPATH``.

Python imports only the first ``sitecustomize`` on ``sys.path``, so this one would shadow the
image's own (Debian ships one in ``/usr/lib/python3.X``). It applies the cacheroot layout, then
finds the next ``sitecustomize`` on ``sys.path`` and runs it, so nothing the image did is lost.
"""

from __future__ import annotations

import os
import sys


def _apply() -> None:
    try:
        from _cacheroot_layout import hook  # noqa: PLC0415 - a broken install is caught here
    except Exception:  # noqa: BLE001 - an interpreter must always start
        return
    hook()


def _chain() -> None:
    from importlib.machinery import PathFinder  # noqa: PLC0415 - only this image hook needs it
    from importlib.util import module_from_spec  # noqa: PLC0415

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - the shadowed hook failing must not stop the interpreter
        import traceback  # noqa: PLC0415 - only on failure

        traceback.print_exc()


_apply()
_chain()
