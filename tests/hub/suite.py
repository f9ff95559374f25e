"""A suite of ordinary Hugging Face Hub calls, as a project's tests make them, for fault runs.

:func:`write_suite` writes it into a directory: 30 tests (six kinds, five each) that download
by branch and by commit, take a snapshot, ask ``model_info`` and ``list_repo_files``, and ask
``file_exists`` of a file that is there and one that is not, all with the real huggingface_hub
against ``HF_ENDPOINT``. The tests assert what the repository holds, written out as literals by
the caller (the commit and the file names), never what the client returned elsewhere.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

#: How many tests the suite has (six kinds, five of each).
TESTS = 30

_SUITE = """\
import json

import huggingface_hub as hh
import pytest

REPO = {repo!r}
COMMIT = {commit!r}
FILES = {files!r}
KIND = {kind!r}


@pytest.mark.parametrize("n", range(5))
def test_download_by_branch(n):
    path = hh.hf_hub_download(REPO, "config.json")
    with open(path) as f:
        assert json.load(f)["model_type"] == KIND


@pytest.mark.parametrize("n", range(5))
def test_download_by_commit(n):
    path = hh.hf_hub_download(REPO, "tokenizer.json", revision=COMMIT)
    assert COMMIT in path


@pytest.mark.parametrize("n", range(5))
def test_snapshot(n):
    path = hh.snapshot_download(REPO)
    assert path.endswith(COMMIT)


@pytest.mark.parametrize("n", range(5))
def test_model_info(n):
    assert hh.model_info(REPO).sha == COMMIT


@pytest.mark.parametrize("n", range(5))
def test_list_repo_files(n):
    assert sorted(hh.list_repo_files(REPO)) == FILES


@pytest.mark.parametrize("n", range(5))
def test_file_exists(n):
    assert hh.file_exists(REPO, "config.json")
    assert not hh.file_exists(REPO, "missing.bin")
"""


def write_suite(where: Path, *, repo: str, commit: str, files: list[str], kind: str) -> Path:
    """Write the suite (and an empty conftest) into ``where``; return the test file."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "conftest.py").write_text("", encoding="utf-8")
    path = where / "test_hub_calls.py"
    text = _SUITE.format(repo=repo, commit=commit, files=sorted(files), kind=kind)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path
