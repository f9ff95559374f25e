"""A real JIT under the run-time audit: what ``torch.compile`` on CPU writes outside the root.

Inductor's CPU path generates C++ and builds it with the system compiler, in its own worker
processes; its caches (FX graphs, compiled kernels, autotuning, Triton's, where it is imported)
land under ``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR`` as the layout sets them, except the
headers it precompiles, which torch 2.14 keeps in the temporary directory whatever
``TORCHINDUCTOR_CACHE_DIR`` says: the audit must name those, and nothing else. A hooked child
process runs the compile with ``CACHEROOT_AUDIT=fail`` and writes the audit's report at its
exit; the test reads it, with HOME and the temporary directory pointed into ``tmp_path`` (not
the working tree, which the audit allows), so that the scan sees every file a compiler or a
worker left there.

The ``upstream`` session installs torch (the CUDA build from PyPI, which imports on CPU beside
its nvidia-* wheels) and what it imports into a directory of their own, named by ``--jit-site``:
the child has it on ``PYTHONPATH``, this process does not (torch importable beside vLLM would
change what the vLLM tests import). Elsewhere torch is looked for in this environment; where it
is missing, or no C++ compiler is on PATH, the test says so and skips.
"""

from __future__ import annotations

import getpass
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_AUDIT, CACHEROOT_AUDIT_REPORT, CACHEROOT_PIN_FILE

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: The compiled function and a check of its result against literals; prints where Inductor and
#: Triton keep their caches, as the child resolved them.
COMPILE = """
import torch
import torch._inductor.config
from torch._inductor.runtime.cache_dir_utils import cache_dir

def f(x, y):
    return torch.sin(x) * 2 + y.relu()

x = torch.tensor([0.0, 1.5707963267948966, -1.0])
y = torch.tensor([-1.0, 0.5, 3.0])
out = torch.compile(f, backend="inductor")(x, y)
expected = torch.tensor([0.0, 2.5, 1.3170580])
assert torch.allclose(out, expected, atol=1e-5), out.tolist()
print("inductor", cache_dir())
print("triton", "triton" in __import__("sys").modules)
"""


def _missing(jit_site: Path | None) -> str:
    """Why the check cannot run here, or ``""``."""
    if jit_site is not None:
        if importlib.machinery.PathFinder.find_spec("torch", [str(jit_site)]) is None:
            return f"--jit-site {jit_site} holds no torch: run `nox -s upstream`, which fills it"
    elif importlib.util.find_spec("torch") is None:
        return (
            "torch is not installed in this environment: `nox -s upstream` installs it (the "
            'wheels marked install = "jit" in tests/upstream/wheels.toml) and passes '
            "--jit-site; or install torch (a CPU build, or the CUDA build with its nvidia-* "
            "wheels) to run this check"
        )
    if shutil.which("g++") is None and shutil.which("c++") is None:
        return (
            "no C++ compiler (g++ or c++) on PATH: Inductor's CPU path builds C++ with it "
            "(ci/bootstrap.sh installs g++)"
        )
    return ""


def test_torch_compile_on_cpu_writes_only_under_the_root(
    tmp_path: Path,
    clean_env: dict[str, str],
    jit_site: Path | None,
    report: Callable[[str], None],
) -> None:
    missing = _missing(jit_site)
    if missing:
        pytest.skip(missing)
    # The working tree is an allowed place: it must not hold HOME or the temporary directory.
    root, tmp, home = tmp_path / "root", tmp_path / "tmp", tmp_path / "home"
    work = tmp_path / "work"
    for folder in (tmp, home, work):
        folder.mkdir()
    audit_report = tmp_path / "audit.json"
    env = {
        **clean_env,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        CACHEROOT: str(root),
        CACHEROOT_PIN_FILE: "",
        CACHEROOT_AUDIT: "fail",
        CACHEROOT_AUDIT_REPORT: str(audit_report),
    }
    if jit_site is not None:
        env["PYTHONPATH"] = str(jit_site)
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["inductor"] == str(root / "torchinductor")
    audit = json.loads(audit_report.read_text(encoding="utf-8"))
    # torch 2.14 keeps the headers Inductor precompiles for its C++ kernels in
    # default_cache_dir()/precompiled_headers, $TMPDIR/torchinductor_$USER, whatever
    # TORCHINDUCTOR_CACHE_DIR says (torch/_inductor/codecache.py: _HEADER_DIR); the audit must
    # name them (written by Inductor, and the .gch by g++, found by the scan), and nothing else.
    headers = tmp / f"torchinductor_{getpass.getuser()}"
    written = [w["path"] for group in audit["groups"] for w in group["writes"]]
    found = [f["path"] for f in audit["scan"]["finds"]]
    assert str(headers / "precompiled_headers") in written, json.dumps(audit, indent=1)
    assert all(p == str(headers) or p.startswith(f"{headers}/precompiled_headers") for p in written)
    assert all(p.startswith(f"{headers}/precompiled_headers/") for p in found), found
    assert audit["escapes"] == len(written) + len(found)
    # The compile really cached something, under the root.
    inductor = root / "torchinductor"
    assert any(p.is_file() for p in inductor.rglob("*")), sorted(inductor.rglob("*"))
    triton = lines["triton"] == "True"
    if triton:
        assert not (home / ".triton").exists()
    report(
        f"torch.compile on CPU: {audit['processes']} audited process(es), {audit['escapes']} "
        f"escapes, all Inductor's precompiled headers in {headers}, "
        f"{sum(1 for p in inductor.rglob('*') if p.is_file())} files under TORCHINDUCTOR_CACHE_DIR"
        f"; triton imported: {triton}; transient files outside: {len(audit['transient'])}"
    )
