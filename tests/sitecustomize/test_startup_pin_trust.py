"""Who may write the pin: the rule ssh applies to ``authorized_keys``, tried with a second user.

The pin decides where a process without ``CACHEROOT`` keeps its Triton and Inductor caches (code
it later runs), so a pin another user can rewrite hands that user root's next interpreter. These
tests add a real user (``useradd``), let it write with its own uid (``setpriv``), and check real
modes. The pins live under one directory of ``/tmp`` (mode 0755) that the second user can reach:
``CACHEROOT_PIN_FILE`` points the hook and the commands at them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_PIN_FILE

if TYPE_CHECKING:
    from collections.abc import Iterator

#: What the hooked interpreter reports: where Hugging Face and Triton would put their caches.
SHOW = "import os; print(os.environ.get('HF_HOME')); print(os.environ.get('TRITON_CACHE_DIR'))"


@pytest.fixture(scope="module")
def stranger() -> Iterator[tuple[int, int]]:
    """A second, unprivileged user (uid, gid), added for this module and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("adding a second user (useradd) and acting as it (setpriv) needs root")
    for tool in ("useradd", "userdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: cannot act as a second user")
    name = f"crpin{os.getpid()}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/bin/sh", name],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory (0755, root's) that the second user can traverse and read."""
    top = Path(tempfile.mkdtemp(prefix="cacheroot-pin-", dir="/tmp"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def _as(who: tuple[int, int], script: str) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` as ``who`` (no supplementary groups)."""
    uid, gid = who
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def _pin(pin: Path, root: Path, env: dict[str, str], umask: str = "022") -> None:
    """``cacheroot hook pin ROOT`` under ``umask``, into ``pin``."""
    out = subprocess.run(
        [
            "sh",
            "-c",
            f'umask {umask}; exec "$0" -m cacheroot.envs._cli hook pin "$1"',
            sys.executable,
            str(root),
        ],
        env={**env, CACHEROOT_PIN_FILE: str(pin)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def _hooked(pin: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A hooked interpreter without ``CACHEROOT``: the pin would decide its root."""
    return subprocess.run(
        [sys.executable, "-c", SHOW],
        env={**env, CACHEROOT_PIN_FILE: str(pin)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _doctor(pin: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "doctor"],
        env={**env, CACHEROOT_PIN_FILE: str(pin)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize("umask", ["000", "077"])
def test_the_pin_is_0644_in_a_0755_directory_whatever_the_umask(
    shared_dir: Path, child_env: dict[str, str], umask: str
) -> None:
    pin = shared_dir / "etc" / "cacheroot" / "pin"
    _pin(pin, shared_dir / "root", child_env, umask)
    assert stat.S_IMODE(pin.stat().st_mode) == 0o644
    assert stat.S_IMODE(pin.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(pin.parent.parent.stat().st_mode) == 0o755


def test_a_second_user_cannot_redirect_roots_caches_through_a_pin_made_under_umask_000(
    stranger: tuple[int, int], shared_dir: Path, child_env: dict[str, str]
) -> None:
    pin = shared_dir / "etc" / "cacheroot" / "pin"
    _pin(pin, shared_dir / "root", child_env, "000")
    attack = _as(stranger, f"printf 'CACHEROOT=/tmp/chosen\\n' > {pin}")
    assert attack.returncode != 0  # Permission denied
    out = _hooked(pin, child_env)
    assert out.stdout.splitlines() == [
        f"{shared_dir}/root/huggingface",
        f"{shared_dir}/root/triton",
    ]
    assert out.stderr == ""


#: The second user's real writes: over the pin in place, or a pin of its own moved in.
REWRITE = "printf 'CACHEROOT=/tmp/chosen\\n' > {pin}"
SWAP = "printf 'CACHEROOT=/tmp/chosen\\n' > {pin}.new && mv -f {pin}.new {pin}"
#: How the pin (or its directory) is made unsafe, what the second user then writes (if it can),
#: and the hook's warning (after "ignoring the pinned root: ").
UNSAFE = {
    "world-writable pin, rewritten": (
        "chmod 0666 {pin}",
        REWRITE,
        "{pin} is writable by other users (mode 0666): chmod go-w {pin}",
    ),
    "group-writable pin": (
        "chmod 0664 {pin}",
        "",
        "{pin} is writable by its group (mode 0664): chmod go-w {pin}",
    ),
    "world-writable directory": (
        "chmod 0777 {dir}",
        "",
        "its directory {dir} is writable by other users (mode 0777): chmod go-w {dir}",
    ),
    "world-writable directory, pin swapped": (
        "chmod 0777 {dir}",
        SWAP,
        (
            "{pin} is owned by uid {uid}, neither root nor this user (uid 0): remove it, then "
            "pin again as root or as this user"
        ),
    ),
    "pin of another user": (
        "chown {uid} {pin}",
        "",
        (
            "{pin} is owned by uid {uid}, neither root nor this user (uid 0): remove it, then "
            "pin again as root or as this user"
        ),
    ),
    "directory of another user": (
        "chown {uid} {dir}",
        "",
        (
            "its directory {dir} is owned by uid {uid}, neither root nor this user (uid 0): "
            "make root or this user its owner (chown)"
        ),
    ),
}


@pytest.mark.parametrize("how", list(UNSAFE))
def test_the_hook_ignores_a_pin_others_may_write_with_one_warning_and_the_doctor_says_why(
    stranger: tuple[int, int], shared_dir: Path, child_env: dict[str, str], how: str
) -> None:
    pin = shared_dir / "etc" / "cacheroot" / "pin"
    _pin(pin, shared_dir / "root", child_env)
    make, attack, warning = UNSAFE[how]
    fill = {"pin": pin, "dir": pin.parent, "uid": stranger[0]}
    subprocess.run(["sh", "-c", make.format(**fill)], check=True)
    if attack:
        done = _as(stranger, attack.format(**fill))
        assert done.returncode == 0, done.stderr
        assert pin.read_text(encoding="utf-8") == "CACHEROOT=/tmp/chosen\n"

    out = _hooked(pin, child_env)
    home = child_env["HOME"]
    assert out.stdout.splitlines() == [f"{home}/.cache/huggingface", f"{home}/.cache/triton"]
    expected = warning.format(**fill)
    assert out.stderr == f"cacheroot: ignoring the pinned root: {expected}\n"

    doctor = _doctor(pin, child_env)
    assert doctor.returncode == 1
    assert f"pin:  ignored: {expected}\n" in doctor.stdout
    assert f"  - the pin is ignored: {expected}\n" in doctor.stdout


def test_a_pin_that_is_a_fifo_or_a_link_is_ignored_without_hanging(
    shared_dir: Path, child_env: dict[str, str]
) -> None:
    target = shared_dir / "elsewhere"
    target.write_text("CACHEROOT=/tmp/chosen\n", encoding="utf-8")
    link = shared_dir / "link-pin"
    link.symlink_to(target)
    out = _hooked(link, child_env)
    assert out.stdout.splitlines()[0] == f"{child_env['HOME']}/.cache/huggingface"
    assert out.stderr == (
        f"cacheroot: ignoring the pinned root: {link} is a symbolic link (never followed): "
        "replace it with the file\n"
    )
    fifo = shared_dir / "fifo-pin"
    os.mkfifo(fifo)
    out = _hooked(fifo, child_env)  # before the fix: blocked in open() until the timeout
    assert out.stdout.splitlines()[0] == f"{child_env['HOME']}/.cache/huggingface"
    assert out.stderr == (
        f"cacheroot: ignoring the pinned root: {fifo} is not a regular file: remove it, then "
        "pin again\n"
    )


def test_pin_refuses_a_directory_others_may_write_and_records_nothing(
    shared_dir: Path, child_env: dict[str, str]
) -> None:
    where = shared_dir / "open"
    where.mkdir()
    where.chmod(0o777)
    pin = where / "pin"
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "hook", "pin", str(shared_dir / "root")],
        env={**child_env, CACHEROOT_PIN_FILE: str(pin)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        f"cacheroot hook pin: its directory {where} is writable by other users (mode 0777): "
        f"chmod go-w {where}; nothing was recorded (the hook would ignore this pin)"
    )
    assert not pin.exists()


def test_a_tag_pinned_with_cacheroot_set_is_reported_as_the_hook_applies_it(
    shared_dir: Path, child_env: dict[str, str]
) -> None:
    """``hook pin ROOT --tag cuda``; with ``CACHEROOT`` set, the pin (tag included) is not used:
    a hooked interpreter, ``cacheroot env`` and ``cacheroot doctor`` all say so."""
    pin = shared_dir / "etc" / "cacheroot" / "pin"
    env = {**child_env, CACHEROOT_PIN_FILE: str(pin)}
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "cacheroot.envs._cli",
            "hook",
            "pin",
            str(shared_dir / "pinned"),
            "--tag",
            "cuda",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    env[CACHEROOT] = str(shared_dir / "set")
    hooked = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('CUDA_CACHE_PATH'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert hooked.stdout == "None\n"
    listed = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "env"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "CUDA_CACHE_PATH" not in listed.stdout
    assert "CACHEROOT_TAG" not in listed.stdout
    doctor = _doctor(pin, env)
    assert "tag:  (none: vendor JIT caches left alone)\n" in doctor.stdout
    assert "CUDA_CACHE_PATH" not in doctor.stdout
    assert f"pin:  {shared_dir}/pinned, tag cuda from {pin} (not used: CACHEROOT is set)\n" in (
        doctor.stdout
    )

    # Without CACHEROOT, the pin applies whole: root and tag, in all three alike.
    del env[CACHEROOT]
    hooked = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('CUDA_CACHE_PATH'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert hooked.stdout == f"{shared_dir}/pinned/nv/ComputeCache\n"
    listed = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "env"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert f"export CUDA_CACHE_PATH={shared_dir}/pinned/nv/ComputeCache\n" in listed.stdout
    assert f"export CACHEROOT={shared_dir}/pinned\n" in listed.stdout
