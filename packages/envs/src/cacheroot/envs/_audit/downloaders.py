"""Downloads in code of one's own: known downloaders, and what to call instead of a download.

A test that calls ``torch.hub.load`` or ``from_pretrained`` builds no path the audit sees: its
library decides where the files land, from a variable the layout sets. Told nothing, the author
cannot tell whether the layout keeps them; so each such call is listed with that variable and
the place the layout gives it. The variables are not spelled here: each row names the layout
row it lands under, by the layout's own constant or, where the layout spells a name only in its
row, by the file its library reads it in (``torch/hub.py``), so that a renamed row moves this
report with it.

A download the code makes itself into a place of its own (``urlretrieve(url, path)``,
``requests.get(url)`` written to a file) is a finding of its own; there the audit writes the
``cacheroot.fetch`` call that keeps the file once per volume, checked, and offline once warm,
with the URL when it can resolve it. A known downloader sent elsewhere (``cache_dir=``) is told
which keyword to leave out.

Both are for source trees given to ``cacheroot audit`` only: an installed library calls
``from_pretrained`` in hundreds of places, and no one auditing it can rewrite them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from _cacheroot_layout import BY_NAME, CACHEROOT, HF_HOME, HF_HUB_CACHE, MODELSCOPE_CACHE, NEVER
from _cacheroot_layout import TABLE as _TABLE

from .names import dotted
from .platforms import runs_on
from .writes import CLIENTS, DOWNLOADING, FETCHES, urlish

if TYPE_CHECKING:
    from .index import Scope
    from .modules import Module

#: Words a file of one's own must hold for a known downloader to be called in it (the scan
#: parses a file only when it holds one of its words).
NEEDLES = (
    b"from_pretrained",
    b"load_dataset",
    b"get_encoding",
    b"encoding_for_model",
    b"torch.hub",
    b"hub.load",
    b"load_state_dict_from_url",
    b"load_url",
    b"snapshot_download",
    b"hf_hub_download",
    b"model_file_download",
    b"pipeline",
)
#: What a placeholder stands for in a suggested ``fetch`` call.
URL_PLACEHOLDER = "<URL>"
SHA256_PLACEHOLDER = "<sha256 of the file>"
NAMESPACE_PLACEHOLDER = "<namespace>"
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_URL = re.compile(r'(?:https?|ftp)://[^\s{}$"\\]+')
#: How a first argument names a local directory rather than a repository to download.
_LOCAL = ("/", "~", ".", "$", "{__file__}")


def _read_in(file: str) -> str:
    """The name of the one layout row whose upstream reads it in ``file`` (``torch/hub.py``)."""
    names = [v.name for v in _TABLE if any(u.partition(" ")[2] == file for u in v.upstream)]
    if len(names) != 1:
        raise LookupError(f"the layout has {len(names)} rows read in {file}, expected one")
    return names[0]


@dataclass(frozen=True)
class Downloader:
    """A call that downloads into a place its library decides from a layout variable."""

    #: The modules it is called from (``huggingface_hub``; a submodule counts), none for any,
    #: and the last parts of its name (``hf_hub_download``).
    modules: tuple[str, ...]
    names: tuple[str, ...]
    #: The layout row the files land under, and the path below it.
    variable: str
    under: str
    #: Keywords that send it elsewhere, and the position the first of them may take.
    keywords: tuple[str, ...] = ()
    position: int = -1
    #: Where its library reads the variable, as the known readers' table says it.
    source: str = ""

    @property
    def expression(self) -> str:
        """Where it lands, in the audit's notation (``$TORCH_HOME/hub``)."""
        return f"${self.variable}/{self.under}" if self.under else f"${self.variable}"

    @property
    def place(self) -> str:
        """Where it lands under the layout (``$CACHEROOT/torch/hub``)."""
        return f"{layout_place(self.variable)}/{self.under}".rstrip("/")

    @property
    def lands(self) -> str:
        """``$TORCH_HOME/hub, which the layout sets: $CACHEROOT/torch/hub``."""
        row = BY_NAME[self.variable]
        how = "which the layout sets"
        if row.mode == NEVER and row.parent:
            how = f"which the layout leaves to {row.parent}"
        return f"{self.expression}, {how}: {self.place}"


def layout_place(name: str) -> str:
    """The directory the layout gives a row, under the root (``$CACHEROOT/huggingface/hub``)."""
    row = BY_NAME[name]
    base = layout_place(row.parent) if row.parent else f"${CACHEROOT}"
    return f"{base}/{row.path}" if row.path else base


TORCH_HOME = _read_in("torch/hub.py")
TIKTOKEN_CACHE_DIR = _read_in("tiktoken/load.py")
#: The known downloaders, the first that matches a call taken (ModelScope's ``from_pretrained``
#: before everyone else's).
DOWNLOADERS = (
    Downloader(
        ("torch.hub",),
        ("load",),
        TORCH_HOME,
        "hub",
        source="torch torch/hub.py load, into get_dir(): _get_torch_home()/hub",
    ),
    Downloader(
        ("torch.hub", "torch.utils.model_zoo"),
        ("load_state_dict_from_url", "load_url"),
        TORCH_HOME,
        "hub/checkpoints",
        ("model_dir",),
        1,
        source="torch torch/hub.py load_state_dict_from_url, into model_dir (default "
        "get_dir()/checkpoints)",
    ),
    Downloader(
        ("modelscope", "modelscope_hub"),
        (
            "snapshot_download",
            "model_file_download",
            "dataset_snapshot_download",
            "from_pretrained",
        ),
        MODELSCOPE_CACHE,
        "",
        ("cache_dir", "local_dir"),
        source="modelscope modelscope/utils/file_utils.py get_modelscope_cache_dir",
    ),
    Downloader(
        ("huggingface_hub",),
        ("hf_hub_download", "snapshot_download"),
        HF_HUB_CACHE,
        "",
        ("cache_dir", "local_dir"),
        source=f"huggingface_hub huggingface_hub/constants.py {HF_HUB_CACHE}",
    ),
    Downloader(
        ("transformers",),
        ("pipeline",),
        HF_HUB_CACHE,
        "",
        source=f"huggingface_hub huggingface_hub/constants.py {HF_HUB_CACHE}",
    ),
    Downloader(
        (),
        ("from_pretrained",),
        HF_HUB_CACHE,
        "",
        ("cache_dir",),
        source=f"huggingface_hub huggingface_hub/constants.py {HF_HUB_CACHE}",
    ),
    Downloader(
        ("datasets",),
        ("load_dataset",),
        HF_HOME,
        "",
        ("cache_dir",),
        source=f"datasets datasets/config.py, hub files in ${HF_HOME}/hub and Arrow files in "
        f"${HF_HOME}/datasets",
    ),
    Downloader(
        ("tiktoken",),
        ("get_encoding", "encoding_for_model"),
        TIKTOKEN_CACHE_DIR,
        "",
        source="tiktoken tiktoken/load.py read_file_cached",
    ),
)


@dataclass(frozen=True)
class KnownDownload:
    """A call of a known downloader in code of one's own, and where it lands."""

    dist: str
    version: str
    file: str
    line: int
    #: The call as the module names it, imports resolved (``torch.hub.load``).
    call: str
    downloader: Downloader
    #: The keyword that sends it elsewhere (``cache_dir``), and its value in the audit's
    #: notation; ``""`` when it lands in its library's place.
    given: str = ""
    destination: str = ""
    runs_on: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        """The last part of the call's name (``from_pretrained``)."""
        return self.call.rpartition(".")[2]


@dataclass(frozen=True)
class Fetched:
    """The download whose file lands in a finding's place, for the call to write instead."""

    #: Where the call that downloads is: ``line 13``, or ``FILE:13`` in another module.
    at: str
    #: The URL as a literal, ``""`` when the audit cannot resolve it.
    url: str = ""
    #: A known downloader sent there by a keyword, and that keyword.
    downloader: Downloader | None = None
    keyword: str = ""
    call: str = ""


def _name(m: Module, func: ast.expr) -> str:
    """The called name with its first part resolved through the imports (``AutoModel`` from
    ``transformers`` is ``transformers.AutoModel``)."""
    name = dotted(func)
    if not name:
        return func.attr if isinstance(func, ast.Attribute) else ""
    head, dot, rest = name.partition(".")
    full = m.imported.get(head) or m.module_names.get(head, head)
    return f"{full}{dot}{rest}"


def downloader_of(m: Module, call: ast.Call) -> tuple[Downloader, str] | None:
    """The known downloader ``call`` is, with its name; ``None`` when it is none."""
    name = _name(m, call.func)
    module, _, last = name.rpartition(".")
    for row in DOWNLOADERS:
        if last not in row.names:
            continue
        if not row.modules or any(module == r or module.startswith(f"{r}.") for r in row.modules):
            return row, name
    return None


def _argument(call: ast.Call, keywords: tuple[str, ...], position: int) -> ast.expr | None:
    """The argument given as one of ``keywords``, else at ``position`` (``-1``: none)."""
    for keyword in call.keywords:
        if keyword.arg in keywords:
            return keyword.value
    return call.args[position] if 0 <= position < len(call.args) else None


def known_downloads(m: Module, dist: str, version: str, file: str) -> list[KnownDownload]:
    """Every call of a known downloader in one module, by line."""
    out = []
    for node in m.candidates:
        if not isinstance(node, ast.Call):
            continue
        found = downloader_of(m, node)
        if found is None:
            continue
        row, name = found
        scope = m.scope_of.get(node, m.tree)
        source = next((k.value for k in node.keywords if k.arg == "source"), None)
        if row.names == ("load",) and m.string(source, scope) == "local":
            continue  # ``torch.hub.load(directory, source="local")`` reads a directory
        first = node.args[0] if node.args else None
        if first is not None and m.render(first, scope).text.startswith(_LOCAL):
            continue  # ``from_pretrained("/models/x")``, ``from_pretrained("./tiny")``: a directory
        given, destination = "", ""
        value = _argument(node, row.keywords, row.position)
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            named = [k.arg for k in node.keywords if k.value is value and k.arg]
            given = named[0] if named else row.keywords[0]
            destination = m.render(value, scope).text or "{...}"
        out.append(
            KnownDownload(
                dist, version, file, node.lineno, name, row, given, destination, runs_on(m, node)
            )
        )
    return out


def _literal(m: Module, url: ast.expr | None, scope: Scope) -> str:
    """The URL ``url`` is, when the audit resolves all of it; ``""`` otherwise."""
    if url is None:
        return ""
    text = m.render(url, scope).text
    return text if _URL.fullmatch(text) else ""


def _url_of(call: ast.Call) -> ast.expr | None:
    """What a call that downloads fetches: its URL argument, else its first argument."""
    for keyword in call.keywords:
        if keyword.arg is not None and keyword.arg.endswith("url"):
            return keyword.value
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "request" and len(call.args) > 1:
        return call.args[1]  # ``requests.request("GET", url)``
    return next((a for a in call.args if urlish(a)), call.args[0] if call.args else None)


def _fetching(call: ast.Call) -> bool:
    """Whether a call fetches from the network (``requests.get``, ``session.get``,
    ``urlopen``, a callee whose name says it downloads)."""
    name = dotted(call.func)
    last = name.rpartition(".")[2]
    if name in FETCHES or last in ("urlopen", "urlretrieve") or DOWNLOADING.search(last):
        return True
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("get", "stream", "request")
        and bool(CLIENTS.search(dotted(func.value)))
    )


def _fetched_in(m: Module, scope: Scope) -> list[ast.expr | None]:
    """The URLs the function ``scope`` fetches itself."""
    return [
        _url_of(node)
        for node in ast.walk(scope)
        if isinstance(node, ast.Call) and m.scope_of.get(node) is scope and _fetching(node)
    ]


def fetched(
    m: Module, call: ast.Call, path: ast.expr, *, fetching: bool, at: str
) -> Fetched | None:
    """What a write or download ``call`` of ``path`` (``at``) fetches, for the call to write
    instead (``fetching``: a write in a function that downloads); ``None`` when it fetches no
    URL the audit can tell (a library's ``cache_dir=``, a dataset class's ``root=``)."""
    scope = m.scope_of.get(call, m.tree)
    keyword = next((k.arg for k in call.keywords if k.value is path and k.arg), "")
    known = downloader_of(m, call)
    if known is not None:
        row, name = known
        positional = 0 <= row.position < len(call.args) and call.args[row.position] is path
        if keyword in row.keywords or (positional and row.keywords):
            given = keyword or row.keywords[0]
            return Fetched(at, downloader=row, keyword=given, call=name)
        return None  # (its other arguments name what it fetches, not where)
    urls = _fetched_in(m, scope) if fetching else []
    if urls:  # a write of what the function fetched: its URL, when it fetches one
        texts = {_literal(m, u, scope) for u in urls}
        return Fetched(at, texts.pop() if len(texts) == 1 else "")
    url = _url_of(call)  # a download, or a helper given the URL it fetches
    callee = dotted(call.func).rpartition(".")[2]
    if not (url is not None and urlish(url)) and not DOWNLOADING.search(callee):
        return None
    return Fetched(at, _literal(m, url, scope))


def fetched_url(m: Module, url: ast.expr, line: int) -> Fetched:
    """What a download read into memory fetches (its URL node is known)."""
    return Fetched(f"line {line}", _literal(m, url, m.scope_of.get(url, m.tree)))


def namespace(url: str) -> str:
    """A namespace for ``url``'s entry: the last directory of its path
    (``https://example.org/gsm8k/test.jsonl`` -> ``gsm8k``), ``""`` when it has none."""
    path = url.split("://", 1)[-1].partition("/")[2].split("?", 1)[0]
    parts = [p for p in path.split("/") if p]
    last = parts[-2] if len(parts) > 1 else ""
    return last if _NAMESPACE.fullmatch(last) else ""


def fetch_call(url: str) -> str:
    """The ``cacheroot.fetch`` call that keeps ``url``'s file (placeholders where the audit
    cannot tell: the URL when it is built at run time, the digest, a namespace)."""
    where = namespace(url) or NAMESPACE_PLACEHOLDER
    return (
        "from cacheroot.fetch import fetch; "
        f'path = fetch("{url or URL_PLACEHOLDER}", sha256="{SHA256_PLACEHOLDER}", '
        f'namespace="{where}")'
    )


def instead(got: Fetched) -> str:
    """What to write instead of the download ``got`` names, for code of one's own."""
    row = got.downloader
    if row is None:
        return f"download it with cacheroot.fetch ({got.at}): {fetch_call(got.url)}"
    short = got.call.rpartition(".")[2]
    return f"leave {got.keyword}= out of {short}() ({got.at}): then it lands in {row.lands}"
