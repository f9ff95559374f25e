"""The start-up hook: applies the cacheroot layout before any user import.

``cacheroot.pth`` imports this module in every interpreter of the environment, so it must cost
next to nothing: it imports only ``cacheroot.envs`` (which imports only :mod:`os`), never
creates a directory, never prints and never raises. Imports sit inside the functions so that
the start-up path pays only for what :func:`run` needs.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import argparse

#: Folder that holds the ``sitecustomize.py`` for images that use ``PYTHONPATH``.
PYTHONPATH_FOLDER = "_cacheroot_pythonpath"


def run() -> None:
    """Apply the layout unless ``CACHEROOT_DISABLE`` is on; swallow every error."""
    try:
        from cacheroot.envs import hook  # noqa: PLC0415 - a broken install is caught here
    except Exception:  # noqa: BLE001 - a broken install must never stop an interpreter
        return
    hook()


def pythonpath() -> str:
    """The folder to put on ``PYTHONPATH`` for images that cannot use ``.pth`` files."""
    import os  # noqa: PLC0415 - off the start-up path

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), PYTHONPATH_FOLDER)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cacheroot hook``: say whether the hook is installed and where its files are."""
    p = sub.add_parser("hook", help="where the start-up hook is installed")
    p.add_argument(
        "--pythonpath",
        action="store_true",
        help="print only the folder to put on PYTHONPATH (chains to the sitecustomize it shadows)",
    )
    p.set_defaults(func=_run_hook)


def _run_hook(args: argparse.Namespace) -> int:
    import os  # noqa: PLC0415 - off the start-up path
    import sysconfig  # noqa: PLC0415 - off the start-up path

    if args.pythonpath:
        print(pythonpath())  # noqa: T201 - command output
        return 0
    pth = os.path.join(sysconfig.get_paths()["purelib"], "cacheroot.pth")
    print(f"module:     {os.path.abspath(__file__)}")  # noqa: T201
    state = "present" if os.path.exists(pth) else "absent (hook not active in this environment)"
    print(f"pth file:   {pth} ({state})")  # noqa: T201
    print(f"PYTHONPATH: {pythonpath()}")  # noqa: T201
    return 0
