"""On a real GPU: the vendor's JIT caches land under the root, in a process the hook configured.

Each test runs a fresh interpreter (the hook applies the layout at its start) that compiles a
small kernel, then looks for the compiled artefacts under ``$CACHEROOT``. They need a GPU of
the marker's vendor and a torch build for it; ``tests/conftest.py`` skips them, with the reason,
where either is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_TAG, TABLE, resolve

if TYPE_CHECKING:
    from pathlib import Path

#: Compiles one elementwise kernel with torch.compile (Inductor, which emits Triton).
COMPILE = """
import torch
f = torch.compile(lambda x: (x * 2 + 1).sin())
x = torch.arange(1024, device="cuda", dtype=torch.float32)
torch.testing.assert_close(f(x), (x * 2 + 1).sin())
torch.cuda.synchronize()
"""

#: One convolution through MIOpen (ROCm's torch reports its devices as "cuda").
CONVOLVE = """
import torch
conv = torch.nn.Conv2d(3, 8, 3).to("cuda")
y = conv(torch.randn(2, 3, 32, 32, device="cuda"))
torch.cuda.synchronize()
assert y.shape == (2, 8, 30, 30)
"""


def run_hooked(code: str, root: Path, tag: str) -> dict[str, str]:
    """Run ``code`` in a hooked interpreter with ``root`` as the cache; its layout, by name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROOT")}
    for var in TABLE:
        env.pop(var.name, None)
    env.update({CACHEROOT: str(root), CACHEROOT_TAG: tag})
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return resolve(env, tag).applied()


def files_under(path: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]


@pytest.mark.cuda
def test_inductor_and_triton_caches_land_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "volume"
    layout = run_hooked(COMPILE, root, "cuda")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert layout[name].startswith(f"{root}/")
        assert files_under(layout[name]), f"{name} ({layout[name]}) stayed empty"


@pytest.mark.rocm
def test_miopen_and_triton_caches_land_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "volume"
    layout = run_hooked(CONVOLVE + COMPILE, root, "rocm")
    for name in ("TRITON_CACHE_DIR", "MIOPEN_USER_DB_PATH"):
        assert layout[name].startswith(f"{root}/")
        assert files_under(layout[name]), f"{name} ({layout[name]}) stayed empty"
