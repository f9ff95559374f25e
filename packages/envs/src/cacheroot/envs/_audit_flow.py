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
#: A write inside a function that downloads: a download, unless its words say otherwise.
FETCHED = "fetched"
#: A write under a name made anew on every run (``join(tmp, f"pool_{os.getpid()}")``).
PER_RUN = "per-run"
#: How much a kind of sink says, least first.
SINK_RANK = {PER_RUN: 0, WRITE: 1, FETCHED: 2, DOWNLOAD: 3}

# Limits of the walks: each written once, here.
#: How many steps :func:`origins` follows a value back from where it is used (each node on the
#: way is a step: a name, a call, a join, the return of a helper, an argument given to it).
ORIGIN_DEPTH = 24
#: How many steps :func:`per_run` follows the parts of a written path, through names and the
#: arguments callers give a parameter.
PER_RUN_DEPTH = 6
#: How deeply :func:`platform_test` reads a test (``not``, ``and``/``or``, a name given one).
PLATFORM_TEST_DEPTH = 6

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
_IPC_WORDS = frozenset(
    {"SOCK", "SOCKET", "SOCKETS", "IPC", "RPC", "ZMQ", "FIFO", "RUNTIME", "LOCK", "LOCKS"}
)
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
_CONFIG_WORDS = frozenset(
    {"CONFIG", "CONF", "CFG", "SETTINGS", "CREDENTIALS", "CREDENTIAL", "CREDS", "SECRETS"}
)
_DOWNLOAD_WORDS = frozenset(
    {"DOWNLOAD", "DOWNLOADS", "DOWNLOADED", "DATA", "DATASET", "DATASETS", "HUB", "ASSETS"}
    | {"WEIGHTS", "MODELS"}
)
#: Shared memory: where processes meet.
_SHM = "/dev/shm"  # noqa: S108 - the place this audit classifies, not one it writes
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
    elif dotted.rpartition(".")[2] == "download_url_to_file":
        # torch.hub's: a literal destination too (``download_paths`` follows only values).
        target = args[1] if len(args) > 1 else keywords.get("dst")
        if target is not None:
            out.append((target, DOWNLOAD, "downloaded into by download_url_to_file()"))
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


#: Words of a callee that say it downloads (``download_file``, ``http_get``, ``fetch_url``).
_DOWNLOADING = re.compile(r"download|http_get|fetch|retrieve", re.IGNORECASE)
#: Callees that take a URL but keep nothing (logging, formatting, parsing, containers).
_NOT_KEEPING = frozenset(
    {
        "print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log",
        "format", "join", "append", "extend", "insert", "add", "update", "get", "pop",
        "startswith", "endswith", "replace", "split", "urlparse", "urljoin", "urlsplit",
        "quote", "unquote", "sub", "match", "search", "isinstance", "str", "len", "dict",
        "setdefault", "ValueError", "RuntimeError", "OSError", "Exception", "TypeError",
    }
)  # fmt: skip
#: Keywords of a download call that name what it fetches or how, never where it lands.
_NOT_A_TARGET = frozenset(
    {"url", "urls", "base_url", "headers", "timeout", "params", "data", "json", "auth"}
)


#: Callees that look a file up, whatever URL they are given.
_LOOKING = ("find", "search", "locate", "lookup", "check", "validate", "is_", "has_", "exists")


def _urlish(node: ast.AST) -> bool:
    """Whether an argument is a URL: ``"https://..."``, a name that ends in ``url``,
    or a string built from either."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith(
            ("http://", "https://", "ftp://")
        )
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name.lower().endswith(("url", "urls"))
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and _urlish(node.values[0])
    if isinstance(node, ast.BinOp):
        return _urlish(node.left)
    return False


def download_paths(call: ast.Call, dotted: str) -> list[tuple[ast.expr, str, str]]:
    """``(path, DOWNLOAD, how)`` for the places a call downloads into: every argument but the
    URL of a callee that says it downloads (``download_file(url, out)``), or of any call given
    a URL and a path (``create(path, base_url=...)``) that is not logging or formatting."""
    callee = dotted.rpartition(".")[2]
    if not callee or callee in _NOT_KEEPING or callee == "urlretrieve" or callee[0].isupper():
        return []  # (a class made, ``DownloadManager(...)``, has downloaded nothing yet)
    if callee.lower().lstrip("_").startswith(_LOOKING):
        return []  # ``find_file(name, searchpath=..., url=...)``: the URL says where to get it
    arguments: list[tuple[str | None, ast.expr]] = [(None, a) for a in call.args]
    arguments += [(k.arg, k.value) for k in call.keywords if "search" not in (k.arg or "")]
    urls = [value for name, value in arguments if (name or "").endswith("url") or _urlish(value)]
    if not urls and not _DOWNLOADING.search(callee):
        return []
    out: list[tuple[ast.expr, str, str]] = []
    for name, value in arguments:
        if name in _NOT_A_TARGET or any(value is u for u in urls) or (name is None and not urls):
            continue
        if isinstance(value, ast.Constant | ast.JoinedStr | ast.Dict | ast.Lambda):
            continue
        out.append((value, DOWNLOAD, f"downloaded into by {callee}()"))
    if not urls and _DOWNLOADING.search(callee):
        # ``download(url, path)``: the first argument is what is fetched, the others where.
        out += [(a, DOWNLOAD, f"downloaded into by {callee}()") for a in call.args[1:]]
    return out


#: Receivers whose ``get``/``stream``/``request`` fetches from the network.
_CLIENTS = re.compile(r"requests|session|sess\b|client|http|urllib3|pool", re.IGNORECASE)


def fetches(m: _Module, fn: ast.AST) -> bool:
    """Whether a function fetches from the network itself: ``requests.get``, ``urlopen``,
    ``session.get``, a call that says it downloads, or one given a URL to keep."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or m.scope_of.get(node) is not fn:
            continue
        name = _dotted(node.func)
        last = name.rpartition(".")[2]
        if name in _FETCHES or last in ("urlopen", "urlretrieve") or _DOWNLOADING.search(last):
            return True
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("get", "stream", "request", "urlopen")
            and _CLIENTS.search(_dotted(func.value) or "")
            and node.args
        ):
            return True
    return False


#: A leaf of :func:`origins`: the module it lies in, and the node.
Leaf = tuple["_Module", ast.AST]
#: Methods of a string or a path that keep the place their object names.
_SAME_PLACE = frozenset({*_PATH_METHODS, "with_name", "parent", "split", "strip", "rstrip"})


def origins(m: _Module, node: ast.AST | None, scope: _Scope) -> list[Leaf]:
    """Where a path value may come from: environment reads, fixed bases, ``__file__``, the
    parameters of the function it is in, calls to helpers that cannot be read (the leaves the
    walk stops at), over every branch and every value a name is given (``+=``, ``.append``,
    a loop over a list), into the functions and constants of the package's other modules.

    The answer does not depend on the order of the code: a node already followed is skipped
    only when it was reached in as few steps, and a function's returns are followed once per
    depth (:func:`_returned`) and given each call's own arguments, never skipped because
    another call of it was followed first. Each leaf once, in the order first found."""
    return list(_once(_origins(m, node, scope, 0, {})))


def _origins(  # noqa: PLR0911, PLR0912 - one case per kind of node
    m: _Module, node: ast.AST | None, scope: _Scope, depth: int, seen: dict[int, int]
) -> list[Leaf]:
    """:func:`origins` from ``depth`` steps on; ``seen``: the fewest steps each node (by id)
    was reached in by this walk. A node is followed again when reached in fewer, so that
    everything within :data:`ORIGIN_DEPTH` steps is found, whichever way was taken first."""
    if node is None or depth > ORIGIN_DEPTH or seen.get(id(node), depth + 1) <= depth:
        return []
    seen[id(node)] = depth
    d = depth + 1
    if isinstance(node, ast.Call):
        return _call_origins(m, node, scope, d, seen)
    if m.env_read(node) is not None or m.base_call(node) or m.reader_call(node):
        return [(m, node)]
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (owner := m.owner(scope)) is not None
    ):  # ``self.NAME``: every value the class's methods give it
        values = m.attributes.get((owner, node.attr), [])
        return [o for v in values for o in _origins(m, v, m.scope_of.get(v, m.tree), d, seen)]
    if isinstance(node, ast.Constant):
        text = node.value
        return [(m, node)] if isinstance(text, str) and text.startswith(("/", "~")) else []
    if isinstance(node, ast.Name):
        return _name_origins(m, node, scope, d, seen)
    # Only the head of a path is where it lies: ``base / name``, ``f"{base}/{user}"``,
    # ``join(base, user)`` lie in ``base``; a variable in a later part names a component.
    if isinstance(node, ast.BinOp):
        out = _origins(m, node.left, scope, d, seen)
        if isinstance(node.op, ast.Add) and isinstance(node.right, _LISTS):
            out += _origins(m, node.right, scope, d, seen)  # a list made longer
        return out
    if isinstance(node, ast.JoinedStr):
        return _origins(m, node.values[0], scope, d, seen) if node.values else []
    if isinstance(node, ast.FormattedValue | ast.Starred):
        return _origins(m, node.value, scope, d, seen)
    if isinstance(node, ast.IfExp):
        return _origins(m, node.body, scope, d, seen) + _origins(m, node.orelse, scope, d, seen)
    if isinstance(node, ast.BoolOp):
        return [o for v in node.values for o in _origins(m, v, scope, d, seen)]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [o for e in node.elts for o in _origins(m, e, scope, d, seen)]
    if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
        return _origins(m, node.elt, scope, d, seen)
    if isinstance(node, ast.Attribute):
        if node.attr in ("parent", "parents"):
            return _origins(m, node.value, scope, d, seen)
        found = m.values_at(node, scope)
        if found is not None:
            other, values = found
            return [o for v in values for o in _origins(other, v, other.tree, d, seen)]
        return []
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        return _origins(m, node.value, scope, d, seen)  # Path(__file__).parents[1]
    return []


def _returned(
    m: _Module, fn: ast.FunctionDef | ast.AsyncFunctionDef, depth: int
) -> tuple[Leaf, ...]:
    """The origins of everything ``fn`` (of ``m``) returns, from ``depth`` steps on: its own
    parameters among them, for each call to give its own arguments. Followed in a walk of its
    own, so that one call of a helper never hides another's, and kept on ``m`` by function and
    depth: what lies within the limit depends on nothing else. (A recursive call is followed
    like any other, each time a step deeper, until the limit.)"""
    key = (id(fn), depth)
    known = m.returned.get(key)
    if known is None:
        seen: dict[int, int] = {}
        known = _once([o for r in returns(fn) for o in _origins(m, r, fn, depth, seen)])
        m.returned[key] = known
    return known


def _once(leaves: list[Leaf]) -> tuple[Leaf, ...]:
    """Each leaf once, in the order first found."""
    kept: dict[tuple[int, int], Leaf] = {}
    for where, leaf in leaves:
        kept.setdefault((id(where), id(leaf)), (where, leaf))
    return tuple(kept.values())


_LISTS = (ast.List, ast.Tuple, ast.ListComp, ast.Name, ast.Call)


def _platform_place(m: _Module, value: ast.expr) -> bool:
    """Whether a name's value is a place of its own: a path built with a fixed part on one
    platform's branch (``join(home, "Library", "Caches")`` for macOS), from no variable
    read there (that read is the place)."""
    if isinstance(value, ast.Call):
        name = _dotted(value.func)
        if not (name in _JOINERS or name in _WRAPPERS or name.endswith("path.join")):
            return False
    elif not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div)):
        return False
    inside = list(ast.walk(value))
    if any(m.env_read(n) is not None for n in inside):
        return False
    fixed = any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in inside)
    return fixed and bool(runs_on(m, value))


def _name_origins(
    m: _Module, node: ast.Name, scope: _Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:
    if node.id == "__file__":
        return [(m, node)]
    out: list[Leaf] = []
    for value in m.values_of(node.id, scope) or ():
        out += _origins(m, value, m.scope_of.get(value, m.tree), d, seen)
        if _platform_place(m, value):
            out.append((m, value))
    for sc in (scope, m.tree):
        for value in m.more.get((sc, node.id), ()):
            out += _origins(m, value, sc, d, seen)
        for over in m.iterables.get((sc, node.id), ()):
            out += _origins(m, over, sc, d, seen)
    param = m.params.get((scope, node.id))
    if param is not None:
        out.append((m, param))
        default = _default_of(param, scope)
        if default is not None:  # the value it has when the caller gives none
            out += _origins(m, default, m.scope_of.get(default, m.tree), d, seen)
    if not out:
        found = m.values_at(node, scope)
        if found is not None:
            other, values = found
            out += [o for v in values for o in _origins(other, v, other.tree, d, seen)]
    return out


def _call_origins(  # noqa: PLR0911 - one case per kind of call
    m: _Module, node: ast.Call, scope: _Scope, d: int, seen: dict[int, int]
) -> list[Leaf]:

    called = m.function_at(node, scope)
    if called is not None:
        other, fn = called
        given = dict(bind(node, fn))
        out = []
        for where, leaf in _returned(other, fn, d):
            if isinstance(leaf, ast.arg) and where.scope_of.get(leaf) is fn:
                # A parameter returned: what this call gives it (its default was followed).
                out += _origins(m, given.get(leaf.arg), scope, d, seen)
            else:
                out.append((where, leaf))
        first = node.args[0] if node.args else None
        if (
            isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and any(_a_place(where, leaf) for where, leaf in out)
        ):
            out.append((m, node))  # a location function given a fixed name: a place too
        return out
    read = m.env_read(node)
    if read is not None:
        out = [(m, node)]
        default = read.default
        if isinstance(default, ast.Call) and m.function_at(default, scope) is not None:
            # A default a function of the package computes: that function's places are
            # reached too (a default written inline is part of the read's own place).
            out += _origins(m, default, scope, d, seen)
        return out
    if m.base_call(node) or m.reader_call(node):
        return [(m, node)]
    name = _dotted(node.func)
    if name in _JOINERS or name in _WRAPPERS or name.endswith("path.join"):
        return _origins(m, node.args[0], scope, d, seen) if node.args else []
    if name in ("os.path.dirname", "os.fspath", "str", "list", "tuple", "sorted"):
        return [o for a in node.args[:1] for o in _origins(m, a, scope, d, seen)]
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _SAME_PLACE:
        return _origins(m, func.value, scope, d, seen)
    if m.helper(node):
        return [(m, node)]
    return []


def per_run(m: _Module, path: ast.AST, scope: _Scope, depth: int = 0) -> bool:
    """Whether a written path ends in a name made anew on every run: a part after its head
    built from ``getpid``/``uuid``/``mkdtemp``/..., directly, through a name, or given by
    the callers in the module of the function it is a parameter of."""
    if depth > PER_RUN_DEPTH:
        return False
    d = depth + 1
    if isinstance(path, ast.Name):
        values = m.values_of(path.id, scope) or []
        return any(per_run(m, v, m.scope_of.get(v, m.tree), d) for v in values)
    if isinstance(path, ast.Call):
        name = _dotted(path.func)
        if name in _JOINERS or name.endswith("path.join"):
            tail = path.args[1:]
            return any(_made_per_run(m, a, scope, d) for a in tail) or (
                bool(path.args) and per_run(m, path.args[0], scope, d)
            )
        if name in _WRAPPERS and path.args:
            return per_run(m, path.args[0], scope, d)
    if isinstance(path, ast.BinOp) and isinstance(path.op, ast.Div):
        return _made_per_run(m, path.right, scope, d) or per_run(m, path.left, scope, d)
    return False


def _made_per_run(m: _Module, node: ast.AST, scope: _Scope, depth: int) -> bool:
    """Whether a part of a path is made anew on every run."""
    if depth > PER_RUN_DEPTH:
        return False
    if _PER_RUN.search(ast.unparse(node)):
        return True
    if not isinstance(node, ast.Name):
        return False
    values = m.values_of(node.id, scope) or []
    if any(_made_per_run(m, v, m.scope_of.get(v, m.tree), depth + 1) for v in values):
        return True
    if (scope, node.id) not in m.params or isinstance(scope, ast.Module | ast.Lambda):
        return False
    given = []
    for call in m.calls.get(scope.name, []):
        params = [a.arg for a in (*scope.args.posonlyargs, *scope.args.args)]
        bound = dict(zip(params, call.args, strict=False))
        bound |= {k.arg: k.value for k in call.keywords if k.arg}
        if node.id in bound:
            given.append((bound[node.id], m.scope_of.get(call, m.tree)))
    return bool(given) and all(_made_per_run(m, v, sc, depth + 1) for v, sc in given)


def bind(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    """``(parameter, argument)`` for each argument of ``call`` to ``fn``."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    out = [(p, a) for p, a in zip(params, call.args, strict=False)]
    out += [(k.arg, k.value) for k in call.keywords if k.arg]
    return out


def _default_of(param: ast.arg, fn: _Scope) -> ast.expr | None:
    """The default value of a parameter of ``fn``, if it has one."""
    if isinstance(fn, ast.Module):
        return None
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    if param in positional:
        index = positional.index(param) - (len(positional) - len(args.defaults))
        return args.defaults[index] if index >= 0 else None
    if param in args.kwonlyargs:
        return args.kw_defaults[args.kwonlyargs.index(param)]
    return None


def _a_place(m: _Module, leaf: ast.AST) -> bool:
    """Whether a leaf is a place: not a parameter, nor a helper that could not be read."""
    if isinstance(leaf, ast.arg):
        return False
    return not isinstance(leaf, ast.Call) or m.base_call(leaf) or m.reader_call(leaf)


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
    if depth > PLATFORM_TEST_DEPTH:
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
    names: tuple[str, ...],
    expression: str,
    sink: str,
    *,
    beside_source: bool = False,
    written: tuple[str, ...] = (),
) -> tuple[str, str]:
    """The class of a location and why, from the words of its names and path and the kind of
    sink its value reaches (``""``: none seen). A value that reaches a download is a download
    whatever it is called; a write where the function downloads is one unless its words say
    output, configuration or IPC. Otherwise the place's own names speak first, then the names
    of the paths written under it (``lock_dir``), then the fixed parts of its path, then the
    variables it hangs from (``EXTRACTED_PATH`` under ``X_CACHE``
    is what its name says). The user's cache base (``$XDG_CACHE_HOME``, ``~/.cache``) is no
    word of the place's own: what lies under it is a cache unless something says otherwise. A
    file written beside the source that names no cache nor download is output (generated code,
    build metadata)."""

    if _PER_RUN.search(expression):
        return THROWAWAY, "a new name on every run (made per process or at random)"
    if sink == PER_RUN:
        return THROWAWAY, "written only under names made anew on every run"
    if sink == DOWNLOAD:
        # What is written there says more than what it is called (a download cache).
        return DOWNLOAD_KIND, "downloads land there"
    bare = _USER_CACHE_BASE.sub("", expression)
    levels = (
        words(*(_USER_CACHE_BASE.sub("", n) for n in names)),
        words(*written),
        words(_VARIABLE.sub("", bare)),
        words(*_VARIABLE.findall(bare)),
    )
    every = frozenset().union(*levels)
    if sink == FETCHED and not every & (_IPC_WORDS | _OUTPUT_WORDS | _CONFIG_WORDS):
        return DOWNLOAD_KIND, "written where the function downloads"
    if expression.endswith((".sock", ".ipc", ".socket")) or expression.startswith(_SHM):
        return IPC, "a socket, shared memory or IPC place"
    under_cache = bool(_USER_CACHE_BASE.search(" ".join((*names, expression))))
    for said in levels:
        decided = _by_words(said, under_cache=under_cache)
        if decided is not None:
            return decided
    if under_cache:
        return CACHE, "kept in the user's cache directory"
    if sink == FETCHED:
        return DOWNLOAD_KIND, "written where the function downloads"
    if beside_source:
        return OUTPUT, "written beside the source, naming no cache"
    return CACHE, "kept from one run to the next"


#: A variable in a rendered place (``$NAME``, ``${NAME:-``), for telling its words apart.
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::-)?")


def _by_words(  # noqa: PLR0911 - one per class
    said: frozenset[str], *, under_cache: bool
) -> tuple[str, str] | None:
    """The class the words of one level say, if they say one; under the user's cache base,
    only a cache or a download (its author chose to keep it there)."""
    if said & _CACHE_WORDS or "CACHE" in "".join(said):
        return CACHE, f"its name says cache ({_first(said & _CACHE_WORDS) or 'cache'})"
    if under_cache:
        if said & _DOWNLOAD_WORDS:
            return DOWNLOAD_KIND, f"downloads land there ({_first(said & _DOWNLOAD_WORDS)})"
        return None
    if said & _IPC_WORDS:
        return IPC, f"a socket or IPC place ({_first(said & _IPC_WORDS)})"
    if said & _OUTPUT_WORDS:
        return OUTPUT, f"output the run writes ({_first(said & _OUTPUT_WORDS)})"
    if said & _CONFIG_WORDS:
        return CONFIG, f"configuration ({_first(said & _CONFIG_WORDS)})"
    if said & _DOWNLOAD_WORDS:
        return DOWNLOAD_KIND, f"downloads land there ({_first(said & _DOWNLOAD_WORDS)})"
    return None


def _first(found: frozenset[str]) -> str:
    return sorted(found)[0].lower() if found else ""


def is_test_file(file: str) -> bool:
    """Whether ``file`` is test code (where setting a layout variable overrides the layout)."""
    *dirs, name = file.split("/")
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith(("_test.py", "_tests.py"))
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
