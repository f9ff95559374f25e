"""The doctor and the ``cacheroot`` command, run as real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_PIN_FILE, TABLE
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


# -- roots that cannot work: refused with what was expected, what was found, what to do ------

#: Exit status of :func:`_mounted`'s wrapper when the mount itself failed.
NO_MOUNT = 97


def _problems(text: str) -> list[str]:
    """The doctor's problem lines, without their bullets."""
    _, _, tail = text.partition("\nproblems:\n")
    return [line.removeprefix("  - ") for line in tail.splitlines()]


def _notes(text: str) -> list[str]:
    """The doctor's note lines, without their indent."""
    _, _, tail = text.partition("\nnotes:\n")
    return [line.strip() for line in tail.split("\n\n")[0].splitlines()]


def _row(text: str, name: str) -> list[str]:
    """The doctor's table row of ``name``, one cell per column (values hold no blanks)."""
    (row,) = [line.split() for line in text.splitlines() if line.startswith(f"{name} ")]
    return row


def _mounted(mount: str, directory: Path) -> list[str]:
    """A prefix that runs a command in a private mount namespace where the shell command
    ``mount`` (``$0`` is ``directory``) was run: as root, or as another user in a user
    namespace where allowed.

    Root passes every permission check, so a mount is the honest way to make a directory that
    root cannot write; the namespace keeps the mount from every other process.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to mount in a private namespace")
    flag = "-m" if os.geteuid() == 0 else "-rm"
    script = f'{mount} || exit {NO_MOUNT}; exec "$@"'
    prefix = [unshare, flag, "sh", "-c", script, str(directory)]
    probe = subprocess.run([*prefix, "true"], check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot run {mount!r} on {directory} here: {probe.stderr.strip()}")
    return prefix


#: What the test's own environment must not pass on: the fixture sets each derived value as if
#: the user had (without the hook's record), which a child would take for explicit values.
LAYOUT_NAMES = frozenset(v.name for v in TABLE) | {CACHEROOT_APPLIED, CACHEROOT}


def _env(root: str, **values: str) -> dict[str, str]:
    """This process's environment without the layout's variables, with ``CACHEROOT=root`` and
    ``values``."""
    env = {k: v for k, v in os.environ.items() if k not in LAYOUT_NAMES}
    return {**env, CACHEROOT_PIN_FILE: "", CACHEROOT: root, **values}


def _doctor(
    env: dict[str, str], prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "cacheroot.envs._cli", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(("root", "kind"), [("/proc/nope", "proc"), ("/sys/nope", "sysfs")])
def test_doctor_refuses_a_root_on_a_virtual_file_system(root: str, kind: str) -> None:
    out = _doctor(_env(root))
    assert out.returncode == 1, out.stdout + out.stderr
    problem = (
        f"the root '{root}' is on a virtual file system ({kind}), whose files the kernel makes "
        "up: expected a directory on a disk, where files persist between runs; point CACHEROOT "
        "at one (nothing can be cached there)"
    )
    assert _problems(out.stdout) == [problem]
    row = _row(out.stdout, "HF_HOME")
    assert row[:5] == ["HF_HOME", f"{root}/huggingface", "derived", "no", "NO"]


def test_doctor_finds_a_virtual_file_system_by_its_type(tmp_path: Path) -> None:
    """A ``proc`` mounted away from ``/proc`` is found in ``/proc/self/mountinfo``."""
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    prefix = _mounted('mount -t proc proc "$0"', kernel)
    root = f"{kernel}/cache"
    out = _doctor(_env(root), prefix)
    assert out.returncode == 1, out.stdout + out.stderr
    problem = (
        f"the root '{root}' is on a virtual file system (proc), whose files the kernel makes "
        "up: expected a directory on a disk, where files persist between runs; point CACHEROOT "
        "at one (nothing can be cached there)"
    )
    assert _problems(out.stdout) == [problem]


def test_doctor_refuses_a_file_as_root_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = _doctor(_env(f"{tmp_path}/file"))
    assert out.returncode == 1, out.stdout + out.stderr
    problem = (
        f"the root '{tmp_path}/file' is not a directory: expected a directory, found a regular "
        "file; point CACHEROOT at a directory, or remove the file"
    )
    assert _problems(out.stdout) == [problem]
    below = _doctor(_env(f"{tmp_path}/file/cache"))
    assert below.returncode == 1, below.stdout + below.stderr
    problem = (
        f"the root '{tmp_path}/file/cache' cannot be created: '{tmp_path}/file' is not a "
        "directory (expected a directory, found a regular file); point CACHEROOT elsewhere, or "
        "remove the file"
    )
    assert _problems(below.stdout) == [problem]
    assert (tmp_path / "file").read_text() == "x"


def test_doctor_refuses_a_root_it_cannot_write(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    uid = os.getuid()
    if os.geteuid() == 0:
        prefix = _mounted('mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"', locked)
        found, fix = "it is on a read-only mount", "remount it read-write"
    else:
        locked.chmod(0o555)
        prefix = []
        found = f"it is not writable by uid {uid} (Permission denied)"
        fix = "fix its permissions (or free space)"
    out = _doctor(_env(str(locked)), prefix)
    assert out.returncode == 1, out.stdout + out.stderr
    problem = (
        f"the root '{locked}' is not writable: expected a directory this user (uid {uid}) can "
        f"create files in, found that {found}; {fix}, or point CACHEROOT elsewhere"
    )
    assert _problems(out.stdout) == [problem]
    assert _row(out.stdout, "XDG_CACHE_HOME")[3:5] == ["yes", "NO"]
    assert list(locked.iterdir()) == []


def test_doctor_tries_a_write_where_permissions_allow_one(tmp_path: Path) -> None:
    """A file system with no inode left: ``os.access`` says writable, creating a file fails."""
    full = tmp_path / "full"
    full.mkdir()
    prefix = _mounted('mount -t tmpfs -o size=64k,nr_inodes=1 tmpfs "$0"', full)
    out = _doctor(_env(f"{full}/cache"), prefix)
    assert out.returncode == 1, out.stdout + out.stderr
    # The doctor runs in the namespace as uid 0: root, or a user mapped to root there (-r).
    problem = (
        f"the root '{full}/cache' is not writable: expected a directory this user (uid "
        f"0) can create files in, found that its nearest existing ancestor "
        f"'{full}' is not writable by uid 0 (No space left on device); fix its "
        "permissions (or free space), or point CACHEROOT elsewhere"
    )
    assert _problems(out.stdout) == [problem]


#: What the hook does with an unusable root that the user named, as the doctor says it.
NO_ROOT = (
    "CACHEROOT: the start-up hook uses no root (there is no fallback to XDG_CACHE_HOME or "
    "~/.cache): it {sets}, and removes what a parent process's hook derived; each library then "
    "uses its own default location"
)

#: Prints what a hooked interpreter holds of the layout's variables.
SHOW_LAYOUT = f"""
import json, os
names = {sorted(v.name for v in TABLE)!r}
print(json.dumps({{n: os.environ[n] for n in names if n in os.environ}}))
"""


def _hooked_layout(env: dict[str, str]) -> dict[str, str]:
    """The layout's variables in a fresh interpreter of this environment (hooked)."""
    done = subprocess.run(
        [sys.executable, "-c", SHOW_LAYOUT], env=env, capture_output=True, text=True, check=True
    )
    found: dict[str, str] = json.loads(done.stdout)
    return found


def test_doctor_names_a_relative_root_once_and_what_the_hook_does(tmp_path: Path) -> None:
    # A child of a hooked process, told of a relative root: it inherits what its parent derived.
    parent = subprocess.run(
        [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
        env=_env(f"{tmp_path}/root"),
        capture_output=True,
        text=True,
        check=True,
    )
    env = {**json.loads(parent.stdout), CACHEROOT: "rel"}
    assert env["HF_HOME"] == f"{tmp_path}/root/huggingface"
    out = _doctor(env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert _problems(out.stdout) == [
        "CACHEROOT='rel' is not an absolute path; set it to an absolute path"
    ]
    assert _notes(out.stdout) == [
        NO_ROOT.format(sets="sets no variable"),
        "VLLM_MEDIA_CACHE: add it to CACHEROOT_OPT_IN to derive it",
        "CACHEROOT_MEDIA_CACHE: add it to CACHEROOT_OPT_IN to derive it",
    ]
    assert out.stdout.count("'rel'") == 1
    # What the note says is what the hook does: nothing derived, the inherited values gone.
    assert _hooked_layout(env) == {}
    doc = json.loads(cli("doctor", "--json", env=env).stdout)
    assert doc["hook_note"] == NO_ROOT.format(sets="sets no variable").removeprefix("CACHEROOT: ")


def test_doctor_says_what_the_hook_derives_from_explicit_values_without_a_root(
    tmp_path: Path,
) -> None:
    env = _env("rel", VLLM_CACHE_ROOT=f"{tmp_path}/vllm")
    out = _doctor(env)
    assert out.returncode == 1, out.stdout + out.stderr
    sets = "sets only VLLM_ASSETS_CACHE, VLLM_XLA_CACHE_PATH, _VLLM_TEST_CACHE (from values set "
    assert _notes(out.stdout)[0] == NO_ROOT.format(sets=sets + "explicitly)")
    assert _hooked_layout(env) == {
        "VLLM_CACHE_ROOT": f"{tmp_path}/vllm",
        "VLLM_ASSETS_CACHE": f"{tmp_path}/vllm/assets",
        "VLLM_XLA_CACHE_PATH": f"{tmp_path}/vllm/xla_cache",
        "_VLLM_TEST_CACHE": f"{tmp_path}/vllm/test_cache",
    }


def test_doctor_says_the_hook_is_off() -> None:
    env = _env("rel", CACHEROOT_DISABLE="1")
    out = _doctor(env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert _notes(out.stdout)[0] == (
        "CACHEROOT: the start-up hook is off (CACHEROOT_DISABLE): it changes no variable"
    )
