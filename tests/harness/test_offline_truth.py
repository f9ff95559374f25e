"""An offline-first run is offline in every process its line says so, and a model the hub
cannot give costs one bounded attempt per run.

Each test writes a small project into ``tmp_path`` and runs it with a real pytest process
against the local hub (``tests/hub``), with the real ``huggingface_hub``.
"""

from __future__ import annotations

import importlib
import json
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from .runner import layout_env, plugin_args, report_lines, run_pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_HUB: Any = importlib.import_module("hub.hubserver")

REPO_ID = "acme/offline-truth"


@pytest.fixture(scope="module")
def repo() -> Any:
    return _HUB.HubRepo(
        REPO_ID,
        {
            "config.json": json.dumps({"model_type": "llama"}).encode(),
            "tokenizer.json": json.dumps({"version": "1.0"}).encode(),
        },
    )


@pytest.fixture
def hub(repo: Any) -> Iterator[Any]:
    server = _HUB.HubServer()
    server.add_hf(repo)
    with server:
        yield server


def _env(tmp_path: Path, hub: Any) -> dict[str, str]:
    return layout_env(
        tmp_path / "volume",
        HF_ENDPOINT=hub.url,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )


def _project(tmp_path: Path, conftest: str, tests: str) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (project / "conftest.py").write_text(textwrap.dedent(conftest))
    (project / "test_adopter.py").write_text(textwrap.dedent(tests))
    return project


#: A conftest as ``import transformers`` makes one: huggingface_hub imported at module level,
#: which reads ``HF_HUB_OFFLINE`` once, there.
CONFTEST_IMPORTS_THE_CLIENT = """
import os

from huggingface_hub import constants

AT_IMPORT = (os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE)
"""

TESTS_READ_THE_CLIENT = """
from huggingface_hub import constants

import conftest


def test_the_client_was_offline_from_its_import():
    assert conftest.AT_IMPORT == ("1", True)
    assert constants.HF_HUB_OFFLINE
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_conftest_importing_the_client_sees_the_offline_run(
    tmp_path: Path, hub: Any, workers: list[str]
) -> None:
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("# nothing to warm: the run is offline at once\n")
    project = _project(tmp_path, CONFTEST_IMPORTS_THE_CLIENT, TESTS_READ_THE_CLIENT)

    done = run_pytest(
        [*plugin_args(), *workers, "-p", "no:cacheprovider", f"--cacheroot-manifest={manifest}"],
        env=_env(tmp_path, hub),
        cwd=project,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    [line] = report_lines(done.stdout)
    assert line.startswith("cacheroot: offline run; "), line
    assert hub.total() == 0, hub.counts()


def test_the_line_says_so_when_the_client_was_imported_before_the_run(
    tmp_path: Path, hub: Any
) -> None:
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("# nothing to warm: the run is offline at once\n")
    project = _project(tmp_path, "", "def test_nothing():\n    pass\n")
    # A plugin loaded before cacheroot's that imports the client: nothing can reach it in time.
    (project / "early_client.py").write_text("import huggingface_hub.constants\n")
    report = tmp_path / "report.json"

    done = run_pytest(
        [
            *plugin_args(),
            "-p",
            "early_client",
            "-p",
            "no:cacheprovider",
            f"--cacheroot-manifest={manifest}",
            f"--cacheroot-report={report}",
        ],
        env=_env(tmp_path, hub),
        cwd=project,
        timeout=120,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    [line] = report_lines(done.stdout)
    assert line.startswith(
        "cacheroot: offline run, but huggingface_hub stayed online in 1 process (imported "
        "before the run set HF_HUB_OFFLINE); 0 hits, 0 misses"
    ), line
    assert json.loads(report.read_text())["online_hub_clients"] == 1


TESTS_NEED_THE_MODEL = """
def test_needs_the_model(model_snapshot):
    model_snapshot({repo_id!r}, {commit!r})
"""


def test_a_model_the_hub_will_not_give_costs_one_attempt_per_run(
    tmp_path: Path, hub: Any, repo: Any
) -> None:
    # An outage: every API call is rate limited. The client asks 6 times (5 retries,
    # Retry-After + 1 s apart) in its one attempt.
    status, requests = 429, 6
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        f'[[model]]\nhub = "hf"\nrepo_id = "{repo.repo_id}"\nrevision = "{repo.commit}"\n'
    )
    tests = TESTS_NEED_THE_MODEL.format(repo_id=repo.repo_id, commit=repo.commit)
    project = _project(tmp_path, "", tests)
    hub.fail_next(10_000, status=status, retry_after="0", match="^/api/")
    args = [*plugin_args(), "-p", "no:cacheprovider", f"--cacheroot-manifest={manifest}"]

    first = run_pytest(args, env=_env(tmp_path, hub), cwd=project, timeout=120)
    after_first = hub.total()
    second = run_pytest(args, env=_env(tmp_path, hub), cwd=project, timeout=120)

    assert (first.returncode, second.returncode) == (1, 1), first.stdout + second.stdout
    assert after_first == requests, hub.counts()  # the manifest step's one attempt
    assert hub.total() == requests, hub.counts()  # the second session asked nothing
    for run in (first, second):
        assert "cacheroot manifest: 1 entry could not be warmed; running online:" in run.stdout
        # The test is told why, at once, without warming again.
        assert "cacheroot: warming hf://acme/offline-truth@" in run.stdout
        assert f"failed: DownloadError: hf://{repo.repo_id}@{repo.commit}: warming it failed" in (
            run.stdout
        )
        assert str(status) in run.stdout
