"""``cacheroot audit`` finds every reader the layout table names in the pinned wheels.

Recall, measured: each ``(dist, file, variable)`` below is a row's ``upstream`` entry, written
out again here so that a reader sees what the audit must find, and checked against the table
so the list cannot fall behind it. A reader inside a compiled module is listed apart: the audit
reads Python source only, and says so.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import TABLE
from cacheroot.envs._audit import Report, audit

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.upstream.conftest import Pins

#: (distribution, file in its wheel, variable): what the audit must report.
EXPECTED = [
    ("platformdirs", "platformdirs/_xdg.py", "XDG_CACHE_HOME"),
    ("vllm", "vllm/envs.py", "XDG_CACHE_HOME"),
    ("huggingface-hub", "huggingface_hub/constants.py", "HF_HOME"),
    ("huggingface-hub", "huggingface_hub/constants.py", "HF_HUB_CACHE"),
    ("modelscope", "modelscope/utils/file_utils.py", "MODELSCOPE_CACHE"),
    ("modelscope-hub", "modelscope_hub/constants.py", "MODELSCOPE_CACHE"),
    ("modelscope-hub", "modelscope_hub/config.py", "MODELSCOPE_HOME"),
    (
        "modelscope",
        "modelscope/models/nlp/mglm/data_utils/file_utils.py",
        "PYTORCH_PRETRAINED_BERT_CACHE",
    ),
    ("vllm", "vllm/envs.py", "VLLM_CACHE_ROOT"),
    ("vllm", "vllm/envs.py", "VLLM_CONFIG_ROOT"),
    ("vllm", "vllm/envs.py", "VLLM_LORA_RESOLVER_CACHE_DIR"),
    ("vllm", "vllm/envs.py", "VLLM_ASSETS_CACHE"),
    ("vllm", "vllm/envs.py", "VLLM_XLA_CACHE_PATH"),
    ("vllm", "vllm/envs.py", "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"),
    ("vllm", "vllm/envs.py", "VLLM_MEDIA_CACHE"),
    ("vllm", "vllm/v1/structured_output/utils.py", "OUTLINES_CACHE_DIR"),
    ("tiktoken", "tiktoken/load.py", "TIKTOKEN_CACHE_DIR"),
    ("torch", "torch/hub.py", "TORCH_HOME"),
    ("torch", "torch/_inductor/runtime/cache_dir_utils.py", "TORCHINDUCTOR_CACHE_DIR"),
    ("triton", "triton/knobs.py", "TRITON_CACHE_DIR"),
    ("tokenspeed-triton", "tokenspeed_triton/knobs.py", "TRITON_CACHE_DIR"),
    ("triton", "triton/knobs.py", "TRITON_HOME"),
    ("tokenspeed-triton", "tokenspeed_triton/knobs.py", "TRITON_HOME"),
    ("apache-tvm-ffi", "tvm_ffi/cpp/extension.py", "TVM_FFI_CACHE_DIR"),
    ("tilelang", "tilelang/env.py", "TILELANG_CACHE_DIR"),
    ("tilelang", "tilelang/env.py", "TILELANG_TMP_DIR"),
    ("flashinfer-python", "flashinfer/prims_ts/utils.py", "CUTE_DSL_CACHE_DIR"),
    ("vllm", "vllm/vllm_flash_attn/cute/cache_utils.py", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"),
    (
        "flashinfer-python",
        "flashinfer/cute_dsl/sparse/bsa_utils/cache_utils.py",
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
    ),
    ("quack-kernels", "quack/cache/__init__.py", "QUACK_CACHE_DIR"),
    ("torch", "torch/_vendor/quack/cache/__init__.py", "QUACK_CACHE_DIR"),
    ("humming-kernels", "humming/utils/jit.py", "HUMMING_CACHE_DIR"),
    ("humming-kernels", "humming/utils/jit.py", "HUMMING_TMP_DIR"),
    ("vllm", "vllm/third_party/fmha_sm100/jit.py", "MINFER_FMHA_CACHE_DIR"),
    (
        "vllm",
        "vllm/third_party/fmha_sm100/cute/src/common/aot_cache.py",
        "MM_SPARSE_ATTN_AOT_CACHE",
    ),
    (
        "vllm",
        "vllm/third_party/fmha_sm100/kvouter/aot_export.py",
        "MINIMAX_KERNELS_CUTE_AOT_CACHE",
    ),
    ("vllm", "vllm/utils/deep_gemm.py", "DG_JIT_CACHE_DIR"),
    ("flashinfer-python", "flashinfer/jit/env.py", "FLASHINFER_WORKSPACE_BASE"),
    (
        "flashinfer-python",
        "flashinfer/moe_ep/kernel_src/sm100/cutedsl_megamoe/shim/knob_cache.py",
        "FLASHINFER_MOE_EP_KNOB_CACHE",
    ),
    (
        "flashinfer-python",
        "flashinfer/moe_ep/kernel_src/sm107/next_cutedsl_megamoe/shim/knob_cache.py",
        "FLASHINFER_MOE_EP_KNOB_CACHE",
    ),
    (
        "flashinfer-python",
        "flashinfer/moe_ep/kernel_src/sm90/pull_style_cutedsl_megakernel/shim/knob_cache.py",
        "FLASHINFER_MOE_EP_KNOB_CACHE",
    ),
    ("flashinfer-python", "flashinfer/autotune_cache.py", "FLASHINFER_AUTOTUNE_CACHE_DIR"),
    (
        "flashinfer-python",
        "flashinfer/kda_kernels/ptx/static_runtime.py",
        "FLASHINFER_KDA_PTX_CACHE_DIR",
    ),
    (
        "flashinfer-python",
        "flashinfer/experimental/b12x/_lib/compiler.py",
        "B12X_COMPILE_CACHE_DIR",
    ),
    (
        "flashinfer-python",
        "flashinfer/experimental/b12x/comm/roce/_proxy.py",
        "B12X_ROCE_CACHE_DIR",
    ),
    ("amd-aiter", "aiter/jit/core.py", "AITER_JIT_DIR"),
    ("amd-aiter", "aiter_meta/csrc/cpp_itfs/utils.py", "AITER_ROOT_DIR"),
    ("vllm", "vllm/models/deepseek_v4/amd/mono/runner.py", "FLYDSL_RUNTIME_CACHE_DIR"),
    ("cupy-cuda12x", "cupy/cuda/_compiler_cache.py", "CUPY_CACHE_DIR"),
    ("cupy-cuda12x", "cupy/_environment.py", "CUPY_CUDA_LIB_PATH"),
    ("numba", "numba/core/config.py", "NUMBA_CACHE_DIR"),
]
#: Readers the audit cannot see: inside compiled code.
COMPILED = [
    ("openai-harmony", "openai_harmony/openai_harmony.abi3.so", "TIKTOKEN_RS_CACHE_DIR"),
]


def _dist(name: str) -> str:
    return name.replace("_", "-").lower()


def test_the_list_is_the_table() -> None:
    """Every ``dist==version path`` entry of the table is above, and nothing else is."""
    entries = {
        (_dist(spec.partition("==")[0]), path, v.name)
        for v in TABLE
        for entry in v.upstream
        if not entry.startswith("doc:")
        for spec, _, path in [entry.partition(" ")]
    }
    assert entries == set(EXPECTED) | set(COMPILED)


@pytest.fixture(scope="module")
def scanned(pins: Pins) -> Report:
    """One audit of every pinned wheel the list names."""
    dists = {d for d, _, _ in EXPECTED}
    wheels = [str(pins.path(p)) for p in pins.wheels if _dist(p.name) in dists]
    return audit(wheels)


def test_recall(scanned: Report, report: Callable[[str], None]) -> None:
    found = {(i.finding.dist, i.finding.file, i.finding.variable) for i in scanned.items}
    missed = [e for e in EXPECTED if e not in found]
    uncovered = sum(1 for i in scanned.items if i.covered_by is None)
    failing = sum(1 for i in scanned.items if i.failing)
    kinds = Counter(i.finding.kind for i in scanned.items)
    unfollowed = Counter(u.what for u in scanned.stats.unfollowed)
    report(
        f"audit: {len(EXPECTED) - len(missed)}/{len(EXPECTED)} table readers found "
        f"({len(COMPILED)} more inside compiled code, not seen); {len(scanned.items)} cache "
        f"locations in {scanned.stats.sources} wheels, {uncovered} not covered, {failing} "
        f"failing the gate, {scanned.seconds:.0f} s; by class: "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        + "; not followed: "
        + ", ".join(f"{n} {k}" for k, n in sorted(unfollowed.items()))
    )
    assert missed == []


def test_each_reader_is_covered_by_its_row(scanned: Report) -> None:
    """A table reader the audit finds is judged covered, by that variable's own row."""
    verdict = {
        (i.finding.dist, i.finding.file, i.finding.variable): i.covered_by for i in scanned.items
    }
    wrong = {e: verdict.get(e) for e in EXPECTED if verdict.get(e) != e[2]}
    assert wrong == {}
