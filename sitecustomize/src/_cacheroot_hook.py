"""The hook's command (``cacheroot hook``) and the folder for ``PYTHONPATH`` images.

The hook itself is one line in ``cacheroot.pth``, run by ``site`` at every interpreter start:
it imports ``_cacheroot_layout`` (one top-level module of cacheroot-envs that imports only
:mod:`os`) and calls its ``hook()``, inside a ``try`` so that a broken install never stops an
interpreter or prints. The line goes through ``exec`` because a ``.pth`` line must start with
``import`` and be a single line; importing this module from it instead would cost one more
module at every start (about 0.25 ms, measured). Python 3.15 and later read ``cacheroot.start``
(PEP 829) instead, which names the same function. Nothing here runs at start-up.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import argparse

#: Folder that holds the ``sitecustomize.py`` for images that use ``PYTHONPATH``.
PYTHONPATH_FOLDER = "_cacheroot_pythonpath"


def pythonpath() -> str:
    """The folder to put on ``PYTHONPATH`` for images that cannot use ``.pth`` files."""
    import os  # noqa: PLC0415 - off the start-up path

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), PYTHONPATH_FOLDER)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``cacheroot hook``: say whether the hook is installed and where its files are."""
    p = sub.add_parser("hook", help="where the start-up hook is installed")
    p.add_argument(
        "--pythonpath",
        action="store_true",
        help="print only the folder to put on PYTHONPATH (chains to the sitecustomize it shadows)",
    )
    p.set_defaults(func=_run_hook)


def _run_hook(args: "argparse.Namespace") -> int:
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
