"""Test code that writes outside the cache root the way vLLM's test code once did.

Not collected by the suite (the name does not start with ``test_``): ``tests/audit/test_escapes.py``
copies it into a project of its own and runs it under ``--cacheroot-audit``, with ``HOME`` and
the temporary directory pointed into that test's ``tmp_path``. Each escaping line carries an
``# escape:`` comment, by which the outer test finds the line the report must name.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

REPO_ID = "acme/tiny-model"


def test_gsm8k_written_to_tmp() -> None:
    """The dataset downloaded to a fixed name in /tmp, shared by every job on the machine."""
    path = os.path.join(tempfile.gettempdir(), "gsm8k_test.jsonl")
    with open(path, "w", encoding="utf-8") as f:  # escape: gsm8k
        f.write(json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n")


def test_hard_coded_hf_cache() -> None:
    """A path spelled as Hugging Face's default, whatever HF_HOME says."""
    folder = os.path.expanduser("~/.cache/huggingface/hub/models--acme--tiny-model")
    os.makedirs(folder, exist_ok=True)  # escape: hf-home


def test_snapshot_download_cache_dir() -> None:
    """``cache_dir=`` overrides HF_HOME, so the layout never sees the download."""
    from huggingface_hub import snapshot_download

    snapshot_download(REPO_ID, cache_dir=os.path.expanduser("~/models"))  # escape: cache-dir


def test_child_with_scrubbed_environment() -> None:
    """A child started with only HOME: no CACHEROOT, no layout, no audit."""
    code = "import os; os.makedirs(os.path.expanduser('~/.cache/vllm/assets'), exist_ok=True)"
    env = {"HOME": os.environ["HOME"]}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)  # escape: scrubbed


def test_compiler_writes_home() -> None:
    """A writer that is not Python (a compiler, a driver's JIT) writing its default cache."""
    script = 'mkdir -p "$HOME/.nv/ComputeCache" && echo kernel > "$HOME/.nv/ComputeCache/index"'
    subprocess.run(["sh", "-c", script], check=True)  # escape: not-python


def _write_shard(path: str) -> None:
    with open(path, "wb") as f:  # escape: multiprocessing
        f.write(b"\x00" * 16)


def test_multiprocessing_child() -> None:
    """A spawned worker writes next to the dataset, in the temporary directory."""
    shard = os.path.join(tempfile.gettempdir(), "gsm8k_shard_0.bin")
    child = multiprocessing.get_context("spawn").Process(target=_write_shard, args=(shard,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
