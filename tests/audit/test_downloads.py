"""Downloads in code of one's own: the ``cacheroot.fetch`` call to write instead, and the known
downloaders listed with where the layout puts them.

Each source is audited as a directory through the command, as a user runs it; line numbers
matter (the expected lines name them), and the expected lines are written out in full.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "src"
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cacheroot.envs._cli", "audit", "--platform", "linux", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def section(stdout: str, title: str) -> list[str]:
    """The lines of the report's section that starts with ``title``, up to the blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


#: Downloads the code makes itself: into a place of its own, and into memory.
DOWNLOADS = """\
import os
import tempfile
import urllib.request

import requests
import torch

DATA = os.path.join(tempfile.gettempdir(), "gsm8k")


def test_urlretrieve():
    urllib.request.urlretrieve("https://example.org/gsm8k/test.jsonl", os.path.join(DATA, "t"))


def test_requests():
    answer = requests.get("https://example.org/tok/tokenizer.json", timeout=10)
    with open("/tmp/tokenizer.json", "wb") as f:
        f.write(answer.content)


def test_urlopen(url):
    data = urllib.request.urlopen(url).read()
    with open(os.path.expanduser("~/.demo/x.bin"), "wb") as f:
        f.write(data)


def test_torch_hub_to_a_file():
    torch.hub.download_url_to_file("https://example.org/w.pt", "/tmp/w.pt")


def test_sheet():
    return urllib.request.urlopen("https://example.org/data/sheet.csv").read()
"""

FETCH = "from cacheroot.fetch import fetch; path = fetch"
DIGEST = 'sha256="<sha256 of the file>"'


def test_a_download_of_ones_own_is_told_the_fetch_call_to_write(tmp_path: Path) -> None:
    """The verdict is what it was (the gate fails on the places), each with the call: the URL
    as a literal where the audit resolves it, a placeholder where it is a parameter."""
    out = cli(str(tree(tmp_path, {"test_data.py": DOWNLOADS})))
    assert out.returncode == 1, out.stdout + out.stderr
    assert section(out.stdout, "Not covered by the layout") == [
        "Not covered by the layout (4):",
        "  src test_data.py:8",
        "    $TMPDIR/gsm8k  [gettempdir()]",
        "    download: downloads land there; downloaded into by urlretrieve() (line 12)",
        (
            "    no variable moves it: ask upstream for one, patch the code to read one, or "
            "--allow '$TMPDIR/gsm8k'"
        ),
        (
            f"    download it with cacheroot.fetch (line 12): {FETCH}("
            f'"https://example.org/gsm8k/test.jsonl", {DIGEST}, namespace="gsm8k")'
        ),
        "    to accept it: --allow '$TMPDIR/gsm8k'",
        "  src test_data.py:17",
        "    /tmp/tokenizer.json  [/tmp literal]",
        (
            "    download: written where the function downloads; opened for writing in a function "
            "that downloads (line 17)"
        ),
        (
            "    no variable moves it: ask upstream for one, patch the code to read one, or "
            "--allow '/tmp/tokenizer.json'"
        ),
        (
            f"    download it with cacheroot.fetch (line 17): {FETCH}("
            f'"https://example.org/tok/tokenizer.json", {DIGEST}, namespace="tok")'
        ),
        "    to accept it: --allow '/tmp/tokenizer.json'",
        "  src test_data.py:23",
        "    ~/.demo/x.bin  [expanduser]",
        (
            "    download: written where the function downloads; opened for writing in a function "
            "that downloads (line 23)"
        ),
        (
            "    no variable moves it: ask upstream for one, patch the code to read one, or "
            "--allow '~/.demo/x.bin'"
        ),
        (
            f'    download it with cacheroot.fetch (line 23): {FETCH}("<URL>", {DIGEST}, '
            'namespace="<namespace>")'
        ),
        "    to accept it: --allow '~/.demo/x.bin'",
        "  src test_data.py:28",
        "    /tmp/w.pt  [/tmp literal]",
        "    download: downloads land there; downloaded into by download_url_to_file() (line 28)",
        (
            "    no variable moves it: ask upstream for one, patch the code to read one, or "
            "--allow '/tmp/w.pt'"
        ),
        (
            f'    download it with cacheroot.fetch (line 28): {FETCH}("https://example.org/w.pt", '
            f'{DIGEST}, namespace="<namespace>")'
        ),
        "    to accept it: --allow '/tmp/w.pt'",
    ]
    assert section(out.stdout, "Listed, not gating") == [
        "Listed, not gating (1):",
        "  src test_data.py:32  https://example.org/data/sheet.csv",
        "    uncached-download: fetched from the network on every call: no cache keeps it",
        (
            f"    download it with cacheroot.fetch (line 32): {FETCH}("
            f'"https://example.org/data/sheet.csv", {DIGEST}, namespace="data")'
        ),
    ]


#: Places decided in one module and downloaded into in another, under URLs built from a
#: constant: all of one fixed (``model.bin``), one with a name given at run time.
ELSEWHERE = {
    "demo/__init__.py": "",
    "demo/paths.py": """\
        import os

        DATA = os.path.expanduser("~/.demo/data")
        MODELS = os.path.expanduser("~/.demo/models")
        """,
    "demo/get.py": """\
        import os
        import urllib.request

        from .paths import DATA, MODELS

        BASE = "https://example.org/corpus"


        def get(name):
            urllib.request.urlretrieve(f"{BASE}/{name}", os.path.join(DATA, name))


        def model():
            urllib.request.urlretrieve(f"{BASE}/model.bin", os.path.join(MODELS, "model.bin"))
        """,
}


def test_the_call_is_named_in_the_module_that_downloads(tmp_path: Path) -> None:
    """The place's finding names the other module's line; the constant is followed into the
    URL where all of it is fixed, and a name given at run time leaves the placeholder."""
    out = cli(str(tree(tmp_path, ELSEWHERE)))
    assert out.returncode == 1
    assert [line for line in out.stdout.splitlines() if "cacheroot.fetch" in line] == [
        (
            f'    download it with cacheroot.fetch (demo/get.py:10): {FETCH}("<URL>", {DIGEST}, '
            'namespace="<namespace>")'
        ),
        (
            f"    download it with cacheroot.fetch (demo/get.py:14): {FETCH}("
            f'"https://example.org/corpus/model.bin", {DIGEST}, namespace="corpus")'
        ),
    ]


#: Known downloaders: each lands where its library's variable says, which the layout sets. The
#: last three read a local directory or are sent elsewhere by a keyword.
KNOWN = """\
import datasets
import tiktoken
import torch
from huggingface_hub import hf_hub_download
from modelscope import snapshot_download
from transformers import AutoModel


def test_models():
    torch.hub.load("pytorch/vision", "resnet18")
    torch.hub.load_state_dict_from_url("https://download.pytorch.org/models/resnet18.pth")
    hf_hub_download("openai/gsm8k", "test.jsonl", repo_type="dataset")
    AutoModel.from_pretrained("facebook/opt-125m")
    datasets.load_dataset("openai/gsm8k", "main", split="test")
    tiktoken.get_encoding("cl100k_base")
    snapshot_download("qwen/Qwen2-0.5B")
    torch.hub.load("/srv/hubconf", "tiny", source="local")
    AutoModel.from_pretrained("/models/opt")
"""


def test_known_downloaders_are_listed_with_where_the_layout_puts_them(tmp_path: Path) -> None:
    """Each is said with the variable that decides and the place under the root (read from the
    layout table); none fails the gate, and none is a location of its own."""
    out = cli(str(tree(tmp_path, {"tests/test_models.py": KNOWN})))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(
        "cacheroot audit: 1 source, 1 Python file (1 parsed), 0 locations, 0 not covered"
    )
    assert section(out.stdout, "Known downloaders") == [
        "Known downloaders (7; not gating):",
        "  src tests/test_models.py:10  torch.hub.load",
        "    lands in $TORCH_HOME/hub, which the layout sets: $CACHEROOT/torch/hub",
        "  src tests/test_models.py:11  torch.hub.load_state_dict_from_url",
        (
            "    lands in $TORCH_HOME/hub/checkpoints, which the layout sets: "
            "$CACHEROOT/torch/hub/checkpoints"
        ),
        "  src tests/test_models.py:12  huggingface_hub.hf_hub_download",
        (
            "    lands in $HF_HUB_CACHE, which the layout leaves to HF_HOME: "
            "$CACHEROOT/huggingface/hub"
        ),
        "  src tests/test_models.py:13  transformers.AutoModel.from_pretrained",
        (
            "    lands in $HF_HUB_CACHE, which the layout leaves to HF_HOME: "
            "$CACHEROOT/huggingface/hub"
        ),
        "  src tests/test_models.py:14  datasets.load_dataset",
        "    lands in $HF_HOME, which the layout sets: $CACHEROOT/huggingface",
        "  src tests/test_models.py:15  tiktoken.get_encoding",
        "    lands in $TIKTOKEN_CACHE_DIR, which the layout sets: $CACHEROOT/tiktoken",
        "  src tests/test_models.py:16  modelscope.snapshot_download",
        "    lands in $MODELSCOPE_CACHE, which the layout sets: $CACHEROOT/modelscope",
    ]


#: The example of docs/explanation/audit.md ("Downloads in your own code").
SENT_ELSEWHERE = """\
import torch
from transformers import AutoTokenizer


def test_tokenizer():
    return AutoTokenizer.from_pretrained("facebook/opt-125m", cache_dir="/tmp/hf")


def test_hub():
    return torch.hub.load("pytorch/vision", "resnet18")
"""


def test_a_known_downloader_sent_elsewhere_is_told_the_keyword_to_leave_out(
    tmp_path: Path,
) -> None:
    """The place its keyword gives keeps its verdict; left out, the layout keeps the files."""
    out = cli(str(tree(tmp_path, {"test_tok.py": SENT_ELSEWHERE})))
    assert out.returncode == 1
    leave = (
        "leave cache_dir= out of from_pretrained() (line 6): then it lands in $HF_HUB_CACHE, "
        "which the layout leaves to HF_HOME: $CACHEROOT/huggingface/hub"
    )
    assert section(out.stdout, "Not covered by the layout") == [
        "Not covered by the layout (1):",
        "  src test_tok.py:6",
        "    /tmp/hf  [/tmp literal]",
        (
            "    download: downloads land there; downloaded into by from_pretrained(cache_dir=) "
            "(line 6)"
        ),
        (
            "    no variable moves it: ask upstream for one, patch the code to read one, or "
            "--allow '/tmp/hf'"
        ),
        f"    {leave}",
        "    to accept it: --allow '/tmp/hf'",
    ]
    assert section(out.stdout, "Known downloaders") == [
        "Known downloaders (2; not gating):",
        "  src test_tok.py:6  transformers.AutoTokenizer.from_pretrained",
        (
            "    lands in /tmp/hf (cache_dir=); without cache_dir= it lands in $HF_HUB_CACHE, "
            "which the layout leaves to HF_HOME: $CACHEROOT/huggingface/hub"
        ),
        "  src test_tok.py:10  torch.hub.load",
        "    lands in $TORCH_HOME/hub, which the layout sets: $CACHEROOT/torch/hub",
    ]


def by_line(doc: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {d["line"]: d for d in doc}


def test_json_says_the_same_and_only_for_code_of_ones_own(tmp_path: Path) -> None:
    """``--json`` lists known downloaders with a finding's keys (``downloader`` names the call,
    never failing) and gives ``instead``; a wheel of the same code is a library: neither."""
    files = {"test_all.py": DOWNLOADS, "test_models.py": KNOWN}
    out = cli("--json", str(tree(tmp_path, files)))
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    models = by_line([d for d in doc if d["file"] == "test_models.py"])
    assert models[10] == {
        "dist": "src",
        "version": "",
        "file": "test_models.py",
        "line": 10,
        "variable": "TORCH_HOME",
        "expression": "$TORCH_HOME/hub",
        "default": "",
        "style": [],
        "fallback_of": None,
        "class": "download",
        "reason": "known downloader torch.hub.load (where: torch torch/hub.py load, into "
        "get_dir(): _get_torch_home()/hub)",
        "runs_on": [],
        "failing": False,
        "covered_by": "TORCH_HOME",
        "coverage": "lands in $TORCH_HOME/hub, which the layout sets: $CACHEROOT/torch/hub",
        "allowed": False,
        "suggestion": None,
        "instead": None,
        "downloader": "torch.hub.load",
    }
    assert sorted(models) == [10, 11, 12, 13, 14, 15, 16]
    assert by_line([d for d in doc if d["file"] == "test_all.py"])[8]["instead"] == (
        f"download it with cacheroot.fetch (line 12): {FETCH}("
        f'"https://example.org/gsm8k/test.jsonl", {DIGEST}, namespace="gsm8k")'
    )
    assert [(d["line"], d["downloader"], d["instead"] is not None) for d in doc] == [
        (8, None, True),
        (17, None, True),
        (23, None, True),
        (28, None, True),
        (32, None, True),
        (10, "torch.hub.load", False),
        (11, "torch.hub.load_state_dict_from_url", False),
        (12, "huggingface_hub.hf_hub_download", False),
        (13, "transformers.AutoModel.from_pretrained", False),
        (14, "datasets.load_dataset", False),
        (15, "tiktoken.get_encoding", False),
        (16, "modelscope.snapshot_download", False),
    ]
    wheel = tmp_path / "demo_tests-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo/data.py", DOWNLOADS)
        z.writestr("demo/models.py", KNOWN)
    out = cli("--json", str(wheel))
    doc = json.loads(out.stdout)
    assert [(d["line"], d["class"], d["instead"], d["downloader"]) for d in doc] == [
        (8, "download", None, None),
        (17, "download", None, None),
        (23, "download", None, None),
        (28, "download", None, None),
        (32, "uncached-download", None, None),
    ]
