"""The layout table: the one place where every variable name is spelled.

The start-up hook imports this module in every Python process, so it imports nothing at all
(no ``dataclasses``, no ``typing``, no ``pathlib``): plain classes with ``__slots__`` cost
nothing to define. The hook, the exporters, the doctor and the README's variable table are all
generated from :data:`TABLE`.
"""

from __future__ import annotations

#: The cache root. Absolute after ``~`` expansion, or the layout is invalid.
CACHEROOT = "CACHEROOT"
#: ``cuda`` or ``rocm``: which vendor JIT caches the layout sets.
CACHEROOT_TAG = "CACHEROOT_TAG"
#: ``1`` turns the start-up hook off (the library calls still work).
CACHEROOT_DISABLE = "CACHEROOT_DISABLE"
#: Comma-separated names of opt-in variables to derive as well (or ``all``).
CACHEROOT_OPT_IN = "CACHEROOT_OPT_IN"
#: ``1`` makes cacheroot's own downloads cache-only: a miss is an error, never a request.
CACHEROOT_OFFLINE = "CACHEROOT_OFFLINE"
#: Where the root falls back to when ``CACHEROOT`` is unset (the XDG base directory spec).
XDG_CACHE_HOME = "XDG_CACHE_HOME"
#: Hugging Face's switch for cache-only operation (read by huggingface_hub, set by the harness).
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"

#: Upstream vLLM's bound on the media cache, in MiB (default 5120).
VLLM_MEDIA_CACHE_MAX_SIZE_MB = "VLLM_MEDIA_CACHE_MAX_SIZE_MB"
#: Upstream vLLM's time-to-live of a media cache entry, in hours (default 24).
VLLM_MEDIA_CACHE_TTL_HOURS = "VLLM_MEDIA_CACHE_TTL_HOURS"
#: Hugging Face's hub endpoint (the tests point it at a local hub).
HF_ENDPOINT = "HF_ENDPOINT"
#: ModelScope's hub endpoint (modelscope_hub; the deprecated MODELSCOPE_DOMAIN is its fallback).
MODELSCOPE_ENDPOINT = "MODELSCOPE_ENDPOINT"

#: The tags a variable may belong to. ``all`` means every tag, and no tag at all.
TAGS = ("cuda", "rocm")

#: Modes: set by default, set only when opted in, or documented as deliberately never set.
DEFAULT = "default"
OPT_IN = "opt-in"
NEVER = "never"


class Variable:
    """One row of the layout table.

    ``path`` is relative to the value of ``parent`` (another variable of the table) or, when
    ``parent`` is empty, to the root. Deriving from the parent's *value* means that a parent the
    user set explicitly carries its children along (``VLLM_CACHE_ROOT=/x`` puts the assets
    cache in ``/x/assets``), which upstream's own defaults do not do.
    """

    __slots__ = ("mode", "name", "parent", "path", "purpose", "replaces", "tags", "upstream")

    def __init__(
        self,
        name: str,
        path: str,
        *,
        purpose: str,
        replaces: str,
        upstream: str,
        parent: str = "",
        tags: tuple[str, ...] = TAGS,
        mode: str = DEFAULT,
    ) -> None:
        self.name = name
        self.path = path
        self.parent = parent
        self.tags = tags
        self.mode = mode
        self.purpose = purpose
        self.replaces = replaces
        self.upstream = upstream

    def __repr__(self) -> str:
        return f"Variable({self.name!r}, {self.path!r})"


#: Every cache variable, parents before their children.
TABLE: tuple[Variable, ...] = (
    Variable(
        XDG_CACHE_HOME,
        "",
        purpose="Base of every XDG-respecting cache (torch extensions, outlines, pip, ...).",
        replaces="~/.cache",
        upstream="XDG Base Directory spec; platformdirs `_xdg.py`",
    ),
    Variable(
        "HF_HOME",
        "huggingface",
        purpose="Hugging Face hub, xet, assets and token (hub cache is HF_HOME/hub).",
        replaces="$XDG_CACHE_HOME/huggingface",
        upstream="huggingface_hub `src/huggingface_hub/constants.py`",
    ),
    Variable(
        "HF_HUB_CACHE",
        "hub",
        parent="HF_HOME",
        mode=NEVER,
        purpose="Not set: huggingface_hub derives it from HF_HOME, so a user's HF_HOME carries it.",
        replaces="$HF_HOME/hub",
        upstream="huggingface_hub `src/huggingface_hub/constants.py`",
    ),
    Variable(
        "TRANSFORMERS_CACHE",
        "hub",
        parent="HF_HOME",
        mode=NEVER,
        purpose="Not set: deprecated by transformers (warns when set); HF_HOME covers it.",
        replaces="$HF_HOME/hub",
        upstream="transformers `src/transformers/utils/hub.py`",
    ),
    Variable(
        "MODELSCOPE_CACHE",
        "modelscope",
        purpose="ModelScope cache; one directory for modelscope's and modelscope_hub's resolvers.",
        replaces="~/.cache/modelscope (ignores XDG_CACHE_HOME)",
        upstream=(
            "modelscope `modelscope/utils/file_utils.py`; "
            "modelscope_hub `modelscope_hub/utils/file_utils.py`"
        ),
    ),
    Variable(
        "VLLM_CACHE_ROOT",
        "vllm",
        purpose="vLLM's own cache (torch.compile cache, p2p access cache, ...).",
        replaces="$XDG_CACHE_HOME/vllm",
        upstream="vllm `vllm/envs.py`",
    ),
    Variable(
        "VLLM_CONFIG_ROOT",
        "",
        mode=NEVER,
        purpose="Not set: configuration, not cache; sharing it through a CI volume leaks settings.",
        replaces="$XDG_CONFIG_HOME/vllm",
        upstream="vllm `vllm/envs.py`",
    ),
    Variable(
        "VLLM_ASSETS_CACHE",
        "assets",
        parent="VLLM_CACHE_ROOT",
        purpose="vLLM's downloaded example and test assets (images, audio, video).",
        replaces="$XDG_CACHE_HOME/vllm/assets (ignores VLLM_CACHE_ROOT)",
        upstream="vllm `vllm/envs.py`",
    ),
    Variable(
        "VLLM_XLA_CACHE_PATH",
        "xla_cache",
        parent="VLLM_CACHE_ROOT",
        purpose="XLA persistent compilation cache of vLLM's TPU backend.",
        replaces="$XDG_CACHE_HOME/vllm/xla_cache (ignores VLLM_CACHE_ROOT)",
        upstream="vllm `vllm/envs.py`",
    ),
    Variable(
        "VLLM_TEST_CACHE",
        "test_cache",
        parent="VLLM_CACHE_ROOT",
        purpose="Test data fetched by cacheroot.fetch (datasets, tokenizer files, GeoTIFFs, ...).",
        replaces="/tmp and ad-hoc paths in test code",
        upstream="cacheroot.fetch (vLLM CI PR #36951 proposed the name; not on vLLM main)",
    ),
    Variable(
        "VLLM_MEDIA_CACHE",
        "media_cache",
        parent="VLLM_CACHE_ROOT",
        mode=OPT_IN,
        purpose="URL cache of media fetches; opt-in only: unset means no change in behaviour.",
        replaces="unset (media is downloaded on every request)",
        upstream="vllm `vllm/envs.py`",
    ),
    Variable(
        "TIKTOKEN_CACHE_DIR",
        "tiktoken",
        purpose="tiktoken's encoding files (keyed by sha1 of the URL).",
        replaces="$TMPDIR/data-gym-cache",
        upstream="tiktoken `tiktoken/load.py`",
    ),
    Variable(
        "TIKTOKEN_RS_CACHE_DIR",
        "tiktoken-rs",
        purpose="openai-harmony's vocabulary files (tiktoken-rs).",
        replaces="$TMPDIR/tiktoken-rs-cache",
        upstream="openai-harmony `src/tiktoken_ext/public_encodings.rs`",
    ),
    Variable(
        "TORCH_HOME",
        "torch",
        purpose="torch.hub checkpoints and repositories.",
        replaces="$XDG_CACHE_HOME/torch",
        upstream="pytorch `torch/hub.py`",
    ),
    Variable(
        "TORCHINDUCTOR_CACHE_DIR",
        "torchinductor",
        purpose="Inductor's compiled kernels and FX graph cache.",
        replaces="/tmp/torchinductor_$USER",
        upstream="pytorch `torch/_inductor/runtime/cache_dir_utils.py`",
    ),
    Variable(
        "TRITON_CACHE_DIR",
        "triton",
        purpose="Triton's compiled kernels.",
        replaces="~/.triton/cache",
        upstream="triton `python/triton/knobs.py`",
    ),
    Variable(
        "CUDA_CACHE_PATH",
        "nv/ComputeCache",
        tags=("cuda",),
        purpose="The NVIDIA driver's PTX JIT cache.",
        replaces="~/.nv/ComputeCache",
        upstream="CUDA C Programming Guide, 'CUDA Environment Variables'",
    ),
    Variable(
        "MIOPEN_USER_DB_PATH",
        "miopen/db",
        tags=("rocm",),
        purpose="MIOpen's user performance database (tuning results).",
        replaces="~/.config/miopen",
        upstream="ROCm MIOpen `src/db_path.cpp.in`",
    ),
    Variable(
        "MIOPEN_CUSTOM_CACHE_DIR",
        "miopen/cache",
        tags=("rocm",),
        purpose="MIOpen's compiled kernel cache.",
        replaces="~/.cache/miopen/<version>",
        upstream="ROCm MIOpen `src/binary_cache.cpp`",
    ),
    Variable(
        "CUPY_CACHE_DIR",
        "cupy/kernel_cache",
        purpose="CuPy's compiled kernels (CUDA and ROCm builds).",
        replaces="~/.cupy/kernel_cache (ignores XDG_CACHE_HOME)",
        upstream="cupy `cupy/cuda/compiler.py`",
    ),
    Variable(
        "NUMBA_CACHE_DIR",
        "numba",
        purpose="Numba's cached functions (default: beside the source, often read-only).",
        replaces="__pycache__ next to each source file",
        upstream="numba `numba/core/config.py`",
    ),
    Variable(
        "DG_JIT_CACHE_DIR",
        "deep_gemm",
        tags=("cuda",),
        purpose="DeepGEMM's JIT-compiled kernels.",
        replaces="$HOME/.deep_gemm",
        upstream="DeepGEMM `csrc/jit/compiler.hpp`",
    ),
    Variable(
        "FLASHINFER_WORKSPACE_BASE",
        "flashinfer",
        tags=("cuda",),
        purpose="FlashInfer's JIT cache and cubins ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer).",
        replaces="$HOME (cache in ~/.cache/flashinfer, ignores XDG_CACHE_HOME)",
        upstream="flashinfer `flashinfer/jit/env.py`",
    ),
)

#: Variables by name, for lookups by parent.
BY_NAME: dict[str, Variable] = {v.name: v for v in TABLE}
