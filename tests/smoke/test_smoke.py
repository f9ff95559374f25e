"""The first check after an install (``nox -s smoke``): the hook applied in a child process, one
download from a local origin, one ``--cacheroot-hub`` run against the local test hub.

Each step is what a new user tries first; each runs the installed distributions for real, in
fresh interpreters, with the cache root in ``tmp_path``. The whole file takes seconds, so the
session around it (build and install included) stays under a minute on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cacheroot.envs import CACHEROOT, HF_ENDPOINT, TABLE

if TYPE_CHECKING:
    from tests.harness import runner
    from tests.hub.hubserver import HubRepo, HubServer
    from tests.origin import Server, static
else:
    # pytest puts tests/ on sys.path; mypy names it tests.
    from harness import runner
    from hub.hubserver import HubRepo, HubServer
    from origin import Server, static

BODY = b"question,answer\n1+1,2\n"
#: The sha256 of BODY, written out (never recomputed by the code under test).
BODY_SHA256 = "83686927dda8227e1f8ad46e51e4f21fc109e2b7afc72814342c52987be2d557"


def test_the_hook_sets_the_layout_in_a_child_process(tmp_path: Path) -> None:
    layout = {v.name for v in TABLE}  # none set: the hook must set them itself
    env = {k: v for k, v in runner.clean_env().items() if k not in layout}
    env[CACHEROOT] = str(tmp_path / "root")
    names = ["HF_HOME", "TRITON_CACHE_DIR", "TORCH_HOME"]
    code = f"import json, os; print(json.dumps([os.environ.get(n) for n in {names!r}]))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    root = tmp_path / "root"
    assert json.loads(out.stdout) == [f"{root}/huggingface", f"{root}/triton", f"{root}/torch"]


def test_one_fetch_from_a_local_origin_then_a_hit(tmp_path: Path) -> None:
    env = runner.layout_env(tmp_path / "root")
    cli = str(Path(sys.executable).with_name("cacheroot"))
    with Server() as server:
        url = server.route("/data/test.csv", static(BODY))
        args = [cli, "fetch", url, "--sha256", BODY_SHA256, "--namespace", "smoke"]
        first = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        assert first.returncode == 0, first.stderr
        path = Path(first.stdout.strip())
        assert path.read_bytes() == BODY
        assert path.is_relative_to(tmp_path / "root")
        again = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        assert (again.returncode, again.stdout) == (0, first.stdout)
        assert server.count("/data/test.csv", "GET") == 1


TESTS = """\
import huggingface_hub as hh


def test_a_model_through_the_hub_cache():
    assert hh.model_info({repo!r}).sha == {commit!r}
    with open(hh.hf_hub_download({repo!r}, "config.json")) as f:
        assert f.read() == {config!r}
"""


def test_one_run_with_the_hub_cache_against_the_local_test_hub(tmp_path: Path) -> None:
    config = '{"model_type": "llama"}'
    repo = HubRepo("acme/smoke-model", {"config.json": config.encode()})
    project = tmp_path / "project"
    project.mkdir()
    text = TESTS.format(repo=repo.repo_id, commit=repo.commit, config=config)
    (project / "test_hub.py").write_text(textwrap.dedent(text), encoding="utf-8")
    server = HubServer()
    server.add_hf(repo)
    with server:
        extra: dict[str, Any] = {HF_ENDPOINT: server.url, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        env = runner.layout_env(tmp_path / "root", **extra)
        args = [*runner.plugin_args(), "-p", "no:randomly", "--cacheroot-hub", "-q"]
        out = runner.run_pytest(args, env=env, cwd=project, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "1 passed" in out.stdout
    # The model landed in the hub cache of the layout's root.
    assert (tmp_path / "root" / "huggingface" / "hub" / "models--acme--smoke-model").is_dir()
