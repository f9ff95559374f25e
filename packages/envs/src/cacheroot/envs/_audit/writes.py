"""Which calls write, download or fetch, and which path each writes: ``open(p, "w")``,
``makedirs``, ``cache_dir=``, ``urlretrieve``, ``save_pretrained``; whether a written path ends in
a name made anew on every run; whether a function fetches from the network, or reads a download
whole into memory. Read off one module's index: no value is followed here."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from .limits import PER_RUN_DEPTH
from .names import JOINERS, WRAPPERS
from .names import dotted as _dotted

if TYPE_CHECKING:
    from .index import Index, Scope


#: Kinds of sink: a path created or written, a directory a library downloads into.
WRITE = "write"
DOWNLOAD = "download"
#: A write inside a function that downloads: a download, unless its words say otherwise.
FETCHED = "fetched"
#: A write under a name made anew on every run (``join(tmp, f"pool_{os.getpid()}")``).
PER_RUN = "per-run"
#: How much a kind of sink says, least first.
SINK_RANK = {PER_RUN: 0, WRITE: 1, FETCHED: 2, DOWNLOAD: 3}


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
FETCHES = frozenset(
    {"requests.get", "requests.request", "httpx.get", "urllib.request.urlopen", "urlopen"}
)
_IN_MEMORY = frozenset({"content", "raw"})
#: Calls whose result is a path that changes on every run.
MADE_PER_RUN = re.compile(r"getpid|uuid|mkdtemp|TemporaryDirectory|time\(|token_hex|random")


def _mode_writes(mode: ast.expr | None) -> bool:
    return (
        isinstance(mode, ast.Constant)
        and isinstance(mode.value, str)
        and (any(c in mode.value for c in "wax+"))
    )


def sink_paths(call: ast.Call, dotted: str) -> list[tuple[ast.expr, str, str]]:
    """``(path, kind of sink, how)`` for each path ``call`` creates, writes or downloads into."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    found = _called_sink(call, dotted, keywords)
    return ([found] if found is not None else []) + _keyword_sinks(call, dotted, keywords)


def _called_sink(
    call: ast.Call, dotted: str, keywords: dict[str, ast.expr]
) -> tuple[ast.expr, str, str] | None:
    """The path a call writes or downloads into by what it is (``open(p, "w")``,
    ``makedirs``, ``.mkdir()``, ``save_pretrained``, ``urlretrieve``), if any."""
    func = call.func
    args = call.args
    attr = func.attr if isinstance(func, ast.Attribute) else ""
    target: ast.expr | None = None
    sink, how = WRITE, ""
    if dotted in ("open", "io.open") or (attr == "open" and dotted.rpartition(".")[0] in _OPENERS):
        mode = args[1] if len(args) > 1 else keywords.get("mode")
        target, how = (args[0] if args and _mode_writes(mode) else None), "opened for writing"
    elif isinstance(func, ast.Attribute) and attr == "open":
        mode = args[0] if args else keywords.get("mode")
        target, how = (func.value if _mode_writes(mode) else None), "opened for writing"
    elif dotted in _WRITE_FIRST and args:
        target, how = args[0], f"made by {dotted}()"
    elif dotted in _WRITE_SECOND and len(args) > 1:
        target, how = args[1], f"written by {dotted}()"
    elif isinstance(func, ast.Attribute) and attr in _PATH_WRITERS:
        target, how = func.value, f"made by .{attr}()"
    elif attr in ("save_pretrained", "extractall") or dotted in ("save_pretrained",):
        target = args[0] if args else keywords.get("path") or keywords.get("save_directory")
        how = f"written by .{attr}()"
    elif dotted.rpartition(".")[2] == "urlretrieve":
        target = args[1] if len(args) > 1 else keywords.get("filename")
        sink, how = DOWNLOAD, "downloaded into by urlretrieve()"
    elif dotted.rpartition(".")[2] == "download_url_to_file":
        # torch.hub's: a literal destination too (``download_paths`` follows only values).
        target = args[1] if len(args) > 1 else keywords.get("dst")
        sink, how = DOWNLOAD, "downloaded into by download_url_to_file()"
    return (target, sink, how) if target is not None else None


def _keyword_sinks(
    call: ast.Call, dotted: str, keywords: dict[str, ast.expr]
) -> list[tuple[ast.expr, str, str]]:
    """The paths a call is given to write or download into by keyword (``cache_dir=``,
    ``output_dir=``, ``root=`` with ``download=``, ``tempfile``'s ``dir=``)."""
    func = call.func
    callee = (func.attr if isinstance(func, ast.Attribute) else "") or dotted
    out: list[tuple[ast.expr, str, str]] = []
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
DOWNLOADING = re.compile(r"download|http_get|fetch|retrieve", re.IGNORECASE)
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


def urlish(node: ast.AST) -> bool:
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
        return bool(node.values) and urlish(node.values[0])
    if isinstance(node, ast.BinOp):
        return urlish(node.left)
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
    urls = [value for name, value in arguments if (name or "").endswith("url") or urlish(value)]
    if not urls and not DOWNLOADING.search(callee):
        return []
    out: list[tuple[ast.expr, str, str]] = []
    for name, value in arguments:
        if name in _NOT_A_TARGET or any(value is u for u in urls) or (name is None and not urls):
            continue
        if isinstance(value, ast.Constant | ast.JoinedStr | ast.Dict | ast.Lambda):
            continue
        out.append((value, DOWNLOAD, f"downloaded into by {callee}()"))
    if not urls and DOWNLOADING.search(callee):
        # ``download(url, path)``: the first argument is what is fetched, the others where.
        out += [(a, DOWNLOAD, f"downloaded into by {callee}()") for a in call.args[1:]]
    return out


#: Receivers whose ``get``/``stream``/``request`` fetches from the network.
CLIENTS = re.compile(r"requests|session|sess\b|client|http|urllib3|pool", re.IGNORECASE)


def fetches(m: Index, fn: ast.AST) -> bool:
    """Whether a function fetches from the network itself: ``requests.get``, ``urlopen``,
    ``session.get``, a call that says it downloads, or one given a URL to keep."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or m.scope_of.get(node) is not fn:
            continue
        name = _dotted(node.func)
        last = name.rpartition(".")[2]
        if name in FETCHES or last in ("urlopen", "urlretrieve") or DOWNLOADING.search(last):
            return True
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("get", "stream", "request", "urlopen")
            and CLIENTS.search(_dotted(func.value) or "")
            and node.args
        ):
            return True
    return False


def per_run(m: Index, path: ast.AST, scope: Scope, depth: int = 0) -> bool:
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
        if name in JOINERS or name.endswith("path.join"):
            tail = path.args[1:]
            return any(_made_per_run(m, a, scope, d) for a in tail) or (
                bool(path.args) and per_run(m, path.args[0], scope, d)
            )
        if name in WRAPPERS and path.args:
            return per_run(m, path.args[0], scope, d)
    if isinstance(path, ast.BinOp) and isinstance(path.op, ast.Div):
        return _made_per_run(m, path.right, scope, d) or per_run(m, path.left, scope, d)
    return False


def _made_per_run(m: Index, node: ast.AST, scope: Scope, depth: int) -> bool:
    """Whether a part of a path is made anew on every run."""
    if depth > PER_RUN_DEPTH:
        return False
    if MADE_PER_RUN.search(ast.unparse(node)):
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


def fetched_in_memory(m: Index, node: ast.AST) -> ast.expr | None:
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


def _fetch_call(m: Index, node: ast.AST, scope: Scope) -> ast.Call | None:

    if isinstance(node, ast.Name):
        value = m.with_values.get((scope, node.id)) or m.value_of(node.id, scope)
        node = value if value is not None else node
    if isinstance(node, ast.Call) and _dotted(node.func) in FETCHES:
        return node
    return None
