"""The class of a location (:data:`.names.KINDS`), from the words of its names and path and the
kind of sink its value reaches."""

from __future__ import annotations

import re

from .names import CACHE, CONFIG, CONFIG_SUFFIXES, IPC, OUTPUT, SHM, THROWAWAY
from .names import DOWNLOAD as DOWNLOAD_KIND
from .writes import DOWNLOAD, FETCHED, MADE_PER_RUN, PER_RUN

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
_SPLIT = re.compile(r"[^A-Za-z0-9]+")
#: The user's cache base in a rendered place: it says that a library keeps something there,
#: not what (``${XDG_CACHE_HOME:-~/.cache}/demo/models`` is a download).
_USER_CACHE_BASE = re.compile(r"XDG_CACHE_HOME|~/\.cache\b")


def words(*texts: str) -> frozenset[str]:
    """The words of names and paths, upper case (``demo_profile-output.d`` -> 4 words)."""
    return frozenset(w.upper() for t in texts for w in _SPLIT.split(t) if w)


def kind_of(
    names: tuple[str, ...],
    expression: str,
    sink: str,
    *,
    beside_source: bool = False,
    written: tuple[str, ...] = (),
    temporary: bool = False,
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
    build metadata). The temporary directory itself, as its variables name it (``temporary``:
    ``TMPDIR or TEMP or TMP``), is throwaway unless words say otherwise; a file under the home
    directory with a configuration file's ending that no write reaches is configuration."""
    decided = _by_sink(expression, sink)
    if decided is not None:
        return decided
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
    if expression.endswith((".sock", ".ipc", ".socket")) or expression.startswith(SHM):
        return IPC, "a socket, shared memory or IPC place"
    under_cache = bool(_USER_CACHE_BASE.search(" ".join((*names, expression))))
    for said in levels:
        decided = _by_words(said, under_cache=under_cache)
        if decided is not None:
            return decided
    return _unsaid(sink, under_cache=under_cache, beside_source=beside_source, temporary=temporary)


def _by_sink(expression: str, sink: str) -> tuple[str, str] | None:
    """The class the sink decides whatever the words say: a name made anew on every run, a
    download; no write at all, for a configuration file under the home directory."""
    if MADE_PER_RUN.search(expression):
        return THROWAWAY, "a new name on every run (made per process or at random)"
    if sink == PER_RUN:
        return THROWAWAY, "written only under names made anew on every run"
    if sink == DOWNLOAD:
        # What is written there says more than what it is called (a download cache).
        return DOWNLOAD_KIND, "downloads land there"
    if not sink and _config_file(expression):
        return CONFIG, "a configuration file under the home directory, only read"
    return None


def _config_file(expression: str) -> bool:
    """Whether a place is a file with a configuration file's ending (``~/.tool/tokens.json``)
    under the home directory, outside the user's cache base: only read, another program's
    settings or tokens, whatever else its name says."""
    return (
        expression.startswith("~/")
        and expression.lower().endswith(CONFIG_SUFFIXES)
        and not _USER_CACHE_BASE.search(expression)
    )


def _unsaid(
    sink: str, *, under_cache: bool, beside_source: bool, temporary: bool
) -> tuple[str, str]:
    """The class of a location whose words say none."""
    if temporary and sink != FETCHED:
        return THROWAWAY, "the temporary directory its variables name"
    if under_cache:
        return CACHE, "kept in the user's cache directory"
    if sink == FETCHED:
        return DOWNLOAD_KIND, "written where the function downloads"
    if beside_source:
        return OUTPUT, "written beside the source, naming no cache"
    return CACHE, "kept from one run to the next"


#: A variable in a rendered place (``$NAME``, ``${NAME:-``), for telling its words apart.
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::-)?")


def _by_words(said: frozenset[str], *, under_cache: bool) -> tuple[str, str] | None:
    """The class the words of one level say, if they say one; under the user's cache base,
    only a cache or a download (its author chose to keep it there)."""
    if said & _CACHE_WORDS or "CACHE" in "".join(said):
        return CACHE, f"its name says cache ({_first(said & _CACHE_WORDS) or 'cache'})"
    for kind, vocabulary, what in _SAYS[-1:] if under_cache else _SAYS:
        if said & vocabulary:
            return kind, f"{what} ({_first(said & vocabulary)})"
    return None


#: The classes words say besides a cache, in the order they are asked: the class, its words, and
#: what the reason says.
_SAYS = (
    (IPC, _IPC_WORDS, "a socket or IPC place"),
    (OUTPUT, _OUTPUT_WORDS, "output the run writes"),
    (CONFIG, _CONFIG_WORDS, "configuration"),
    (DOWNLOAD_KIND, _DOWNLOAD_WORDS, "downloads land there"),
)


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
