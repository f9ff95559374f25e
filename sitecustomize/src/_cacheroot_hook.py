"""The hook's audit switch, its command (``cacheroot hook``) and the folder for ``PYTHONPATH``.

The hook itself is one line in ``cacheroot.pth``, run by ``site`` at every interpreter start:
it imports ``_cacheroot_start`` (a top-level module of this distribution that imports only
:mod:`os` and :mod:`sys`) and calls its ``start()``, which applies the layout once per
interpreter (a plain environment from a template, anything else from ``_cacheroot_compact``, a
pin from ``_cacheroot_layout``, both of cacheroot-envs) and, only when the run-time audit is
asked for (``CACHEROOT_AUDIT`` set), imports this module and calls :func:`audit`. ``start()``
never raises, so the hook never stops an interpreter. The ``sitecustomize.py`` of
:data:`PYTHONPATH_FOLDER` does the same as the line.

Python 3.15 and later read ``cacheroot.start`` (PEP 829) instead of the line's import. It names
``_cacheroot_start:start``, the function the line calls.

This module sits above the layout and the audit (``_cacheroot_audit`` imports the layout, the
audit's report imports the audit): the layout never imports the audit and the audit never
imports its report, so :func:`audit` is where they meet, without an import circle. Its module
level imports nothing: only the functions that run import what they need.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import argparse

#: Folder that holds the ``sitecustomize.py`` for images that use ``PYTHONPATH``.
PYTHONPATH_FOLDER = "_cacheroot_pythonpath"


def audit() -> None:
    """Install the run-time audit in this process (``CACHEROOT_AUDIT`` is set); never raises.

    The process that made the audit session (the first audited one; its children join) reports
    at its exit: :func:`cacheroot.envs._audit_report.report_at_exit`, imported only then so that
    start-up does not pay for the ``cacheroot.envs`` package and :mod:`json`. A failure says one
    line on stderr: the audit was asked for, so its absence must not be silent.
    """
    try:
        import _cacheroot_audit  # noqa: PLC0415 - only when the audit is asked for

        if _cacheroot_audit.install():
            import atexit  # noqa: PLC0415 - only the session's maker

            atexit.register(_report_at_exit)
    except Exception as exc:  # noqa: BLE001 - an interpreter must always start
        import os  # noqa: PLC0415 - only on failure
        import sys  # noqa: PLC0415

        sys.stderr.write(f"cacheroot audit: not installed in pid {os.getpid()}: {exc!r}\n")


def _report_at_exit() -> None:
    try:
        from cacheroot.envs._audit_report import report_at_exit  # noqa: PLC0415 - at exit only
    except Exception as exc:  # noqa: BLE001 - exit must not fail on the report
        import sys  # noqa: PLC0415

        sys.stderr.write(f"cacheroot audit: no report: {exc!r}\n")
        return
    report_at_exit()


def pythonpath() -> str:
    """The folder to put on ``PYTHONPATH`` for images that cannot use ``.pth`` files."""
    import os  # noqa: PLC0415 - off the start-up path

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), PYTHONPATH_FOLDER)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``cacheroot hook [pin ROOT | unpin]``: where the hook is; the environment's pinned root."""
    p = sub.add_parser("hook", help="where the start-up hook is installed; pin a root")
    p.add_argument(
        "--pythonpath",
        action="store_true",
        help="print only the folder to put on PYTHONPATH (chains to the sitecustomize it shadows)",
    )
    p.set_defaults(func=_run_hook)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    pin = actions.add_parser(
        "pin",
        help="record ROOT for processes of this environment that start without CACHEROOT",
        description=(
            "Record ROOT in this environment's prefix (sys.prefix/etc/cacheroot/pin). The hook "
            "uses it in every process that has no CACHEROOT, such as a child started with a "
            "scrubbed environment (subprocess.run(..., env={...})). CACHEROOT, when set, wins."
        ),
    )
    pin.add_argument("root", metavar="ROOT", help="absolute path of the cache root (~ expands)")
    pin.add_argument(
        "--tag", choices=("cuda", "rocm"), default=None, help="vendor tag used with the pin"
    )
    pin.set_defaults(func=_run_pin)
    unpin = actions.add_parser("unpin", help="remove this environment's pinned root")
    unpin.set_defaults(func=_run_unpin)


def _run_pin(args: "argparse.Namespace") -> int:
    import os  # noqa: PLC0415 - off the start-up path
    import sys  # noqa: PLC0415

    from _cacheroot_layout import (  # noqa: PLC0415
        CACHEROOT,
        CACHEROOT_PIN_FILE,
        CACHEROOT_TAG,
        path_problem,
        pin_dir_problem,
        pin_path,
    )

    root = os.path.expanduser(args.root.strip())
    problem = path_problem(root)
    if problem:
        sys.stderr.write(
            f"cacheroot hook pin: {args.root!r} {problem}: expected an absolute path such as "
            "/cacheroot; nothing was recorded\n"
        )
        return 2
    path = pin_path()
    if not path:
        sys.stderr.write(
            f"cacheroot hook pin: {CACHEROOT_PIN_FILE} is set but blank (no pin file); unset it to "
            "pin this environment, or set it to a file path\n"
        )
        return 2
    lines = [f"{CACHEROOT}={os.path.normpath(root)}"]
    if args.tag:
        lines.append(f"{CACHEROOT_TAG}={args.tag}")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        _make_dirs(os.path.dirname(path))
        unsafe = pin_dir_problem(os.path.dirname(path))
        if unsafe:
            sys.stderr.write(
                f"cacheroot hook pin: {unsafe}; nothing was recorded (the hook would ignore "
                "this pin)\n"
            )
            return 1
        _write_new(tmp, "\n".join(lines) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        sys.stderr.write(
            f"cacheroot hook pin: cannot write {path}: {exc.strerror or exc}; run it as the "
            "owner of this environment\n"
        )
        return 1
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    print(f"pinned {', '.join(lines)} in {path}")  # noqa: T201 - command output
    return 0


def _make_dirs(directory: str) -> None:
    """Create ``directory`` and its missing parents, each 0755 whatever the umask."""
    import os  # noqa: PLC0415 - off the start-up path

    if not directory or os.path.isdir(directory):
        return
    _make_dirs(os.path.dirname(directory))
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        return  # made meanwhile by someone else: judged as found (pin_dir_problem)
    os.chmod(directory, 0o755)  # noqa: S103 - every user of the environment reads the pin


def _write_new(path: str, text: str) -> None:
    """Write ``text`` to a new file ``path`` (never through a link), mode 0644 whatever the umask:
    every user of the environment reads the pin, and no one but its owner writes it."""
    import os  # noqa: PLC0415 - off the start-up path

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _run_unpin(args: "argparse.Namespace") -> int:  # noqa: ARG001 - the argparse signature
    import os  # noqa: PLC0415 - off the start-up path
    import sys  # noqa: PLC0415

    from _cacheroot_layout import CACHEROOT_PIN_FILE, pin_path  # noqa: PLC0415

    path = pin_path()
    if not path:
        print(f"no pin file: {CACHEROOT_PIN_FILE} is set but blank")  # noqa: T201 - output
        return 0
    try:
        os.unlink(path)
    except FileNotFoundError:
        print(f"no pinned root in {path}")  # noqa: T201 - command output
        return 0
    except OSError as exc:
        sys.stderr.write(f"cacheroot hook unpin: cannot remove {path}: {exc.strerror or exc}\n")
        return 1
    print(f"removed the pinned root ({path})")  # noqa: T201 - command output
    return 0


def _run_hook(args: "argparse.Namespace") -> int:
    import os  # noqa: PLC0415 - off the start-up path
    import sysconfig  # noqa: PLC0415 - off the start-up path

    if args.pythonpath:
        print(pythonpath())  # noqa: T201 - command output
        return 0
    from _cacheroot_layout import pin_path, read_pin  # noqa: PLC0415

    pth = os.path.join(sysconfig.get_paths()["purelib"], "cacheroot.pth")
    print(f"module:     {os.path.abspath(__file__)}")  # noqa: T201
    state = "present" if os.path.exists(pth) else "absent (hook not active in this environment)"
    print(f"pth file:   {pth} ({state})")  # noqa: T201
    print(f"PYTHONPATH: {pythonpath()}")  # noqa: T201
    why: list[str] = []
    pin = read_pin(why=why)
    shown = ", ".join(f"{k}={v}" for k, v in pin.items()) if pin else "none"
    if why:
        shown = f"ignored: {why[0]}"
    print(f"pin:        {shown} ({pin_path()})")  # noqa: T201
    return 0
