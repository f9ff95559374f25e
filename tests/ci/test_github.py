"""``ci/github/cacheroot.yml``: the workflow's shell steps run here, in order.

No GitHub is involved. The steps' ``run:`` scripts run under bash as the runner would run them
(``bash --noprofile --norc -eo pipefail``), each with fresh ``GITHUB_ENV`` and ``GITHUB_OUTPUT``
files in ``tmp_path`` whose lines are applied as GitHub applies them. Stood in for, not run:
``actions/cache/restore`` and ``actions/cache/save`` by a directory of saved volumes (exact key
first, then the newest volume under a ``restore-keys`` prefix); ``actions/checkout`` by this tree
itself (not a copy under the temporary directory, which the suite's isolated runs replace with a
fresh one); ``actions/setup-python`` by this interpreter, whose environment holds what the
install step would install, so that step does not run.

With a toy manifest (a local origin) and a toy suite, three jobs: a cold one (misses, downloads,
saves), one whose manifest is only reformatted (same key: exact hit, no request, nothing saved),
and one whose manifest gained an entry (a new key: the older volume restored by prefix, one
download, saved under the new key).

With the repository's own values (the job's ``env``: ``tests/manifest.toml``, ``tests``, the
``cuda`` tag): the suite step's selection is that of ``nox -s tests-*`` (xdist, slow tests left
out), the only tests that read the run's offline switches in their own process are the
scenarios, and the job passes with them; the whole suite, run by the job as the workflow says,
is the slow test at the end (``nox -s e2e``: a few minutes on two cores).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_TAG, TABLE

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "ci" / "github" / "cacheroot.yml"
#: Steps this test does not run: the environment running the tests is the installed one.
NOT_RUN = {"install"}
#: The save step's condition, implemented by :meth:`Job.run` (checked word for word).
SAVE_IF = "always() && steps.warm.outcome == 'success' && steps.restore.outputs.cache-hit != 'true'"
EXPRESSION = re.compile(r"\$\{\{\s*(env|steps)\.([\w-]+)(?:\.outputs\.([\w-]+))?\s*\}\}")

SUITE = """
from pathlib import Path

from cacheroot.fetch import fetch


def test_the_warmed_asset_is_read_offline():
    for url, sha in {assets!r}:
        assert Path(fetch(url, sha256=sha, namespace="gh")).read_bytes() == Path(url).name.encode()
"""


def steps() -> list[dict[str, Any]]:
    """The job's steps, as YAML reads them."""
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow")
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    assert list(jobs) == ["tests"]
    found: list[dict[str, Any]] = jobs["tests"]["steps"]
    return found


def job_env() -> dict[str, str]:
    """The job's ``env:`` block."""
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow")
    env: dict[str, str] = yaml.safe_load(WORKFLOW.read_text())["jobs"]["tests"]["env"]
    return env


def read_commands(path: Path) -> dict[str, str]:
    """``NAME=value`` and ``NAME<<DELIMITER`` blocks, as GitHub reads ``$GITHUB_ENV``."""
    found: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            found[name] = "\n".join(iter(lambda: next(lines), delimiter))
        elif line:
            name, value = line.split("=", 1)
            found[name] = value
    return found


class Job:
    """One run of the job: its environment, step outputs and outcomes, the saved volumes."""

    def __init__(self, tmp: Path, store: Path, env: dict[str, str], timeout: float = 300) -> None:
        self.tmp = tmp
        self.timeout = timeout
        self.store = store
        self.env = env
        self.outputs: dict[str, dict[str, str]] = {}
        self.outcomes: dict[str, str] = {}
        self.log: list[str] = []
        self.stdout: dict[str, str] = {}

    def expand(self, text: str) -> str:
        def value(m: re.Match[str]) -> str:
            kind, name, output = m.groups()
            if kind == "env":
                return self.env.get(name, "")
            return self.outputs.get(name, {}).get(output or "", "")

        return EXPRESSION.sub(value, text)

    def shell(self, number: int, step: dict[str, Any]) -> None:
        files = {
            name: self.tmp / f"{name.lower()}-{number}" for name in ("GITHUB_ENV", "GITHUB_OUTPUT")
        }
        for path in files.values():
            path.write_text("")
        script = self.tmp / f"step-{number}.sh"
        script.write_text(step["run"])
        env = {**self.env, **{k: str(v) for k, v in files.items()}}
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.env["GITHUB_WORKSPACE"],
            env=env,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )
        self.log.append(f"--- {step.get('name')}: {done.returncode}\n{done.stdout}{done.stderr}")
        self.outcomes[step.get("id", "")] = "success" if done.returncode == 0 else "failure"
        self.stdout[step.get("id", "")] = done.stdout
        self.env.update(read_commands(files["GITHUB_ENV"]))
        self.outputs[step.get("id", "")] = read_commands(files["GITHUB_OUTPUT"])

    def restore(self, step: dict[str, Any]) -> None:
        path = Path(self.expand(step["with"]["path"]))
        key = self.expand(step["with"]["key"])
        prefix = self.expand(step["with"]["restore-keys"])
        exact = self.store / key
        older = sorted(self.store.glob(f"{prefix}*"), key=lambda p: p.stat().st_mtime_ns)
        source = exact if exact.is_dir() else (older[-1] if older else None)
        if source is not None:
            shutil.copytree(source, path, symlinks=True)
        self.outputs[step["id"]] = {
            "cache-hit": "true" if source == exact else "false",
            "cache-matched-key": source.name if source else "",
        }
        self.log.append(f"--- restore {key}: {source.name if source else 'nothing'}")

    def save(self, step: dict[str, Any]) -> None:
        assert step["if"] == SAVE_IF
        if self.outcomes.get("warm") != "success":
            return
        if self.outputs["restore"]["cache-hit"] == "true":
            return
        path = Path(self.expand(step["with"]["path"]))
        shutil.copytree(path, self.store / self.expand(step["with"]["key"]), symlinks=True)

    def run(self) -> None:
        for number, step in enumerate(steps()):
            uses = step.get("uses", "")
            if uses.startswith("actions/cache/restore@"):
                self.restore(step)
            elif uses.startswith("actions/cache/save@"):
                self.save(step)
            elif uses:
                assert uses.startswith(("actions/checkout@", "actions/setup-python@")), uses
            elif step.get("id") not in NOT_RUN:
                if any(o == "failure" for o in self.outcomes.values()):
                    continue  # a failed step skips the rest but `always()` ones
                self.shell(number, step)

    @property
    def key(self) -> str:
        return self.outputs["key"]["key"]

    def report(self) -> str:
        return "\n".join(self.log)


@pytest.fixture
def origin() -> Iterator[Any]:
    server = importlib.import_module("ops.origin").Origin().start()
    yield server
    server.close()


def manifest_text(origin: Any, names: list[str], *, reformatted: bool = False) -> str:
    entries = []
    for name in names:
        url = origin.serve(name, name.encode())
        sha = hashlib.sha256(name.encode()).hexdigest()
        if reformatted:  # comments, other spacing, keys in another order, upper-case hex
            entries.append(
                f'# {name}\n[[asset]]\n  namespace = "gh"\n  sha256 = "{sha.upper()}"\n'
                f'  url="{url}"   # from the origin\n\n'
            )
        else:
            entries.append(f'[[asset]]\nurl = "{url}"\nsha256 = "{sha}"\nnamespace = "gh"\n')
    return "\n".join(reversed(entries) if reformatted else entries)


def runner_env(tmp: Path, workspace: Path) -> dict[str, str]:
    """A fresh runner's environment with the job's ``env``: no layout, no pytest variables."""
    (tmp / "runner-temp").mkdir(parents=True)
    drop = {CACHEROOT, CACHEROOT_TAG, *(v.name for v in TABLE)}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(job_env())
    env.update(RUNNER_TEMP=str(tmp / "runner-temp"), GITHUB_WORKSPACE=str(workspace))
    return env


def run_job(tmp_path: Path, name: str, manifest: str, assets: list[tuple[str, str]]) -> Job:
    """One job in a fresh runner: its own temp directory and workspace, the shared store."""
    tmp = tmp_path / name
    env = runner_env(tmp, tmp / "workspace")
    (tmp / "workspace").mkdir()
    (tmp / "manifest.toml").write_text(manifest)
    (tmp / "test_suite.py").write_text(SUITE.format(assets=assets))
    env.update(MANIFEST=str(tmp / "manifest.toml"), TESTS=str(tmp / "test_suite.py"))
    job = Job(tmp, tmp_path / "store", env)
    (tmp_path / "store").mkdir(exist_ok=True)
    job.run()
    return job


def run_repository_job(tmp_path: Path, *, timeout: float, **env: str) -> Job:
    """One job on this repository with the workflow's own values (``env`` overrides some)."""
    tmp = tmp_path / "repository"
    job = Job(tmp, tmp_path / "store", {**runner_env(tmp, REPO), **env}, timeout=timeout)
    (tmp_path / "store").mkdir(exist_ok=True)
    job.run()
    return job


def test_the_workflow_keys_restores_warms_tests_offline_and_saves(
    tmp_path: Path, origin: Any
) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: the workflow's steps are bash scripts")
    ids = [s.get("id") for s in steps()]
    assert ids[2:] == ["install", "key", "restore", "layout", "warm", "tests", None]
    assets = [(origin.url("a.txt"), hashlib.sha256(b"a.txt").hexdigest())]

    cold = run_job(tmp_path, "cold", manifest_text(origin, ["a.txt"]), assets)
    assert set(cold.outcomes.values()) == {"success"}, cold.report()
    assert re.fullmatch(r"cacheroot-v1-cuda-[0-9a-f]{32}", cold.key)
    assert cold.outputs["key"]["prefix"] == "cacheroot-v1-cuda-"
    assert cold.outputs["restore"]["cache-hit"] == "false"
    assert cold.env[CACHEROOT] == str(tmp_path / "cold" / "runner-temp" / "cacheroot")
    assert origin.requests["/a.txt"] == 1
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [cold.key]

    same = run_job(tmp_path, "same", manifest_text(origin, ["a.txt"], reformatted=True), assets)
    assert set(same.outcomes.values()) == {"success"}, same.report()
    assert same.key == cold.key
    assert same.outputs["restore"]["cache-hit"] == "true"
    assert origin.requests["/a.txt"] == 1  # warm and the suite were served by the volume
    assert "1 entry: 1 hit, 0 misses" in same.stdout["warm"]
    assert "1 passed" in same.stdout["tests"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [cold.key]

    assets.append((origin.url("b.txt"), hashlib.sha256(b"b.txt").hexdigest()))
    more = run_job(tmp_path, "more", manifest_text(origin, ["a.txt", "b.txt"]), assets)
    assert set(more.outcomes.values()) == {"success"}, more.report()
    assert more.key != cold.key
    assert more.key.startswith("cacheroot-v1-cuda-")
    assert more.outputs["restore"] == {"cache-hit": "false", "cache-matched-key": cold.key}
    assert (origin.requests["/a.txt"], origin.requests["/b.txt"]) == (1, 1)
    assert "2 entries: 1 hit, 1 miss" in more.stdout["warm"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == sorted([cold.key, more.key])


def test_a_failed_warm_saves_nothing(tmp_path: Path, origin: Any) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: the workflow's steps are bash scripts")
    url = origin.url("absent.txt")  # never served: the origin answers 404
    manifest = f'[[asset]]\nurl = "{url}"\nsha256 = "{"0" * 64}"\nnamespace = "gh"\n'
    job = run_job(tmp_path, "failed", manifest, [])
    assert job.outcomes["warm"] == "failure", job.report()
    assert "tests" not in job.outcomes
    assert list((tmp_path / "store").iterdir()) == []


#: The suite step's command, word for word (``$MANIFEST`` and ``$TESTS`` expanded by bash).
SUITE_STEP = [
    "python",
    "-m",
    "pytest",
    "-n",
    "auto",
    "-m",
    "not slow and not e2e",
    "--cacheroot-offline",
    "--cacheroot-hub",
    "--cacheroot-manifest",
    "$MANIFEST",
    "$TESTS",
]
#: The plugin's fixtures that fetch, cache-only on an offline run.
FETCHING_FIXTURES = {"cached_file", "model_snapshot", "media_cache"}
#: Collects the suite and writes, as JSON, the files whose tests use a fetching fixture.
FIXTURE_USERS = f"""
import json, os

def pytest_collection_modifyitems(session, config, items):
    wanted = {FETCHING_FIXTURES!r}
    users = {{i.nodeid.split("::")[0] for i in items if wanted & set(i.fixturenames)}}
    with open(os.environ["FIXTURE_USERS"], "w") as out:
        json.dump(sorted(users), out)
"""


def summary(output: str) -> str:
    """pytest's closing line (``11 passed in 6.99s``), without its rule."""
    return output.strip().splitlines()[-1].strip("= ")


def step(step_id: str) -> dict[str, Any]:
    return next(s for s in steps() if s.get("id") == step_id)


def nox_selection() -> list[str]:
    """The leading words of the pytest arguments of ``nox -s tests-*`` (``run_tests``)."""
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    function = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "run_tests"
    )
    first = next(
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == "args"
    )
    assert isinstance(first.value, ast.List)
    # Module-level string constants the list names (DEFAULT_MARKERS), as their values.
    constants = {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
    }
    words: list[str] = []
    for element in first.value.elts:
        if isinstance(element, ast.Name) and element.id in constants:
            words.append(constants[element.id])
        elif isinstance(element, ast.Constant) and isinstance(element.value, str):
            words.append(element.value)
        else:
            break
    return words


def test_the_job_s_values_are_the_repository_s() -> None:
    env = job_env()
    assert env == {"MANIFEST": "tests/manifest.toml", "CACHEROOT_TAG": "cuda", "TESTS": "tests"}
    assert (REPO / env["MANIFEST"]).is_file()
    assert (REPO / env["TESTS"] / "conftest.py").is_file()


def test_the_suite_step_selects_what_the_nox_test_sessions_select() -> None:
    assert shlex.split(step("tests")["run"]) == SUITE_STEP
    assert nox_selection()[:4] == ["-n", "auto", "-m", "not slow and not e2e"]
    assert SUITE_STEP[3:7] == nox_selection()[:4]


def test_only_the_scenarios_fetch_through_the_run_s_offline_switch(tmp_path: Path) -> None:
    """Every other test runs on a root of its own with the offline switches cleared (the root
    conftest's ``isolated_cache``): in a forced-offline run, only the tests that use the plugin's
    fetching fixtures in their own process can miss, and those are the scenarios."""
    (tmp_path / "fixture_users.py").write_text(FIXTURE_USERS)
    found = tmp_path / "users.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(tmp_path), FIXTURE_USERS=str(found))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "fixture_users", "tests"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    users = json.loads(found.read_text())
    assert "tests/scenarios/test_gsm8k.py" in users
    assert [u for u in users if not u.startswith("tests/scenarios/")] == []


def test_the_job_passes_the_scenarios_with_the_repository_s_manifest(tmp_path: Path) -> None:
    """The workflow's steps with its own values, the suite step on the scenarios: offline, with
    ``tests/manifest.toml``, whose tests fetch from the run's own origin on loopback."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: the workflow's steps are bash scripts")
    job = run_repository_job(tmp_path, timeout=300, TESTS="tests/scenarios")
    assert set(job.outcomes.values()) == {"success"}, job.report()
    assert job.outcomes["tests"] == "success"
    assert "tests/manifest.toml: 0 entries: 0 hits, 0 misses" in job.stdout["warm"]
    assert "cacheroot: offline run; " in job.stdout["tests"]
    assert re.fullmatch(r"11 passed in [\d.]+s", summary(job.stdout["tests"])), job.report()


@pytest.mark.slow
def test_the_workflow_passes_on_this_repository(tmp_path: Path) -> None:
    """The whole job with the workflow's own values: the whole suite, offline (``nox -s e2e``)."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: the workflow's steps are bash scripts")
    job = run_repository_job(tmp_path, timeout=1800)
    assert set(job.outcomes.values()) == {"success"}, job.report()[-20000:]
    line = summary(job.stdout["tests"])
    assert re.fullmatch(r"\d+ passed(, \d+ (skipped|deselected|xfailed))* in .+", line), line
    assert "cacheroot: offline run; " in job.stdout["tests"]
    print(f"the workflow's suite step: {line}")  # noqa: T201 - quoted in the report
