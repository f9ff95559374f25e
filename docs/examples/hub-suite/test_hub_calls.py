"""Ordinary Hugging Face Hub calls, as a project's tests make them: the suite of docs/hub.md.

Thirty tests (six kinds, five of each) against ``HF_ENDPOINT``, with the real huggingface_hub.
"""
# ruff: noqa: S101, ARG001

from __future__ import annotations

import json

import huggingface_hub as hh
import pytest

REPO = "acme/tiny-model"
COMMIT = "e7cd968092652f4305c64836d7a85c2a3d27f566"
FILES = ["config.json", "model.safetensors", "tokenizer.json"]


@pytest.mark.parametrize("n", range(5))
def test_download_by_branch(n: int) -> None:
    path = hh.hf_hub_download(REPO, "config.json")
    with open(path, encoding="utf-8") as f:
        assert json.load(f)["model_type"] == "llama"


@pytest.mark.parametrize("n", range(5))
def test_download_by_commit(n: int) -> None:
    path = hh.hf_hub_download(REPO, "tokenizer.json", revision=COMMIT)
    assert COMMIT in path


@pytest.mark.parametrize("n", range(5))
def test_snapshot(n: int) -> None:
    path = hh.snapshot_download(REPO)
    assert path.endswith(COMMIT)


@pytest.mark.parametrize("n", range(5))
def test_model_info(n: int) -> None:
    assert hh.model_info(REPO).sha == COMMIT


@pytest.mark.parametrize("n", range(5))
def test_list_repo_files(n: int) -> None:
    assert sorted(hh.list_repo_files(REPO)) == FILES


@pytest.mark.parametrize("n", range(5))
def test_file_exists(n: int) -> None:
    assert hh.file_exists(REPO, "config.json")
    assert not hh.file_exists(REPO, "missing.bin")
