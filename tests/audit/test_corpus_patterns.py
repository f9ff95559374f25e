"""Patterns the measured corpus (``tests/upstream/test_audit_corpus.py``) showed the static audit
missing, each in the smallest source that has it. Line numbers matter; verdicts are literals.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from cacheroot.envs._audit import audit

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.envs._audit import Report


def run(tmp_path: Path, source: str) -> Report:
    path = tmp_path / "src" / "m.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return audit([str(tmp_path / "src")], platform="linux")


def rows(report: Report) -> list[tuple[object, ...]]:
    return [
        (i.finding.line, i.finding.variable, i.finding.expression, i.finding.kind, i.covered_by)
        for i in report.items
    ]


#: sentence-transformers' shape: a parameter given its default inside the function.
PARAMETER_DEFAULT = """\
import os


class Model:
    def __init__(self, name, cache_folder=None):
        if cache_folder is None:
            cache_folder = os.getenv("DEMO_MODELS_HOME")
        load(name, cache_folder=cache_folder)


def fetch(url, root=None):
    if not root:
        root = os.path.expanduser("~/.demo-fetch")
    os.makedirs(root, exist_ok=True)
"""


def test_a_parameter_given_its_default_in_the_function_is_followed(tmp_path: Path) -> None:
    """The caller's value is not a place decided here, the default given in the body is."""
    assert rows(run(tmp_path, PARAMETER_DEFAULT)) == [
        (7, "DEMO_MODELS_HOME", "$DEMO_MODELS_HOME", "download", None),
        (13, None, "~/.demo-fetch", "cache", None),
    ]


#: librosa's shape: a variable whose default is pooch's cache directory for a project.
POOCH_CACHE = """\
import os

import pooch

DATA = os.environ.get("DEMO_DATA_DIR", pooch.os_cache("demo"))
SPARE = pooch.os_cache("spare")
"""


def test_pooch_os_cache_is_a_known_location_function(tmp_path: Path) -> None:
    assert rows(run(tmp_path, POOCH_CACHE)) == [
        (
            5,
            "DEMO_DATA_DIR",
            "${DEMO_DATA_DIR:-${XDG_CACHE_HOME:-~/.cache}/demo}",
            "download",
            "XDG_CACHE_HOME",
        ),
        (6, "XDG_CACHE_HOME", "${XDG_CACHE_HOME:-~/.cache}/spare", "download", "XDG_CACHE_HOME"),
    ]


#: Places under the user's cache directory whose own words say no cache.
UNDER_USER_CACHE = """\
import os

TRACES = os.path.expanduser("~/.cache/demo/trace/solutions")
WEIGHTS = os.path.expanduser("~/.cache/demo/hub/checkpoints")
"""


def test_under_the_user_cache_a_place_is_a_cache_or_a_download(tmp_path: Path) -> None:
    """The cache base is no word of the place's own, but its author kept the place there."""
    assert rows(run(tmp_path, UNDER_USER_CACHE)) == [
        (3, None, "~/.cache/demo/trace/solutions", "cache", None),
        (4, None, "~/.cache/demo/hub/checkpoints", "download", None),
    ]


def run_tree(tmp_path: Path, files: dict[str, str]) -> Report:
    """Audit a package of several modules (``path -> source``)."""
    for name, source in files.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return audit([str(tmp_path / "src")], platform="linux")


def placed(report: Report) -> list[tuple[object, ...]]:
    return [
        (i.finding.file, i.finding.line, i.finding.variable, i.finding.expression, i.finding.kind)
        for i in report.items
    ]


#: kagglehub's shape: the directory decided in one module, re-exported by the package, joined
#: in a second, downloaded into by a third through an instance's method.
ACROSS_MODULES = {
    "demo/__init__.py": """\
from .paths import get_store
""",
    "demo/paths.py": """\
import os
from pathlib import Path

DEFAULT = os.path.join(Path.home(), ".cache", "demo")


def get_store():
    if "DEMO_STORE" in os.environ:
        return os.environ["DEMO_STORE"]
    return DEFAULT
""",
    "demo/layout.py": """\
import os

from . import get_store


class Layout:
    def path_of(self, handle):
        return os.path.join(get_store(), "models", handle)
""",
    "demo/client.py": """\
from demo.layout import Layout
from .transfer import download_file


def resolve(handle, url):
    layout = Layout()
    download_file(url, layout.path_of(handle))
""",
    "demo/transfer.py": """\
import shutil
import urllib.request


def download_file(url, out_path):
    with urllib.request.urlopen(url) as answer, open(out_path, "wb") as out:
        shutil.copyfileobj(answer, out)
""",
}


def test_a_place_decided_in_one_module_and_downloaded_into_in_another(tmp_path: Path) -> None:
    """``DEMO_STORE`` says no place by its name: it is one because a download lands in it,
    three modules away; both places are downloads, not caches."""
    assert placed(run_tree(tmp_path, ACROSS_MODULES)) == [
        ("demo/paths.py", 4, None, "~/.cache/demo", "download"),
        ("demo/paths.py", 9, "DEMO_STORE", "$DEMO_STORE", "download"),
    ]


#: imageio's and nltk's shapes: a directory function with a branch per platform (two variables
#: read on one line), one with a fallback under ``/var/tmp``; a search path grown with ``+=``
#: and ``.append``, whose first writable entry a download is put in; a download helper that is
#: given a URL and the place.
BRANCHES_AND_LISTS = {
    "demo/appdir.py": """\
import os
import sys


def appdata_dir(appname):
    user = os.getenv("DEMO_USERDIR")
    if user is None:
        user = os.path.expanduser("~")
        if not os.path.isdir(user):
            user = "/var/tmp"
    path = None
    if sys.platform.startswith("win"):
        local, roaming = os.getenv("LOCALAPPDATA"), os.getenv("APPDATA")
        path = local or roaming
    elif sys.platform == "darwin":
        path = os.path.join(user, "Library", "Application Support")
    if not path:
        path = user
    return os.path.join(path, "." + appname)
""",
    "demo/fetch.py": """\
import os

from .appdir import appdata_dir
from .net import download_to


def resource(name, url):
    folder = appdata_dir("demo")
    return download_to(url, os.path.join(folder, name))
""",
    "demo/net.py": """\
import urllib.request


def download_to(url, filename):
    urllib.request.urlretrieve(url, filename)
    return filename
""",
    "demo/data.py": """\
import os
import urllib.request

path = []
path += [os.path.expanduser(d) for d in os.environ.get("DEMO_PATHS", "").split(":") if d]
path.append(os.path.expanduser("~/demo_data"))


def download_dir():
    for folder in path:
        if os.access(folder, os.W_OK):
            return folder
    return None


def get(name, url):
    urllib.request.urlretrieve(url, os.path.join(download_dir(), name))
""",
}


def test_every_branch_of_a_directory_function_and_every_entry_of_a_list(tmp_path: Path) -> None:
    """The places of each platform, the fallback, the caller's fixed name (``appdata_dir("demo")``),
    each entry of a list grown by ``+=`` and ``.append``: all downloads."""
    report = run_tree(tmp_path, BRANCHES_AND_LISTS)
    assert placed(report) == [
        ("demo/appdir.py", 6, "DEMO_USERDIR", "$DEMO_USERDIR", "download"),
        ("demo/appdir.py", 8, None, "~", "download"),
        ("demo/appdir.py", 10, None, "/var/tmp", "download"),
        ("demo/appdir.py", 13, "APPDATA", "$APPDATA", "download"),
        ("demo/appdir.py", 13, "LOCALAPPDATA", "$LOCALAPPDATA", "download"),
        ("demo/appdir.py", 16, None, "{user}/Library/Application Support", "download"),
        ("demo/data.py", 5, "DEMO_PATHS", "$DEMO_PATHS", "download"),
        ("demo/data.py", 6, None, "~/demo_data", "download"),
        ("demo/fetch.py", 8, None, "{appdata_dir('demo')}", "download"),
    ]
    on = [i.finding.runs_on for i in report.items]
    assert on == [(), (), (), ("win32",), ("win32",), ("darwin",), (), (), ()]


#: Classes: a write where the function downloads; a name that says what its default does not;
#: a per-run folder under a variable and the temporary directory (joblib's shape).
CLASSES = """\
import os
import tempfile
import urllib.request
import uuid

STORE = os.environ.get("DEMO_STORE_CACHE", os.path.expanduser("~/.cache/demo"))
EXTRACTED = os.environ.get("DEMO_EXTRACTED_DATASETS_PATH", os.path.join(STORE, "x"))


def pretrained(url, cache_dir=None):
    if not cache_dir:
        cache_dir = os.path.expanduser("~/.cache/demo-clip")
    os.makedirs(cache_dir, exist_ok=True)
    with urllib.request.urlopen(url) as answer:
        return answer.read()


def pool_dir(name, base=None):
    if base is None:
        base = os.environ.get("DEMO_POOL_FOLDER")
    if base is None:
        base = tempfile.gettempdir()
    folder = os.path.join(base, name)
    os.makedirs(folder)
    return folder


def start():
    return pool_dir(f"demo_pool_{os.getpid()}_{uuid.uuid4().hex}")
"""


def test_what_a_place_is_follows_its_writes_then_its_own_name(tmp_path: Path) -> None:
    assert rows(run(tmp_path, CLASSES)) == [
        (6, "DEMO_STORE_CACHE", "${DEMO_STORE_CACHE:-~/.cache/demo}", "cache", None),
        (
            7,
            "DEMO_EXTRACTED_DATASETS_PATH",
            "${DEMO_EXTRACTED_DATASETS_PATH:-${DEMO_STORE_CACHE:-~/.cache/demo}/x}",
            "download",
            None,
        ),
        (12, None, "~/.cache/demo-clip", "download", None),
        (20, "DEMO_POOL_FOLDER", "$DEMO_POOL_FOLDER", "throwaway", None),
        (22, None, "$TMPDIR", "throwaway", None),
    ]


#: tldextract's shape: a directory function's last fallback beside the source, the default of
#: a parameter of a class that keeps it in ``self`` and writes under it in another method.
INSTANCE = {
    "demo/cache.py": """\
import os


def get_cache_dir():
    cache_dir = os.environ.get("DEMO_SUFFIX_CACHE")
    if cache_dir is not None:
        return cache_dir
    return os.path.join(os.path.dirname(__file__), ".suffix_cache")


class DiskStore:
    def __init__(self, folder):
        self.folder = os.path.expanduser(folder)

    def set(self, key, value):
        with open(os.path.join(self.folder, key), "w") as f:
            f.write(value)
""",
    "demo/extract.py": """\
import os

from .cache import DiskStore, get_cache_dir

TIMEOUT = os.environ.get("DEMO_FETCH_TIMEOUT")


class Extract:
    def __init__(self, folder=get_cache_dir()):
        self._store = DiskStore(folder)
""",
}


def test_a_default_kept_in_self_and_written_by_another_method(tmp_path: Path) -> None:
    assert placed(run_tree(tmp_path, INSTANCE)) == [
        ("demo/cache.py", 5, "DEMO_SUFFIX_CACHE", "$DEMO_SUFFIX_CACHE", "cache"),
        ("demo/cache.py", 8, None, "{os.path.dirname(__file__)}/.suffix_cache", "cache"),
    ]


#: What is not a place: a helper that returns its parameter (its other callers' arguments
#: are not written); a timeout given to a download; a mount point; credentials; a library
#: search path; a class whose name says download.
NOT_PLACES = """\
import os
import tempfile
import urllib.request
from pathlib import Path


def as_text(value):
    return os.fspath(value)


def scratch(where):
    return tempfile.mkdtemp(dir=as_text(where))


def validate():
    return as_text(os.environ.get("DEMO_TOOL_HOME"))


def get(url, name):
    timeout = float(os.environ.get("DEMO_FETCH_TIMEOUT", "10"))
    urllib.request.urlretrieve(url, name, timeout)


MOUNTED = os.environ.get("DEMO_CACHE_MOUNT_FOLDER", "/kaggle/input")
CREDENTIALS_FOLDER = os.path.join(Path.home(), ".demo-keys")
home = os.path.expanduser("~")
user_lib_dirs = [os.path.join(home, d) for d in ["lib"]]
manager = DownloadManager(data_dir=os.environ.get("DEMO_DATA_STORE"))
"""


def test_what_only_looks_like_a_place(tmp_path: Path) -> None:
    assert rows(run(tmp_path, NOT_PLACES)) == [
        (25, None, "~/.demo-keys", "config", None),
    ]


TEMPORARY = """\
import tempfile
from tempfile import TemporaryDirectory


def stage(folder):
    with TemporaryDirectory() as scratch, tempfile.NamedTemporaryFile(dir=folder) as f:
        return scratch, f.name, tempfile.mkdtemp(), tempfile.mkstemp(".x", "p", None)
"""


def test_a_temporary_name_made_in_the_temporary_directory_is_throwaway(tmp_path: Path) -> None:
    """Listed, never gating; one made inside a given folder is that folder's business."""
    report = run(tmp_path, TEMPORARY)
    assert rows(report) == [
        (6, None, "$TMPDIR/{TemporaryDirectory()}", "throwaway", None),
        (7, None, "$TMPDIR/{mkdtemp()}", "throwaway", None),
        (7, None, "$TMPDIR/{mkstemp()}", "throwaway", None),
    ]
    assert [i.failing for i in report.items] == [False, False, False]


#: vLLM's tests' shapes: a module constant a fixture downloads into after ``global``; a
#: directory named beside the source, then made and downloaded into; a response read later.
SEED_SHAPES = """\
import os
import tempfile
import urllib.request
from pathlib import Path

MODEL_PATH = os.path.join(tempfile.gettempdir(), "demo_model")
DATA_DIR = Path(__file__).parent / "data"


def server():
    global MODEL_PATH
    MODEL_PATH = fetch_weights("acme/tiny", cache_dir=MODEL_PATH)


def ensure(url):
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    urllib.request.urlretrieve(url, DATA_DIR / "vocab.bin")


def read(url):
    answer = urllib.request.urlopen(url)
    size = len(url)
    return answer.read(), size
"""


def test_a_global_assigned_in_a_function_and_a_place_named_beside_the_source(
    tmp_path: Path,
) -> None:
    assert rows(run(tmp_path, SEED_SHAPES)) == [
        (6, None, "$TMPDIR/demo_model", "download", None),
        (7, None, "{__file__}/../data", "download", None),
        (21, None, "{url}", "uncached-download", None),
    ]


#: vLLM's shapes: a lock directory in the temporary directory (file locks shared by users), a
#: shared-memory segment; and a recipe given a kernel's ``uri``, which is no URL.
MEETING_PLACES = """\
import os
import tempfile
from pathlib import Path

temp_dir = tempfile.gettempdir()
SHM = "/dev/shm"


def lock_for(name, cache_dir=None):
    lock_dir = cache_dir or temp_dir
    os.makedirs(os.path.dirname(lock_dir), exist_ok=True)
    return os.path.join(lock_dir, name + ".lock")


def segment(size):
    with tempfile.NamedTemporaryFile(dir=SHM) as f:
        f.truncate(size)


def recipe(kernel):
    return make_recipe(kernel.uri, templates=(Path(__file__).parent / "templates",))
"""


def test_locks_and_shared_memory_are_where_processes_meet(tmp_path: Path) -> None:
    """Listed as ``ipc`` by the name of what is written there; nothing gates."""
    report = run(tmp_path, MEETING_PLACES)
    assert rows(report) == [
        (5, None, "$TMPDIR", "ipc", None),
        (6, None, "/dev/shm", "ipc", None),
    ]
    assert report.status == 0
