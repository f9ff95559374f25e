"""The doctor and the ``cacheroot`` command, run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT
from cacheroot.envs._doctor import report
from cacheroot.envs.units import format_size


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_doctor_on_a_good_root(tmp_path: Path) -> None:
    text, status = report({"HOME": str(tmp_path), CACHEROOT: str(tmp_path / "root")})
    assert status == 0, text
    assert "problems" not in text
    assert "HF_HOME" in text
    assert "VLLM_CONFIG_ROOT" in text  # listed as not set on purpose


def test_doctor_flags_a_file_as_root(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    text, status = report({"HOME": str(tmp_path), CACHEROOT: str(f)})
    assert status == 1
    assert "not a directory" in text


def test_doctor_flags_a_relative_root(tmp_path: Path) -> None:
    text, status = report({"HOME": str(tmp_path), CACHEROOT: "rel"})
    assert status == 1
    assert "is not an absolute path" in text
    assert "(invalid)" in text


def test_doctor_does_not_create_directories(tmp_path: Path) -> None:
    root = tmp_path / "missing"
    report({"HOME": str(tmp_path), CACHEROOT: str(root)})
    assert not root.exists()


def test_cli_env_and_doctor(tmp_path: Path) -> None:
    env = {**os.environ, CACHEROOT: str(tmp_path)}
    out = cli("env", "--format", "json", "--tag", "rocm", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["variables"]["MIOPEN_CUSTOM_CACHE_DIR"]["value"] == f"{tmp_path}/miopen/cache"
    assert cli("doctor", env=env).returncode == 0
    bad = cli("doctor", env={**env, CACHEROOT: "rel"})
    assert bad.returncode == 1
    assert "absolute" in bad.stdout
    docker = cli("env", "--format", "docker", env={**env, CACHEROOT: "rel"})
    assert docker.returncode == 1
    assert "absolute" in docker.stderr


def test_cli_lists_installed_subcommands() -> None:
    out = cli("--help")
    assert out.returncode == 0
    for name in ("env", "doctor", "hook"):
        assert name in out.stdout


@pytest.mark.parametrize(
    ("size", "text"), [(None, "?"), (0, "0 B"), (1536, "1.5 KiB"), (3 * 1024**3, "3.0 GiB")]
)
def test_human(size: int | None, text: str) -> None:
    assert format_size(size) == text
