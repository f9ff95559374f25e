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


def test_flashinfer_knob_cache_zero_is_its_off_switch_not_a_path(tmp_path: Path) -> None:
    """FlashInfer documents ``FLASHINFER_MOE_EP_KNOB_CACHE=0`` as "off": kept, not a problem."""
    env = {
        "HOME": str(tmp_path),
        CACHEROOT: str(tmp_path / "root"),
        "CACHEROOT_TAG": "cuda",
        "FLASHINFER_MOE_EP_KNOB_CACHE": "0",
    }
    text, status = report(env, pin_file="")
    assert status == 0, text
    assert "problems" not in text
    assert "  FLASHINFER_MOE_EP_KNOB_CACHE: '0' turns it off: kept\n" in text
    hooked = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['FLASHINFER_MOE_EP_KNOB_CACHE'])"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert hooked.stdout == "0\n"
    # Any other relative value is still a mistake.
    text, status = report({**env, "FLASHINFER_MOE_EP_KNOB_CACHE": "knobs.json"}, pin_file="")
    assert status == 1
    assert "FLASHINFER_MOE_EP_KNOB_CACHE='knobs.json' is not an absolute path" in text


def test_doctor_json_holds_what_the_table_shows(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "huggingface").mkdir(parents=True)
    env = {"HOME": str(tmp_path), CACHEROOT: str(root), "CACHEROOT_PIN_FILE": ""}
    out = cli("doctor", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["root"] == str(root)
    assert doc["root_source"] == "CACHEROOT"
    assert doc["tag"] is None
    assert doc["pin"] == {"file": "", "values": {}, "used": False, "ignored": None}
    assert doc["shared"] == {"root": None, "problem": None}
    assert doc["hub"].startswith("none (HF_ENDPOINT is unset")
    assert doc["problems"] == []
    assert doc["variables"]["HF_HOME"] == {
        "value": f"{root}/huggingface",
        "source": "derived",
        "reason": None,
        "exists": True,
        "writable": True,
        "free": doc["variables"]["HF_HOME"]["free"],
        "under_root": True,
    }
    assert isinstance(doc["variables"]["HF_HOME"]["free"], int)
    assert doc["variables"]["TRITON_CACHE_DIR"]["exists"] is False
    assert "VLLM_CONFIG_ROOT" in doc["not_set_on_purpose"]

    bad = cli("doctor", "--json", env={**env, CACHEROOT: "rel"})
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["root"] is None
    assert doc["problems"] == [
        "CACHEROOT='rel' is not an absolute path; set it to an absolute path"
    ]


@pytest.mark.parametrize(
    ("mode", "line"),
    [
        ("ro", "read only: CACHEROOT_SHARED_MODE=ro; never written)"),
        (" OFF ", "(ignored: CACHEROOT_SHARED_MODE=off)"),
    ],
)
def test_doctor_says_which_trust_tier_the_shared_tier_is_in(
    tmp_path: Path, mode: str, line: str
) -> None:
    (tmp_path / "l2").mkdir()
    env = {
        CACHEROOT: str(tmp_path / "root"),
        "CACHEROOT_SHARED": str(tmp_path / "l2"),
        "CACHEROOT_SHARED_MODE": mode,
        "CACHEROOT_PIN_FILE": "",
    }
    text, status = report(env)
    (shared,) = [x for x in text.splitlines() if x.startswith("shared:")]
    assert shared.startswith(f"shared: {tmp_path / 'l2'} ")
    assert shared.endswith(line)
    assert status == 0
    assert list((tmp_path / "l2").iterdir()) == []  # no probe file written


def test_doctor_reports_a_trust_tier_that_is_no_mode(tmp_path: Path) -> None:
    (tmp_path / "l2").mkdir()
    env = {
        CACHEROOT: str(tmp_path / "root"),
        "CACHEROOT_SHARED": str(tmp_path / "l2"),
        "CACHEROOT_SHARED_MODE": "readonly",
        "CACHEROOT_PIN_FILE": "",
    }
    text, status = report(env)
    assert status == 1
    assert "CACHEROOT_SHARED_MODE='readonly' is not a mode: expected one of rw, ro, off" in text


def test_doctor_says_what_hf_endpoint_points_at(tmp_path: Path) -> None:
    env = {CACHEROOT: str(tmp_path / "root"), "CACHEROOT_PIN_FILE": "", "HF_ENDPOINT": "ftp://x"}
    text, _ = report(env)
    assert "hub:  ftp://x (HF_ENDPOINT is not an http:// or https:// URL)" in text.splitlines()
