"""The same test code as ``seed_escapes.py``, each write moved under the cache root's layout.

Run by ``tests/audit/test_escapes.py`` under ``--cacheroot-audit=fail --cacheroot-audit-strict``:
the report must list nothing.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

from cacheroot.envs import HF_HOME, VLLM_CACHE_ROOT, VLLM_TEST_CACHE, XDG_CACHE_HOME

REPO_ID = "acme/tiny-model"


def test_gsm8k_in_the_test_cache() -> None:
    folder = os.path.join(os.environ[VLLM_TEST_CACHE], "gsm8k")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "test.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"question": "1 + 1?", "answer": "2"}) + "\n")


def test_hf_cache_from_hf_home() -> None:
    folder = os.path.join(os.environ[HF_HOME], "hub", "models--acme--tiny-model")
    os.makedirs(folder, exist_ok=True)


def test_snapshot_download_default_cache() -> None:
    from huggingface_hub import snapshot_download

    snapshot_download(REPO_ID)


def test_child_inherits_the_environment() -> None:
    code = (
        "import os, sys; "
        f"os.makedirs(os.path.join(os.environ[{VLLM_CACHE_ROOT!r}], 'assets'), exist_ok=True)"
    )
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ), check=True)


def test_compiler_writes_the_layout() -> None:
    script = f'mkdir -p "${XDG_CACHE_HOME}/nv" && echo kernel > "${XDG_CACHE_HOME}/nv/index"'
    subprocess.run(["sh", "-c", script], check=True)


def _write_shard(path: str) -> None:
    with open(path, "wb") as f:
        f.write(b"\x00" * 16)


def test_multiprocessing_child() -> None:
    shard = os.path.join(os.environ[VLLM_TEST_CACHE], "gsm8k_shard_0.bin")
    child = multiprocessing.get_context("spawn").Process(target=_write_shard, args=(shard,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
