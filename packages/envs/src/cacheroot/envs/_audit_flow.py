"""Where values go, for the static audit: writes, downloads, children, platforms and classes.

:mod:`._audit_ast` finds the places that look like locations; this module follows values to
where they are used. A value that reaches a path that is created or written (``open(p, "w")``,
``makedirs``, ``cache_dir=``, ``urlretrieve``, ``save_pretrained``) is a location whatever its
name says; each of its origins (an environment read, a fixed base, ``__file__``) is followed
through every value a name is given, in every branch. The same walk says which platforms a
branch runs on (``sys.platform``, ``os.name``, ``platform.system()``), and the words around a
location decide its class (:data:`._audit_ast.KINDS`).

Only the syntax tree is read. A helper imported from another module is not followed: it is
counted, so that a package is never clean only because nothing in it could be seen.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from ._audit_names import (
    _JOINERS,
    _PATH_METHODS,
    _WRAPPERS,
    CACHE,
    CONFIG,
    IPC,
    OUTPUT,
    PLATFORMS,
    THROWAWAY,
)
from ._audit_names import DOWNLOAD as DOWNLOAD_KIND
from ._audit_names import dotted as _dotted

if TYPE_CHECKING:
    from ._audit_ast import _Module, _Scope

#: Kinds of sink: a path created or written, a directory a library downloads into.
WRITE = "write"
DOWNLOAD = "download"

#: Keywords whose value is a directory a library downloads into.
_DOWNLOAD_KEYWORDS = frozenset(
    {
        "cache_dir",
        "local_dir",
        "download_root",
        "download_dir",
        "download_path",
        "cache_folder",
        "cache_path",
        "cache_location",
        "data_home",
        "model_dir",
    }
)
#: Keywords whose value is a directory written to (outputs, logs).
_WRITE_KEYWORDS = frozenset(
    {"output_dir", "out_dir", "save_dir", "save_path", "output_path", "log_dir", "logdir"}
)
#: Modules whose ``open`` takes a path first and a mode second.
_OPENERS = frozenset({"io", "gzip", "bz2", "lzma", "tarfile", "codecs", "builtins", "zipfile"})
#: Calls that write their first argument.
_WRITE_FIRST = frozenset({"os.makedirs", "os.mkdir", "sqlite3.connect", "os.mkfifo"})
#: Calls that write their second argument.
_WRITE_SECOND = frozenset(
    {
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
        "os.rename",
        "os.replace",
        "torch.save",
    }
)
#: Methods of a path object that create or write it.
_PATH_WRITERS = frozenset({"mkdir", "touch", "write_text", "write_bytes"})
#: Calls that fetch a URL, and what of their answer reads it whole into memory.
_FETCHES = frozenset(
    {"requests.get", "requests.request", "httpx.get", "urllib.request.urlopen", "urlopen"}
)
_IN_MEMORY = frozenset({"content", "raw"})
#: Calls whose result is a path that changes on every run.
_PER_RUN = re.compile(r"getpid|uuid|mkdtemp|TemporaryDirectory|time\(|token_hex|random")

#: Words of a location that say what lies there (names split at ``_``, paths at ``/ . -``).
_CACHE_WORDS = frozenset(
    {"CACHE", "CACHES", "CACHEDIR", "JIT", "AOT", "COMPILE", "KERNELS", "PYCACHE"}
)
_IPC_WORDS = frozenset({"SOCK", "SOCKET", "SOCKETS", "IPC", "RPC", "ZMQ", "FIFO", "RUNTIME"})
_OUTPUT_WORDS = frozenset(
    {
        "OUT",
        "OUTPUT",
        "OUTPUTS",
        "DUMP",
        "DUMPS",
        "LOG",
        "LOGS",
        "RESULT",
        "RESULTS",
        "REPORT",
        "REPORTS",
        "TRACE",
        "TRACES",
        "PROFILE",
        "PROFILER",
        "PROFILES",
        "ARTIFACT",
        "ARTIFACTS",
        "EXPORT",
        "PLOTS",
        "FIGURES",
        "SAVE",
        "SAVED",
    }
)
_CONFIG_WORDS = frozenset({"CONFIG", "CONF", "CFG", "SETTINGS"})
_DOWNLOAD_WORDS = frozenset(
    {"DOWNLOAD", "DOWNLOADS", "DATA", "DATASET", "DATASETS", "HUB", "ASSETS", "WEIGHTS", "MODELS"}
)
_SPLIT = re.compile(r"[^A-Za-z0-9]+")
#: The user's cache base in a rendered place: it says that a library keeps something there,
#: not what (``${XDG_CACHE_HOME:-~/.cache}/demo/models`` is a download).
_USER_CACHE_BASE = re.compile(r"XDG_CACHE_HOME|~/\.cache\b")


def _mode_writes(mode: ast.expr | None) -> bool:
    return (
        isinstance(mode, ast.Constant)
        and isinstance(mode.value, str)
        and (any(c in mode.value for c in "wax+"))
    )


def sink_paths(call: ast.Call, dotted: str) -> list[tuple[ast.expr, str, str]]:  # noqa: PLR0912
    """``(path, kind of sink, how)`` for each path ``call`` creates, writes or downloads into."""
    func = call.func
    args = call.args
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    out: list[tuple[ast.expr, str, str]] = []
    attr = func.attr if isinstance(func, ast.Attribute) else ""
    if dotted in ("open", "io.open") or (attr == "open" and dotted.rpartition(".")[0] in _OPENERS):
        mode = args[1] if len(args) > 1 else keywords.get("mode")
        if args and _mode_writes(mode):
            out.append((args[0], WRITE, "opened for writing"))
    elif isinstance(func, ast.Attribute) and attr == "open":
        mode = args[0] if args else keywords.get("mode")
        if _mode_writes(mode):
            out.append((func.value, WRITE, "opened for writing"))
    elif dotted in _WRITE_FIRST and args:
        out.append((args[0], WRITE, f"made by {dotted}()"))
    elif dotted in _WRITE_SECOND and len(args) > 1:
        out.append((args[1], WRITE, f"written by {dotted}()"))
    elif isinstance(func, ast.Attribute) and attr in _PATH_WRITERS:
        out.append((func.value, WRITE, f"made by .{attr}()"))
    elif attr in ("save_pretrained", "extractall") or dotted in ("save_pretrained",):
        target = args[0] if args else keywords.get("path") or keywords.get("save_directory")
        if target is not None:
            out.append((target, WRITE, f"written by .{attr}()"))
    elif dotted.rpartition(".")[2] == "urlretrieve":
        target = args[1] if len(args) > 1 else keywords.get("filename")
        if target is not None:
            out.append((target, DOWNLOAD, "downloaded into by urlretrieve()"))
    callee = attr or dotted
    for name, value in keywords.items():
        if name in _DOWNLOAD_KEYWORDS:
            out.append((value, DOWNLOAD, f"downloaded into by {callee}({name}=)"))
        elif name in _WRITE_KEYWORDS:
            out.append((value, WRITE, f"written by {callee}({name}=)"))
        elif name == "root" and isinstance(keywords.get("download"), ast.Constant):
            out.append((value, DOWNLOAD, f"downloaded into by {callee}(root=, download=)"))
        elif name == "dir" and dotted.startswith("tempfile."):
            out.append((value, WRITE, f"made in by {dotted}(dir=)"))
    return out


def origins(m: _Module, node: ast.AST | None, scope: _Scope, depth: int = 0) -> list[ast.AST]:  # noqa: PLR0911, PLR0912
    """Where a path value may come from: environment reads, fixed bases, ``__file__``, and
    calls to helpers of other modules (the leaves the walk stops at), over every branch."""
    if node is None or depth > 12:
        return []
    d = depth + 1
    if m.env_read(node) is not None or m.base_call(node) or m.reader_call(node):
        return [node]
    if isinstance(node, ast.Constant):
        return [node] if isinstance(node.value, str) and node.value.startswith(("/", "~")) else []
    if isinstance(node, ast.Name):
        if node.id == "__file__":
            return [node]
        values = m.values_of(node.id, scope)
        out: list[ast.AST] = []
        for value in values or ():
            out += origins(m, value, m.scope_of.get(value, m.tree), d)
        return out
    if isinstance(node, ast.Call):
        return _call_origins(m, node, scope, d)
    # Only the head of a path is where it lies: ``base / name``, ``f"{base}/{user}"``,
    # ``join(base, user)`` lie in ``base``; a variable in a later part names a component.
    if isinstance(node, ast.BinOp):
        return origins(m, node.left, scope, d)
    if isinstance(node, ast.JoinedStr):
        return origins(m, node.values[0], scope, d) if node.values else []
    if isinstance(node, ast.FormattedValue):
        return origins(m, node.value, scope, d)
    if isinstance(node, ast.IfExp):
        return origins(m, node.body, scope, d) + origins(m, node.orelse, scope, d)
    if isinstance(node, ast.BoolOp):
        return [o for v in node.values for o in origins(m, v, scope, d)]
    if isinstance(node, ast.Attribute) and node.attr in ("parent", "parents"):
        return origins(m, node.value, scope, d)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        return origins(m, node.value, scope, d)  # Path(__file__).parents[1]
    return []


def _call_origins(m: _Module, node: ast.Call, scope: _Scope, d: int) -> list[ast.AST]:

    name = _dotted(node.func)
    if name in _JOINERS or name in _WRAPPERS or name.endswith("path.join"):
        return origins(m, node.args[0], scope, d) if node.args else []
    if name in ("os.path.dirname", "os.fspath", "str"):
        return [o for a in node.args[:1] for o in origins(m, a, scope, d)]
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in (*_PATH_METHODS, "with_name", "parent"):
        return origins(m, func.value, scope, d)
    if isinstance(func, ast.Name) and func.id in m.functions:
        fn = m.functions[func.id]
        return [o for r in returns(fn) for o in origins(m, r, fn, d)]
    if m.helper(node):
        return [node]
    return []


def returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """Every expression ``fn`` returns (not those of a nested function)."""
    found: list[ast.expr] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return found


# -- platforms ----------------------------------------------------------------------------------

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


def platform_test(m: _Module, test: ast.AST, platform: str, depth: int = 0) -> bool | None:  # noqa: PLR0911, PLR0912
    """What ``test`` is on ``platform`` (``True``/``False``), or ``None`` when it does not
    depend on the platform alone."""
    if depth > 6:
        return None
    d = depth + 1
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = platform_test(m, test.operand, platform, d)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [platform_test(m, v, platform, d) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
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
        if isinstance(op, ast.NotEq | ast.NotIn):
            return value not in strings
        return None
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
    if isinstance(test, ast.Name):
        assigned = m.value_of(test.id, m.tree)
        if assigned is not None and not isinstance(assigned, ast.Constant):
            return platform_test(m, assigned, platform, d)
    return None


def runs_on(m: _Module, node: ast.AST) -> tuple[str, ...]:
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


# -- classes ------------------------------------------------------------------------------------


def words(*texts: str) -> frozenset[str]:
    """The words of names and paths, upper case (``demo_profile-output.d`` -> 4 words)."""
    return frozenset(w.upper() for t in texts for w in _SPLIT.split(t) if w)


def kind_of(  # noqa: PLR0911 - one per class
    names: tuple[str, ...], expression: str, sink: str, *, beside_source: bool = False
) -> tuple[str, str]:
    """The class of a location and why, from the words of its names and path and the kind of
    sink its value reaches (``""``: none seen). A value that reaches a download is a download
    whatever it is called. The user's cache base (``$XDG_CACHE_HOME``, ``~/.cache``) is no word
    of the place's own, but what lies under it is a download when the place says so, else a
    cache. A file written beside the source that names no cache nor download is output
    (generated code, build metadata)."""

    said = words(*(_USER_CACHE_BASE.sub("", t) for t in (*names, expression)))
    if _PER_RUN.search(expression):
        return THROWAWAY, "a new name on every run (made per process or at random)"
    if sink == DOWNLOAD:
        # What is written there says more than what it is called (a download cache).
        return DOWNLOAD_KIND, "downloads land there"
    if said & _CACHE_WORDS or "CACHE" in "".join(said):
        return CACHE, f"its name says cache ({_first(said & _CACHE_WORDS) or 'cache'})"
    if _USER_CACHE_BASE.search(" ".join((*names, expression))):
        # Kept in the user's cache directory by its author's choice: a cache, or a download.
        if said & _DOWNLOAD_WORDS:
            return DOWNLOAD_KIND, f"downloads land there ({_first(said & _DOWNLOAD_WORDS)})"
        return CACHE, "kept in the user's cache directory"
    if said & _IPC_WORDS or expression.endswith((".sock", ".ipc", ".socket")):
        return IPC, f"a socket or IPC place ({_first(said & _IPC_WORDS) or 'socket file'})"
    if said & _OUTPUT_WORDS:
        return OUTPUT, f"output the run writes ({_first(said & _OUTPUT_WORDS)})"
    if said & _CONFIG_WORDS:
        return CONFIG, f"configuration ({_first(said & _CONFIG_WORDS)})"
    if sink == DOWNLOAD or said & _DOWNLOAD_WORDS:
        return DOWNLOAD_KIND, "downloads land there" + (
            f" ({_first(said & _DOWNLOAD_WORDS)})" if said & _DOWNLOAD_WORDS else ""
        )
    if beside_source:
        return OUTPUT, "written beside the source, naming no cache"
    return CACHE, "kept from one run to the next"


def _first(found: frozenset[str]) -> str:
    return sorted(found)[0].lower() if found else ""


def is_test_file(file: str) -> bool:
    """Whether ``file`` is test code (where setting a layout variable overrides the layout)."""
    *dirs, name = file.split("/")
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith("_test.py")
        or not {"tests", "test"}.isdisjoint(dirs)
    )


def fetched_in_memory(m: _Module, node: ast.AST) -> ast.expr | None:
    """The URL of a download ``node`` reads whole into memory or into an anonymous file on
    every call (``requests.get(url).content``, ``urlopen(url).read()``, ``urlretrieve(url)``),
    or ``None``."""

    scope = m.scope_of.get(node, m.tree)
    if isinstance(node, ast.Attribute) and node.attr in _IN_MEMORY:
        call = _fetch_call(m, node.value, scope)
        return call.args[0] if call is not None and call.args else None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "read" and not node.args:
        call = _fetch_call(m, func.value, scope)
        if call is not None and _dotted(call.func).endswith("urlopen") and call.args:
            return call.args[0]
    fetches = _dotted(func).rpartition(".")[2] == "urlretrieve" and len(node.args) == 1
    if fetches and not any(k.arg == "filename" for k in node.keywords):
        return node.args[0]
    return None


def _fetch_call(m: _Module, node: ast.AST, scope: _Scope) -> ast.Call | None:

    if isinstance(node, ast.Name):
        value = m.with_values.get((scope, node.id)) or m.value_of(node.id, scope)
        node = value if value is not None else node
    if isinstance(node, ast.Call) and _dotted(node.func) in _FETCHES:
        return node
    return None
