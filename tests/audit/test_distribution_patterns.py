"""Patterns a second set of distributions showed the static audit getting wrong (issue 32, item
3), each in the smallest wheel, sdist or tree that has it: test code shipped as ``*_test.py``,
an sdist whose name has a hyphen, settings that are not places (a version, a URL, a name), an
``or``-chain of variables, ``torch.hub.get_dir`` imported by name, and one place whose default
falls back on another fixed place. Line numbers matter; verdicts are literals.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
import zipfile
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs._audit import audit, text
from cacheroot.envs._audit.sources import _name_version, shipped_test

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.envs._audit import Report


def wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, textwrap.dedent(text))
    return path


def sdist(path: Path, files: dict[str, str]) -> Path:
    top = path.name.removesuffix(".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def run_wheel(tmp_path: Path, files: dict[str, str]) -> Report:
    return audit([str(wheel(tmp_path / "demo-1.0-py3-none-any.whl", files))], platform="linux")


def rows(report: Report) -> list[tuple[object, ...]]:
    return [
        (
            i.finding.file,
            i.finding.line,
            i.finding.variable,
            i.finding.expression,
            i.finding.default,
            i.finding.kind,
            i.covered_by,
        )
        for i in report.items
    ]


# -- 1. test code in distributions ---------------------------------------------------------------

WRITES_TMP = 'open("/tmp/{}", "w")\n'


def test_test_modules_named_by_their_suffix_are_skipped_in_a_wheel(tmp_path: Path) -> None:
    """``pkg/foo_test.py`` and ``pkg/_ops_tests.py`` are test code as much as ``test_foo.py``;
    ``latest.py`` and ``contest.py`` only end in the letters."""
    report = run_wheel(
        tmp_path,
        {
            "pkg/foo_test.py": WRITES_TMP.format("foo-test"),
            "pkg/_ops_test.py": WRITES_TMP.format("ops-test"),
            "pkg/ops_tests.py": WRITES_TMP.format("ops-tests"),
            "pkg/latest.py": WRITES_TMP.format("latest"),
            "pkg/contest.py": WRITES_TMP.format("contest"),
        },
    )
    assert [(i.finding.file, i.finding.expression) for i in report.items] == [
        ("pkg/contest.py", "/tmp/contest"),
        ("pkg/latest.py", "/tmp/latest"),
    ]
    assert report.stats.shipped_tests == 3


def test_test_modules_named_by_their_suffix_are_skipped_in_an_sdist(tmp_path: Path) -> None:
    archive = sdist(
        tmp_path / "demo-1.0.tar.gz",
        {"pkg/foo_test.py": WRITES_TMP.format("foo"), "pkg/io.py": WRITES_TMP.format("io")},
    )
    report = audit([str(archive)], platform="linux")
    assert [i.finding.file for i in report.items] == ["pkg/io.py"]
    assert report.stats.shipped_tests == 1


def test_a_source_tree_of_ones_own_still_reads_its_suffixed_tests(tmp_path: Path) -> None:
    """Only distributions' test code is skipped: a tree's own tests are what CI runs."""
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "foo_test.py").write_text(WRITES_TMP.format("foo"), encoding="utf-8")
    report = audit([str(tmp_path / "src")], platform="linux")
    assert [i.finding.file for i in report.items] == ["pkg/foo_test.py"]


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("pkg/test_io.py", True),
        ("pkg/io_test.py", True),
        ("pkg/io_tests.py", True),
        ("pkg/conftest.py", True),
        ("pkg/tests/helpers.py", True),
        ("pkg/testing/fixtures.py", True),
        ("pkg/benchmarks/run.py", True),
        ("pkg/examples/demo.py", True),
        ("pkg/latest.py", False),
        ("pkg/contest.py", False),
        ("pkg/testament.py", False),
        ("pkg/io_testing.py", False),
    ],
)
def test_which_files_of_a_distribution_are_test_code(path: str, test: bool) -> None:
    assert shipped_test(path) is test


# -- 2. an sdist's name and version ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "named"),
    [
        ("openai-clip-1.0.1.tar.gz", ("openai-clip", "1.0.1")),
        ("demo_pkg-1.2.0.tar.gz", ("demo-pkg", "1.2.0")),
        ("vllm-0.33.0.tar.gz", ("vllm", "0.33.0")),
        ("django-2fa-1.0.tgz", ("django-2fa", "1.0")),
        ("openai-whisper-20240930.tar.gz", ("openai-whisper", "20240930")),
        ("Some.Project-2.0rc1.zip", ("some-project", "2.0rc1")),
        ("no-version-here.tar.gz", ("no-version-here", "")),
        ("openai_clip-1.0.1-py3-none-any.whl", ("openai-clip", "1.0.1")),
        ("demo-1.0-1-py3-none-any.whl", ("demo", "1.0")),
    ],
)
def test_an_archive_is_named_at_its_last_hyphen_before_a_version(
    file: str, named: tuple[str, str]
) -> None:
    """An sdist's name may hold hyphens (``openai-clip``); its version starts with a digit. A
    wheel's name never holds one (PEP 427), its build tag may start with a digit."""
    assert _name_version(f"/somewhere/{file}") == named


def test_a_hyphenated_sdist_labels_its_findings(tmp_path: Path) -> None:
    archive = sdist(tmp_path / "openai-clip-1.0.1.tar.gz", {"clip/io.py": WRITES_TMP.format("x")})
    report = audit([str(archive)], platform="linux")
    assert {(i.finding.dist, i.finding.version) for i in report.items} == {("openai-clip", "1.0.1")}
    assert report.items[0].finding.upstream == "openai-clip==1.0.1 clip/io.py"


# -- 3. strings that are not paths -------------------------------------------------------------

#: stanza's shape: settings read from the environment, handed to a download with its directory.
SETTINGS = {
    "stanza/resources/common.py": """\
import os

from stanza._version import __resources_version__

STANZA_RESOURCES_VERSION = os.environ.get("STANZA_RESOURCES_VERSION", "1.5.0")
STANZA_RESOURCES_TAG = os.environ.get("STANZA_RESOURCES_TAG", "v1.5.0rc1")
STANZA_RESOURCES_BRANCH = os.environ.get("STANZA_RESOURCES_BRANCH", __resources_version__)
STANZA_RESOURCES_URL = os.environ.get("STANZA_RESOURCES_URL", "https://example.org/stanza")
STANZA_MODEL_NAME = os.environ.get("STANZA_MODEL_NAME", "default")
STANZA_HOST = os.environ.get("STANZA_HOST")
STANZA_MIRROR = os.environ.get("STANZA_MIRROR", "https://mirror.example.org/stanza")
DEFAULT_MODEL_DIR = os.getenv("STANZA_RESOURCES_DIR", os.path.expanduser("~/stanza_resources"))
STANZA_VERSION_DIR = os.getenv("STANZA_VERSION_DIR", "/tmp/stanza-versions")


def download_resources_json(
    model_dir=DEFAULT_MODEL_DIR,
    version=STANZA_RESOURCES_VERSION,
    tag=STANZA_RESOURCES_TAG,
    branch=STANZA_RESOURCES_BRANCH,
    url=STANZA_RESOURCES_URL,
    name=STANZA_MODEL_NAME,
    host=STANZA_HOST,
    mirror=STANZA_MIRROR,
):
    os.makedirs(model_dir, exist_ok=True)
    download_file(url, model_dir, version, tag, branch, name, host, mirror)
    os.makedirs(STANZA_VERSION_DIR, exist_ok=True)
""",
}


def test_a_version_url_or_name_read_from_the_environment_is_no_place(tmp_path: Path) -> None:
    """Handed to a download beside its directory, a setting is still no directory: a version
    (``1.5.0``, ``v1.5.0rc1``, one imported), a URL, a plain name, a host. A variable whose
    name says directory stays a place, whatever else its name says (``_VERSION_DIR``)."""
    report = run_wheel(tmp_path, SETTINGS)
    assert rows(report) == [
        (
            "stanza/resources/common.py",
            12,
            "STANZA_RESOURCES_DIR",
            "${STANZA_RESOURCES_DIR:-~/stanza_resources}",
            "~/stanza_resources",
            "download",
            None,
        ),
        (
            "stanza/resources/common.py",
            13,
            "STANZA_VERSION_DIR",
            "${STANZA_VERSION_DIR:-/tmp/stanza-versions}",
            "/tmp/stanza-versions",
            "download",
            None,
        ),
    ]
    assert [i.finding.variable for i in report.items if i.suggestion.startswith("Variable(")] == [
        "STANZA_RESOURCES_DIR",
        "STANZA_VERSION_DIR",
    ]


# -- 4. or-chains ------------------------------------------------------------------------------

#: easyocr's shape: two variables and a home default chained with ``or``.
OR_CHAIN = """\
import os

MODULE_PATH = os.environ.get("EASYOCR_MODULE_PATH") or os.environ.get("MODULE_PATH") or os.path.expanduser("~/.EasyOCR/")
"""  # noqa: E501
CHAINED = (
    "easyocr/config.py",
    3,
    "EASYOCR_MODULE_PATH",
    "${EASYOCR_MODULE_PATH:-${MODULE_PATH:-~/.EasyOCR/}}",
    "${MODULE_PATH:-~/.EasyOCR/}",
    "cache",
    None,
)
CHAIN_ROW = (
    "Variable('EASYOCR_MODULE_PATH', 'easyocr_module', purpose='<what it caches>', "
    "replaces='${MODULE_PATH:-~/.EasyOCR/}', upstream=('demo==1.0 easyocr/config.py',)),"
)


def test_an_or_chain_written_under_is_one_place(tmp_path: Path) -> None:
    report = run_wheel(
        tmp_path,
        {
            "easyocr/config.py": OR_CHAIN
            + 'os.makedirs(os.path.join(MODULE_PATH, "model"), exist_ok=True)\n'
        },
    )
    assert rows(report) == [CHAINED]
    assert [i.suggestion for i in report.items] == [CHAIN_ROW]


def test_an_or_chain_used_from_another_module_is_one_place(tmp_path: Path) -> None:
    """``from .config import MODULE_PATH``, kept in ``self`` and made with ``os.makedirs``."""
    report = run_wheel(
        tmp_path,
        {
            "easyocr/config.py": OR_CHAIN,
            "easyocr/easyocr.py": """\
import os

from .config import MODULE_PATH


class Reader:
    def __init__(self, model_storage_directory=None):
        self.model_storage_directory = MODULE_PATH + "/model"
        if model_storage_directory:
            self.model_storage_directory = model_storage_directory
        os.makedirs(self.model_storage_directory, exist_ok=True)
""",
        },
    )
    assert rows(report) == [CHAINED]
    assert [i.suggestion for i in report.items] == [CHAIN_ROW]


def test_a_two_part_or_is_still_a_variable_with_its_default(tmp_path: Path) -> None:
    report = run_wheel(
        tmp_path,
        {
            "demo/paths.py": """\
import os

ROOT = os.environ.get("DEMO_ROOT") or os.path.expanduser("~/.demo")
os.makedirs(ROOT, exist_ok=True)
"""
        },
    )
    assert rows(report) == [
        ("demo/paths.py", 3, "DEMO_ROOT", "${DEMO_ROOT:-~/.demo}", "~/.demo", "cache", None)
    ]


# -- 5. known directory helpers imported by name -------------------------------------------------

#: facexlib's shape: torch.hub's directory, imported by name, joined, downloaded into.
HUB_DIR = {
    "facexlib/utils/misc.py": """\
import os

from torch import hub
from torch.hub import download_url_to_file, get_dir


def load_file_from_url(url, model_dir=None, file_name=None):
    if model_dir is None:
        hub_dir = get_dir()
        model_dir = os.path.join(hub_dir, "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    cached_file = os.path.join(model_dir, file_name)
    download_url_to_file(url, cached_file)


def other(url):
    target = os.path.join(hub.get_dir(), "other")
    download_url_to_file(url, os.path.join(target, "x.pt"))
""",
}
UNDER_TORCH_HOME = "${TORCH_HOME:-${XDG_CACHE_HOME:-~/.cache}/torch}/hub"


def test_torch_hub_get_dir_imported_by_name_is_covered_by_torch_home(tmp_path: Path) -> None:
    report = run_wheel(tmp_path, HUB_DIR)
    assert [
        (i.finding.line, i.finding.variable, i.finding.expression, i.finding.kind, i.covered_by)
        for i in report.items
    ] == [
        (9, "TORCH_HOME", UNDER_TORCH_HOME, "download", "TORCH_HOME"),
        (17, "TORCH_HOME", f"{UNDER_TORCH_HOME}/other", "download", "TORCH_HOME"),
    ]
    assert report.status == 0


# -- 6. a default that falls back on another fixed place ---------------------------------------

#: The brief's shape of keras's: a variable with a home default, replaced by a /tmp place when
#: the home is not writable.
KERAS_ONE_NAME = """\
import os

base = os.environ.get("KERAS_HOME", os.path.expanduser("~/.keras"))
if not os.access(base, os.W_OK):
    base = "/tmp/.keras"
os.makedirs(os.path.join(base, "models"), exist_ok=True)
"""

#: keras's backend configuration: the variable only when set, else a directory under the home,
#: or under /tmp when the home is not writable.
KERAS_CONFIG = """\
import os

if "KERAS_HOME" in os.environ:
    _keras_dir = os.environ.get("KERAS_HOME")
else:
    _keras_base_dir = os.path.expanduser("~")
    if not os.access(_keras_base_dir, os.W_OK):
        _keras_base_dir = "/tmp"
    _keras_dir = os.path.join(_keras_base_dir, ".keras")
os.makedirs(_keras_dir, exist_ok=True)
"""

#: keras's get_file: the same chain in a function, downloaded into.
KERAS_GET_FILE = """\
import os
from urllib.request import urlretrieve


def get_file(fname, origin, cache_dir=None, cache_subdir="datasets"):
    if cache_dir is None:
        if "KERAS_HOME" in os.environ:
            cache_dir = os.environ.get("KERAS_HOME")
        else:
            cache_dir = os.path.expanduser(os.path.join("~", ".keras"))
    datadir_base = os.path.expanduser(cache_dir)
    if not os.access(datadir_base, os.W_OK):
        datadir_base = os.path.join("/tmp", ".keras")
    datadir = os.path.join(datadir_base, cache_subdir)
    os.makedirs(datadir, exist_ok=True)
    urlretrieve(origin, os.path.join(datadir, fname))
"""
KERAS_ROW = (
    "Variable('KERAS_HOME', 'keras', purpose='<what it caches>', "
    "replaces='~/.keras, else /tmp/.keras', upstream=('demo==1.0 {}',)),"
)


@pytest.mark.parametrize(
    ("source", "line", "expression", "kind"),
    [
        (KERAS_ONE_NAME, 3, "${KERAS_HOME:-~/.keras}", "cache"),
        (KERAS_CONFIG, 4, "${KERAS_HOME:-~/.keras}", "cache"),
        (KERAS_GET_FILE, 8, "${KERAS_HOME:-~/.keras}", "download"),
    ],
    ids=["one-name", "backend-config", "get-file"],
)
def test_a_fallback_chain_is_one_place_that_names_its_variable(
    tmp_path: Path, source: str, line: int, expression: str, kind: str
) -> None:
    report = run_wheel(tmp_path, {"keras/paths.py": source})
    assert rows(report) == [
        (
            "keras/paths.py",
            line,
            "KERAS_HOME",
            expression,
            "~/.keras, else /tmp/.keras",
            kind,
            None,
        )
    ]
    assert [i.suggestion for i in report.items] == [KERAS_ROW.format("keras/paths.py")]


def test_a_fixed_place_also_written_on_its_own_stays_a_place(tmp_path: Path) -> None:
    """A fallback folds into its variable only where the variable's value is the one written;
    the same place written directly elsewhere is a place of its own there."""
    report = run_wheel(
        tmp_path,
        {
            "demo/paths.py": """\
import os

FALLBACK = "/tmp/.demo"
base = os.environ.get("DEMO_HOME", os.path.expanduser("~/.demo"))
if not os.access(base, os.W_OK):
    base = FALLBACK
os.makedirs(base, exist_ok=True)
os.makedirs(FALLBACK, exist_ok=True)
"""
        },
    )
    assert [(i.finding.line, i.finding.variable, i.finding.default) for i in report.items] == [
        (3, None, "/tmp/.demo"),
        (4, "DEMO_HOME", "~/.demo, else /tmp/.demo"),
    ]


def test_platform_branches_are_not_folded_into_a_variable(tmp_path: Path) -> None:
    """Another platform's place is listed apart, not as a fallback of this one's variable."""
    report = run_wheel(
        tmp_path,
        {
            "demo/paths.py": """\
import os
import sys

if sys.platform == "win32":
    base = os.path.join(os.path.expanduser("~"), "demo-win")
else:
    base = os.environ.get("DEMO_HOME", os.path.expanduser("~/.demo"))
os.makedirs(base, exist_ok=True)
"""
        },
    )
    assert [
        (i.finding.line, i.finding.variable, i.finding.default, i.finding.runs_on)
        for i in report.items
    ] == [
        (5, None, "~/demo-win", ("win32",)),
        (7, "DEMO_HOME", "~/.demo", ("darwin", "linux")),
    ]


def test_the_report_shows_the_chain_a_variable_falls_back_on(tmp_path: Path) -> None:
    report = run_wheel(tmp_path, {"keras/paths.py": KERAS_CONFIG})
    (item,) = report.items
    assert item.finding.fallbacks == ("~/.keras", "/tmp/.keras")
    assert item.as_json()["default"] == "~/.keras, else /tmp/.keras"
    shown = text(report)
    assert "    KERAS_HOME = ${KERAS_HOME:-~/.keras}  [expanduser]\n" in shown
    assert "    falls back on: ~/.keras, else /tmp/.keras\n" in shown
    assert "--allow '~'" not in shown
    assert "--allow '/tmp'" not in shown


def test_a_branch_on_something_else_is_no_fallback(tmp_path: Path) -> None:
    """seaborn's appdirs shape: a branch per platform told by a module's own name, which the
    audit cannot read as a platform: the places stay apart, the variable's default its own."""
    report = run_wheel(
        tmp_path,
        {
            "demo/appdirs.py": """\
import os
import sys

system = "darwin" if sys.platform.startswith("darwin") else "linux2"


def cache_dir_of(appname):
    if system == "darwin":
        path = os.path.expanduser("~/Library/Caches")
    else:
        path = os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.path.join(path, appname)


def data_home():
    home = cache_dir_of("demo")
    os.makedirs(home, exist_ok=True)
    return home
"""
        },
    )
    assert [(i.finding.line, i.finding.variable, i.finding.default) for i in report.items] == [
        (9, None, "~/Library/Caches"),
        (11, "XDG_CACHE_HOME", "~/.cache"),
        (16, None, "{path}/{appname}"),  # the location function given a fixed name
    ]
