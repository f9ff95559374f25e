"""The hook in real processes: every fresh interpreter, spawn child and xdist worker.

Each test starts ``sys.executable`` (which has the hook installed) and reads back what the
child's ``os.environ`` held once start-up was over; the expected values come from
:func:`cacheroot.envs.resolve` and, for a few, from the path spelled out by hand.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_TAG, TABLE, resolve

if TYPE_CHECKING:
    from pathlib import Path

    from tests.sitecustomize.conftest import Interpreter

#: Every variable of the layout table.
NAMES = tuple(v.name for v in TABLE)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.mark.parametrize("tag", [None, "cuda", "rocm"])
def test_layout_is_applied_at_start_up(
    interp: Interpreter, child_env: dict[str, str], root: Path, tag: str | None
) -> None:
    env = {**child_env, CACHEROOT: str(root)}
    if tag:
        env[CACHEROOT_TAG] = tag
    expected = resolve(env).applied()

    got = interp.layout(env)

    assert {name: got[name] for name in expected} == expected
    assert {name: value for name, value in got.items() if name not in expected} == dict.fromkeys(
        set(NAMES) - set(expected)
    )
    assert got["HF_HOME"] == str(root / "huggingface")
    assert got["VLLM_ASSETS_CACHE"] == str(root / "vllm" / "assets")
    assert got["VLLM_MEDIA_CACHE"] is None  # opt-in: unset unless asked for
    assert (got["CUDA_CACHE_PATH"] is not None) == (tag == "cuda")
    assert (got["MIOPEN_USER_DB_PATH"] is not None) == (tag == "rocm")


@pytest.mark.parametrize("flag", ["-I", "-E", "-s", "-B"])
def test_hook_runs_under_isolating_flags(
    interp: Interpreter, child_env: dict[str, str], root: Path, flag: str
) -> None:
    """``.pth`` files of the environment's site-packages run even under ``-I``."""
    got = interp.layout({**child_env, CACHEROOT: str(root)}, flag)
    assert got["HF_HOME"] == str(root / "huggingface")


def test_no_site_means_no_hook(interp: Interpreter, child_env: dict[str, str], root: Path) -> None:
    """``-S`` skips ``site`` and with it every ``.pth`` file: documented, not a bug."""
    got = interp.layout({**child_env, CACHEROOT: str(root)}, "-S")
    assert got == dict.fromkeys(NAMES)


@pytest.mark.parametrize(
    ("value", "off"),
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("on", True),
        ("0", False),
        ("", False),
        ("no", False),
    ],
)
def test_cacheroot_disable(
    interp: Interpreter, child_env: dict[str, str], root: Path, value: str, off: bool
) -> None:
    got = interp.layout({**child_env, CACHEROOT: str(root), CACHEROOT_DISABLE: value})
    if off:
        assert got == dict.fromkeys(NAMES)
    else:
        assert got["HF_HOME"] == str(root / "huggingface")


def test_hook_is_idempotent(interp: Interpreter, child_env: dict[str, str], root: Path) -> None:
    """Running the hook again, in-process or in a child of a hooked process, changes nothing."""
    env = {**child_env, CACHEROOT: str(root)}
    code = (
        "import json, os, sys, _cacheroot_layout; before = dict(os.environ); "
        "_cacheroot_layout.hook(); _cacheroot_layout.hook(); "
        "sys.stdout.write(json.dumps([before, dict(os.environ)]))"
    )
    proc = interp.run([sys.executable, "-c", code], env)
    assert proc.returncode == 0, proc.stderr
    before, after = json.loads(proc.stdout)
    assert before["HF_HOME"] == str(root / "huggingface")
    assert after == before

    first = interp.environ(env)
    assert interp.environ(first) == first


@pytest.mark.parametrize("where", ["explicit root", "default root"])
def test_hook_never_creates_directories(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, where: str
) -> None:
    env = dict(child_env)
    if where == "explicit root":
        env[CACHEROOT] = str(tmp_path / "absent")
    home = tmp_path / "home"
    home.mkdir()
    env["HOME"] = str(home)
    before = interp.tree(tmp_path)

    proc = interp.run([sys.executable, "-c", "pass"], env)

    assert proc.returncode == 0
    assert interp.tree(tmp_path) == before
    expected_root = tmp_path / "absent" if where == "explicit root" else home / ".cache"
    assert interp.layout(env)["HF_HOME"] == str(expected_root / "huggingface")


@pytest.mark.parametrize("cacheroot", ["valid", "relative", "unset"])
def test_start_up_is_silent(
    interp: Interpreter, child_env: dict[str, str], root: Path, cacheroot: str
) -> None:
    env = dict(child_env)
    if cacheroot != "unset":
        env[CACHEROOT] = str(root) if cacheroot == "valid" else "relative/dir"
    proc = interp.run([sys.executable, "-c", "pass"], env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


SPAWN = """\
import json, multiprocessing, os, sys

def report(queue):
    queue.put(dict(os.environ))

if __name__ == "__main__":
    derived = json.loads(sys.argv[1])
    for name in derived:
        # The parent's copy is removed: only the child's own start-up hook can bring it back.
        del os.environ[name]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    seen = queue.get(timeout=60)
    child.join(timeout=60)
    json.dump({"parent": dict(os.environ), "child": seen, "exitcode": child.exitcode}, sys.stdout)
"""


def test_spawn_child_applies_the_same_layout(
    interp: Interpreter, child_env: dict[str, str], root: Path, tmp_path: Path
) -> None:
    env = {**child_env, CACHEROOT: str(root)}
    expected = resolve(env).applied()
    script = tmp_path / "spawn_probe.py"
    script.write_text(SPAWN)

    proc = interp.run([sys.executable, str(script), json.dumps(sorted(expected))], env)

    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["exitcode"] == 0
    assert not set(expected) & set(seen["parent"])
    assert {name: seen["child"].get(name) for name in expected} == expected


XDIST_CONFTEST = """\
import json, os

DERIVED = {derived!r}


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        # The controller drops the layout before it starts workers: each worker's own
        # start-up hook must bring it back.
        for name in DERIVED:
            os.environ.pop(name, None)
        with open({out!r} + "/controller.json", "w") as f:
            json.dump(dict(os.environ), f)
"""

XDIST_TEST = """\
import json, os


def test_report():
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with open({out!r} + "/" + worker + ".json", "w") as f:
        json.dump(dict(os.environ), f)
"""


def test_xdist_workers_apply_the_same_layout(
    interp: Interpreter, child_env: dict[str, str], root: Path, tmp_path: Path
) -> None:
    env = {**child_env, CACHEROOT: str(root)}
    expected = resolve(env).applied()
    suite = tmp_path / "suite"
    out = tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text(
        XDIST_CONFTEST.format(derived=sorted(expected), out=str(out))
    )
    (suite / "test_report.py").write_text(textwrap.dedent(XDIST_TEST.format(out=str(out))))

    proc = interp.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "xdist",
            "-n",
            "2",
            "--dist",
            "each",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(suite),
            "-c",
            str(suite / "pytest.ini"),
            str(suite),
        ],
        env,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    controller = json.loads((out / "controller.json").read_text())
    assert not set(expected) & set(controller)
    reports = sorted(p.name for p in out.glob("gw*.json"))
    assert reports == ["gw0.json", "gw1.json"]
    for name in reports:
        seen = json.loads((out / name).read_text())
        assert {k: seen.get(k) for k in expected} == expected


def test_child_with_another_cacheroot_gets_its_own_layout(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    hooked = interp.environ({**child_env, CACHEROOT: str(tmp_path / "first")})
    assert hooked["HF_HOME"] == str(tmp_path / "first" / "huggingface")

    child = interp.layout({**hooked, CACHEROOT: str(tmp_path / "second")})

    assert child["HF_HOME"] == str(tmp_path / "second" / "huggingface")


def test_doctor_in_a_hooked_process_reports_derived(
    interp: Interpreter, child_env: dict[str, str], root: Path
) -> None:
    env = {**child_env, CACHEROOT: str(root)}

    doctor = interp.run([sys.executable, "-m", "cacheroot.envs._cli", "doctor"], env)

    assert doctor.returncode == 0, doctor.stdout
    assert re.search(r"\nHF_HOME +\S+ +derived ", doctor.stdout), doctor.stdout
