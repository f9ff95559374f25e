"""The start-up entry points and the audit: installed only when asked, reported once, at exit.

Each of the three ways the hook starts (the ``.pth`` line, ``cacheroot.start``'s
``_cacheroot_start:start`` for Python 3.15 and later, the ``sitecustomize`` of the ``PYTHONPATH``
folder) applies the layout, and installs the audit only when ``CACHEROOT_AUDIT`` is set. Only
the process that made the audit session reports at its exit; the processes that join it do not.
The report's modules are imported at exit, not at start-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import _cacheroot_hook
import _cacheroot_layout
import pytest

from cacheroot.envs import CACHEROOT_AUDIT, CACHEROOT_AUDIT_REPORT

from .runner import Project, load_report, writes

if TYPE_CHECKING:
    from pathlib import Path

#: Where the layout and the hook's modules are importable from without any ``.pth`` file.
ENVS_DIR = os.path.dirname(os.path.abspath(_cacheroot_layout.__file__))
HOOK_DIR = os.path.dirname(os.path.abspath(_cacheroot_hook.__file__))
#: Prints which of the hook's, the audit's and the report's modules are imported, whether the
#: audit hook is installed, and the layout's HF_HOME.
PROBE = (
    "import os, sys; names = ('_cacheroot_audit', '_cacheroot_hook', 'cacheroot.envs'); "
    "print(sorted(m for m in names if m in sys.modules)); "
    "a = sys.modules.get('_cacheroot_audit'); print(a is not None and a.AUDITOR is not None); "
    "print(os.environ.get('HF_HOME'))"
)
ENTRY_POINTS = ("pth", "start", "pythonpath")


def _base_python() -> str:
    """The interpreter this environment was made from: same Python, no cacheroot ``.pth``."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    base = os.path.join(sys.base_prefix, "bin", version)
    if sys.prefix == sys.base_prefix or not os.path.exists(base):
        pytest.skip("needs a virtual environment with a separate base interpreter")
    return base


def _start(entry: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run PROBE in a fresh interpreter whose layout (and audit) come from ``entry`` only."""
    if entry == "pth":
        argv = [sys.executable, "-c", PROBE]
    elif entry == "start":
        # What Python 3.15 does with cacheroot.start, here without site (-S: no .pth runs).
        code = (
            f"import sys; sys.path[:0] = {[ENVS_DIR, HOOK_DIR]!r}; "
            f"import _cacheroot_start; _cacheroot_start.start()\n{PROBE}"
        )
        argv = [sys.executable, "-S", "-c", code]
    else:
        env = {
            **env,
            "PYTHONPATH": os.pathsep.join([_cacheroot_hook.pythonpath(), ENVS_DIR, HOOK_DIR]),
        }
        argv = [_base_python(), "-c", PROBE]
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_off_applies_the_layout_and_imports_no_audit(tmp_path: Path, entry: str) -> None:
    project = Project.make(tmp_path)
    run = _start(entry, project.env(), project.work)
    assert (run.returncode, run.stderr) == (0, "")
    # Every entry calls _cacheroot_start.start(): with the audit off, _cacheroot_hook (and the
    # audit, and the report's package) stay unloaded, Python 3.15's cacheroot.start included.
    assert run.stdout.splitlines() == ["[]", "False", str(project.root / "huggingface")]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_on_installs_the_audit_and_reports_once_at_exit(tmp_path: Path, entry: str) -> None:
    project = Project.make(tmp_path)
    report = tmp_path / "audit.json"
    env = project.env(**{CACHEROOT_AUDIT: "1", CACHEROOT_AUDIT_REPORT: str(report)})
    run = _start(entry, env, project.work)
    assert run.returncode == 0, run.stderr
    # Installed at start-up; the report's package is imported only at exit.
    assert run.stdout.splitlines() == [
        "['_cacheroot_audit', '_cacheroot_hook']",
        "True",
        str(project.root / "huggingface"),
    ]
    assert run.stderr.startswith("cacheroot audit: no writes outside"), run.stderr
    assert run.stderr.count("cacheroot audit:") == 1
    assert load_report(report)["processes"] == 1


def test_children_join_and_only_the_maker_reports(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    child = f"open({str(outside / 'child.txt')!r}, 'w').close()"
    code = textwrap.dedent(f"""\
        import os, subprocess, sys
        print(os.getpid(), flush=True)
        subprocess.run([sys.executable, "-c", {child!r}], check=True)
        """)
    report_path = tmp_path / "audit.json"
    env = project.env(**{CACHEROOT_AUDIT: "1", CACHEROOT_AUDIT_REPORT: str(report_path)})
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=project.work,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    # The child shares stderr with its parent: one summary in all, the parent's.
    assert run.stderr.count("cacheroot audit:") == 1, run.stderr
    assert run.stderr.startswith("cacheroot audit: 1 path written outside"), run.stderr
    report = load_report(report_path)
    assert report["processes"] == 2
    (write,) = writes(report)
    assert write["path"] == str(outside / "child.txt")
    assert write["caller"] == "<string>:1"
    assert write["pid"] != int(run.stdout.strip())
