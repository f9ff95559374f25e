"""The static audit follows values, not names: aliases, branches, writes, known readers, platforms.

Each source below is small and written for the case it names; line numbers matter (the
expectations name them). Expected verdicts are written out as literals.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from cacheroot.envs._audit import audit, text

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.envs._audit import Report


def run(tmp_path: Path, source: str, name: str = "m.py", platform: str = "linux") -> Report:
    path = tmp_path / "src" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return audit([str(tmp_path / "src")], platform=platform)


def rows(report: Report) -> list[tuple[object, ...]]:
    return [
        (i.finding.line, i.finding.variable, i.finding.expression, i.finding.kind, i.covered_by)
        for i in report.items
    ]


ALIASES = """\
import os as _os
import os.path as osp
import tempfile as tf
from os.path import join as pjoin
from pathlib import Path as P

A = osp.join(osp.expanduser("~"), ".alias-a")
B = _os.environ.get("ALIAS_CACHE_DIR", "/srv/alias")
C = pjoin(tf.gettempdir(), "alias-c")
D = P.home() / ".alias-d"
"""


def test_aliases_of_os_path_pathlib_and_tempfile(tmp_path: Path) -> None:
    assert rows(run(tmp_path, ALIASES)) == [
        (7, None, "~/.alias-a", "cache", None),
        (8, "ALIAS_CACHE_DIR", "${ALIAS_CACHE_DIR:-/srv/alias}", "cache", None),
        (9, None, "$TMPDIR/alias-c", "cache", None),
        (10, None, "~/.alias-d", "cache", None),
    ]


#: vLLM's test helper, in the shape its tests/ tree has it: a name with a leading underscore,
#: held in a constant, with a fixed default in the temporary directory.
TEST_HELPER = """\
import os
import tempfile
from pathlib import Path

TEST_CACHE_ENV = "_VLLM_TEST_CACHE"


def test_cache_dir(namespace=None):
    default = Path(tempfile.gettempdir()) / "vllm-test-cache"
    root = Path(os.environ.get(TEST_CACHE_ENV, default))
    root.mkdir(parents=True, exist_ok=True)
    return root
"""


def test_a_name_with_a_leading_underscore_and_its_helper_are_covered(tmp_path: Path) -> None:
    report = run(tmp_path, TEST_HELPER)
    assert rows(report) == [
        (
            10,
            "_VLLM_TEST_CACHE",
            "${_VLLM_TEST_CACHE:-$TMPDIR/vllm-test-cache}",
            "cache",
            "_VLLM_TEST_CACHE",
        ),
    ]
    assert report.status == 0


BRANCHES = """\
import os
import sys


def store():
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", "C:/demo")
    else:
        base = os.environ.get("DEMO_STORE", "/var/lib/demo")
    os.makedirs(base, exist_ok=True)
    return base
"""


def test_every_value_of_a_branch_reaches_the_write(tmp_path: Path) -> None:
    """Neither name says cache; both values reach ``makedirs``. The Windows branch does not
    count on Linux, and does on Windows."""
    linux = run(tmp_path, BRANCHES)
    assert rows(linux) == [
        (7, "LOCALAPPDATA", "${LOCALAPPDATA:-C:/demo}", "cache", None),
        (9, "DEMO_STORE", "${DEMO_STORE:-/var/lib/demo}", "cache", None),
    ]
    assert [(i.finding.line, i.finding.runs_on, i.failing) for i in linux.items] == [
        (7, ("win32",), False),
        (9, ("darwin", "linux"), True),
    ]
    windows = run(tmp_path, BRANCHES, platform="win32")
    assert [(i.finding.line, i.failing) for i in windows.items] == [(7, True), (9, False)]


WRITES = """\
import os
import urllib.request
from huggingface_hub import snapshot_download

WEIGHTS = os.environ.get("DEMO_WEIGHTS")
SHEET = os.getenv("DEMO_SHEET_FILE", "/srv/sheet.csv")
PLOTS = os.environ.get("DEMO_PLOTS", "/srv/plots")


def fetch():
    snapshot_download("acme/tiny", cache_dir=WEIGHTS)
    urllib.request.urlretrieve("https://example.com/s.csv", SHEET)
    with open(os.path.join(PLOTS, "a.png"), "wb") as f:
        f.write(b"")
"""


def test_a_variable_whose_value_is_written_is_a_location(tmp_path: Path) -> None:
    assert rows(run(tmp_path, WRITES)) == [
        (5, "DEMO_WEIGHTS", "$DEMO_WEIGHTS", "download", None),
        (6, "DEMO_SHEET_FILE", "${DEMO_SHEET_FILE:-/srv/sheet.csv}", "download", None),
        (7, "DEMO_PLOTS", "${DEMO_PLOTS:-/srv/plots}", "output", None),
    ]


KNOWN = """\
import os
import appdirs
import platformdirs
import torch

MPL = os.environ.get("MPLCONFIGDIR")
NLTK = os.getenv("NLTK_DATA", "")
MODELS = os.getenv("DEMO_MODELS_PATH", os.getenv("HF_HOME"))
HUB = os.path.join(torch.hub.get_dir(), "checkpoints")
DIRS = platformdirs.PlatformDirs("demo").user_cache_dir
OLD = appdirs.AppDirs("demo-old").user_cache_dir
HOME = os.path.join(os.environ["HOME"], ".demo-home")
"""


def test_known_readers_and_location_functions(tmp_path: Path) -> None:
    report = run(tmp_path, KNOWN)
    assert rows(report) == [
        (6, "MPLCONFIGDIR", "$MPLCONFIGDIR", "cache", None),
        (7, "NLTK_DATA", "$NLTK_DATA", "download", None),
        (8, "DEMO_MODELS_PATH", "${DEMO_MODELS_PATH:-$HF_HOME}", "download", "HF_HOME"),
        (
            9,
            "TORCH_HOME",
            "${TORCH_HOME:-${XDG_CACHE_HOME:-~/.cache}/torch}/hub/checkpoints",
            "download",
            "TORCH_HOME",
        ),
        (10, "XDG_CACHE_HOME", "$XDG_CACHE_HOME/demo", "cache", "XDG_CACHE_HOME"),
        (11, "XDG_CACHE_HOME", "$XDG_CACHE_HOME/demo-old", "cache", "XDG_CACHE_HOME"),
        (12, None, "~/.demo-home", "cache", None),
    ]
    reasons = {i.finding.line: i.finding.reason for i in report.items}
    assert reasons[6] == (
        "read by matplotlib matplotlib/__init__.py _get_config_or_cache_dir (font cache, tex cache)"
    )


CHILD = """\
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"


def test_child():
    env = {**os.environ, "DEMO_DATA": str(DATA)}
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
"""


def test_a_directory_beside_the_source_handed_to_a_child(tmp_path: Path) -> None:
    assert rows(run(tmp_path, CHILD, name="test_child.py")) == [
        (10, "DEMO_DATA", "{__file__}/../data", "download", None),
    ]


RUN_TIME = """\
import os

PREFIX = os.environ.get("DEMO_PREFIX", "demo").upper()


def where(kind):
    return os.environ.get(f"{PREFIX}_{kind}_CACHE_DIR")
"""


def test_a_name_built_at_run_time_is_said_with_its_line(tmp_path: Path) -> None:
    report = run(tmp_path, RUN_TIME)
    assert report.items == []
    assert [(u.dist, u.file, u.line, u.what) for u in report.stats.unfollowed] == [
        ("src", "m.py", 7, "environment name built at run time"),
    ]


UNCACHED = """\
import io
import tempfile
import urllib.request

import requests


def image(url):
    return io.BytesIO(requests.get(url, timeout=10).content)


def sheet(url):
    return urllib.request.urlopen(url).read()


def archive(url):
    with tempfile.NamedTemporaryFile() as f:
        f.write(requests.get(url).content)


def api(url):
    return requests.get(url).json()
"""


def test_a_url_read_on_every_call_is_an_uncached_download(tmp_path: Path) -> None:
    report = run(tmp_path, UNCACHED)
    assert rows(report) == [
        (9, None, "{url}", "uncached-download", None),
        (13, None, "{url}", "uncached-download", None),
        (17, None, "$TMPDIR/{NamedTemporaryFile()}", "throwaway", None),
        (18, None, "{url}", "uncached-download", None),
    ]
    assert report.status == 0  # listed, not gating


OVERRIDES = """\
import os

from cacheroot.envs import VLLM_TEST_CACHE


def test_points_hf_home_at_tmp(monkeypatch):
    monkeypatch.setenv("HF_HOME", "/tmp/hf")


def test_sets_it_by_hand():
    os.environ["TORCH_HOME"] = "/tmp/torch"


def test_reads_the_layout():
    return os.path.join(os.environ[VLLM_TEST_CACHE], "gsm8k")
"""


def test_a_test_that_sets_a_layout_variable_fails_the_gate(tmp_path: Path) -> None:
    report = run(tmp_path, OVERRIDES, name="tests/test_env.py")
    assert rows(report) == [
        (7, "HF_HOME", "/tmp/hf", "layout-override", None),
        (11, "TORCH_HOME", "/tmp/torch", "layout-override", None),
        (15, "_VLLM_TEST_CACHE", "$_VLLM_TEST_CACHE/gsm8k", "cache", "_VLLM_TEST_CACHE"),
    ]
    assert [i.failing for i in report.items] == [True, True, False]
    assert report.status == 1


CLASSES = """\
import os
import tempfile

DUMP = os.environ.get("DEMO_DEBUG_DUMP_PATH", "/tmp/demo-dumps")
RPC = os.environ.get("DEMO_RPC_BASE_PATH", tempfile.gettempdir())
RUN = os.path.join(tempfile.gettempdir(), f"demo-{os.getpid()}")
PROFILE = os.path.join(tempfile.gettempdir(), "demo_profile_output")
SOCKET = "/tmp/demo.sock"
"""


def test_each_finding_has_a_class_and_only_caches_gate(tmp_path: Path) -> None:
    report = run(tmp_path, CLASSES)
    assert [(i.finding.line, i.finding.kind, i.failing) for i in report.items] == [
        (4, "output", False),
        (5, "ipc", False),
        (6, "throwaway", False),
        (7, "output", False),
        (8, "ipc", False),
    ]
    assert all(i.finding.reason for i in report.items)
    assert report.status == 0


def test_platform_branches_of_every_spelling(tmp_path: Path) -> None:
    source = """\
    import os
    import platform
    import sys

    IS_WINDOWS = os.name == "nt"

    if sys.platform.startswith("win"):
        A = os.path.join(os.path.expanduser("~"), ".demo-a")
    elif sys.platform == "darwin":
        B = os.path.join(os.path.expanduser("~"), ".demo-b")
    if platform.system() == "Windows":
        C = os.path.join(os.path.expanduser("~"), ".demo-c")
    if not IS_WINDOWS:
        D = os.path.join(os.path.expanduser("~"), ".demo-d")
    """
    report = run(tmp_path, source)
    assert [(i.finding.line, i.finding.runs_on, i.failing) for i in report.items] == [
        (8, ("win32",), False),
        (10, ("darwin",), False),
        (12, ("win32",), False),
        (14, ("darwin", "linux"), True),
    ]


def test_a_package_where_nothing_was_seen_is_not_called_clean(tmp_path: Path) -> None:
    """What could not be followed is counted per package, and the text says so."""
    source = """\
    import os
    from demo.paths import default_root

    ROOT = os.environ.get("DEMO_ROOT", default_root())
    NAME = os.environ[os.environ.get("DEMO_WHICH", "X")]
    """
    report = run(tmp_path, source)
    out = text(report)
    assert "src: 1 environment name built at run time, 1 helper in another module" in out
    assert [(u.line, u.what) for u in report.stats.unfollowed] == [
        (4, "helper in another module"),
        (5, "environment name built at run time"),
    ]


WINDOWS_ONLY = """\
import os
import sys

if sys.platform == "win32":
    CACHE = os.path.join(os.environ.get("LOCALAPPDATA", "C:/"), "demo", "cache")
    os.makedirs(CACHE, exist_ok=True)
"""


def test_the_platform_option_decides_which_branches_gate(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text(WINDOWS_ONLY, encoding="utf-8")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "cacheroot.envs._cli", "audit", str(src), *args]
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    linux = cli("--platform", "linux")
    assert linux.returncode == 0, linux.stdout
    assert "On other platforms' branches (1; not linux):" in linux.stdout
    assert "(only win32)" in linux.stdout
    windows = cli("--platform", "win32")
    assert windows.returncode == 1, windows.stdout
    assert "Not covered by the layout (1):" in windows.stdout


def test_a_variable_whose_default_is_under_home_is_a_location(tmp_path: Path) -> None:
    """The default, not the name, says it: ``DEMO_MODELS`` falls back to ``~/.demo/models``;
    a configuration default under HOME is still left alone."""
    source = """\
    import os

    MODELS = os.environ.get("DEMO_MODELS", os.path.expanduser("~/.demo/models"))
    EDITOR = os.environ.get("DEMO_EDITOR_RC", "~/.config/demo/rc")
    """
    assert rows(run(tmp_path, source)) == [
        (3, "DEMO_MODELS", "${DEMO_MODELS:-~/.demo/models}", "download", None),
    ]


def test_only_the_head_of_a_written_path_is_a_location(tmp_path: Path) -> None:
    """``$TMPDIR/$USER/x`` lies in the temporary directory: ``USER`` names a part, not a
    place; a file generated beside the source is output, reported once."""
    source = """\
    import os
    import tempfile
    from pathlib import Path

    HERE = Path(__file__).parent


    def build():
        folder = os.path.join(tempfile.gettempdir(), os.environ.get("USER", "x"), "demo")
        os.makedirs(folder, exist_ok=True)
        (HERE / "_generated.py").write_text("X = 1\\n")
    """
    assert rows(run(tmp_path, source)) == [
        (9, None, "$TMPDIR/${USER:-x}/demo", "cache", None),
        (11, None, "{__file__}/../_generated.py", "output", None),
    ]
