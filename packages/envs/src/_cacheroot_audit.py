"""The run-time audit's in-process side: which writes land outside the cache root, and whose.

Installed at start-up by ``_cacheroot_hook.audit()`` when the layout's ``hook()`` says that
``CACHEROOT_AUDIT`` is set (the off path costs the hook one environment lookup and imports
nothing), or by the pytest plugin for ``--cacheroot-audit``. It
adds a :func:`sys.addaudithook` hook that looks at the events through which Python creates or
writes a file (``open`` with a write, create, truncate or append flag, ``os.mkdir``, the
destination of ``os.rename``/``os.replace``, ``os.link``, ``os.symlink``, ``shutil.copyfile``,
...) and at the processes a process starts. A write into an allowed place (the cache root and
the layout's directories, the working tree, the test's temporary directory, the prefixes of
``CACHEROOT_AUDIT_ALLOW``) costs a prefix test; any other write is appended as one JSON line to
the session's record file, with the frames that made it: ``origin``, the first frame outside the
standard library (often a library such as ``huggingface_hub``), and ``caller``, the first frame
outside the standard library and ``site-packages`` (the test or project line responsible).

The session is a directory named in ``CACHEROOT_AUDIT_DIR``, which every child process inherits;
it holds ``places`` (the allowed prefixes, one a line, written once by the process that made the
session) and ``records.jsonl`` (opened with ``O_APPEND`` and written with one ``write`` per
record, so processes never interleave). A child started with a scrubbed environment has no
``CACHEROOT_AUDIT_DIR`` and is not audited: the parent records that start (``spawn`` with
``scrubbed``), and the before/after :func:`scan` of ``HOME`` and the temporary directory, taken by
the process that made the session, finds what such children and writers that are not Python
(compilers, ``nvcc``, JIT toolchains) left there.

Like :mod:`_cacheroot_layout`, this is a top-level module (the hook imports it without a package
to initialise) that imports only the standard library and the layout, and never raises into the
program it watches. The report (:mod:`cacheroot.envs._audit_report`, which imports this module,
never the other way round) is built by :mod:`cacheroot.fetch._plugin.audit` (pytest) or, for any
other command, at the exit of the process that made the session (registered by the hook).
"""

from __future__ import annotations

import _thread
import os
import sys
from collections.abc import Mapping

from _cacheroot_layout import (
    CACHEROOT,
    CACHEROOT_AUDIT,
    CACHEROOT_AUDIT_ALLOW,
    CACHEROOT_AUDIT_DIR,
    PYTEST_CURRENT_TEST,
    resolve,
    secret_variable,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Iterable
    from types import FrameType

#: The session directory's files.
RECORDS = "records.jsonl"
PLACES = "places"
#: Modes of ``CACHEROOT_AUDIT`` (``1``, ``true``, ``yes`` and ``on`` mean ``warn``).
WARN = "warn"
FAIL = "fail"
#: Values of ``CACHEROOT_AUDIT`` that turn it off, and those that mean ``warn``.
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on", WARN)
#: The values a user is told about when ``CACHEROOT_AUDIT`` holds another one.
ACCEPTED = "1, warn or fail (blank or 0: off)"
#: Prefixes of paths that hold no cache: device nodes, process and kernel views.
PSEUDO = ("/dev/", "/proc/", "/sys/")
#: How deep :func:`scan` looks below ``HOME`` and the temporary directory, and how many entries
#: it reads at most (a developer's real home can be large; the audit's tests point it elsewhere).
SCAN_DEPTH = 4
SCAN_CAP = 200_000

_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_TMPFILE = getattr(os, "O_TMPFILE", -1)  # Linux: a file without a name, gone when closed
#: Audit event -> index of the path written in its arguments.
_WRITES = {
    "open": 0,
    "os.mkdir": 0,
    "os.mkfifo": 0,
    "os.mknod": 0,
    "os.truncate": 0,
    "os.rename": 1,
    "os.link": 1,
    "os.symlink": 1,
    "shutil.copyfile": 1,
    "shutil.copytree": 1,
    "shutil.move": 1,
    "sqlite3.connect": 0,
}
#: Audit event -> index of the directory descriptor its written path is relative to.
_DIR_FD = {
    "os.mkdir": 2,
    "os.mkfifo": 2,
    "os.mknod": 3,
    "os.rename": 3,
    "os.link": 3,
    "os.symlink": 2,
}
#: The ``dir_fd`` of the ``os.open`` running now (its audit event does not carry it).
_PENDING = _thread._local()  # noqa: SLF001 - threading.local, without importing threading
#: Why places were left out of the allowed ones (said in the report).
REFUSED: dict[str, None] = {}
_OPEN_WRAPPED = False
#: Audit event -> (index of the argument vector or command, index of the environment or -1).
_SPAWNS = {
    "subprocess.Popen": (1, 3),
    "os.posix_spawn": (1, 2),
    "os.exec": (1, 2),
    "os.system": (0, -1),
}
_STDLIB = os.path.dirname(os.__file__) + os.sep
_LIBRARY_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_THIS = __file__


def _fd_path(fd: int) -> str | None:
    """The directory a descriptor is open on (Linux's ``/proc``; ``None`` elsewhere)."""
    for link in (f"/proc/self/fd/{fd}", f"/dev/fd/{fd}"):
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if os.path.isabs(target):
            return target
    return None


def _open_with_dir_fd() -> None:
    """Let the hook see the ``dir_fd`` of ``os.open`` (its ``open`` event carries only the
    relative name): ``os.open`` is wrapped once, in audited processes only."""
    global _OPEN_WRAPPED  # noqa: PLW0603 - once per process
    if _OPEN_WRAPPED:
        return
    _OPEN_WRAPPED = True
    original = os.open

    def audited_open(
        path: object, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        if dir_fd is None:
            return original(path, flags, mode)  # type: ignore[arg-type]
        _PENDING.fd = dir_fd
        try:
            return original(path, flags, mode, dir_fd=dir_fd)  # type: ignore[arg-type]
        finally:
            _PENDING.fd = None

    audited_open.__doc__ = original.__doc__
    os.open = audited_open


def bytecode(path: str) -> bool:
    """Whether ``path`` is Python's bytecode of a module this process imported (or its
    ``__pycache__`` directory, or the temporary file the bytecode is written through).

    A tagged variant of a module's bytecode counts too: pytest writes a test module's rewritten
    bytecode beside the plain one, as ``NAME.cpython-311-pytest-9.2.0.pyc`` for the module whose
    ``__cached__`` is ``NAME.cpython-311.pyc``.
    """
    name = path
    head, _, tail = path.rpartition(".")
    if tail.isdigit():
        name = head  # importlib (and pytest) write PATH.<id> first, then rename it to PATH
    is_pyc = name.endswith(".pyc")
    if not is_pyc and os.path.basename(name) != "__pycache__" and not os.path.isdir(name):
        return False
    for module in list(sys.modules.values()):
        cached = getattr(module, "__cached__", None)
        if not isinstance(cached, str):
            continue
        cached = os.path.abspath(cached)
        if not is_pyc:
            if cached.startswith(name.rstrip(os.sep) + os.sep):
                return True
        elif cached == name or name.startswith(cached.removesuffix(".pyc") + "-"):
            return True
    return _compiled_source(name, is_pyc=is_pyc)


def _compiled_source(name: str, *, is_pyc: bool) -> bool:
    """Whether ``name`` is bytecode as Python names it for a source file that is there
    (``DIR/__pycache__/NAME.<cache tag>[.opt-N][-TAG].pyc`` for ``DIR/NAME.py``), or such a
    ``__pycache__`` directory beside Python sources.

    ``python -m NAME`` (runpy) compiles the module, and writes its bytecode, before the module
    is in :data:`sys.modules`; so does ``compileall``. A cache that only sits in ``__pycache__``
    (numba's index) is not named so, and is still reported.
    """
    folder, base = os.path.split(name.rstrip(os.sep))
    if not is_pyc:
        try:
            return base == "__pycache__" and any(n.endswith(".py") for n in os.listdir(folder))
        except OSError:
            return False
    if os.path.basename(folder) != "__pycache__":
        return False
    stem, tag, rest = base.partition("." + sys.implementation.cache_tag)
    if not tag or not rest.endswith(".pyc") or rest[:1] not in (".", "-"):
        return False
    return os.path.isfile(os.path.join(os.path.dirname(folder), stem + ".py"))


def _bases() -> dict[str, str]:
    """HOME and the temporary directory (as spelled and resolved), by what they are."""
    tmp = next(
        (os.environ[n] for n in ("TMPDIR", "TEMP", "TMP") if os.environ.get(n, "").strip()),
        "/tmp",  # noqa: S108 - the system temporary directory when no variable names one
    )
    out: dict[str, str] = {}
    for what, place in (("HOME", os.path.expanduser("~")), ("the temporary directory", tmp)):
        if os.path.isabs(place):
            for spelled in (os.path.normpath(place), os.path.realpath(place)):
                out[spelled] = what
    return out


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip(os.sep)
    return path == folder or path.startswith(folder + os.sep)


def safe(places: Iterable[str]) -> list[str]:
    """``places`` without those that hold HOME or the temporary directory (a working tree
    at ``/tmp``, a pytest rootdir above HOME): allowing one would allow every escape. Each one
    left out is noted in :data:`REFUSED`."""
    bases = _bases()
    out = []
    for place in places:
        if not place or not os.path.isabs(place):
            continue
        spelled = {os.path.normpath(place), os.path.realpath(place)}
        held = sorted({what for b, what in bases.items() for p in spelled if _inside(b, p)})
        if held:
            REFUSED[
                f"{place} is not an allowed place: it holds {' and '.join(held)}, so writes "
                "there are reported"
            ] = None
            continue
        out.append(place)
    return out


def mode_of(value: str | None) -> str:
    """``warn``, ``fail``, or ``""`` (off) for a ``CACHEROOT_AUDIT`` value; blank means off.

    A value it does not know means ``warn``: the audit was asked for, so it runs, and the
    process that makes the session says so once (:func:`unknown_mode`).
    """
    value = (value or "").strip().lower()
    if not value or value in _OFF:
        return ""
    return FAIL if value == FAIL else WARN


def unknown_mode(value: str | None) -> str:
    """The line that says a ``CACHEROOT_AUDIT`` value is not one it knows; ``""`` if it is."""
    text = (value or "").strip()
    if not text or text.lower() in (*_OFF, *_ON, FAIL):
        return ""
    return (
        f"cacheroot audit: {CACHEROOT_AUDIT}={text!r} is not a mode: expected {ACCEPTED}; "
        f"auditing as {WARN}\n"
    )


def _text(value: object) -> str | None:
    """A path argument as text, or ``None`` for a file descriptor or an unusable object."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        return None
    try:
        return os.fsdecode(os.fspath(value))
    except (TypeError, ValueError):
        return None


def _prefixes(places: Iterable[str]) -> tuple[str, ...]:
    """Each place as given and resolved, with a trailing separator, for ``startswith``."""
    out: list[str] = []
    for place in places:
        if not place or not os.path.isabs(place):
            continue
        for spelled in (os.path.normpath(place), os.path.realpath(place)):
            prefix = spelled.rstrip(os.sep) + os.sep
            if prefix not in out:
                out.append(prefix)
    return tuple(out)


def _kind(filename: str) -> int:
    """0: the standard library (frozen modules too), 1: an installed library, 2: the project
    (``<string>`` and ``<stdin>`` included: that is the code ``python -c`` was given)."""
    if filename.startswith("<frozen") or filename == _THIS:
        return 0
    if any(part in filename for part in _LIBRARY_PARTS):
        return 1
    return 0 if filename.startswith(_STDLIB) else 2


def frames(frame: FrameType | None) -> tuple[str, str]:
    """``(origin, caller)`` as ``file:line``: the first frame outside the standard library, and
    the first outside ``site-packages`` too (``""`` where there is none)."""
    origin = caller = ""
    depth = 0
    while frame is not None and depth < 200:
        code = frame.f_code
        kind = _kind(code.co_filename)
        if kind:
            where = f"{code.co_filename}:{frame.f_lineno}"
            origin = origin or where
            if kind == 2:
                caller = where
                break
        frame = frame.f_back
        depth += 1
    return origin, caller


def _quote(text: str) -> str:
    """``text`` as a JSON string of ASCII characters (``json.dumps(text)``, as ensure_ascii)."""
    out = []
    for char in text:
        code = ord(char)
        if 0x20 <= code < 0x7F and char not in '"\\':
            out.append(char)
        elif code > 0xFFFF:  # a surrogate pair, as JSON spells characters beyond the BMP
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def dumps(record: dict[str, object]) -> str:
    """One record as a line of JSON: str, int, float, bool and None values.

    Hand-written so that recording costs no ``import json`` (which imports ``re`` and ``enum``:
    milliseconds in every audited process).
    """
    items = []
    for key, value in record.items():
        if isinstance(value, str):
            text = _quote(value)
        elif value is None or isinstance(value, bool):
            text = {None: "null", True: "true", False: "false"}[value]
        elif isinstance(value, (int, float)):
            text = repr(value)
        else:
            text = _quote(str(value))
        items.append(f"{_quote(key)}: {text}")
    return "{" + ", ".join(items) + "}"


class Auditor:
    """The audit hook of one process: allowed prefixes, the record file, what it has recorded.

    ``sys.addaudithook`` cannot be undone, so :attr:`enabled` turns the hook into a return.
    """

    def __init__(self, directory: str, places: Iterable[str]) -> None:
        self.directory = directory
        self.records = os.path.join(directory, RECORDS)
        self.allowed = _prefixes([directory, *safe(places)])
        self.enabled = True
        self.seen: set[str] = set()

    def allows(self, path: str) -> bool:
        """Whether writing ``path`` (absolute) is fine: allowed places, device nodes, and the
        bytecode of the modules this process imports."""
        if (path + os.sep).startswith(self.allowed) or path.startswith(PSEUDO):
            return True
        real = os.path.realpath(path)
        return (real + os.sep).startswith(self.allowed) or bytecode(path)

    def __call__(self, event: str, args: tuple[object, ...]) -> None:
        try:  # noqa: SIM105 - contextlib costs an import in every audited process
            self._event(event, args)
        except Exception:  # noqa: BLE001, S110 - never raise into the program it watches
            pass

    def _event(self, event: str, args: tuple[object, ...]) -> None:
        index = _WRITES.get(event)
        if index is None:
            if event in _SPAWNS and self.enabled:
                self._spawn(event, args)
            return
        if not self.enabled:
            return
        path = self._written(event, args, index)
        if path is None or path in self.seen or self.allows(path):
            return
        if event in ("os.mkdir", "open") and os.path.isdir(path):
            # makedirs(exist_ok=True) on a directory that exists, or io.open of a directory with
            # an opener that adds O_TMPFILE (tempfile.TemporaryFile): no named file is written.
            return
        self.seen.add(path)
        origin, caller = frames(sys._getframe(2))  # noqa: SLF001 - the frame that wrote
        self.note(
            {"kind": "write", "event": event, "path": path, "origin": origin, "caller": caller}
        )

    @staticmethod
    def _written(event: str, args: tuple[object, ...], index: int) -> str | None:
        """The absolute path ``event`` writes, or ``None`` (a read, a descriptor, memory); a
        path relative to a directory descriptor (``dir_fd=``) is resolved through it."""
        dir_fd: object = None
        if event == "open":
            flags = args[2]
            if not isinstance(flags, int) or not flags & _WRITE or flags & _TMPFILE == _TMPFILE:
                return None  # a read, or an unnamed temporary file (O_TMPFILE)
            dir_fd = getattr(_PENDING, "fd", None)
        elif event == "sqlite3.connect" and args[0] in (":memory:", b":memory:", ""):
            return None
        else:
            at = _DIR_FD.get(event, -1)
            dir_fd = args[at] if 0 <= at < len(args) else None
        path = _text(args[index])
        if path is None:
            return None
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
            base = _fd_path(dir_fd)
            if base is not None:
                return os.path.normpath(os.path.join(base, path))
        return os.path.abspath(path)

    def _spawn(self, event: str, args: tuple[object, ...]) -> None:
        argv_at, env_at = _SPAWNS[event]
        argv = args[argv_at]
        if isinstance(argv, (list, tuple)):
            command = redact_command([_text(a) or "?" for a in argv[:16]])
        else:
            command = redact_command(_text(argv) or "?")
        env = args[env_at] if env_at >= 0 else None
        scrubbed = False
        if isinstance(env, Mapping):
            names = {k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in env}
            scrubbed = CACHEROOT_AUDIT_DIR not in names
        origin, caller = frames(sys._getframe(3))  # noqa: SLF001 - skip the hook's own frames
        self.note(
            {
                "kind": "spawn",
                "event": event,
                "command": command[:300],
                "scrubbed": scrubbed,
                "origin": origin,
                "caller": caller,
            }
        )

    def note(self, record: dict[str, object]) -> None:
        """Append ``record`` (with pid, time and the current test) as one line, in one write."""
        import time  # noqa: PLC0415 - only once something is recorded

        record.setdefault("pid", os.getpid())
        record.setdefault("time", time.time())
        record.setdefault("test", os.environ.get(PYTEST_CURRENT_TEST, ""))
        line = (dumps(record) + "\n").encode("ascii")
        try:
            fd = os.open(self.records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError:
            return
        try:
            os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)


#: This process's auditor, once installed.
AUDITOR: Auditor | None = None
#: Set in the process that made the session: what :func:`scan` found before anything ran, and
#: whether this process reports at exit (the pytest plugin takes that over).
BEFORE: dict[str, tuple[bool, int]] | None = None
SCAN_BASES: tuple[str, ...] = ()
#: Files held open from before the session (:func:`held_files`): the scan leaves them out.
HELD: tuple[str, ...] = ()
REPORT_AT_EXIT = False


def layout_places(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The root and every directory the layout sets, in ``environ``.

    A variable set by hand to a place in HOME or the temporary directory, outside the root
    (``NUMBA_CACHE_DIR=~/.numba-cache``), is left out and noted in :data:`REFUSED`: that is a
    cache outside the root, which the audit is there to report.
    """
    layout = resolve(environ)
    root = layout.root
    places = [root] if root else []
    bases = _bases()
    for setting in layout.settings.values():
        value = setting.value
        if not value:
            continue
        if not (root and _inside(os.path.normpath(value), os.path.normpath(root))):
            held = next((what for b, what in bases.items() if _inside(value, b)), None)
            if held is not None:
                REFUSED[
                    f"{setting.name}={value} lies in {held}, outside the cache root: not an "
                    "allowed place (cacheroot doctor shows the row); unset it to let the "
                    "layout place it"
                ] = None
                continue
        places.append(value)
    return places


def allow_list(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The prefixes of ``CACHEROOT_AUDIT_ALLOW`` (``os.pathsep``-separated; blanks skipped)."""
    raw = environ.get(CACHEROOT_AUDIT_ALLOW) or ""
    return [os.path.expanduser(p.strip()) for p in raw.split(os.pathsep) if p.strip()]


def read_places(directory: str) -> list[str]:
    """The allowed places the session's maker wrote."""
    try:
        with open(os.path.join(directory, PLACES), encoding="utf-8") as f:
            return [line for line in f.read().split("\n") if line]
    except OSError:
        return []


def redact_command(command: list[str] | str) -> str:
    """A command line as text, with what looks like a secret replaced by ``***``: the value
    of an option that names a token, key, secret or password (``--token=...``, ``--token
    ...``, ``--password ...``), of ``-p`` (``sshpass -p``, ``docker login -p``) except for the
    programs whose ``-p`` is something else (:data:`_DASH_P_IS_NO_PASSWORD`), the password
    attached to ``-p`` of the MySQL clients (:data:`_DASH_P_ATTACHED`), of a
    ``NAME=value`` word whose name is a secret's (``HF_TOKEN=``, ``AWS_SECRET_ACCESS_KEY=``,
    ``-e OPENAI_API_KEY=...``, ``--env=GITHUB_TOKEN=...``: the layout's
    :func:`~_cacheroot_layout.secret_variable`), an ``Authorization:`` or other key header, a
    URL's password (``user:***@``, a token as userinfo ``***@``) and its token-like query
    values. Arguments holding spaces are quoted. Only called when a process is started or
    recorded."""
    import re  # noqa: PLC0415 - only once a command is recorded

    argv = command.split(" ") if isinstance(command, str) else list(command)
    out: list[str] = []
    hide_next = False
    program, starts = "", True  # the program whose arguments these are; the next word names one
    for arg in argv:
        if hide_next:
            arg, hide_next = "***", False  # noqa: PLW2901 - the argument, redacted
        else:
            if starts and not re.fullmatch(_SETTING, arg):
                program, starts = os.path.basename(arg), False  # a shell's FOO=x before it skipped
            if (
                arg in _SEPARATORS
                or arg.endswith(";")
                or (arg == "-m" and program.startswith("python"))
            ):
                starts = True  # a shell's next command, or the module python runs
            hide_next = bool(re.fullmatch(_HIDDEN_OPTION, arg)) or (
                arg == "-p" and program not in _DASH_P_IS_NO_PASSWORD
            )
            if program in _DASH_P_ATTACHED and arg.startswith("-p") and len(arg) > 2:
                arg = "-p***"  # noqa: PLW2901 - mysql -pPASSWORD, redacted
        arg = re.sub(_HIDDEN_ASSIGN, r"\1***", arg)  # noqa: PLW2901
        setting = re.fullmatch(_SETTING, arg)
        if setting and secret_variable(setting[2]):
            arg = f"{setting[1] or ''}{setting[2]}=***"  # noqa: PLW2901
        arg = re.sub(_HIDDEN_HEADER, r"\1: ***", arg)  # noqa: PLW2901
        arg = re.sub(_USERINFO, _userinfo, arg)  # noqa: PLW2901
        arg = re.sub(_HIDDEN_QUERY, r"\1***", arg)  # noqa: PLW2901
        out.append(f"'{arg}'" if " " in arg and not isinstance(command, str) else arg)
    return " ".join(out)


_WORDS = r"(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|auth|credentials?)"
_HIDDEN_OPTION = rf"(?i)--?[\w-]*{_WORDS}[\w-]*"
_HIDDEN_ASSIGN = rf"(?i)^(--?[\w-]*{_WORDS}[\w-]*=)[^\s]+"
_HIDDEN_HEADER = r"(?i)\b(authorization|proxy-authorization|x-api-key|api-key|cookie)\s*:\s*.+"
_USERINFO = r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#\s@]*(?:@[^/?#\s@]*)*)@"
_HIDDEN_QUERY = rf"(?i)([?&][\w-]*(?:{_WORDS}|sig|signature|key)[\w-]*=)[^&#\s]+"
#: ``NAME=value`` (an environment setting, ``make``'s or Hydra's ``a.b=value``), alone or as an
#: option's value (``--env=NAME=value``): the option, the name.
_SETTING = r"(?s)(--?[\w-]+=)?([A-Za-z_][\w.-]*)=.+"
#: The words after which a shell line starts another command.
_SEPARATORS = frozenset({";", "&&", "||", "|", "&"})
#: Programs whose ``-p`` is no password: a flag with no value, so the next word is a path
#: (``mkdir -p DIR``, ``cp -p``), or pytest's plugin (``pytest -p no:xdist``,
#: ``python -m pytest -p``). Any other program's ``-p VALUE`` is hidden: a port or a process id
#: shown as ``***`` costs less than a password shown in clear.
_DASH_P_IS_NO_PASSWORD = frozenset({"cp", "install", "ls", "mkdir", "py.test", "pytest", "tar"})
#: Programs that take the password attached to ``-p`` (``mysql -pPASSWORD``); another
#: program's ``-pVALUE`` is kept (``docker run -p8080:80`` maps a port).
_DASH_P_ATTACHED = frozenset({"mariadb", "mariadb-dump", "mysql", "mysqladmin", "mysqldump"})


def _userinfo(match: object) -> str:
    scheme, userinfo = match.group(1), match.group(2)  # type: ignore[attr-defined]
    user, colon, _ = str(userinfo).partition(":")
    return f"{scheme}{user}:***@" if colon else f"{scheme}***@"


def write_places(directory: str, places: Iterable[str]) -> None:
    """Record ``places`` for the processes that join the session (replaced whole, atomically)."""
    path = os.path.join(directory, PLACES)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\n" for p in dict.fromkeys(places) if p and "\n" not in p))
    os.replace(tmp, path)


def scan_bases() -> tuple[str, ...]:
    """``HOME`` and the temporary directory, as this process resolves them."""
    import tempfile  # noqa: PLC0415 - only the session's maker scans

    bases = [os.path.expanduser("~"), tempfile.gettempdir()]
    return tuple(dict.fromkeys(os.path.realpath(b) for b in bases if os.path.isabs(b)))


def scan(
    bases: Iterable[str], skip: Iterable[str], depth: int = SCAN_DEPTH, cap: int = SCAN_CAP
) -> dict[str, tuple[bool, int]]:
    """Every entry below ``bases`` to ``depth`` levels: path -> (is a directory, mtime in ns).

    Symbolic links are not followed; the ``skip`` prefixes (allowed places) are not entered.
    At most ``cap`` entries are read; the ``""`` key is set when the cap cut the scan short.
    """
    skipped = _prefixes(skip)
    found: dict[str, tuple[bool, int]] = {}
    stack = [(os.path.normpath(b), 0) for b in bases]
    while stack:
        folder, level = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = entry.path
            if (path + os.sep).startswith(skipped):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except OSError:
                continue
            found[path] = (is_dir, mtime)
            if len(found) >= cap:
                found[""] = (False, 0)
                return found
            if is_dir and level + 1 < depth:
                stack.append((path, level + 1))
    return found


def fd_links(pid: int | str) -> list[tuple[int, str]]:
    """``(descriptor, what it points at)`` for each file ``pid`` holds open, from ``/proc``
    (``[]`` where that is not readable: another user's process, or no ``/proc``)."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    links = []
    for name in names:
        try:
            links.append((int(name), os.readlink(f"{folder}/{name}")))
        except (OSError, ValueError):  # noqa: PERF203 - closed meanwhile
            continue
    return links


def reads(pid: int | str, fd: int) -> bool:
    """Whether descriptor ``fd`` of ``pid`` is open for reading only (a pipe's reading end)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
            for line in f:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE == os.O_RDONLY
    except (OSError, ValueError, IndexError):
        pass
    return False


def held_files(*, own_files: bool = True) -> tuple[str, ...]:
    """The files open in this process (unless not ``own_files``), in its parent, and in the
    processes that read this process's output through a pipe (``| tee log``).

    Where a command's output goes (``pytest > log``, ``| tee log``) is opened before the session
    and written all through it, by no test: the scan must not count it. Asked again at the end
    without this process's own files (which by then include what it opened during the session),
    so that a ``tee`` that opened its file late is seen too. Only what ``/proc`` shows is seen;
    elsewhere this is empty.
    """
    own = fd_links("self")
    pids = [os.getppid()]
    pipes = {target for fd, target in own if fd in (1, 2) and target.startswith("pipe:")}
    if pipes:
        try:
            entries = os.listdir("/proc")
        except OSError:
            entries = []
        for entry in entries:
            if not entry.isdigit() or int(entry) in (os.getpid(), os.getppid()):
                continue
            if any(t in pipes and reads(entry, fd) for fd, t in fd_links(entry)):
                pids.append(int(entry))
    links = [target for _, target in own] if own_files else []
    for pid in pids:
        links += [target for _, target in fd_links(pid)]
    return tuple(
        sorted(
            {
                target
                for target in links
                if target.startswith(os.sep)
                and not target.endswith(" (deleted)")
                and not target.startswith(PSEUDO)
            }
        )
    )


def start(directory: str, places: Iterable[str], *, scan_home: bool = True) -> Auditor:
    """Make ``directory`` the session of this process and its children, and install the hook.

    ``places`` are the allowed prefixes (recorded for the children). With ``scan_home``, HOME
    and the temporary directory are scanned first, for :func:`scan` to compare at the end, and
    the files already held open (:func:`held_files`) are noted, for the scan to leave out.
    """
    global AUDITOR, BEFORE, SCAN_BASES, HELD  # noqa: PLW0603 - one auditor per process
    places = safe(places)
    os.makedirs(directory, exist_ok=True)
    write_places(directory, places)
    os.environ[CACHEROOT_AUDIT_DIR] = directory
    if scan_home:
        SCAN_BASES = scan_bases()
        HELD = held_files()
        BEFORE = scan(SCAN_BASES, [directory, *places])
    if AUDITOR is None:
        AUDITOR = Auditor(directory, places)
        sys.addaudithook(AUDITOR)
        _open_with_dir_fd()
        _hello(AUDITOR)
    else:
        AUDITOR.__init__(directory, places)  # type: ignore[misc]
    return AUDITOR


def move(directory: str, places: Iterable[str]) -> Auditor:
    """Move this process's session to ``directory``, with ``places`` allowed (the pytest plugin
    takes over a session the start-up hook made): its records come along, the old directory
    goes, and the scan taken at start-up stays (it saw more of the session than a new one)."""
    import shutil  # noqa: PLC0415 - only pytest's controller moves a session

    if AUDITOR is None:
        return start(directory, places)
    old = AUDITOR.directory
    if os.path.realpath(old) == os.path.realpath(directory):
        return start(directory, places, scan_home=False)
    auditor = start(directory, places, scan_home=False)
    try:
        with open(os.path.join(old, RECORDS), "rb") as f:
            earlier = f.read()
    except OSError:
        earlier = b""
    if earlier:
        fd = os.open(auditor.records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, earlier)
        finally:
            os.close(fd)
    shutil.rmtree(old, ignore_errors=True)
    return auditor


def _hello(auditor: Auditor) -> None:
    """Record that this process is audited (the report counts them)."""
    argv = getattr(sys, "argv", None) or [sys.executable]
    command = redact_command([str(a) for a in argv[:4]])[:300]
    auditor.note({"kind": "process", "ppid": os.getppid(), "command": command})


def join(directory: str) -> Auditor:
    """Install the hook in a process whose parent made the session ``directory``.

    A child whose own layout names a root (``CACHEROOT`` or a pinned root, not the default
    fallback) may write there as well.
    """
    global AUDITOR  # noqa: PLW0603 - one auditor per process
    places = read_places(directory)
    if resolve(os.environ).root_source == CACHEROOT:
        places += layout_places(os.environ)
    places += allow_list(os.environ)
    if AUDITOR is None:
        AUDITOR = Auditor(directory, places)
        sys.addaudithook(AUDITOR)
        _open_with_dir_fd()
        _hello(AUDITOR)
    return AUDITOR


def install() -> bool:
    """Install the audit in a process with ``CACHEROOT_AUDIT`` set; whether it made the session.

    Called at start-up by ``_cacheroot_hook.audit()``. A process that inherits a session joins
    it; the first process makes one in the temporary directory, with the working tree allowed,
    and returns ``True``: it is the one that reports at its exit (``cacheroot audit: ...`` on
    stderr, the JSON report in ``CACHEROOT_AUDIT_REPORT`` or the session directory), which the
    caller arranges, so that this module never imports the report (which imports this module).
    Failures say one line on stderr: the audit was asked for, so its absence must not be silent;
    so does a ``CACHEROOT_AUDIT`` value it does not know (the audit then runs as ``warn``).
    """
    global REPORT_AT_EXIT  # noqa: PLW0603
    try:
        value = os.environ.get(CACHEROOT_AUDIT)
        if AUDITOR is not None or not mode_of(value):
            return False
        directory = os.environ.get(CACHEROOT_AUDIT_DIR, "").strip()
        if directory:
            join(directory)
            return False
        # Said once, by the process that makes the session (its children inherit the value).
        sys.stderr.write(unknown_mode(value))
        import tempfile  # noqa: PLC0415 - only the session's maker

        directory = tempfile.mkdtemp(prefix="cacheroot-audit-")
        places = [*layout_places(os.environ), os.getcwd(), *allow_list(os.environ)]
        start(directory, places)
        REPORT_AT_EXIT = True
    except Exception as exc:  # noqa: BLE001 - an interpreter must always start
        sys.stderr.write(f"cacheroot audit: not installed in pid {os.getpid()}: {exc!r}\n")
        return False
    return True
