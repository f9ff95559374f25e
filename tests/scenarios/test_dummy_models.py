"""Dummy models: upstream's conftest checked for ``/tmp/dummy_*`` and wrote into it in place.

Here each model (a tiny ``config.json`` plus ``safetensors`` weights) is built once for the whole
volume by ``build_once`` into ``$VLLM_TEST_CACHE/built/``: every xdist worker and every later run
reuses the published directory, and a half-built model is never visible.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from .conftest import under

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: The models upstream's conftest made (by architecture), at test size.
MODELS = {
    "dummy-opt": {"architectures": ["OPTForCausalLM"], "hidden_size": 16, "num_layers": 2},
    "dummy-llava": {
        "architectures": ["LlavaForConditionalGeneration"],
        "hidden_size": 8,
        "num_layers": 1,
    },
}
VOCAB = 300


def build_model(directory: Path, spec: dict[str, Any] | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` (deterministic: seeded weights)."""
    assert spec is not None
    hidden, layers = spec["hidden_size"], spec["num_layers"]
    config = {**spec, "vocab_size": VOCAB, "torch_dtype": "float32", "model_type": "dummy"}
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    rng = np.random.default_rng(hidden * 100 + layers)
    tensors = {"embed_tokens.weight": rng.standard_normal((VOCAB, hidden), dtype=np.float32)}
    for i in range(layers):
        tensors[f"layers.{i}.mlp.weight"] = rng.standard_normal((hidden, hidden), dtype=np.float32)
    save_file(tensors, str(directory / "model.safetensors"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dummy_model_is_built_once_into_the_test_cache(
    name: str,
    build_once: Callable[..., Path],
    test_cache_dir: Path,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    spec = MODELS[name]

    def builder(directory: Path) -> None:
        build_model(directory, spec)

    path = build_once(name, builder, inputs={"spec": spec, "vocab": VOCAB, "version": 1})
    assert path.parent == test_cache_dir / "built"
    assert path.name.startswith(name)
    assert under(path, isolated_cache)
    assert build_once(name, builder, inputs={"spec": spec, "vocab": VOCAB, "version": 1}) == path

    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == spec["architectures"]
    weights = load_file(str(path / "model.safetensors"))
    assert weights["embed_tokens.weight"].shape == (VOCAB, spec["hidden_size"])
    assert len([k for k in weights if k.startswith("layers.")]) == spec["num_layers"]

    build_model(tmp_path, spec)  # the same builder, outside the cache: the same bytes
    for file in ("config.json", "model.safetensors"):
        assert _sha256(path / file) == _sha256(tmp_path / file)
