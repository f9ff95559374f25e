"""The run-time audit's holes, each closed: allowed places that hold HOME or the temporary
directory, a layout variable set by hand into HOME, bytecode exemptions, writes relative to a
directory descriptor, and child command lines that carry secrets."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_AUDIT,
    CACHEROOT_AUDIT_REPORT,
    CACHEROOT_PIN_FILE,
    TABLE,
)

from .runner import Project, load_report, writes

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

#: A row of the layout (numba's cache, which users set by hand into HOME).
NUMBA_CACHE_DIR = next(v.name for v in TABLE if v.name == "NUMBA_CACHE_DIR")


def _run(
    code: str, env: dict[str, str], cwd: Path, *, argv: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` (or ``python ARGV...``) in ``cwd`` with ``env``."""
    return subprocess.run(
        [sys.executable, *(argv or ["-c", textwrap.dedent(code)])],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _around(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working tree that holds HOME and the temporary directory (a rootdir at /tmp, or a
    checkout above HOME), with the report in a file of its own."""
    work = tmp_path / "work"
    home, tmp, root = work / "home", work / "tmp", tmp_path / "root"
    for folder in (home, tmp, root):
        folder.mkdir(parents=True)
    env = Project.make(tmp_path / "unused").env()
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        **{
            CACHEROOT: str(root),
            CACHEROOT_PIN_FILE: "",
            CACHEROOT_AUDIT: "1",
            CACHEROOT_AUDIT_REPORT: str(tmp_path / "report.json"),
        },
    )
    return work, env


def _written(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {w["path"]: w for w in writes(load_report(tmp_path / "report.json"))}


def test_a_working_tree_that_holds_home_and_tmp_does_not_silence_them(tmp_path: Path) -> None:
    work, env = _around(tmp_path)
    code = """\
        import os, tempfile
        os.makedirs(os.path.expanduser("~/.numba-cache"))
        open(os.path.join(tempfile.gettempdir(), "gsm8k.jsonl"), "w").close()
        open("beside.txt", "w").close()
        """
    run = _run(code, env, work)
    assert run.returncode == 0, run.stderr
    # The working tree is not allowed at all: it cannot be without HOME and TMPDIR.
    assert sorted(_written(tmp_path)) == [
        str(work / "beside.txt"),
        str(work / "home" / ".numba-cache"),
        str(work / "tmp" / "gsm8k.jsonl"),
    ]
    report = load_report(tmp_path / "report.json")
    assert str(work) not in report["allowed"]
    assert any(f"{work} is not an allowed place: it holds HOME" in note for note in report["notes"])


def test_pytest_with_its_rootdir_above_home_fails_under_fail(tmp_path: Path) -> None:
    """Two test files in sibling directories: pytest's rootdir is their parent, which holds
    HOME and TMPDIR too; the writes are still escapes and ``=fail`` fails the session."""
    work, env = _around(tmp_path)
    env[CACHEROOT_AUDIT] = "fail"
    for name, line in (
        ("a", 'os.makedirs(os.path.expanduser("~/.cache/demo-a"))'),
        ("b", 'open(os.path.join(tempfile.gettempdir(), "demo-b.bin"), "wb").close()'),
    ):
        folder = work / name
        folder.mkdir()
        (folder / f"test_{name}.py").write_text(
            f"import os, tempfile\n\n\ndef test_{name}():\n    {line}\n", encoding="utf-8"
        )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "a", "b"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "cacheroot audit: 3 paths written outside" in run.stdout, run.stdout
    assert "it holds HOME and the temporary directory" in run.stdout


def test_a_layout_variable_set_by_hand_into_home_is_not_allowed(tmp_path: Path) -> None:
    work, env = _around(tmp_path)
    numba = work / "home" / ".numba-cache"
    env[NUMBA_CACHE_DIR] = str(numba)
    run = _run(
        """\
        import os
        os.makedirs(os.path.join(os.environ["NUMBA_CACHE_DIR"], "index"))
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert sorted(_written(tmp_path)) == [str(numba), str(numba / "index")]
    notes = load_report(tmp_path / "report.json")["notes"]
    assert f"{NUMBA_CACHE_DIR}={numba} lies in HOME, outside the cache root" in " ".join(notes)


def test_pycache_is_exempt_only_for_bytecode_of_imported_modules(tmp_path: Path) -> None:
    """Python's own bytecode of a module it imports is not an escape; a cache that only sits
    in a ``__pycache__`` directory (numba's index beside a source file) is."""
    _, env = _around(tmp_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "demo_mod.py").write_text("X = 1\n", encoding="utf-8")
    env["PYTHONPATH"] = str(lib)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = _run(
        f"""\
        import os, sys
        sys.dont_write_bytecode = False
        import demo_mod
        cache = os.path.join({str(lib)!r}, "__pycache__")
        open(os.path.join(cache, "demo_mod.f-1.py312.nbi"), "wb").close()
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert sorted(_written(tmp_path)) == [str(lib / "__pycache__" / "demo_mod.f-1.py312.nbi")]


def test_pytest_s_rewritten_bytecode_of_a_test_module_is_exempt(tmp_path: Path) -> None:
    """pytest writes a test module's bytecode under a name of its own
    (``test_x.cpython-311-pytest-9.2.0.pyc``): bytecode of a module the process imports, not an
    escape, even in a working tree that holds HOME; a file written into HOME still is."""
    work, env = _around(tmp_path)
    (work / "test_x.py").write_text(
        "import os\n\n\ndef test_x():\n"
        "    open(os.path.expanduser('~/written.txt'), 'w').close()\n",
        encoding="utf-8",
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:cacheroot"]
    run = _run("", env, work, argv=argv)
    assert run.returncode == 0, run.stdout + run.stderr
    written = [p.name for p in (work / "__pycache__").iterdir()]
    assert any(n.startswith("test_x.") and "-pytest-" in n for n in written), written
    assert sorted(_written(tmp_path)) == [str(work / "home" / "written.txt")]


def test_the_bytecode_python_m_writes_for_its_module_is_exempt(tmp_path: Path) -> None:
    """``python -m NAME`` compiles NAME before it is a module in ``sys.modules``: its bytecode
    is still Python's own; what the module writes into HOME is reported."""
    work, env = _around(tmp_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "demo_main.py").write_text(
        "import os\n\nopen(os.path.expanduser('~/written.txt'), 'w').close()\n",
        encoding="utf-8",
    )
    env["PYTHONPATH"] = str(lib)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = _run("", env, work, argv=["-m", "demo_main"])
    assert run.returncode == 0, run.stderr
    assert [p.name for p in (lib / "__pycache__").iterdir()] == [
        f"demo_main.{sys.implementation.cache_tag}.pyc"
    ]
    assert sorted(_written(tmp_path)) == [str(work / "home" / "written.txt")]


def test_a_write_relative_to_a_directory_descriptor_is_resolved(tmp_path: Path) -> None:
    work, env = _around(tmp_path)
    target = work / "home" / "nltk_data"
    target.mkdir()
    run = _run(
        f"""\
        import os
        fd = os.open({str(target)!r}, os.O_RDONLY)
        os.mkdir("corpora", dir_fd=fd)
        out = os.open("punkt.zip", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.close(out)
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    found = _written(tmp_path)
    assert sorted(found) == [str(target / "corpora"), str(target / "punkt.zip")]
    assert [found[p]["caller"] for p in sorted(found)] == ["<string>:3", "<string>:4"]


def test_child_command_lines_are_recorded_redacted(tmp_path: Path) -> None:
    _, env = _around(tmp_path)
    run = _run(
        """\
        import subprocess, sys
        subprocess.run(
            ["true", "--token=hf_secret1", "-H", "Authorization: Bearer sk-secret2",
             "https://user:pw3@example.com/x?token=abc4"],
            env={},
        )
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    records = (tmp_path / "report.json").read_text(encoding="utf-8")
    for secret in ("hf_secret1", "sk-secret2", "pw3", "abc4"):
        assert secret not in records
        assert secret not in run.stderr
    report = load_report(tmp_path / "report.json")
    assert [s["command"] for s in report["scrubbed"]] == [
        "true --token=*** -H 'Authorization: ***' https://user:***@example.com/x?token=***"
    ]
