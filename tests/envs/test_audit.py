"""``cacheroot audit``: small packages that read caches in each style, as directories, wheels,
sdists and installed distributions; the findings, the verdicts, the exit status and the JSON."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from cacheroot.envs._audit import audit, judge
from cacheroot.envs._audit.scan import Stats, scan_installed

#: One module that decides cache locations in every style the audit knows, and in some it must
#: leave alone (a switch, an install prefix, configuration, a docstring). Line numbers matter:
#: the expectations below name them.
CACHES = '''\
import os
import tempfile
from pathlib import Path

import platformdirs

JIT_ENV = "DEMO_JIT_DIR"


def jit_dir():
    return os.environ.get(JIT_ENV, os.path.expanduser("~/.demo/jit"))


CACHE = os.getenv("DEMO_CACHE_DIR", Path.home() / ".demo" / "cache")
TRITON = os.environ["TRITON_CACHE_DIR"]
SCRATCH = os.path.join(tempfile.gettempdir(), "demo-scratch")
HONOURED = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "demo")
IGNORED = os.path.expanduser("~/.cache/demo-models")
APP = platformdirs.user_cache_dir("demo")
KERNELS = os.environ.get("DEMO_KERNEL_CACHE") or str(Path("~/.demo/kernels").expanduser())
ENABLED = os.getenv("DEMO_CACHE_ENABLED", "1")
CUDA = os.getenv("CUDA_HOME", "/usr/local/cuda")
SETTINGS = os.getenv("DEMO_CONFIG_DIR", "~/.config/demo")


def legacy():
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DEMO_LEGACY_CACHE_DIR" in os.environ:
        return os.environ["DEMO_LEGACY_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "demo-legacy")


def humming():
    found = os.getenv("HUMMING_CACHE_DIR")
    if found is not None:
        return found
    return os.path.join(os.path.expanduser("~"), ".humming/cache/")


def build():
    """Writes under /tmp/demo-build (a docstring: not a finding)."""
    os.makedirs("/tmp/demo-build", exist_ok=True)
    return f"{tempfile.gettempdir()}/{os.getpid()}"
'''

#: (line, variable, expression, row that covers it or None), in the order reported.
EXPECTED = [
    (11, "DEMO_JIT_DIR", "${DEMO_JIT_DIR:-~/.demo/jit}", None),
    (14, "DEMO_CACHE_DIR", "${DEMO_CACHE_DIR:-~/.demo/cache}", None),
    (15, "TRITON_CACHE_DIR", "$TRITON_CACHE_DIR", "TRITON_CACHE_DIR"),
    (16, None, "$TMPDIR/demo-scratch", None),
    (17, "XDG_CACHE_HOME", "${XDG_CACHE_HOME:-~/.cache}/demo", "XDG_CACHE_HOME"),
    (18, None, "~/.cache/demo-models", None),
    (19, "XDG_CACHE_HOME", "$XDG_CACHE_HOME/demo", "XDG_CACHE_HOME"),
    (20, "DEMO_KERNEL_CACHE", "${DEMO_KERNEL_CACHE:-~/.demo/kernels}", None),
    (28, "TIKTOKEN_CACHE_DIR", "$TIKTOKEN_CACHE_DIR", "TIKTOKEN_CACHE_DIR"),
    (30, "DEMO_LEGACY_CACHE_DIR", "$DEMO_LEGACY_CACHE_DIR", "TIKTOKEN_CACHE_DIR"),
    (31, None, "$TMPDIR/demo-legacy", "TIKTOKEN_CACHE_DIR"),
    (35, "HUMMING_CACHE_DIR", "$HUMMING_CACHE_DIR", "HUMMING_CACHE_DIR"),
    (38, None, "~/.humming/cache/", "HUMMING_CACHE_DIR"),
    (43, None, "/tmp/demo-build", None),
    (44, None, "$TMPDIR/{os.getpid()}", None),
]
#: Where each uncovered one falls back when unset, and how its default was formed.
STYLES = {
    11: ("~/.demo/jit", ["expanduser"]),
    14: ("~/.demo/cache", ["Path.home()"]),
    16: ("$TMPDIR/demo-scratch", ["gettempdir()"]),
    17: ("~/.cache", ["XDG_CACHE_HOME honoured", "expanduser"]),
    18: ("~/.cache/demo-models", ["XDG_CACHE_HOME ignored", "expanduser"]),
    19: ("$XDG_CACHE_HOME/demo", ["XDG_CACHE_HOME honoured", "platformdirs.user_cache_dir"]),
    20: ("~/.demo/kernels", ["expanduser"]),
    43: ("/tmp/demo-build", ["/tmp literal"]),
}
#: The keys of each object ``--json`` prints.
JSON_KEYS = {
    "dist",
    "version",
    "file",
    "line",
    "variable",
    "expression",
    "default",
    "style",
    "fallback_of",
    "covered_by",
    "coverage",
    "allowed",
    "suggestion",
    "class",
    "reason",
    "runs_on",
    "failing",
    "instead",
    "downloader",
}
#: Only what the layout covers: a package that passes the gate.
COVERED = """\
import os

CACHE = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "audit", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def sdist(path: Path, files: dict[str, str]) -> Path:
    top = path.name.removesuffix(".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def rows(doc: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(d["line"], d["variable"], d["expression"], d["covered_by"]) for d in doc]


def test_every_style_in_a_directory(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    report = audit([str(src)])
    found = [
        (i.finding.line, i.finding.variable, i.finding.expression, i.covered_by)
        for i in report.items
    ]
    assert found == EXPECTED
    assert {i.finding.file for i in report.items} == {"demo/caches.py"}
    assert {i.finding.dist for i in report.items} == {"src"}
    for item in report.items:
        if item.finding.line in STYLES:
            default, style = STYLES[item.finding.line]
            assert (item.finding.default, list(item.finding.style)) == (default, style)
    assert report.status == 1


def test_how_each_is_covered(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    how = {i.finding.line: i.how for i in audit([str(src)]).items if i.covered_by}
    assert how == {
        15: "its row",
        17: "its row",
        19: "its row",
        28: "its row",
        30: "fallback when TIKTOKEN_CACHE_DIR (line 27) is unset",
        31: (
            "fallback when DEMO_LEGACY_CACHE_DIR (line 30) is unset; DEMO_LEGACY_CACHE_DIR: "
            "fallback when TIKTOKEN_CACHE_DIR (line 27) is unset"
        ),
        35: "its row (cuda only)",
        38: "fallback when HUMMING_CACHE_DIR (line 35) is unset",
    }


def test_suggestions_for_what_is_not_covered(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    suggested = {i.finding.line: i.suggestion for i in audit([str(src)]).items if i.suggestion}
    assert suggested[14] == (
        "Variable('DEMO_CACHE_DIR', 'demo', purpose='<what it caches>', "
        "replaces='~/.demo/cache', upstream=('demo/caches.py',)),"
    )
    assert suggested[20] == (
        "Variable('DEMO_KERNEL_CACHE', 'demo_kernel', purpose='<what it caches>', "
        "replaces='~/.demo/kernels', upstream=('demo/caches.py',)),"
    )
    assert suggested[43] == (
        "no variable moves it: ask upstream for one, patch the code to read one, or "
        "--allow '/tmp/demo-build'"
    )


def test_a_wheel_names_dist_version_and_member(tmp_path: Path) -> None:
    whl = wheel(
        tmp_path / "demo_pkg-1.2.0-py3-none-any.whl",
        {
            "demo/caches.py": CACHES,
            "demo/_native.cpython-312-x86_64-linux-gnu.so": "\0ELF",
            "demo/kernels/gemm.cu": "__global__ void k() {}",
            "demo/tests/test_caches.py": 'open("/tmp/from-a-shipped-test", "w")\n',
        },
    )
    report = audit([str(whl)])
    stats = report.stats
    assert {(i.finding.dist, i.finding.version) for i in report.items} == {("demo-pkg", "1.2.0")}
    assert [i.finding.line for i in report.items] == [e[0] for e in EXPECTED]
    assert report.items[1].suggestion.endswith("upstream=('demo-pkg==1.2.0 demo/caches.py',)),")
    assert (stats.compiled, stats.native, stats.shipped_tests) == (1, 1, 1)


def test_an_sdist_is_streamed_and_its_top_directory_cut(tmp_path: Path) -> None:
    archive = sdist(tmp_path / "demo_pkg-1.2.0.tar.gz", {"demo/caches.py": CACHES})
    report = audit([str(archive)])
    assert {i.finding.file for i in report.items} == {"demo/caches.py"}
    found = [
        (i.finding.line, i.finding.variable, i.finding.expression, i.covered_by)
        for i in report.items
    ]
    assert found == EXPECTED
    assert not list(tmp_path.glob("demo_pkg-1.2.0/*"))  # nothing was extracted


def test_a_directory_audits_its_own_tests(tmp_path: Path) -> None:
    """A source tree's tests are what writes to /tmp in CI: they count there (not in a wheel)."""
    src = tree(
        tmp_path / "repo",
        {
            "tests/test_io.py": 'from pathlib import Path\n\nOUT = Path("/tmp/results") / "x"\n',
            ".venv/lib/site.py": 'open("/tmp/never-read", "w")\n',
        },
    )
    report = audit([str(src)])
    assert [(i.finding.file, i.finding.line, i.finding.expression) for i in report.items] == [
        ("tests/test_io.py", 3, "/tmp/results/x")
    ]


def test_installed_distributions_by_their_record(tmp_path: Path) -> None:
    site = tree(
        tmp_path / "site",
        {
            "demo/caches.py": CACHES,
            "demo_pkg-1.2.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo_pkg\n"
            "Version: 1.2.0\n",
            "demo_pkg-1.2.0.dist-info/RECORD": "demo/caches.py,,\n"
            "demo_pkg-1.2.0.dist-info/METADATA,,\ndemo_pkg-1.2.0.dist-info/RECORD,,\n",
        },
    )
    stats = Stats()
    findings = list(scan_installed(stats, path=[str(site)]))
    items = judge(findings)
    assert [
        (i.finding.line, i.finding.variable, i.finding.expression, i.covered_by) for i in items
    ] == EXPECTED
    assert {f.upstream for f in findings} == {"demo-pkg==1.2.0 demo/caches.py"}
    assert stats.sources == 1


def test_exit_status_and_allow(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    assert cli(str(src)).returncode == 1
    fine = tree(tmp_path / "fine", {"fine.py": COVERED})
    out = cli(str(fine))
    assert out.returncode == 0, out.stdout
    assert "0 not covered" in out.stdout
    allow = [
        "--allow=DEMO_JIT_DIR",
        "--allow=DEMO_CACHE_DIR",
        "--allow=DEMO_KERNEL_CACHE",
        "--allow=$TMPDIR/*",
        "--allow=~/.cache/demo-models",
        "--allow=/tmp/demo-build",
    ]
    out = cli(str(src), *allow)
    assert out.returncode == 0, out.stdout
    assert "Allowed (--allow) (7):" in out.stdout
    # One allowance fewer: the gate fails again, on that one only.
    out = cli(str(src), *allow[1:])
    assert out.returncode == 1
    assert "Not covered by the layout (1):" in out.stdout
    assert "DEMO_JIT_DIR" in out.stdout


def test_json_schema(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    out = cli(str(src), "--json", "--allow", "DEMO_JIT_DIR")
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert isinstance(doc, list)
    assert rows(doc) == EXPECTED
    for d in doc:
        assert set(d) == JSON_KEYS
        assert isinstance(d["line"], int)
        assert isinstance(d["style"], list)
        assert isinstance(d["allowed"], bool)
    by_line = {d["line"]: d for d in doc}
    assert by_line[11]["allowed"] is True
    assert by_line[14]["allowed"] is False
    assert by_line[14]["default"] == "~/.demo/cache"
    assert by_line[38]["fallback_of"] == "HUMMING_CACHE_DIR"
    assert by_line[38]["coverage"] == "fallback when HUMMING_CACHE_DIR (line 35) is unset"
    assert by_line[15]["suggestion"] is None
    assert "compiled" in out.stderr  # what it cannot see is said even in JSON mode


def test_text_says_what_it_cannot_see(tmp_path: Path) -> None:
    out = cli(str(tree(tmp_path / "fine", {"fine.py": COVERED})))
    assert "Not seen: 0 compiled modules, 0 C/C++/CUDA/Rust sources" in out.stdout
    assert "names and paths built at run time" in out.stdout


def test_help_documents_every_flag() -> None:
    out = cli("--help")
    assert out.returncode == 0
    for flag in ("--json", "--allow", "PATH"):
        assert flag in out.stdout


def test_a_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x")
    out = cli(str(other))
    assert out.returncode == 2
    assert "neither a directory, a wheel (.whl) nor an sdist (.tar.gz)" in out.stderr


def test_syntax_it_cannot_parse_is_counted(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"py2.py": 'import os\nprint "x", os.environ["HOME"]\n'})
    report = audit([str(src)])
    assert report.items == []
    assert report.stats.unparsable == ["src py2.py"]


@pytest.mark.parametrize(
    ("source", "expression"),
    [
        # A wrapper of the project's own (tilelang's EnvVar, numba's _readenv).
        ('EnvVar("X_CACHE_DIR", os.path.expanduser("~/.x/cache"))', "${X_CACHE_DIR:-~/.x/cache}"),
        ('_readenv("X_CACHE_DIR", str, "~/.x")', "${X_CACHE_DIR:-~/.x}"),
        # The name through a constant, the default through a local function.
        ("os.environ.get(NAME, default_root())", "${Y_JIT_DIR:-${XDG_CACHE_HOME:-~/.cache}/y}"),
        # f-strings and joinpath.
        ("f\"{os.path.expanduser('~')}/.z/tmp\"", "~/.z/tmp"),
        ('Path.home().joinpath(".z", "cache")', "~/.z/cache"),
    ],
)
def test_forms(tmp_path: Path, source: str, expression: str) -> None:
    text = (
        "import os\nfrom pathlib import Path\n\nNAME = 'Y_JIT_DIR'\n\n\n"
        "def default_root():\n"
        "    base = os.getenv('XDG_CACHE_HOME', os.path.expanduser('~/.cache'))\n"
        "    return os.path.join(base, 'y')\n"
        f"\n\nVALUE = {source}\n"
    )
    src = tree(tmp_path / "src", {"m.py": text})
    found = [i.finding for i in audit([str(src)]).items if i.finding.line == 12]
    assert [f.expression for f in found] == [expression]


def test_prefilter_skips_files_without_a_pattern(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"plain.py": "x = 1\n", "env.py": "import os\nos.environ\n"})
    stats = audit([str(src)]).stats
    assert (stats.python_files, stats.parsed) == (2, 1)


def test_environment_is_not_read_for_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict is the layout's, not this shell's: a variable set here changes nothing."""
    src = tree(tmp_path / "src", {"demo/caches.py": CACHES})
    monkeypatch.setenv("DEMO_CACHE_DIR", str(tmp_path))
    assert audit([str(src)]).status == 1


def test_a_fallback_built_in_another_function_carries_its_coverage(tmp_path: Path) -> None:
    """torch's TORCH_EXTENSIONS_DIR: no default where it is read; the caller's fallback is
    $XDG_CACHE_HOME/torch_extensions, which the layout moves, so the variable is covered."""
    text = (
        "import os\n"  # 1
        "import platformdirs\n"  # 2
        "\n"
        "\n"
        "def build_root():\n"  # 5
        "    return platformdirs.user_cache_dir('demo_ext')\n"  # 6
        "\n"
        "\n"
        "def ext_dir():\n"  # 9
        "    found = os.environ.get('DEMO_EXTENSIONS_DIR')\n"  # 10
        "    if found is None:\n"
        "        found = build_root()\n"  # 12
        "    return found\n"
    )
    src = tree(tmp_path / "src", {"ext.py": text})
    verdicts = [
        (i.finding.line, i.finding.variable, i.finding.expression, i.covered_by, i.how)
        for i in audit([str(src)]).items
    ]
    assert verdicts == [
        (6, "XDG_CACHE_HOME", "$XDG_CACHE_HOME/demo_ext", "XDG_CACHE_HOME", "its row"),
        (
            10,
            "DEMO_EXTENSIONS_DIR",
            "$DEMO_EXTENSIONS_DIR",
            "XDG_CACHE_HOME",
            "its fallback (line 6) lies under $XDG_CACHE_HOME",
        ),
    ]


def test_a_base_given_a_name_is_followed_to_where_it_is_joined(tmp_path: Path) -> None:
    """vLLM's outlines fallback: ``home = os.path.expanduser("~")``, joined lines later."""
    text = (
        "import os\n"  # 1
        "import tempfile\n"  # 2
        "\n"
        "\n"
        "def where():\n"  # 5
        "    home = os.path.expanduser('~')\n"  # 6: a bare base, not a place yet
        "    tmp = tempfile.gettempdir()\n"  # 7
        "    if os.path.isdir(home):\n"  # 8: a use, but not a path built from it
        "        return os.path.join(home, '.cache', 'demo')\n"  # 9
        "    return os.path.join(tmp, 'demo')\n"  # 10
    )
    src = tree(tmp_path / "src", {"where.py": text})
    found = [(i.finding.line, i.finding.expression) for i in audit([str(src)]).items]
    assert found == [(9, "~/.cache/demo"), (10, "$TMPDIR/demo")]


#: Places that look like caches to a first reading but are not: data handed to a class, a
#: credential file found through a loop variable, configuration files under the home
#: directory. Only lines 31, 40 and 41 (twice) are places; line numbers matter.
NOT_CACHES = """\
import os
import requests
from pathlib import Path

WINDOWS = False
CONFIG_BASENAME = "pip.ini" if WINDOWS else "pip.conf"
NETRC_FILES = (".netrc", "_netrc")


def legacy_config():
    return os.path.join(os.path.expanduser("~"), "pip" if WINDOWS else ".pip", CONFIG_BASENAME)


def netrc_found():
    home = os.path.expanduser("~")
    return any(os.path.exists(os.path.join(home, n)) for n in requests.utils.NETRC_FILES)


def netrc_local():
    for name in NETRC_FILES:
        if os.path.exists(os.path.join(os.path.expanduser("~"), name)):
            return name
    return None


def windows_netrc():
    return os.path.expanduser("~/_netrc")


def kept():
    return os.path.join(os.path.expanduser("~"), ".cache", "x", "index.json")


class Variable:
    def __init__(self, name, replaces="", cache_dir=""):
        pass


ROW = Variable("X", replaces="/tmp/x_$USER", purpose="/tmp/x_$USER is replaced")
PLACE = Variable("Y", cache_dir="/tmp/y")
CALL = make(out="/tmp/z", replaces="/tmp/w")
SETTINGS = Path.home() / ".demo" / "settings.toml"
"""


def test_data_credentials_and_configuration_are_not_caches(tmp_path: Path) -> None:
    src = tree(tmp_path / "src", {"m.py": NOT_CACHES})
    found = [(i.finding.line, i.finding.expression) for i in audit([str(src)]).items]
    assert found == [
        (31, "~/.cache/x/index.json"),  # a file under a cache directory: a cache
        (40, "/tmp/y"),  # a keyword that names a place
        (41, "/tmp/z"),  # a function, not a class: its arguments are not data
        (41, "/tmp/w"),
    ]


REPO = Path(__file__).resolve().parents[2]
#: The distributions of this repository, as directories that build them.
MEMBERS = ("packages/envs", "packages/fetch", "packages/mediacache", "sitecustomize")


def test_cacheroots_own_code_has_no_findings() -> None:
    """What the four distributions install, read as source trees: no place decides a cache.

    What the run-time audit itself writes is listed, not gated: its session directory (made per
    session by ``mkdtemp``, handed to children through ``CACHEROOT_AUDIT_DIR``) and its report;
    so are the AWS tools' profile files the bucket tier reads (configuration, only read).
    """
    report = audit([str(REPO / "packages"), str(REPO / "sitecustomize")])
    found = sorted(
        (i.finding.file.rpartition("src/")[2], i.finding.expression, i.finding.kind, i.gating)
        for i in report.items
    )
    assert found == [
        ("_cacheroot_audit.py", "$CACHEROOT_AUDIT_DIR", "throwaway", False),
        ("_cacheroot_audit.py", "$TMPDIR/{mkdtemp()}", "throwaway", False),
        ("cacheroot/envs/_audit_report.py", "$CACHEROOT_AUDIT_REPORT", "output", False),
        ("cacheroot/fetch/_bucket/profile.py", "~/.aws/config", "config", False),
        ("cacheroot/fetch/_bucket/profile.py", "~/.aws/credentials", "config", False),
        ("cacheroot/fetch/_plugin/audit.py", "$CACHEROOT_AUDIT_DIR", "throwaway", False),
    ]
    assert report.status == 0


@pytest.fixture(scope="module")
def uv_cache() -> str:
    """uv's cache as the runner's environment names it (read before the per-test isolation
    points HOME and XDG_CACHE_HOME into ``tmp_path``, where no cache is warm)."""
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH: ci/bootstrap.sh installs it")
    out = subprocess.run(
        [found, "cache", "dir"], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.strip()


def test_an_environment_of_only_cacheroot_passes(tmp_path: Path, uv_cache: str) -> None:
    """The four distributions installed (``--no-deps``, no index) into a fresh venv: the gate
    passes there, with nothing to report."""
    uv = shutil.which("uv") or "uv"
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}} | {
        "UV_CACHE_DIR": uv_cache,
        "UV_OFFLINE": "1",
        "UV_PYTHON_DOWNLOADS": "never",
    }
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for member in MEMBERS:
        shutil.copytree(REPO / member, tmp_path / "src" / member, ignore=skip)
    venv = tmp_path / "venv"
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-sources",
            "--python",
            str(venv / "bin" / "python"),
        ]
        + [str(tmp_path / "src" / m) for m in MEMBERS],
    ]
    for argv in steps:
        step = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        if step.returncode != 0 and "network" in step.stderr:
            pytest.skip(f"uv's cache ({uv_cache}) lacks the build backend: {step.stderr[-300:]}")
        assert step.returncode == 0, step.stderr
    run = subprocess.run(
        [str(venv / "bin" / "cacheroot"), "audit"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    assert re.fullmatch(
        r"cacheroot audit: 4 sources, [0-9]+ Python files \([0-9]+ parsed\), "
        r"6 locations, 0 not covered \([0-9.]+ s\)",
        first,
    ), run.stdout


def test_a_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    src = tree(tmp_path / "tests", {"fine.py": COVERED})
    out = cli(str(src), str(tmp_path / "src"))
    assert out.returncode == 2
    assert out.stderr == (
        f"cacheroot audit: {str(tmp_path / 'src')!r} does not exist: name directories, wheels "
        "(.whl) or sdists (.tar.gz) that exist, or nothing to audit the installed "
        "distributions\n"
    )
    assert out.stdout == ""
