"""The Hugging Face cache: upstream's tests hard-coded ``~/.cache/huggingface`` or ``/tmp``.

Here a fresh interpreter is started with nothing but ``CACHEROOT``: the start-up hook derives
``HF_HOME`` from the layout before ``huggingface_hub`` reads it, so the library's default hub
cache, and what it writes there, lie under the root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cacheroot.envs import CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_OPT_IN, TABLE, resolve

from .conftest import under

#: Run in the child: what huggingface_hub decided, and a file it writes into its assets cache.
PROBE = """
import json, sys
from huggingface_hub import cached_assets_path, constants
assets = cached_assets_path(library_name="cacheroot-scenarios", namespace="probe")
(assets / "written.txt").write_text("from the layout")
print(json.dumps({"HF_HOME": constants.HF_HOME, "HF_HUB_CACHE": constants.HF_HUB_CACHE,
                  "assets": str(assets)}))
"""


def test_default_hugging_face_cache_comes_from_the_layout(isolated_cache: Path) -> None:
    names = {CACHEROOT, CACHEROOT_DISABLE, CACHEROOT_OPT_IN, *(v.name for v in TABLE)}
    env = {k: v for k, v in os.environ.items() if k not in names}
    env[CACHEROOT] = str(isolated_cache)
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])

    hf_home = resolve({CACHEROOT: str(isolated_cache)}).settings["HF_HOME"].value
    assert hf_home is not None
    assert seen["HF_HOME"] == hf_home
    assert seen["HF_HUB_CACHE"] == os.path.join(hf_home, "hub")
    for key in ("HF_HOME", "HF_HUB_CACHE", "assets"):
        assert under(Path(seen[key]), isolated_cache), (key, seen[key])
        assert not under(Path(seen[key]), Path(env["HOME"]))
    assert (Path(seen["assets"]) / "written.txt").read_text() == "from the layout"
