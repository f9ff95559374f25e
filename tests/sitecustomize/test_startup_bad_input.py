"""Bad ``CACHEROOT`` values: the interpreter always starts, silently, and the doctor explains.

Each case states its documented behaviour: ``invalid`` (nothing is derived, the doctor exits 1
and says why), a fallback or expanded root (derived, doctor exits 0), or a root the hook uses
but the doctor rejects (a file, a read-only directory). In every case start-up creates nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, TABLE, resolve

if TYPE_CHECKING:
    from tests.sitecustomize.conftest import Interpreter

NAMES = tuple(v.name for v in TABLE)

#: Exit status of the read-only wrapper when this machine cannot make a read-only mount.
NO_READ_ONLY_MOUNT = 97


class Case:
    """One bad value and what the hook and the doctor must do with it.

    ``value`` and ``root`` are templates over ``{tmp}`` (a fresh directory) and ``{home}``;
    ``root=None`` means invalid: nothing is derived. ``says`` is a pattern the doctor's
    output must contain (``{root}`` stands for the expected root). ``make`` creates the
    value's target first (``"file"`` or a read-only ``"dir"``).
    """

    def __init__(
        self,
        value: str | bytes,
        *,
        root: str | None,
        doctor: int,
        says: str,
        make: str = "",
    ) -> None:
        self.value = value
        self.root = root
        self.doctor = doctor
        self.says = says
        self.make = make


#: The doctor's row for the root (``XDG_CACHE_HOME`` is set to it): missing, but creatable.
ABSENT_BUT_WRITABLE = r"XDG_CACHE_HOME +{root} +\S+ +no +yes "

#: The doctor's row for the root (``XDG_CACHE_HOME`` is set to it): missing, but creatable.
ABSENT_BUT_WRITABLE = r"XDG_CACHE_HOME +{root} +\S+ +no +yes "

CASES = {
    "relative": Case("relative/cache", root=None, doctor=1, says="is not an absolute path"),
    "dot": Case(".", root=None, doctor=1, says="is not an absolute path"),
    "empty": Case("", root="{home}/.cache", doctor=0, says=ABSENT_BUT_WRITABLE),
    "blank": Case(" \t ", root="{home}/.cache", doctor=0, says=ABSENT_BUT_WRITABLE),
    "tilde": Case("~", root="{home}", doctor=0, says=r"\(from CACHEROOT\)"),
    "tilde-path": Case("~/cache", root="{home}/cache", doctor=0, says=ABSENT_BUT_WRITABLE),
    "padded": Case("  {tmp}/padded  ", root="{tmp}/padded", doctor=0, says=ABSENT_BUT_WRITABLE),
    "nonexistent": Case(
        "{tmp}/absent/deeper", root="{tmp}/absent/deeper", doctor=0, says=ABSENT_BUT_WRITABLE
    ),
    "file": Case(
        "{tmp}/a-file", root="{tmp}/a-file", doctor=1, says="is not a directory", make="file"
    ),
    "not-writable": Case(
        "{tmp}/read-only", root="{tmp}/read-only", doctor=1, says="is not writable", make="dir"
    ),
    "very-long": Case(
        "/" + "/".join(["d" * 99] * 50), root=None, doctor=1, says="longer than 4095 bytes"
    ),
    "long-component": Case("{tmp}/" + "x" * 300, root=None, doctor=1, says="longer than 255 bytes"),
    "newline": Case("{tmp}/a\nb", root=None, doctor=1, says="contains a NUL or newline"),
    "undecodable": Case(b"{tmp}/caf\xe9", root=None, doctor=1, says="is not decodable as UTF-8"),
}


def _read_only_prefix(directory: str) -> list[str]:
    """A wrapper that runs a command with ``directory`` bind-mounted read-only.

    Root bypasses permission bits, so a read-only mount in a private mount namespace
    (``unshare``) is the only honest way to make a directory unwritable for root.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to make a directory read-only for root")
    script = (
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" '
        f'|| exit {NO_READ_ONLY_MOUNT}; exec "$@"'
    )
    flag = "-m" if os.geteuid() == 0 else "-rm"
    probe = subprocess.run(
        [unshare, flag, "sh", "-c", script, directory, "true"], check=False, capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount {directory} read-only here: {probe.stderr.decode().strip()}")
    return [unshare, flag, "sh", "-c", script, directory]


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_cacheroot(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    # The per-test home of the shared fixture: resolve() expands "~" with this process's HOME.
    home = child_env["HOME"]
    fill = {"tmp": str(tmp_path), "home": home}
    if case.make == "file":
        (tmp_path / "a-file").write_text("not a directory\n")
    elif case.make == "dir":
        (tmp_path / "read-only").mkdir()
    str_env = dict(child_env)
    env: dict[str, str] | dict[bytes, bytes]
    if isinstance(case.value, bytes):
        value = case.value.replace(b"{tmp}", os.fsencode(str(tmp_path)))
        env = {os.fsencode(k): os.fsencode(v) for k, v in str_env.items()}
        env[os.fsencode(CACHEROOT)] = value
        str_env[CACHEROOT] = os.fsdecode(value)  # as the child's os.environ holds it
    else:
        env = str_env = {**str_env, CACHEROOT: case.value.format(**fill)}
    prefix = _read_only_prefix(str(tmp_path / "read-only")) if case.make == "dir" else []
    before = interp.tree(tmp_path, Path(home))

    started = interp.run([*prefix, sys.executable, "-c", "pass"], env)
    layout = interp.layout(env, prefix=prefix)
    doctor = interp.run([*prefix, sys.executable, "-m", "cacheroot.envs._cli", "doctor"], env)

    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    assert interp.tree(tmp_path, Path(home)) == before, "start-up or the doctor created something"
    if case.root is None:
        assert layout == dict.fromkeys(NAMES)
        assert "root: (invalid)" in doctor.stdout
    else:
        root = case.root.format(**fill)
        assert layout["HF_HOME"] == os.path.join(root, "huggingface")
        assert {k: v for k, v in layout.items() if v is not None} == resolve(str_env).applied()
        assert f"root: {root} " in doctor.stdout
    assert doctor.returncode == case.doctor, doctor.stdout + doctor.stderr
    says = case.says.replace("{root}", re.escape(case.root.format(**fill) if case.root else ""))
    assert re.search(says, doctor.stdout), doctor.stdout
