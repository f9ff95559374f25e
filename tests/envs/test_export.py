"""Exporters: shell, docker, GitHub Actions and JSON, all from the one table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_TAG, TABLE, docker_args, export, resolve
from cacheroot.envs._export import table_markdown

ENV = {"HOME": "/home/u", CACHEROOT: "/r"}
#: The docs page that carries the generated variable table.
VARIABLES = Path(__file__).resolve().parents[2] / "docs" / "reference" / "variables.md"


def test_sh_round_trips_through_a_real_shell() -> None:
    env = {**ENV, "HF_HOME": "/with space/it's"}
    text = export("sh", env)
    script = text + 'printf "%s\\n" "$HF_HOME" "$TORCH_HOME"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["/with space/it's", "/r/torch"]
    assert "# VLLM_MEDIA_CACHE: opt-in (off)" in text


def test_github_env_file_lines() -> None:
    lines = export("github", ENV).splitlines()
    assert "HF_HOME=/r/huggingface" in lines
    assert not any(line.startswith("VLLM_MEDIA_CACHE") for line in lines)


def test_json_shape() -> None:
    doc = json.loads(export("json", ENV, tag="cuda"))
    assert doc["root"] == "/r"
    assert doc["tag"] == "cuda"
    assert doc["variables"]["CUDA_CACHE_PATH"] == {
        "value": "/r/nv/ComputeCache",
        "source": "derived",
    }
    assert doc["variables"]["VLLM_MEDIA_CACHE"]["source"] == "opt-in (off)"


@pytest.mark.parametrize("tag", ["cuda", "rocm"])
def test_docker_args_cover_every_variable_for_the_container(tag: str) -> None:
    env = {**ENV, "HF_HOME": "/host/only"}
    args = docker_args(env, tag=tag, container_root="/cache")
    assert args[0] == "--volume=/r:/cache"
    envs = dict(a.removeprefix("--env=").split("=", 1) for a in args[1:])
    expected = resolve({CACHEROOT: "/cache"}, tag).applied()
    assert envs == {CACHEROOT: "/cache", CACHEROOT_TAG: tag, **expected}
    assert envs["HF_HOME"] == "/cache/huggingface"  # the host's explicit path does not leak in


def test_docker_refuses_an_invalid_root() -> None:
    with pytest.raises(ValueError, match="absolute path"):
        docker_args({CACHEROOT: "relative"})


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        export("yaml", ENV)


def test_the_variable_table_is_generated_from_the_table() -> None:
    table = table_markdown()
    for var in TABLE:
        assert f"`{var.name}`" in table
    text = VARIABLES.read_text(encoding="utf-8")
    start, end = "<!-- variables:start -->\n", "<!-- variables:end -->"
    assert start in text, "docs/reference/variables.md lacks the generated table's markers"
    block = text.split(start, 1)[1].split(end, 1)[0]
    assert block == table, "docs/reference/variables.md's table is stale: run `nox -s readme`"


@pytest.mark.parametrize(
    ("host", "container", "side"),
    [("/data/a:b", None, "host"), ("/data/ok", "/in:side", "container")],
)
def test_docker_refuses_a_root_with_a_colon(host: str, container: str | None, side: str) -> None:
    with pytest.raises(ValueError, match=f"the {side} root '.*' contains ':'"):
        docker_args({"HOME": "/home/u", CACHEROOT: host}, container_root=container)


def test_cli_docker_export_of_a_colon_root_exits_1(tmp_path: Path) -> None:
    import os
    import sys

    root = tmp_path / "a:b"
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "env", "--format", "docker"],
        env={**os.environ, CACHEROOT: str(root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (out.returncode, out.stdout) == (1, "")
    assert "docker's --volume=HOST:CONTAINER cannot express" in out.stderr


RELATIVE = (
    "cacheroot env: cannot export the layout: CACHEROOT='relative' is not an absolute path; "
    "set it to an absolute path\n"
)


@pytest.mark.parametrize("fmt", ["docker", "github", "json", "sh"])
def test_cli_refuses_an_invalid_root_in_every_format(
    fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `cacheroot env --format github >> "$GITHUB_ENV"` must stop the job, not go on with no layout.
    from cacheroot.envs._cli import main

    monkeypatch.setenv(CACHEROOT, "relative")
    assert main(["env", "--format", fmt]) == 1
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", RELATIVE)


def test_sh_exports_the_root_and_tag_to_the_processes_it_starts() -> None:
    text = export("sh", ENV, tag="rocm")
    script = text + 'printf "%s\\n" "$CACHEROOT" "$CACHEROOT_TAG"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["/r", "rocm"]


def test_github_exports_the_root_and_tag() -> None:
    lines = export("github", ENV, tag="cuda").splitlines()
    assert lines[:2] == ["CACHEROOT=/r", "CACHEROOT_TAG=cuda"]
    assert not any(line.startswith("CACHEROOT_TAG") for line in export("github", ENV).splitlines())


@pytest.mark.parametrize("fmt", ["github", "json", "sh"])
def test_cli_refuses_container_root_outside_docker(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cacheroot.envs._cli import main

    with pytest.raises(SystemExit) as exited:
        main(["env", "--format", fmt, "--container-root", "/cache"])
    assert exited.value.code == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.endswith(
        f"cacheroot env: error: --container-root applies to --format docker only "
        f"(got --format {fmt}): drop it, or add --format docker\n"
    )


def test_container_root_is_for_docker_only_in_python_too() -> None:
    with pytest.raises(ValueError, match="container_root applies to the docker format only"):
        export("sh", ENV, container_root="/cache")


def test_docker_names_a_relative_container_root() -> None:
    with pytest.raises(ValueError, match="container root") as raised:
        docker_args(ENV, container_root="cache")
    assert str(raised.value) == (
        "cannot export docker arguments: the container root 'cache' is not an absolute path; "
        "give the root's absolute path inside the container"
    )


def test_a_bucket_tier_is_exported_as_its_url_in_every_format(tmp_path: Path) -> None:
    env = {CACHEROOT: str(tmp_path), "CACHEROOT_SHARED": " s3://fleet-cache/ci "}
    assert "export CACHEROOT_SHARED=s3://fleet-cache/ci\n" in export("sh", env)
    assert "CACHEROOT_SHARED=s3://fleet-cache/ci" in export("github", env).splitlines()
    assert json.loads(export("json", env))["shared"] == "s3://fleet-cache/ci"
    args = docker_args(env)
    assert args[-1] == "--env=CACHEROOT_SHARED=s3://fleet-cache/ci"
    assert not any(a.startswith("--volume=s3:") for a in args)  # nothing to mount
