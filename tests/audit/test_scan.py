"""The before/after scan counts only what the session's own processes wrote.

A clean suite whose output goes to a file in the temporary directory (``pytest > log``,
``pytest | tee log``) must pass ``--cacheroot-audit=fail``: the file is written all through the
session, but it was opened before it, by the shell. And a directory another job creates in the
temporary directory meanwhile (``pip install`` unpacking into ``/tmp/pip-install-*``), held open
by a process outside the session's tree, is listed apart and not counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

from .runner import Project, load_report

if TYPE_CHECKING:
    from pathlib import Path

CLEAN = "def test_ok():\n    assert True\n"
#: A test that lets the other job start (``go``) and waits until it has (``ready``); both files
#: are in the working tree, an allowed place.
WAITS = textwrap.dedent("""\
    import time
    from pathlib import Path


    def test_while_another_job_runs():
        Path("go").touch()
        deadline = time.monotonic() + 60
        while not Path("ready").exists():
            assert time.monotonic() < deadline, "the other job never started"
            time.sleep(0.01)
    """)
#: The other job: once told to go, it makes a pip-like build directory in the temporary
#: directory, keeps a file in it open, says it is ready, and holds on until its stdin closes.
OTHER_JOB = textwrap.dedent("""\
    import os, sys, time
    work, tmp = sys.argv[1:3]
    while not os.path.exists(os.path.join(work, "go")):
        time.sleep(0.01)
    build = os.path.join(tmp, "pip-install-k2x9")
    os.mkdir(build)
    held = open(os.path.join(build, "setup.py"), "w")
    open(os.path.join(work, "ready"), "w").close()
    sys.stdin.read()
    """)


def _argv(project: Project, report: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        *args,
        "--cacheroot-audit=fail",
        "--cacheroot-audit-report",
        str(report),
    ]


def _wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{what} never made {path}"
        time.sleep(0.01)


def test_a_log_file_the_output_is_redirected_to_is_not_an_escape(tmp_path: Path) -> None:
    """``pytest ... > $TMPDIR/x/clean-log.txt 2>&1``."""
    project = Project.make(tmp_path)
    (project.work / "test_clean.py").write_text(CLEAN, encoding="utf-8")
    log = project.tmp / "x" / "clean-log.txt"
    log.parent.mkdir()
    report_path = tmp_path / "audit.json"
    argv = _argv(project, report_path, "test_clean.py")
    with log.open("w", encoding="utf-8") as out:
        run = subprocess.run(
            argv,
            cwd=project.work,
            env=project.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=240,
        )
    text = log.read_text(encoding="utf-8")
    assert run.returncode == 0, text
    assert "1 passed" in text
    report = load_report(report_path)
    assert (report["escapes"], report["scan"]["finds"]) == (0, [])
    assert report["scan"]["left_out"] == [str(log)]
    assert "cacheroot audit: no writes outside the cache root and allowed places" in text
    (note,) = report["notes"]
    assert note.startswith(f"not counted: {log}: changed during the session, but held open")
    assert f"  note: {note}" in text


def test_a_log_file_written_by_tee_is_not_an_escape(tmp_path: Path) -> None:
    """``pytest ... 2>&1 | tee $TMPDIR/tee-log.txt``: the file is tee's, read from the pipe."""
    project = Project.make(tmp_path)
    (project.work / "test_clean.py").write_text(CLEAN, encoding="utf-8")
    log = project.tmp / "tee-log.txt"
    report_path = tmp_path / "audit.json"
    read_end, write_end = os.pipe()
    tee = subprocess.Popen(["tee", str(log)], stdin=read_end, stdout=subprocess.DEVNULL)
    os.close(read_end)
    try:
        _wait_for(log, "tee")
        pytest_run = subprocess.Popen(
            _argv(project, report_path, "test_clean.py"),
            cwd=project.work,
            env=project.env(),
            stdout=write_end,
            stderr=subprocess.STDOUT,
        )
        os.close(write_end)
        write_end = -1
        status = pytest_run.wait(timeout=240)
        assert tee.wait(timeout=60) == 0
    finally:
        if write_end >= 0:
            os.close(write_end)
        tee.kill()
        tee.wait()
    text = log.read_text(encoding="utf-8")
    assert status == 0, text
    report = load_report(report_path)
    assert (report["escapes"], report["scan"]["finds"]) == (0, [])
    assert report["scan"]["left_out"] == [str(log)]


def test_another_jobs_directory_is_not_from_this_session(tmp_path: Path) -> None:
    """A live process outside the session holds the new directory open: listed, not counted."""
    project = Project.make(tmp_path)
    (project.work / "test_waits.py").write_text(WAITS, encoding="utf-8")
    report_path = tmp_path / "audit.json"
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_JOB, str(project.work), str(project.tmp)],
        env=project.env(),
        stdin=subprocess.PIPE,
    )
    try:
        run = subprocess.run(
            _argv(project, report_path, "test_waits.py"),
            cwd=project.work,
            env=project.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=240,
        )
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=60)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "1 passed" in out
    report = load_report(report_path)
    build = str(project.tmp / "pip-install-k2x9")
    assert (report["escapes"], report["scan"]["finds"]) == (0, [])
    others = report["scan"]["others"]
    assert [(o["path"], o["change"], o["directory"]) for o in others] == [(build, "new", True)]
    assert [h["pid"] for h in others[0]["holders"]] == [other.pid]
    assert f"  {build} (new; not from this session, not counted: open in pid {other.pid} " in out
    assert report["notes"] == [
        (
            "not counted: 1 new path in HOME or the temporary directory held open by live "
            "processes outside this session (another job on this machine)"
        )
    ]


def test_a_find_of_the_session_says_it_is_matched_by_time(tmp_path: Path) -> None:
    """A program that is not Python writes in the temporary directory: counted, with the note
    that such finds are matched by time."""
    project = Project.make(tmp_path)
    (project.work / "test_shell.py").write_text(
        "import subprocess\n\n\n"
        "def test_shell_writes_tmp():\n"
        "    subprocess.run(['sh', '-c', 'echo x > \"$TMPDIR/from-sh.txt\"'], check=True)\n",
        encoding="utf-8",
    )
    report_path = tmp_path / "audit.json"
    run = subprocess.run(
        _argv(project, report_path, "test_shell.py"),
        cwd=project.work,
        env=project.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    report = load_report(report_path)
    assert [f["path"] for f in report["scan"]["finds"]] == [str(project.tmp / "from-sh.txt")]
    assert report["scan"]["others"] == []
    assert report["notes"] == [
        (
            "the scan's finds are matched to tests by time: on a machine shared with other jobs "
            "they may be those jobs' writes; give each job its own TMPDIR (TMPDIR=$(mktemp -d)) "
            "to keep them apart"
        )
    ]
