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
