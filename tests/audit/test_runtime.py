"""The audit hook in real interpreters: off costs nothing, on records what each write event did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import _cacheroot_audit as audit

from cacheroot.envs import CACHEROOT_AUDIT, CACHEROOT_AUDIT_ALLOW, CACHEROOT_AUDIT_REPORT

from .runner import Project, load_report, writes

if TYPE_CHECKING:
    from pathlib import Path

PROBE = "import sys, _cacheroot_audit as a; print(a.AUDITOR is not None)"
STATE = "import sys; print('_cacheroot_audit' in sys.modules)"


def _python(
    code: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_off_imports_nothing_and_on_installs_the_hook(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    assert _python(STATE, project.env()).stdout.strip() == "False"
    assert _python(STATE, project.env(**{CACHEROOT_AUDIT: ""})).stdout.strip() == "False"
    on = _python(PROBE, project.env(**{CACHEROOT_AUDIT: "1"}), cwd=project.work)
    assert on.stdout.strip() == "True", on.stderr
    assert "cacheroot audit: no writes outside" in on.stderr


def test_any_command_reports_each_write_event_with_its_line(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    allowed = tmp_path / "allowed"
    outside = tmp_path / "outside"
    for folder in (allowed, outside):
        folder.mkdir()
    (outside / "existing.txt").write_text("old", encoding="utf-8")
    code = textwrap.dedent(f"""\
        import os, shutil
        out = {str(outside)!r}
        open(os.path.join(out, "existing.txt")).read()
        open(os.path.join(out, "new.txt"), "w").close()
        os.makedirs(out, exist_ok=True)
        os.mkdir(os.path.join(out, "made"))
        open(os.path.join({str(project.root)!r}, "in-root.txt"), "w").close()
        open(os.path.join({str(allowed)!r}, "allowed.txt"), "w").close()
        open(os.devnull, "w").close()
        shutil.copyfile(os.path.join(out, "existing.txt"), os.path.join(out, "copy.txt"))
        open("in-the-working-tree.txt", "w").close()
        os.replace(os.path.join(out, "copy.txt"), os.path.join(out, "renamed.txt"))
        """)
    report_path = tmp_path / "audit.json"
    env = project.env(
        **{
            CACHEROOT_AUDIT: "1",
            CACHEROOT_AUDIT_ALLOW: f"{tmp_path / 'elsewhere'}{os.pathsep}{allowed}",
            CACHEROOT_AUDIT_REPORT: str(report_path),
        }
    )
    run = _python(code, env, cwd=project.work)
    assert run.returncode == 0, run.stderr
    report = load_report(report_path)
    found = {(w["path"], w["event"], w["caller"]) for w in writes(report)}
    assert found == {
        (str(outside / "new.txt"), "open", "<string>:4"),
        (str(outside / "made"), "os.mkdir", "<string>:6"),
        (str(outside / "renamed.txt"), "os.rename", "<string>:12"),
    }
    # copy.txt was written (line 10) and renamed away: transient, not counted.
    assert [(w["path"], w["caller"]) for w in report["transient"]] == [
        (str(outside / "copy.txt"), "<string>:10")
    ]
    assert report["escapes"] == 3
    assert run.stderr.startswith("cacheroot audit: 3 paths written outside"), run.stderr
    assert f"  {outside}/ (3)" in run.stderr.splitlines()


def test_records_are_json_lines() -> None:
    for text in ("plain", 'a "quote" \\ back', "tab\tnewline\n\x00\x7f", "é中😀", "\udcff"):
        record: dict[str, object] = {"s": text, "n": 3, "f": 1.5, "b": False, "z": None}
        assert json.loads(audit.dumps(record)) == record


BOGUS = (
    "cacheroot audit: CACHEROOT_AUDIT='bogus' is not a mode: expected 1, warn or fail "
    "(blank or 0: off); auditing as warn"
)


def test_a_value_it_does_not_know_is_said_once_and_audits_as_warn(tmp_path: Path) -> None:
    """The process that makes the session says it, once; its child, which joins, does not."""
    project = Project.make(tmp_path)
    report_path = tmp_path / "audit.json"
    child = "import _cacheroot_audit as a; print(a.AUDITOR is not None)"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}], check=True)"
    env = project.env(**{CACHEROOT_AUDIT: " bogus ", CACHEROOT_AUDIT_REPORT: str(report_path)})
    run = _python(code, env, cwd=project.work)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True"  # the child joined the session
    assert run.stderr.splitlines() == [
        BOGUS,
        (
            "cacheroot audit: no writes outside the cache root and allowed places, 2 processes "
            f"audited (report: {report_path})"
        ),
    ]
    assert load_report(report_path)["mode"] == "warn"


def test_pytest_says_an_unknown_value_once(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    (project.work / "test_ok.py").write_text("def test_ok():\n    pass\n", encoding="utf-8")
    report_path = tmp_path / "audit.json"
    run = project.pytest(
        "--cacheroot-audit-report",
        str(report_path),
        env=project.env(**{CACHEROOT_AUDIT: "bogus"}),
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert run.stderr.splitlines().count(BOGUS) == 1, out
    assert out.count("is not a mode") == 1
    assert load_report(report_path)["mode"] == "warn"


def test_the_values_it_knows_say_nothing(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    installed = (
        "import sys; a = sys.modules.get('_cacheroot_audit'); "
        "print(a is not None and a.AUDITOR is not None)"
    )
    for value in ("0", "off", " "):
        run = _python(installed, project.env(**{CACHEROOT_AUDIT: value}), cwd=project.work)
        assert (run.stdout.strip(), run.stderr) == ("False", ""), value
    for value in ("1", "warn", "FAIL", "true"):
        run = _python(PROBE, project.env(**{CACHEROOT_AUDIT: value}), cwd=project.work)
        assert run.stdout.strip() == "True", (value, run.stderr)
        assert run.stderr.startswith("cacheroot audit: no writes outside"), (value, run.stderr)
