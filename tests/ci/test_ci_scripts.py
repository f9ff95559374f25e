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

    from tests.ci import wheelhouse
else:
    # pytest puts tests/ci on sys.path (no package there); mypy names it tests.ci.
    import wheelhouse

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
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install -y shellcheck)")
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


#: The system directories the bootstrap tests put on PATH after their own.
SYSTEM_PATH = ("/usr/bin", "/bin")


@pytest.fixture
def bootstrap_env(tmp_path: Path, fake_bin: Path) -> dict[str, str]:
    """A HOME in ``tmp_path``; PATH: ``fake_bin`` and the system's directories, no nox nor uv."""
    for tool in ("nox", "uv"):
        if shutil.which(tool, path=os.pathsep.join(SYSTEM_PATH)):
            pytest.skip(f"{tool} is installed system-wide: the bootstrap would keep that one")
    knobs = ("PYTHON", "TOOLS_DIR", "BIN_DIR", "XDG_DATA_HOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in knobs}
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = os.pathsep.join([str(fake_bin), *SYSTEM_PATH])
    return env


def bootstrap(
    bash: str, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``ci/bootstrap.sh ARGS`` with ``env``."""
    return subprocess.run(
        [bash, str(CI / "bootstrap.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def fake_tool(path: Path, version: str) -> None:
    """An executable that prints ``version`` as ``--version`` would (on stderr, as nox does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version}' >&2\n")
    path.chmod(0o755)


def test_bootstrap_links_what_its_environment_holds_and_a_rerun_changes_nothing(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    tools = home / ".local/share/cacheroot/tools"  # XDG_DATA_HOME that is not absolute: ignored
    fake_tool(tools / "bin" / "nox", "2024.10.9")
    fake_tool(tools / "bin" / "uv", "uv 0.9.0")
    env = {**bootstrap_env, "XDG_DATA_HOME": "relative/data"}
    first = bootstrap(bash, env, "--no-system-packages")
    assert first.returncode == 0, first.stderr
    bin_dir = home / ".local" / "bin"
    assert first.stdout.splitlines() == [
        f"bootstrap: nox: already installed in {tools} (2024.10.9), linked as {bin_dir}/nox",
        f"bootstrap: uv: already installed in {tools} (uv 0.9.0), linked as {bin_dir}/uv",
        (
            f"bootstrap: {bin_dir} is not on PATH: add it "
            f'(export PATH="{bin_dir}:$PATH") to run the linked commands'
        ),
    ]
    links = {tool: os.lstat(bin_dir / tool) for tool in ("nox", "uv")}
    for tool in links:
        assert os.readlink(bin_dir / tool) == str(tools / "bin" / tool)
    again = bootstrap(bash, {**env, "PATH": f"{bin_dir}:{env['PATH']}"}, "--no-system-packages")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == first.stdout.splitlines()[:2]
    for tool, before in links.items():
        after = os.lstat(bin_dir / tool)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_bootstrap_links_into_a_writable_directory_already_on_path(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    """Without ~/.local/bin on PATH (a root container), ~/bin on PATH takes the links: the
    README's ``bash ci/bootstrap.sh && nox ...`` then finds nox in the same shell line."""
    home = tmp_path / "home"
    tools = home / ".local/share/cacheroot/tools"
    fake_tool(tools / "bin" / "nox", "2024.10.9")
    fake_tool(tools / "bin" / "uv", "uv 0.9.0")
    (home / "bin").mkdir(parents=True)
    env = {**bootstrap_env, "PATH": f"{home / 'bin'}:{bootstrap_env['PATH']}"}
    out = bootstrap(bash, env, "--no-system-packages")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"bootstrap: nox: already installed in {tools} (2024.10.9), linked as {home}/bin/nox",
        f"bootstrap: uv: already installed in {tools} (uv 0.9.0), linked as {home}/bin/uv",
    ]
    assert os.readlink(home / "bin" / "nox") == str(tools / "bin" / "nox")
    assert not (home / ".local" / "bin").exists()
    found = subprocess.run(
        [bash, "-c", "command -v nox"], env=env, capture_output=True, text=True, check=False
    )
    assert found.stdout.strip() == f"{home}/bin/nox"


def test_bootstrap_follows_xdg_data_home_and_its_own_knobs(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    fake_tool(data / "cacheroot/tools/bin/nox", "2024.10.9")
    fake_tool(data / "cacheroot/tools/bin/uv", "uv 0.9.0")
    out = bootstrap(bash, {**bootstrap_env, "XDG_DATA_HOME": str(data)}, "--no-system-packages")
    assert out.returncode == 0, out.stderr
    assert os.readlink(tmp_path / "home/.local/bin/uv") == str(data / "cacheroot/tools/bin/uv")
    elsewhere = {"TOOLS_DIR": str(data / "cacheroot/tools"), "BIN_DIR": str(tmp_path / "b")}
    out = bootstrap(bash, {**bootstrap_env, **elsewhere}, "--no-system-packages")
    assert out.returncode == 0, out.stderr
    assert os.readlink(tmp_path / "b" / "nox") == str(data / "cacheroot/tools/bin/nox")


def test_bootstrap_never_replaces_a_file_that_is_not_its_link(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    fake_tool(home / ".local/share/cacheroot/tools/bin/nox", "2024.10.9")
    mine = home / ".local/bin/nox"
    mine.parent.mkdir(parents=True)
    mine.write_text("a user's own script\n")
    out = bootstrap(bash, bootstrap_env, "--no-system-packages")
    assert out.returncode == 1
    assert f"{mine} exists and is not a link; move it, or set BIN_DIR" in out.stderr
    assert mine.read_text() == "a user's own script\n"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--frobnicate"], {}, "unknown argument --frobnicate"),
        ([], {"TOOLS_DIR": "tools"}, "TOOLS_DIR=tools is not an absolute path"),
        ([], {"BIN_DIR": "bin"}, "BIN_DIR=bin is not an absolute path"),
    ],
)
def test_bootstrap_usage_errors(
    bash: str,
    bootstrap_env: dict[str, str],
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    out = bootstrap(bash, {**bootstrap_env, **env}, *args)
    assert out.returncode == 2
    assert message in out.stderr


@pytest.fixture(scope="session")
def nox_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nox and what it requires, as wheels packed in this session from this environment."""
    try:
        return wheelhouse.build(tmp_path_factory.mktemp("nox-wheels"), ["nox"])
    except wheelhouse.MissingError as exc:
        pytest.skip(str(exc))


def test_bootstrap_installs_nox_with_uv_into_its_own_environment(
    bash: str, bootstrap_env: dict[str, str], fake_bin: Path, tmp_path: Path, nox_wheels: Path
) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH: the bootstrap installs nox with the uv it finds")
    (fake_bin / "uv").symlink_to(uv)
    # Offline: nox from the session's wheelhouse, uv with a fresh cache of its own.
    env = wheelhouse.offline(bootstrap_env, nox_wheels, tmp_path / "uv-cache")
    env["PYTHON"] = sys.executable
    out = bootstrap(bash, env, "--no-system-packages")
    assert out.returncode == 0, out.stderr
    tools = tmp_path / "home/.local/share/cacheroot/tools"
    bin_dir = tmp_path / "home/.local/bin"
    lines = out.stdout.splitlines()
    assert lines[0] == f"bootstrap: uv: found at {fake_bin}/uv ({version(uv)}), left as it is"
    assert lines[1].startswith("bootstrap: nox: installed 20")
    assert lines[1].endswith(f" in {tools}, linked as {bin_dir}/nox")
    assert (tools / "pyvenv.cfg").is_file()  # a virtual environment: no system Python touched
    assert not (bin_dir / "uv").exists()
    nox = subprocess.run(
        [str(bin_dir / "nox"), "--version"], capture_output=True, text=True, check=True
    )
    assert nox.stderr.strip() in lines[1]
    again = bootstrap(bash, env, "--no-system-packages")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].startswith(f"bootstrap: nox: already installed in {tools}")


def version(tool: str) -> str:
    """The first line of ``TOOL --version``."""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).splitlines()[0]


@pytest.mark.slow
def test_bootstrap_without_uv_installs_nox_and_uv_from_pypi(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    # Needs PyPI (or the pip configuration's mirror): about 40 s on a loaded 2-core machine.
    out = bootstrap(bash, {**bootstrap_env, "PYTHON": sys.executable}, "--no-system-packages")
    assert out.returncode == 0, out.stderr
    bin_dir = tmp_path / "home/.local/bin"
    for tool in ("nox", "uv"):
        assert os.readlink(bin_dir / tool).endswith(f"cacheroot/tools/bin/{tool}")
        subprocess.run([str(bin_dir / tool), "--version"], capture_output=True, check=True)
    again = bootstrap(bash, bootstrap_env, "--no-system-packages")
    assert [line.split(" (")[0] for line in again.stdout.splitlines()[:2]] == [
        f"bootstrap: nox: already installed in {tmp_path}/home/.local/share/cacheroot/tools",
        f"bootstrap: uv: already installed in {tmp_path}/home/.local/share/cacheroot/tools",
    ]


def _bwrap(*hide: str) -> list[str]:
    """A mount namespace that sees this machine, with each of ``hide`` an empty, private tmpfs:
    the bootstrap then finds those directories as a fresh machine has them, and what it writes
    there never reaches this machine."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: cannot hide system directories")
    if os.geteuid() != 0:
        pytest.skip("the bootstrap installs system packages and links for every user as root only")
    argv = ["bwrap", "--dev-bind", "/", "/"]
    for path in hide:
        argv += ["--tmpfs", path]
    return [*argv, "--"]


#: An ``apt-get`` that logs each call and, for ``-s``, prints apt's plan: an unversioned
#: openssh-server pulls the newer openssh-client (an upgrade), a versioned one does not;
#: ``FAKE_UPGRADE`` adds one more upgraded package to every plan.
FAKE_APT = r"""#!/bin/sh
echo "$*" >> "$APT_LOG"
case " $* " in *" -s "*) ;; *) exit 0 ;; esac
for arg in "$@"; do
    case "$arg" in
        openssh-server)
            echo "Inst openssh-client [1:9.2p1-2+deb12u9] (1:9.2p1-2+deb12u10 Debian:12 [amd64])"
            echo "Inst openssh-server (1:9.2p1-2+deb12u10 Debian:12/stable [amd64])" ;;
        openssh-server=*) echo "Inst openssh-server (${arg#*=} Debian:12/stable [amd64])" ;;
    esac
done
[ -z "$FAKE_UPGRADE" ] || echo "Inst $FAKE_UPGRADE"
"""


@pytest.fixture
def apt(fake_bin: Path, tmp_path: Path) -> Path:
    """``apt-get`` and ``dpkg-query`` (openssh-client 1:9.2p1-2+deb12u9 installed) on PATH; the
    log of the ``apt-get`` calls."""
    (fake_bin / "apt-get").write_text(FAKE_APT)
    (fake_bin / "dpkg-query").write_text("#!/bin/sh\necho 'installed 1:9.2p1-2+deb12u9'\n")
    for name in ("apt-get", "dpkg-query"):
        (fake_bin / name).chmod(0o755)
    return tmp_path / "apt.log"


def test_bootstrap_installs_sshd_at_the_installed_clients_version_and_never_upgrades(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path, apt: Path
) -> None:
    tools = tmp_path / "tools"
    fake_tool(tools / "bin" / "nox", "2024.10.9")
    fake_tool(tools / "bin" / "uv", "uv 0.9.0")
    env = {**bootstrap_env, "TOOLS_DIR": str(tools), "APT_LOG": str(apt)}
    wrap = _bwrap("/usr/sbin")  # no sshd: openssh-server is wanted
    for tool in ("shellcheck", "bwrap", "sshfs", "g++"):
        if shutil.which(tool, path=os.pathsep.join(SYSTEM_PATH)) is None:
            pytest.skip(f"{tool} is not installed here: the bootstrap would want it as well")
    out = subprocess.run(
        [*wrap, bash, str(CI / "bootstrap.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == [
        "bootstrap: installing openssh-server with apt-get",
        "bootstrap: installed openssh-server=1:9.2p1-2+deb12u9 (Debian packages)",
    ]
    assert apt.read_text().splitlines() == [
        "update -qq",
        "install -s -y openssh-server=1:9.2p1-2+deb12u9",
        "install -y -qq openssh-server=1:9.2p1-2+deb12u9",
    ]

    apt.unlink()
    env["FAKE_UPGRADE"] = "libssl3 [3.0.11-1~deb12u2] (3.0.15-1~deb12u1 Debian:12/stable [amd64])"
    out = subprocess.run(
        [*wrap, bash, str(CI / "bootstrap.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1
    assert out.stderr == (
        "bootstrap: installing openssh-server=1:9.2p1-2+deb12u9 would change installed packages "
        "(libssl3 3.0.11-1~deb12u2 -> 3.0.15-1~deb12u1), and this script changes nothing that is "
        "there: upgrade them yourself first, or install openssh-server yourself, or pass "
        "--no-system-packages\n"
    )
    assert apt.read_text().splitlines() == [
        "update -qq",
        "install -s -y openssh-server=1:9.2p1-2+deb12u9",
    ]


def test_bootstrap_never_links_into_usr_local_bin_from_a_home(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    """A root container whose PATH has /usr/local/bin: the links there point to a system-wide
    tool environment (/opt/cacheroot/tools), never into root's HOME, which another user's
    ``nox`` would then run; with the tools in HOME, the links stay in HOME too."""
    home = tmp_path / "home"
    path = f"/usr/local/bin:{bootstrap_env['PATH']}"
    # The tool environment the first run finds, made inside the namespace (its /opt is private).
    seed = (
        "mkdir -p /opt/cacheroot/tools/bin && for t in nox uv; do "
        'printf "#!/bin/sh\\necho %s >&2\\n" "$t 1.0" > /opt/cacheroot/tools/bin/$t; '
        "chmod 755 /opt/cacheroot/tools/bin/$t; done; "
    )
    script = f'{seed}"$0" {CI}/bootstrap.sh --no-system-packages && readlink /usr/local/bin/nox'
    wrap = _bwrap("/usr/local/bin", "/opt")
    out = subprocess.run(
        [*wrap, bash, "-c", script, bash],
        env={**bootstrap_env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        (
            "bootstrap: nox: already installed in /opt/cacheroot/tools (nox 1.0), linked as "
            "/usr/local/bin/nox"
        ),
        (
            "bootstrap: uv: already installed in /opt/cacheroot/tools (uv 1.0), linked as "
            "/usr/local/bin/uv"
        ),
        "/opt/cacheroot/tools/bin/nox",
    ]

    # The tools in HOME (XDG_DATA_HOME given): /usr/local/bin is passed over.
    data = home / "data"
    fake_tool(data / "cacheroot" / "tools" / "bin" / "nox", "2024.10.9")
    fake_tool(data / "cacheroot" / "tools" / "bin" / "uv", "uv 0.9.0")
    out = subprocess.run(
        [*wrap, bash, str(CI / "bootstrap.sh"), "--no-system-packages"],
        env={**bootstrap_env, "PATH": path, "XDG_DATA_HOME": str(data)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        f"bootstrap: nox: already installed in {data}/cacheroot/tools (2024.10.9), linked as "
        f"{home}/.local/bin/nox"
    )

    # Asked for explicitly, the mix is refused.
    out = subprocess.run(
        [*wrap, bash, str(CI / "bootstrap.sh"), "--no-system-packages"],
        env={
            **bootstrap_env,
            "PATH": path,
            "XDG_DATA_HOME": str(data),
            "BIN_DIR": "/usr/local/bin",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr == (
        f"bootstrap: BIN_DIR=/usr/local/bin is outside HOME but TOOLS_DIR={data}/cacheroot/tools "
        "is inside it: every user of /usr/local/bin would run files of this user's HOME; set "
        "TOOLS_DIR outside HOME (such as /opt/cacheroot/tools), or BIN_DIR inside it\n"
    )


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
