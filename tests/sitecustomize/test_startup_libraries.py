"""The real libraries, imported in a hooked interpreter, resolve their caches under the root.

huggingface_hub reads its environment once, at import time, so these checks only pass when the
hook ran before any import; modelscope's old SDK and modelscope_hub give ``MODELSCOPE_CACHE``
different meanings, and both must land under the root; tiktoken's cache is proven by a real
download from a local server.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_DISABLE, XDG_CACHE_HOME

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Server, static
    from tests.sitecustomize.conftest import Interpreter
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, static

VOCAB = b"IQ== 0\nIg== 1\n"

HF_PROBE = """\
import json, sys
from huggingface_hub import constants
json.dump({"HF_HOME": constants.HF_HOME, "HF_HUB_CACHE": constants.HF_HUB_CACHE}, sys.stdout)
"""

ALL_PROBE = """\
import json, os, sys
from huggingface_hub import constants
from modelscope.utils import file_utils as ms
from modelscope_hub.config import HubConfig
from modelscope_hub.utils import file_utils as msh
import tiktoken.load

url = sys.argv[1]
seen = {
    "HF_HOME": constants.HF_HOME,
    "HF_HUB_CACHE": constants.HF_HUB_CACHE,
    "modelscope cache dir": ms.get_modelscope_cache_dir(),
    "modelscope model root": ms.get_model_cache_root(),
    "modelscope_hub HubConfig": str(HubConfig().cache_dir),
    "modelscope_hub config dir": str(HubConfig().config_dir),
    "PYTORCH_PRETRAINED_BERT_CACHE": os.environ.get("PYTORCH_PRETRAINED_BERT_CACHE"),
}
seen["modelscope_hub dir existed"] = os.path.exists(seen["modelscope_hub HubConfig"])
seen["modelscope_hub get_cache_dir"] = str(msh.get_cache_dir())  # creates the directory
seen["tiktoken body"] = tiktoken.load.read_file_cached(url).decode()
json.dump(seen, sys.stdout)
"""


@pytest.fixture
def vocab_url() -> Iterator[str]:
    """A tiktoken-like vocabulary file served from 127.0.0.1."""
    with Server(static(VOCAB)) as server:
        yield server.url("/cl100k_base.tiktoken")


def _probe(interp: Interpreter, code: str, env: dict[str, str], *args: str) -> dict[str, object]:
    proc = interp.run([sys.executable, "-c", code, *args], env)
    assert proc.returncode == 0, proc.stderr
    seen: dict[str, object] = json.loads(proc.stdout)
    return seen


def test_every_library_resolves_under_the_root(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, vocab_url: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    real = os.path.realpath(root)

    seen = _probe(interp, ALL_PROBE, {**child_env, CACHEROOT: str(root)}, vocab_url)

    assert seen["HF_HOME"] == str(root / "huggingface")
    assert seen["HF_HUB_CACHE"] == str(root / "huggingface" / "hub")
    # modelscope (old SDK): MODELSCOPE_CACHE replaces ~/.cache/modelscope/hub.
    assert seen["modelscope cache dir"] == str(root / "modelscope")
    assert seen["modelscope model root"] == str(root / "modelscope" / "models")
    # modelscope_hub: MODELSCOPE_CACHE replaces the root ~/.cache/modelscope (resolved).
    assert seen["modelscope_hub HubConfig"] == os.path.join(real, "modelscope")
    assert seen["modelscope_hub dir existed"] is False  # the hook created nothing
    assert seen["modelscope_hub get_cache_dir"] == os.path.join(real, "modelscope")
    # MODELSCOPE_HOME is never set: modelscope_hub's configuration and token stay in the home.
    home = os.path.realpath(child_env["HOME"])
    assert os.path.realpath(str(seen["modelscope_hub config dir"])) == os.path.join(
        home, ".modelscope"
    )
    # PYTORCH_PRETRAINED_BERT_CACHE is never set (transformers 4 would take it for its hub cache).
    assert seen["PYTORCH_PRETRAINED_BERT_CACHE"] is None
    # tiktoken: the download was cached as sha1(url) under the root.
    assert seen["tiktoken body"] == VOCAB.decode()
    cached = root / "tiktoken" / hashlib.sha1(vocab_url.encode()).hexdigest()  # noqa: S324
    assert cached.read_bytes() == VOCAB


@pytest.mark.parametrize(
    ("hf_home", "kept"),
    [("{tmp}/explicit-hf", True), ("~/hf-in-home", True), ("", False), ("   ", False)],
    ids=["absolute", "tilde", "empty", "blank"],
)
def test_explicit_hf_home_is_kept(
    interp: Interpreter,
    child_env: dict[str, str],
    tmp_path: Path,
    hf_home: str,
    kept: bool,
) -> None:
    """What the user set wins; a blank value counts as unset and is derived."""
    root = tmp_path / "root"
    value = hf_home.format(tmp=tmp_path)
    env = {**child_env, CACHEROOT: str(root), "HF_HOME": value}

    seen = _probe(interp, HF_PROBE, env)

    expected = value.replace("~", child_env["HOME"], 1) if kept else str(root / "huggingface")
    assert seen == {"HF_HOME": expected, "HF_HUB_CACHE": os.path.join(expected, "hub")}


@pytest.mark.parametrize("xdg", ["", "  ", "relative/cache"], ids=["empty", "blank", "relative"])
def test_unusable_xdg_cache_home_is_ignored(
    interp: Interpreter, child_env: dict[str, str], xdg: str
) -> None:
    """XDG: an empty or relative ``XDG_CACHE_HOME`` is ignored; the root falls back to ~/.cache."""
    home = child_env["HOME"]
    env = {**child_env, XDG_CACHE_HOME: xdg}

    seen = _probe(interp, HF_PROBE, env)
    alone = _probe(interp, HF_PROBE, {**env, CACHEROOT_DISABLE: "1"})

    assert seen["HF_HOME"] == os.path.join(home, ".cache", "huggingface")
    assert seen["HF_HUB_CACHE"] == os.path.join(home, ".cache", "huggingface", "hub")
    # Without the hook, huggingface_hub joins the unusable value as is: a relative directory.
    assert alone["HF_HOME"] == os.path.join(xdg, "huggingface")
    assert not os.path.isabs(str(alone["HF_HOME"]))


PLATFORMDIRS_PROBE = """\
import json, sys
import platformdirs
json.dump({"user_cache_dir": platformdirs.user_cache_dir("someapp")}, sys.stdout)
"""

TIKTOKEN_PROBE = """\
import json, os, sys
import tiktoken.load
body = tiktoken.load.read_file_cached(sys.argv[1]).decode()
json.dump({"body": body, "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR")}, sys.stdout)
"""


def test_platformdirs_puts_xdg_caches_under_the_root(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path
) -> None:
    """``XDG_CACHE_HOME`` as platformdirs (pip, outlines, torch extensions, ...) reads it."""
    pytest.importorskip("platformdirs")
    seen = _probe(interp, PLATFORMDIRS_PROBE, {**child_env, CACHEROOT: str(tmp_path / "r")})
    assert seen == {"user_cache_dir": f"{tmp_path}/r/someapp"}


def test_a_blank_tiktoken_cache_dir_keeps_tiktoken_uncached(
    interp: Interpreter, child_env: dict[str, str], tmp_path: Path, vocab_url: str
) -> None:
    """tiktoken reads ``TIKTOKEN_CACHE_DIR=""`` as "no cache": the hook keeps the user's choice."""
    root = tmp_path / "root"
    env = {**child_env, CACHEROOT: str(root), "TIKTOKEN_CACHE_DIR": ""}
    seen = _probe(interp, TIKTOKEN_PROBE, env, vocab_url)
    assert seen == {"body": VOCAB.decode(), "TIKTOKEN_CACHE_DIR": ""}
    assert not (root / "tiktoken").exists()
    digest = hashlib.sha1(vocab_url.encode()).hexdigest()  # noqa: S324 - tiktoken's key
    assert not (Path(child_env.get("TMPDIR", "/tmp")) / "data-gym-cache" / digest).exists()


#: Rows checked above by asking the library that reads them, with the expected paths written out.
ASKED = {
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "MODELSCOPE_CACHE",
    "MODELSCOPE_HOME",
    "PYTORCH_PRETRAINED_BERT_CACHE",
    "TIKTOKEN_CACHE_DIR",
}


def test_every_row_read_by_an_installed_library_is_asked_here() -> None:
    """A new row whose reader is installed in the test environment needs a check in this file."""
    from importlib.metadata import PackageNotFoundError, version

    from cacheroot.envs import TABLE

    installed = set()
    for var in TABLE:
        for reader in var.upstream:
            if reader.startswith("doc:"):
                continue
            dist = reader.split("==", 1)[0]
            try:
                version(dist)
            except PackageNotFoundError:
                continue
            installed.add(var.name)
    assert installed - ASKED == set(), "add a check that asks the library for these rows"
