"""The seed's escapes, caught: each named with its test and line; their fixes come out clean.

``escapes/seed_escapes.py`` writes outside the cache root in the six ways vLLM's test code did
(a dataset in /tmp, a hard-coded ``~/.cache/huggingface``, ``snapshot_download(cache_dir=...)``
against a local hub, a child with a scrubbed environment, a program that is not Python, a
multiprocessing child); ``escapes/seed_fixed.py`` does the same work through the layout. Both
run as real pytest sessions (the first under xdist) in ``tmp_path``, with HOME and the temporary
directory there too.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_AUDIT

from .runner import Project, hub_env, load_report, marked_line, writes

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.hub.hubserver import HubRepo, HubServer
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from hub.hubserver import HubRepo, HubServer

REPO_ID = "acme/tiny-model"
CONFIG = json.dumps({"model_type": "llama", "hidden_size": 16}).encode()


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    """A local hub serving one tiny repository (a config and a small LFS file)."""
    server = HubServer()
    server.add_hf(HubRepo(REPO_ID, {"config.json": CONFIG, "model.safetensors": b"\x00" * 64}))
    with server:
        yield server


def test_seed_escapes_are_named_with_test_and_line(tmp_path: Path, hub: HubServer) -> None:
    project = Project.make(tmp_path)
    module = project.add("seed_escapes.py", "test_seed_escapes.py")
    report_path = tmp_path / "audit.json"
    env = project.env(**hub_env(hub.url))
    run = project.pytest(
        "-n", "2", "--cacheroot-audit=fail", "--cacheroot-audit-report", str(report_path), env=env
    )
    out = run.stdout + run.stderr
    assert "6 passed" in out, out
    assert run.returncode == 1, out  # every test passed: the audit failed the session
    assert "cacheroot audit: failing the session" in out
    report = load_report(report_path)

    def line(marker: str) -> str:
        return f"{module}:{marked_line(module, marker)}"

    def node(name: str) -> str:
        return f"test_seed_escapes.py::{name}"

    home, tmp = project.home, project.tmp
    by_path = {w["path"]: w for w in writes(report)}
    gsm8k = by_path[str(tmp / "gsm8k_test.jsonl")]
    assert (gsm8k["event"], gsm8k["caller"], gsm8k["test"], gsm8k["phase"]) == (
        "open",
        line("gsm8k"),
        node("test_gsm8k_written_to_tmp"),
        "call",
    )
    hf_home = by_path[str(home / ".cache")]  # the first directory os.makedirs made
    assert (hf_home["event"], hf_home["caller"], hf_home["test"]) == (
        "os.mkdir",
        line("hf-home"),
        node("test_hard_coded_hf_cache"),
    )
    assert str(home / ".cache/huggingface/hub/models--acme--tiny-model") in by_path
    shard = by_path[str(tmp / "gsm8k_shard_0.bin")]
    assert (shard["caller"], shard["test"]) == (
        line("multiprocessing"),
        node("test_multiprocessing_child"),
    )
    assert shard["pid"] != gsm8k["pid"] or shard["pid"] != hf_home["pid"]
    downloads = [w for p, w in by_path.items() if p.startswith(f"{home / 'models'}/")]
    assert downloads, by_path
    # huggingface_hub downloads the files in a thread pool: a write made in a worker thread has
    # no project frame, only the library's (origin: huggingface_hub or filelock); the test is
    # known all the same.
    assert {w["caller"] for w in downloads} == {line("cache-dir"), ""}
    assert all(w["caller"] or "site-packages" in w["origin"] for w in downloads), downloads
    assert any("huggingface_hub" in w["origin"] for w in downloads)
    assert {w["test"] for w in downloads} == {node("test_snapshot_download_cache_dir")}
    expected = {
        str(tmp / "gsm8k_test.jsonl"),
        str(tmp / "gsm8k_shard_0.bin"),
        *(p for p in by_path if p.startswith((f"{home / '.cache'}", f"{home / 'models'}"))),
    }
    assert set(by_path) == expected  # nothing else was written outside

    finds = {f["path"]: f for f in report["scan"]["finds"]}
    assert set(finds) == {str(home / ".cache/vllm"), str(home / ".nv")}
    scrubbed = finds[str(home / ".cache/vllm")]
    assert node("test_child_with_scrubbed_environment") in scrubbed["tests"]
    assert any(s["caller"] == line("scrubbed") and s["scrubbed"] for s in scrubbed["started"]), (
        scrubbed
    )
    compiler = finds[str(home / ".nv")]
    assert node("test_compiler_writes_home") in compiler["tests"]
    assert any(
        s["caller"] == line("not-python") and s["command"].startswith("sh -c")
        for s in compiler["started"]
    ), compiler
    assert report["escapes"] == len(by_path) + 2
    # The summary names each place with its line.
    assert "written outside the cache root and allowed places" in out
    for marker in ("gsm8k", "hf-home", "multiprocessing", "cache-dir", "scrubbed", "not-python"):
        assert line(marker) in out, (marker, out)
    # Both xdist workers, the spawned child and the audited Python children joined the session.
    assert report["processes"] >= 4


def test_fixed_versions_write_nothing_outside(tmp_path: Path, hub: HubServer) -> None:
    project = Project.make(tmp_path)
    project.add("seed_fixed.py", "test_seed_fixed.py")
    report_path = tmp_path / "audit.json"
    env = project.env(**hub_env(hub.url))
    run = project.pytest(
        "--cacheroot-audit=fail",
        "--cacheroot-audit-strict",
        "--cacheroot-audit-report",
        str(report_path),
        env=env,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "6 passed" in out
    report = load_report(report_path)
    assert (report["escapes"], report["groups"], report["scan"]["finds"]) == (0, [], []), report
    assert "cacheroot audit: no writes outside the cache root and allowed places" in out
    # pytest, the Python child and the multiprocessing child: all audited, none scrubbed.
    assert report["processes"] >= 3
    assert report["scrubbed"] == []
    # The work really happened, under the root.
    assert (project.root / "vllm" / "assets").is_dir()
    assert (project.root / "nv" / "index").is_file()


def test_audit_from_the_environment_warns_without_failing(tmp_path: Path) -> None:
    """``CACHEROOT_AUDIT=1 pytest``: the start-up hook starts it, the plugin reports it."""
    project = Project.make(tmp_path)
    (project.work / "test_one.py").write_text(
        "import os, tempfile\n"
        "\n"
        "def test_writes_tmp():\n"
        "    open(os.path.join(tempfile.gettempdir(), 'stray.txt'), 'w').close()\n",
        encoding="utf-8",
    )
    report_path = tmp_path / "audit.json"
    run = project.pytest(
        "--cacheroot-audit-report",
        str(report_path),
        env=project.env(**{CACHEROOT_AUDIT: "1"}),
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "1 passed" in out
    report = load_report(report_path)
    assert [(w["path"], w["caller"]) for w in writes(report)] == [
        (str(project.tmp / "stray.txt"), f"{project.work / 'test_one.py'}:4")
    ]
    assert report["mode"] == "warn"
    # One report, from the plugin: the start-up hook's own exit report was handed over.
    assert out.count("cacheroot audit: 1 path written") == 1


def test_fail_from_the_environment_names_the_variable_and_reports_in_the_base_temp(
    tmp_path: Path,
) -> None:
    """``CACHEROOT_AUDIT=fail pytest``: the start-up hook made the session in the temporary
    directory; the plugin moves it into pytest's base temporary directory, as with the option,
    and says which setting failed the session."""
    project = Project.make(tmp_path)
    (project.work / "test_one.py").write_text(
        "import os, tempfile\n"
        "\n"
        "def test_writes_tmp():\n"
        "    open(os.path.join(tempfile.gettempdir(), 'stray.txt'), 'w').close()\n",
        encoding="utf-8",
    )
    basetemp = tmp_path / "basetemp"
    run = project.pytest(f"--basetemp={basetemp}", env=project.env(**{CACHEROOT_AUDIT: "fail"}))
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    report_path = basetemp / "cacheroot-audit" / "report.json"
    assert f"(report: {report_path})" in out
    report = load_report(report_path)
    assert [w["path"] for w in writes(report)] == [str(project.tmp / "stray.txt")]
    assert (report["mode"], report["session"]) == ("fail", str(basetemp / "cacheroot-audit"))
    assert report["processes"] == 1  # the hook's record of the process came along
    assert "cacheroot audit: failing the session (CACHEROOT_AUDIT=fail): move" in out
    assert "--cacheroot-audit=fail" not in out
    # Nothing of the session is left in the temporary directory.
    assert sorted(p.name for p in project.tmp.iterdir()) == ["stray.txt"]


def test_a_bare_option_before_a_path_suggests_the_default_mode(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    (project.work / "test_x.py").write_text("def test_ok():\n    pass\n", encoding="utf-8")
    run = project.pytest("--cacheroot-audit", "test_x.py")
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert (
        "--cacheroot-audit takes warn or fail, found 'test_x.py'; write --cacheroot-audit=warn "
        "(or =fail): a path after a bare --cacheroot-audit is taken as its value"
    ) in run.stderr
