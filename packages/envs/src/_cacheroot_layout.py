"""The layout: the one table where every variable name is spelled, and its resolver.

The start-up hook applies this table in every Python process, before any user import, through
:mod:`_cacheroot_start` (what this module derives for a plain environment, one template per tag)
and :mod:`_cacheroot_compact` (a compact copy of the rows it may set with the rules of
:func:`apply`, for every other environment), both generated from :data:`TABLE`
(``python tests/envs/start_table.py``) with none of the documentation, so that start-up does not
pay for loading this module (about 0.5 ms). This module is loaded at start-up only where a
process without ``CACHEROOT`` finds a pin file, so it stays a single top-level module that
imports only :mod:`os` and :mod:`sys`: no package to initialise, no ``from __future__`` import,
no ``dataclasses``, ``typing`` or ``pathlib``. ``cacheroot.envs`` re-exports everything public
from here; the exporters and the doctor, which may be slow, live there. A change to the table or
to :func:`resolve` is a change to both start-up modules: ``tests/envs/test_start.py`` says when
they are stale or behave otherwise.

:func:`resolve` is pure (a mapping in, a :class:`Layout` out) and touches no file system. Whether
a directory exists or is writable is the doctor's business, not the hook's.
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only; never imported at run time
    from collections.abc import Mapping, MutableMapping

#: The cache root. Absolute after ``~`` expansion, or the layout is invalid.
CACHEROOT = "CACHEROOT"
#: The shared tier (L2) of a fleet: a slow persistent volume (NFS, a PVC) that every host's
#: node-local ``CACHEROOT`` (L1) fills from and publishes to. Unset or blank: one tier.
CACHEROOT_SHARED = "CACHEROOT_SHARED"
#: How this process may use the shared tier: ``rw`` (default: read and write), ``ro`` (read
#: through it, never write, lease, sync or evict there: untrusted builds) or ``off`` (ignore it).
CACHEROOT_SHARED_MODE = "CACHEROOT_SHARED_MODE"
#: ``cuda`` or ``rocm``: which vendor JIT caches the layout sets.
CACHEROOT_TAG = "CACHEROOT_TAG"
#: ``1`` turns the start-up hook off (the library calls still work).
CACHEROOT_DISABLE = "CACHEROOT_DISABLE"
#: Comma-separated names of opt-in variables to derive as well (or ``all``).
CACHEROOT_OPT_IN = "CACHEROOT_OPT_IN"
#: ``1`` makes cacheroot's own downloads cache-only: a miss is an error, never a request.
CACHEROOT_OFFLINE = "CACHEROOT_OFFLINE"
#: How much a hit verifies: unset (the recorded stat, ``st_ctime_ns`` included, must match) or
#: ``first-use`` (also re-hash each entry the first time a process uses it).
CACHEROOT_VERIFY = "CACHEROOT_VERIFY"
#: Mirrors tried before the origin by ``cacheroot.fetch``: whitespace-separated
#: ``ORIGIN_PREFIX=MIRROR_PREFIX`` pairs, in order (the origin is tried last).
CACHEROOT_MIRRORS = "CACHEROOT_MIRRORS"
#: Bearer tokens per host for ``cacheroot.fetch``: whitespace-separated ``HOST=TOKEN`` (or
#: ``HOST:PORT=TOKEN``) entries; each is sent to that host only, never stored or shown.
CACHEROOT_AUTH_TOKENS = "CACHEROOT_AUTH_TOKENS"
#: Hugging Face's access token (read by huggingface_hub; ``cacheroot.fetch`` sends it to the Hub's
#: own origins only), and its older name, which huggingface_hub still reads after it.
HF_TOKEN = "HF_TOKEN"  # noqa: S105 - the variable's name, not a token
HUGGING_FACE_HUB_TOKEN = "HUGGING_FACE_HUB_TOKEN"  # noqa: S105 - the same
#: The run-time audit (``_cacheroot_audit``): ``1`` (or ``warn``) or ``fail`` records, in every
#: hooked process, each file written outside the root and the allowed places. Unset: the hook
#: looks this variable up and imports nothing more.
CACHEROOT_AUDIT = "CACHEROOT_AUDIT"
#: More places the audit allows writes in: absolute prefixes, ``os.pathsep``-separated.
CACHEROOT_AUDIT_ALLOW = "CACHEROOT_AUDIT_ALLOW"
#: Where a command audited without pytest writes its JSON report (default: in its session).
CACHEROOT_AUDIT_REPORT = "CACHEROOT_AUDIT_REPORT"
#: The audit's session directory, set by the process that made it so that children join it.
CACHEROOT_AUDIT_DIR = "CACHEROOT_AUDIT_DIR"
#: pytest's "node id (phase)" of the running test, which the processes a test starts inherit.
PYTEST_CURRENT_TEST = "PYTEST_CURRENT_TEST"
#: What the hook derived, as ``NAME=value`` lines, so that a child process told of another root
#: (``CACHEROOT=/b python ...`` from a hooked parent) re-derives what it inherited instead of
#: taking its parent's derived values for explicit ones. Written by :func:`apply`; never exported.
CACHEROOT_APPLIED = "CACHEROOT_APPLIED"
#: Where ``cacheroot hook pin`` records a root, under the environment's ``sys.prefix``. The hook
#: reads it only when a process has no ``CACHEROOT`` (a child started with a scrubbed
#: environment, ``subprocess.run(..., env={...})``), so it costs nothing where the root is set.
PIN_FILE = ("etc", "cacheroot", "pin")
#: Another pin file than the environment's (blank: none at all), for hermetic tests and images
#: that keep configuration elsewhere.
CACHEROOT_PIN_FILE = "CACHEROOT_PIN_FILE"
#: ``root_source`` of a layout whose root came from the pin file.
PINNED = "pinned root"
#: Where the root falls back to when ``CACHEROOT`` is unset (the XDG base directory spec).
XDG_CACHE_HOME = "XDG_CACHE_HOME"
#: Hugging Face's switch for cache-only operation (read by huggingface_hub, set by the harness).
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
#: Hugging Face's switch that keeps downloads off Xet storage (huggingface_hub's
#: ``is_xet_available``): set in a session whose Hub traffic goes through the hub cache.
HF_HUB_DISABLE_XET = "HF_HUB_DISABLE_XET"

#: Upstream vLLM's bound on the media cache, in MiB (default 5120).
VLLM_MEDIA_CACHE_MAX_SIZE_MB = "VLLM_MEDIA_CACHE_MAX_SIZE_MB"
#: Upstream vLLM's time-to-live of a media cache entry, in hours (default 24).
VLLM_MEDIA_CACHE_TTL_HOURS = "VLLM_MEDIA_CACHE_TTL_HOURS"
#: Hugging Face's hub endpoint (the tests point it at a local hub).
HF_ENDPOINT = "HF_ENDPOINT"
#: ModelScope's hub endpoint (modelscope_hub; the deprecated MODELSCOPE_DOMAIN is its fallback).
MODELSCOPE_ENDPOINT = "MODELSCOPE_ENDPOINT"
#: ModelScope's older endpoint variable: a host name (``www.modelscope.cn``), read after
#: ``MODELSCOPE_ENDPOINT``.
MODELSCOPE_DOMAIN = "MODELSCOPE_DOMAIN"

#: ``PID URL`` of the pytest process that started the session's hub cache (``--cacheroot-hub``),
#: in its environment: its xdist workers (its children) use that hub instead of starting one.
CACHEROOT_HUB_OWNER = "CACHEROOT_HUB_OWNER"
#: A file holding the secret that signs the hub cache's answers (an HMAC), outside its store:
#: on a store others may write, an answer without a valid signature is not served. Every hub
#: and every warm of that store needs the same file.
CACHEROOT_HUB_KEY_FILE = "CACHEROOT_HUB_KEY_FILE"
#: xdist's name for a worker (``gw0``), set in each worker's environment before pytest starts.
PYTEST_XDIST_WORKER = "PYTEST_XDIST_WORKER"
#: Buildkite's job index and count, from which the harness takes the shard of a parallel step.
BUILDKITE_PARALLEL_JOB = "BUILDKITE_PARALLEL_JOB"
BUILDKITE_PARALLEL_JOB_COUNT = "BUILDKITE_PARALLEL_JOB_COUNT"
#: Set by CI services (GitHub Actions, GitLab, Buildkite, CircleCI, ...) in every job. Some run
#: the job on a pseudo-terminal (Buildkite does by default), whose log would keep every redraw of
#: a progress bar; a bar is for someone watching, so none is drawn where it is set.
CI = "CI"
#: Set (to ``true``) in every Buildkite job: the session's hub report becomes an annotation.
BUILDKITE = "BUILDKITE"
#: GitHub Actions: the file a step appends Markdown to for the job's summary page.
GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"

#: The harness: a fixed root for the scenario suite (a CI volume, or a cold/warm directory), and
#: an origin URL the scenarios use instead of starting their own.
CACHEROOT_SCENARIO_ROOT = "CACHEROOT_SCENARIO_ROOT"
CACHEROOT_SCENARIO_ORIGIN = "CACHEROOT_SCENARIO_ORIGIN"
#: The bucket tier's tests: another S3 server (``http://127.0.0.1:PORT``) than moto's.
CACHEROOT_TEST_S3_ENDPOINT = "CACHEROOT_TEST_S3_ENDPOINT"

#: The AWS tools' own configuration, which a bucket tier (``CACHEROOT_SHARED=s3://...``) reads
#: as they do: the endpoint (most specific first), the credentials, the region.
AWS_ENDPOINT_URL_S3 = "AWS_ENDPOINT_URL_S3"
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_ENDPOINT = "AWS_ENDPOINT"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable's name
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"  # noqa: S105 - a variable's name
AWS_REGION = "AWS_REGION"
AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
#: The AWS tools' named profile (botocore reads ``AWS_DEFAULT_PROFILE`` first), and the two
#: files that hold profiles (``~/.aws/credentials``, ``~/.aws/config`` when unset).
AWS_PROFILE = "AWS_PROFILE"
AWS_DEFAULT_PROFILE = "AWS_DEFAULT_PROFILE"
AWS_SHARED_CREDENTIALS_FILE = "AWS_SHARED_CREDENTIALS_FILE"
AWS_CONFIG_FILE = "AWS_CONFIG_FILE"

#: Rows of the table that library code looks up by name.
HF_HOME = "HF_HOME"
HF_HUB_CACHE = "HF_HUB_CACHE"
MODELSCOPE_CACHE = "MODELSCOPE_CACHE"
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
#: The test cache under upstream vLLM's own name: its test helper reads ``_VLLM_TEST_CACHE``,
#: with a leading underscore because vLLM warns about (or, with ``fail_on_environ_validation``,
#: refuses) every ``VLLM_*`` name that ``vllm.envs`` does not define.
VLLM_TEST_CACHE = "_VLLM_TEST_CACHE"
#: cacheroot's earlier name of the test cache: honoured when a user set it, never derived.
VLLM_TEST_CACHE_LEGACY = "VLLM_TEST_CACHE"
#: Upstream's switch for cache-only test runs (as ``CACHEROOT_OFFLINE`` for cacheroot.fetch).
VLLM_TEST_CACHE_ONLY = "_VLLM_TEST_CACHE_ONLY"
#: vLLM's own media cache (``vllm/multimodal/media/connector.py``): opt-in, vLLM's to manage.
VLLM_MEDIA_CACHE = "VLLM_MEDIA_CACHE"
#: cacheroot.mediacache's directory: opt-in, and never the same directory as vLLM's, whose
#: eviction deletes every file there that does not start with a dot.
CACHEROOT_MEDIA_CACHE = "CACHEROOT_MEDIA_CACHE"

#: Names whose values are credentials (lower case, ``-`` read as ``_``): query parameters
#: (``?token=``, signed URLs' ``sig=``/``Signature=``/``Policy=``, OAuth's ``code=``) and the
#: ``NAME=value`` words of a command line (``HF_TOKEN=``). :func:`cacheroot.fetch.redact_url`,
#: the media cache (through it) and the run-time audit's command lines all judge names by
#: :func:`secret_name`, so there is one list to extend.
SECRET_NAMES = frozenset(
    {
        "access_token",
        "api_key",
        "apikey",
        "auth",
        "code",
        "id_token",
        "jwt",
        "key",
        "key_pair_id",
        "pass",
        "passwd",
        "password",
        "policy",
        "pwd",
        "refresh_token",
        "secret",
        "session",
        "sessionid",
        "sig",
        "signature",
        "token",
    }
)
#: Parts of names that make any name a credential (``x_amz_security_token``, ``HF_TOKEN``,
#: ``AWS_SECRET_ACCESS_KEY``, ``x_goog_credential``, ``client_secret``, ``OPENAI_API_KEY``...).
SECRET_PARTS = ("token", "secret", "passw", "signature", "credential", "apikey", "api_key")
#: Endings that make an environment variable's name a credential (``SSH_PRIVATE_KEY``,
#: ``MYSQL_PWD``, ``REDISCLI_AUTH``) where a query parameter's is not (``?sort_key=``):
#: only :func:`secret_variable` reads them.
SECRET_ENDINGS = ("_key", "_pass", "_pwd", "_auth")

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

    ``upstream`` names where the variable is read, each as ``"dist==version path"`` (the file
    inside that distribution's wheel, which the ``upstream`` nox session downloads and greps) or
    ``"doc: ..."`` for a reader that ships in no wheel (a closed driver, a C++ library).
    ``blank`` is empty when a blank value means "unset" to the library (cacheroot derives one
    then); otherwise it says what the library does with a blank value, which is then the user's
    explicit choice and kept. ``legacy`` lists earlier names of the row that are honoured when
    the user set them, and never derived. ``off`` lists values that are no path but the
    library's documented "off" (FlashInfer's ``0``): kept as the user's choice.
    """

    __slots__ = (
        "blank",
        "legacy",
        "mode",
        "name",
        "off",
        "parent",
        "path",
        "purpose",
        "replaces",
        "tags",
        "upstream",
    )

    def __init__(
        self,
        name: str,
        path: str,
        *,
        purpose: str,
        replaces: str,
        upstream: tuple[str, ...],
        parent: str = "",
        tags: tuple[str, ...] = TAGS,
        mode: str = DEFAULT,
        blank: str = "",
        legacy: tuple[str, ...] = (),
        off: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.path = path
        self.parent = parent
        self.tags = tags
        self.mode = mode
        self.purpose = purpose
        self.replaces = replaces
        self.upstream = upstream
        self.blank = blank
        self.legacy = legacy
        self.off = off

    def __repr__(self) -> str:
        return f"Variable({self.name!r}, {self.path!r})"


#: Every cache variable, parents before their children. Readers were read in the wheels named
#: (``nox -s upstream`` downloads them and checks that each name occurs in each file).
TABLE: tuple[Variable, ...] = (
    Variable(
        XDG_CACHE_HOME,
        "",
        purpose=(
            "Base of every XDG-respecting cache (huggingface_hub, vLLM, numba's fallback, "
            "outlines, b12x, pip, ...)."
        ),
        replaces="~/.cache",
        upstream=("platformdirs==4.14.8 platformdirs/_xdg.py", "vllm==0.33.0 vllm/envs.py"),
    ),
    Variable(
        HF_HOME,
        "huggingface",
        purpose=(
            "Hugging Face hub, xet, assets and modules cache (hub cache is HF_HOME/hub); also "
            "where `hf auth login` keeps its token."
        ),
        replaces="$XDG_CACHE_HOME/huggingface",
        upstream=("huggingface-hub==2.4.0 huggingface_hub/constants.py",),
    ),
    Variable(
        HF_HUB_CACHE,
        "hub",
        parent=HF_HOME,
        mode=NEVER,
        purpose="Not set: huggingface_hub derives it from HF_HOME, so a user's HF_HOME carries it.",
        replaces="$HF_HOME/hub",
        upstream=("huggingface-hub==2.4.0 huggingface_hub/constants.py",),
    ),
    Variable(
        MODELSCOPE_CACHE,
        "modelscope",
        purpose="ModelScope cache; one directory for modelscope's and modelscope_hub's resolvers.",
        replaces="~/.cache/modelscope/hub (modelscope), ~/.cache/modelscope (modelscope_hub)",
        upstream=(
            "modelscope==1.40.2 modelscope/utils/file_utils.py",
            "modelscope-hub==0.5.1 modelscope_hub/constants.py",
        ),
    ),
    Variable(
        "MODELSCOPE_HOME",
        "",
        mode=NEVER,
        purpose=(
            "Not set: modelscope_hub's configuration and login token, not cache; sharing it "
            "through a CI volume leaks the token."
        ),
        replaces="~/.modelscope",
        upstream=("modelscope-hub==0.5.1 modelscope_hub/config.py",),
    ),
    Variable(
        "PYTORCH_PRETRAINED_BERT_CACHE",
        "",
        mode=NEVER,
        purpose=(
            "Not set: read by one model module of modelscope only, and transformers 4 takes it "
            "for its hub cache ahead of HF_HOME, which would split the Hugging Face cache."
        ),
        replaces="~/.pytorch_pretrained_bert",
        upstream=(
            "modelscope==1.40.2 modelscope/models/nlp/mglm/data_utils/file_utils.py",
            "doc: transformers 4.x transformers/utils/hub.py (TRANSFORMERS_CACHE's fallback)",
        ),
    ),
    Variable(
        VLLM_CACHE_ROOT,
        "vllm",
        purpose=(
            "vLLM's own cache (torch.compile and Inductor caches, DeepGEMM, FlashInfer "
            "autotune, p2p access, ...)."
        ),
        replaces="$XDG_CACHE_HOME/vllm",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        "VLLM_CONFIG_ROOT",
        "",
        mode=NEVER,
        purpose="Not set: configuration, not cache; sharing it through a CI volume leaks settings.",
        replaces="$XDG_CONFIG_HOME/vllm",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        "VLLM_LORA_RESOLVER_CACHE_DIR",
        "",
        mode=NEVER,
        purpose=(
            "Not set: the directory vLLM's filesystem LoRA resolver reads adapters from (an "
            "input, not a cache); set, it registers the resolver, which fails where it is missing."
        ),
        replaces="unset (no filesystem LoRA resolver)",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        "VLLM_ASSETS_CACHE",
        "assets",
        parent=VLLM_CACHE_ROOT,
        purpose="vLLM's downloaded example and test assets (images, audio, video).",
        replaces="$XDG_CACHE_HOME/vllm/assets (ignores VLLM_CACHE_ROOT)",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        "VLLM_XLA_CACHE_PATH",
        "xla_cache",
        parent=VLLM_CACHE_ROOT,
        purpose="XLA persistent compilation cache of vLLM's TPU backend.",
        replaces="$XDG_CACHE_HOME/vllm/xla_cache (ignores VLLM_CACHE_ROOT)",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
        "flashinfer_autotune_cache",
        parent=VLLM_CACHE_ROOT,
        mode=NEVER,
        purpose=(
            "Not set: unset, vLLM keeps its per-config FlashInfer autotune files under "
            "VLLM_CACHE_ROOT and leaves FlashInfer's managed store where FlashInfer puts it; set, "
            "both would share one directory."
        ),
        replaces="$VLLM_CACHE_ROOT/flashinfer_autotune_cache/<version>/<arch>",
        upstream=("vllm==0.33.0 vllm/envs.py",),
    ),
    Variable(
        VLLM_TEST_CACHE,
        "test_cache",
        parent=VLLM_CACHE_ROOT,
        legacy=(VLLM_TEST_CACHE_LEGACY,),
        purpose=(
            "Test data fetched by cacheroot.fetch and by vLLM's own test helper (datasets, "
            "tokenizer files, GeoTIFFs, ...)."
        ),
        replaces="$TMPDIR/vllm-test-cache (vLLM's test helper); /tmp and ad-hoc paths",
        upstream=("doc: vLLM's test helper (tests/, not in the wheel); cacheroot.fetch",),
    ),
    Variable(
        VLLM_MEDIA_CACHE,
        "media_cache",
        parent=VLLM_CACHE_ROOT,
        mode=OPT_IN,
        purpose="vLLM's own media URL cache (opt-in; vLLM evicts every file in it).",
        replaces="unset (media is downloaded on every request)",
        upstream=("vllm==0.33.0 vllm/envs.py",),
        blank="blank turns vLLM's media cache off: kept",
    ),
    Variable(
        "OUTLINES_CACHE_DIR",
        ".cache/outlines",
        parent=XDG_CACHE_HOME,
        mode=NEVER,
        purpose=(
            "Not set: vLLM's outlines index cache (VLLM_V1_USE_OUTLINES_CACHE=1) follows "
            "XDG_CACHE_HOME, which the layout sets."
        ),
        replaces="$XDG_CACHE_HOME/.cache/outlines, else ~/.cache/outlines",
        upstream=("vllm==0.33.0 vllm/v1/structured_output/utils.py",),
    ),
    Variable(
        CACHEROOT_MEDIA_CACHE,
        "mediacache",
        mode=OPT_IN,
        purpose=(
            "cacheroot.mediacache's URL cache (HTTP rules, single-flight, size bound), for "
            "vLLM through its plugin; never vLLM's directory."
        ),
        replaces="unset (media is downloaded on every request)",
        upstream=("doc: cacheroot.mediacache",),
    ),
    Variable(
        "TIKTOKEN_CACHE_DIR",
        "tiktoken",
        purpose="tiktoken's encoding files (keyed by sha1 of the URL).",
        replaces="$TMPDIR/data-gym-cache",
        upstream=("tiktoken==0.14.0 tiktoken/load.py",),
        blank="blank disables tiktoken's cache (every load downloads): kept",
    ),
    Variable(
        "TIKTOKEN_RS_CACHE_DIR",
        "tiktoken-rs",
        purpose=(
            "openai-harmony's vocabulary downloads (vLLM up to 0.32; vLLM 0.33's oss-harmony "
            "downloads nothing and reads TIKTOKEN_ENCODINGS_BASE, an input directory)."
        ),
        replaces="$TMPDIR/tiktoken-rs-cache",
        upstream=("openai-harmony==0.0.8 openai_harmony/openai_harmony.abi3.so",),
    ),
    Variable(
        "TORCH_HOME",
        "torch",
        purpose="torch.hub checkpoints and repositories.",
        replaces="$XDG_CACHE_HOME/torch",
        upstream=("torch==2.14.0 torch/hub.py",),
    ),
    Variable(
        "TORCHINDUCTOR_CACHE_DIR",
        "torchinductor",
        purpose=(
            "Inductor's compiled kernels and FX graph cache (vLLM's own compiles override it "
            "with $VLLM_CACHE_ROOT/torch_compile_cache/.../inductor_cache)."
        ),
        replaces="/tmp/torchinductor_$USER",
        upstream=("torch==2.14.0 torch/_inductor/runtime/cache_dir_utils.py",),
    ),
    Variable(
        "TRITON_CACHE_DIR",
        "triton",
        purpose="Triton's compiled kernels (triton and tokenspeed-triton read the same name).",
        replaces="~/.triton/cache",
        upstream=(
            "triton==3.8.0 triton/knobs.py",
            "tokenspeed-triton==3.9.10.post20261028 tokenspeed_triton/knobs.py",
        ),
    ),
    Variable(
        "TRITON_HOME",
        "",
        mode=NEVER,
        purpose=(
            "Not set: Triton's kernel cache is TRITON_CACHE_DIR; what else it places under "
            "TRITON_HOME/.triton is debug output (dump) and hand-written kernel overrides."
        ),
        replaces="~ (~/.triton/dump, ~/.triton/override)",
        upstream=(
            "triton==3.8.0 triton/knobs.py",
            "tokenspeed-triton==3.9.10.post20261028 tokenspeed_triton/knobs.py",
        ),
    ),
    Variable(
        "TVM_FFI_CACHE_DIR",
        "tvm-ffi",
        purpose="TVM-FFI's JIT-built extensions (on ROCm, a torch DLPack addon built at import).",
        replaces="~/.cache/tvm-ffi (ignores XDG_CACHE_HOME)",
        upstream=("apache-tvm-ffi==0.1.11 tvm_ffi/cpp/extension.py",),
    ),
    Variable(
        "TILELANG_CACHE_DIR",
        "tilelang",
        purpose="TileLang's compiled kernels and autotuner results (TILELANG_TMP_DIR follows it).",
        replaces="~/.tilelang/cache",
        upstream=("tilelang==0.1.12 tilelang/env.py",),
    ),
    Variable(
        "TILELANG_TMP_DIR",
        "tmp",
        parent="TILELANG_CACHE_DIR",
        mode=NEVER,
        purpose=(
            "Not set: TileLang derives it from TILELANG_CACHE_DIR; its files are renamed into "
            "the cache, so they must stay on the cache's file system."
        ),
        replaces="$TILELANG_CACHE_DIR/tmp",
        upstream=("tilelang==0.1.12 tilelang/env.py",),
    ),
    Variable(
        "CUDA_CACHE_PATH",
        "nv/ComputeCache",
        tags=("cuda",),
        purpose="The NVIDIA driver's PTX JIT cache.",
        replaces="~/.nv/ComputeCache",
        upstream=("doc: CUDA C Programming Guide, 'CUDA Environment Variables' (closed driver)",),
    ),
    Variable(
        "CUTE_DSL_CACHE_DIR",
        "cute_dsl",
        tags=("cuda",),
        purpose="CuTe DSL's compiled kernels (CUTLASS Python DSL; FlashInfer, quack, FA4).",
        replaces="$TMPDIR/$USER/cutlass_python_cache (made at import)",
        upstream=(
            "flashinfer-python==0.7.2.post1 flashinfer/prims_ts/utils.py",
            (
                "doc: nvidia-cutlass-dsl-libs-core 4.8.0 base_dsl/cache_helpers.py (the name is "
                "built as f'{dsl_name}_CACHE_DIR')"
            ),
        ),
    ),
    Variable(
        "CUTE_EXPERIMENTAL_DSL_CACHE_DIR",
        "cute_dsl_experimental",
        tags=("cuda",),
        purpose="The experimental CuTe DSL's kernels (made at `import cutlass.cute`).",
        replaces="$TMPDIR/$USER/cutlass_python_cache (made at import)",
        upstream=(
            (
                "doc: nvidia-cutlass-dsl-libs-core 4.8.0 base_dsl/cache_helpers.py with dsl_name "
                "CUTE_EXPERIMENTAL_DSL (cutlass_dsl/cutlass.py)"
            ),
        ),
    ),
    Variable(
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
        "flash_attention_cute_dsl",
        tags=("cuda",),
        purpose=(
            "FlashAttention-4's CuTe kernels (vendored in vLLM; used when "
            "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1)."
        ),
        replaces="$TMPDIR/$USER/flash_attention_cute_dsl_cache",
        upstream=(
            "vllm==0.33.0 vllm/vllm_flash_attn/cute/cache_utils.py",
            "flashinfer-python==0.7.2.post1 flashinfer/cute_dsl/sparse/bsa_utils/cache_utils.py",
        ),
    ),
    Variable(
        "QUACK_CACHE_DIR",
        "quack",
        tags=("cuda",),
        purpose="quack-kernels' JIT objects and autotuner results.",
        replaces="$TMPDIR/$USER/quack_cache and ~/.quack/cache",
        upstream=(
            "quack-kernels==0.6.5 quack/cache/__init__.py",
            "torch==2.14.0 torch/_vendor/quack/cache/__init__.py",
        ),
    ),
    Variable(
        "HUMMING_CACHE_DIR",
        "humming/cache",
        tags=("cuda",),
        purpose="humming-kernels' compiled kernels.",
        replaces="~/.humming/cache",
        upstream=("humming-kernels==0.1.19 humming/utils/jit.py",),
    ),
    Variable(
        "HUMMING_TMP_DIR",
        "humming/tmp",
        tags=("cuda",),
        purpose="humming-kernels' build modules and locks.",
        replaces="~/.humming/tmp",
        upstream=("humming-kernels==0.1.19 humming/utils/jit.py",),
    ),
    Variable(
        "MINFER_FMHA_CACHE_DIR",
        "minfer/fmha_sm100",
        tags=("cuda",),
        purpose="vLLM's vendored SM100 FMHA JIT kernels.",
        replaces="~/.cache/minfer/fmha_sm100 (ignores XDG_CACHE_HOME)",
        upstream=("vllm==0.33.0 vllm/third_party/fmha_sm100/jit.py",),
    ),
    Variable(
        "MM_SPARSE_ATTN_AOT_CACHE",
        "minfer/mm_sparse_attn",
        tags=("cuda",),
        purpose="vLLM's vendored sparse-attention AOT kernels.",
        replaces="~/.cache/minfer/mm_sparse_attn (ignores XDG_CACHE_HOME)",
        upstream=("vllm==0.33.0 vllm/third_party/fmha_sm100/cute/src/common/aot_cache.py",),
    ),
    Variable(
        "MINIMAX_KERNELS_CUTE_AOT_CACHE",
        "",
        tags=("cuda",),
        mode=NEVER,
        purpose=(
            "Not set: unset, each process compiles vLLM's kvouter AOT kernels into a temporary "
            "directory it removes at exit; a persistent one is keyed without the kernel source, "
            "so it would serve stale objects after a vLLM upgrade."
        ),
        replaces="a fresh $TMPDIR/fmha_sm100_cute_aot_* per process",
        upstream=("vllm==0.33.0 vllm/third_party/fmha_sm100/kvouter/aot_export.py",),
    ),
    Variable(
        "DG_JIT_CACHE_DIR",
        "deep_gemm",
        tags=("cuda",),
        purpose="DeepGEMM's JIT-compiled kernels (vLLM sets it only where it is unset).",
        replaces="$VLLM_CACHE_ROOT/deep_gemm (vLLM); $HOME/.deep_gemm (DeepGEMM alone)",
        upstream=("vllm==0.33.0 vllm/utils/deep_gemm.py",),
    ),
    Variable(
        "FLASHINFER_WORKSPACE_BASE",
        "flashinfer",
        tags=("cuda",),
        purpose="FlashInfer's JIT cache and cubins ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer).",
        replaces="$HOME (cache in ~/.cache/flashinfer, ignores XDG_CACHE_HOME)",
        upstream=("flashinfer-python==0.7.2.post1 flashinfer/jit/env.py",),
    ),
    Variable(
        "FLASHINFER_MOE_EP_KNOB_CACHE",
        ".cache/flashinfer/moe_ep_knob_cache.json",
        parent="FLASHINFER_WORKSPACE_BASE",
        tags=("cuda",),
        purpose=(
            "FlashInfer's MoE EP tuned knobs (a JSON file keyed by GPU and shape), kept beside "
            "its JIT cache."
        ),
        replaces="~/.cache/flashinfer/moe_ep_knob_cache.json (ignores FLASHINFER_WORKSPACE_BASE)",
        off=("0",),
        upstream=(
            (
                "flashinfer-python==0.7.2.post1 "
                "flashinfer/moe_ep/kernel_src/sm100/cutedsl_megamoe/shim/knob_cache.py"
            ),
            (
                "flashinfer-python==0.7.2.post1 "
                "flashinfer/moe_ep/kernel_src/sm107/next_cutedsl_megamoe/shim/knob_cache.py"
            ),
            (
                "flashinfer-python==0.7.2.post1 "
                "flashinfer/moe_ep/kernel_src/sm90/pull_style_cutedsl_megakernel/shim/knob_cache.py"
            ),
        ),
    ),
    Variable(
        "FLASHINFER_AUTOTUNE_CACHE_DIR",
        ".cache/flashinfer/autotune",
        parent="FLASHINFER_WORKSPACE_BASE",
        tags=("cuda",),
        mode=NEVER,
        purpose="Not set: FlashInfer's autotune store follows FLASHINFER_WORKSPACE_BASE.",
        replaces="$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/autotune",
        upstream=("flashinfer-python==0.7.2.post1 flashinfer/autotune_cache.py",),
    ),
    Variable(
        "FLASHINFER_KDA_PTX_CACHE_DIR",
        ".cache/flashinfer",
        parent="FLASHINFER_WORKSPACE_BASE",
        tags=("cuda",),
        mode=NEVER,
        purpose="Not set: FlashInfer's KDA cubins follow FLASHINFER_WORKSPACE_BASE.",
        replaces="$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops/kda_ptx",
        upstream=("flashinfer-python==0.7.2.post1 flashinfer/kda_kernels/ptx/static_runtime.py",),
    ),
    Variable(
        "B12X_COMPILE_CACHE_DIR",
        "b12x/compile",
        parent=XDG_CACHE_HOME,
        tags=("cuda",),
        mode=NEVER,
        purpose="Not set: FlashInfer's b12x CuTe compile cache follows XDG_CACHE_HOME.",
        replaces="$XDG_CACHE_HOME/b12x/compile",
        upstream=("flashinfer-python==0.7.2.post1 flashinfer/experimental/b12x/_lib/compiler.py",),
    ),
    Variable(
        "B12X_ROCE_CACHE_DIR",
        "b12x/roce",
        parent=XDG_CACHE_HOME,
        tags=("cuda",),
        mode=NEVER,
        purpose="Not set: FlashInfer's b12x RDMA proxy library follows XDG_CACHE_HOME.",
        replaces="$XDG_CACHE_HOME/b12x/roce",
        upstream=(
            "flashinfer-python==0.7.2.post1 flashinfer/experimental/b12x/comm/roce/_proxy.py",
        ),
    ),
    Variable(
        "MIOPEN_USER_DB_PATH",
        "miopen/db",
        tags=("rocm",),
        purpose="MIOpen's user performance database (tuning results).",
        replaces="~/.config/miopen",
        upstream=("doc: ROCm MIOpen `src/db_path.cpp.in` (a C++ library, in no wheel)",),
    ),
    Variable(
        "MIOPEN_CUSTOM_CACHE_DIR",
        "miopen/cache",
        tags=("rocm",),
        purpose="MIOpen's compiled kernel cache.",
        replaces="~/.cache/miopen/<version>",
        upstream=("doc: ROCm MIOpen `src/binary_cache.cpp` (a C++ library, in no wheel)",),
    ),
    Variable(
        "AITER_JIT_DIR",
        "aiter/jit",
        tags=("rocm",),
        purpose="AITER's JIT-built modules (imported from there).",
        replaces="aiter/jit in site-packages if writable, else ~/.aiter/jit",
        upstream=("amd-aiter==0.1.7.post2.dev18 aiter/jit/core.py",),
    ),
    Variable(
        "AITER_ROOT_DIR",
        "aiter",
        tags=("rocm",),
        mode=OPT_IN,
        purpose=(
            "AITER's hipcc-built template ops ($AITER_ROOT_DIR/build; sampling, paged "
            "attention, ...), opt-in: keyed by op and arguments only, not by GPU arch or AITER "
            "version, so share it only across one GPU model and one AITER."
        ),
        replaces="$HOME/.aiter (build/ made at import)",
        upstream=("amd-aiter==0.1.7.post2.dev18 aiter_meta/csrc/cpp_itfs/utils.py",),
    ),
    Variable(
        "FLYDSL_RUNTIME_CACHE_DIR",
        "flydsl/cache",
        tags=("rocm",),
        purpose=(
            "FlyDSL's compiled kernels; vLLM's ROCm runners replace a directory that does "
            "not exist yet, so warm jobs should create it."
        ),
        replaces="~/.flydsl/cache",
        upstream=("vllm==0.33.0 vllm/models/deepseek_v4/amd/mono/runner.py",),
        blank="blank turns FlyDSL's disk cache off: kept",
    ),
    Variable(
        "CUPY_CACHE_DIR",
        "cupy/kernel_cache",
        purpose="CuPy's compiled kernels (CUDA and ROCm builds; not a vLLM 0.33 dependency).",
        replaces="~/.cupy/kernel_cache (ignores XDG_CACHE_HOME)",
        upstream=("cupy-cuda12x==14.2.0 cupy/cuda/_compiler_cache.py",),
    ),
    Variable(
        "CUPY_CUDA_LIB_PATH",
        "",
        tags=("cuda",),
        mode=NEVER,
        purpose=(
            "Not set: where `python -m cupyx.tools.install_library` installed CUDA libraries "
            "(cuTENSOR, NCCL, cuDNN) for CuPy to load; an installation, not a cache."
        ),
        replaces="~/.cupy/cuda_lib",
        upstream=("cupy-cuda12x==14.2.0 cupy/_environment.py",),
    ),
    Variable(
        "NUMBA_CACHE_DIR",
        "numba",
        purpose="Numba's cached functions (default: beside the source, even in site-packages).",
        replaces="__pycache__ next to each source file, else $XDG_CACHE_HOME/numba",
        upstream=("numba==0.65.0 numba/core/config.py",),
    ),
)

#: Variables by name, for lookups by parent.
BY_NAME: dict[str, Variable] = {v.name: v for v in TABLE}


#: Provenance of a value: the user set it.
EXPLICIT = "explicit"
#: Derived from an explicit ``CACHEROOT`` (or from a parent variable the user set).
DERIVED = "derived"
#: Derived from the fallback root (``XDG_CACHE_HOME`` or ``~/.cache``).
DEFAULT_SOURCE = "default"
#: The user set it under a legacy name of the row: :func:`apply` copies it to the current name.
LEGACY = "legacy"
#: An opt-in variable that was not asked for: left unset.
OPT_IN_OFF = "opt-in (off)"
#: Unusable: nothing is derived from it, and the doctor says why.
INVALID = "invalid"

#: Longest path Linux accepts (PATH_MAX includes the terminating NUL) and longest name.
_PATH_MAX = 4095
_NAME_MAX = 255
_TRUE = frozenset({"1", "true", "yes", "on"})


class Setting:
    """The value one variable gets, with where it came from and, when unusable, why."""

    __slots__ = ("name", "reason", "source", "value")

    def __init__(self, name: str, value: str | None, source: str, reason: str = "") -> None:
        self.name = name
        self.value = value
        self.source = source
        self.reason = reason

    def __repr__(self) -> str:
        return f"Setting({self.name!r}, {self.value!r}, {self.source!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Setting):
            return NotImplemented
        return (self.name, self.value, self.source, self.reason) == (
            other.name,
            other.value,
            other.source,
            other.reason,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    @property
    def applies(self) -> bool:
        """Whether :func:`apply` writes this value into the environment."""
        return self.source in (DERIVED, DEFAULT_SOURCE, LEGACY)


class Layout:
    """The resolved layout: the root, the tag, and one :class:`Setting` per variable."""

    __slots__ = ("problems", "root", "root_reason", "root_source", "settings", "tag")

    def __init__(
        self,
        *,
        root: str | None,
        root_source: str,
        root_reason: str,
        tag: str | None,
        settings: dict[str, Setting],
        problems: list[str],
    ) -> None:
        self.root = root
        self.root_source = root_source
        self.root_reason = root_reason
        self.tag = tag
        self.settings = settings
        self.problems = problems

    def __repr__(self) -> str:
        return f"Layout(root={self.root!r}, tag={self.tag!r}, settings={len(self.settings)})"

    @property
    def valid(self) -> bool:
        """True when nothing in the layout is invalid."""
        return not self.problems

    def applied(self) -> dict[str, str]:
        """The variables that :func:`apply` sets, by name."""
        return {s.name: s.value for s in self.settings.values() if s.applies and s.value}


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def truthy(value: str | None) -> bool:
    """Whether a switch variable is on (``1``, ``true``, ``yes``, ``on``; any case)."""
    return value is not None and value.strip().lower() in _TRUE


def secret_name(name: str) -> bool:
    """Whether a value called ``name`` (a query parameter, a ``NAME=value`` word) is a
    credential: one of :data:`SECRET_NAMES`, or a name containing one of :data:`SECRET_PARTS`
    (in any case, ``-`` read as ``_``)."""
    plain = name.strip().lower().replace("-", "_")
    return plain in SECRET_NAMES or any(part in plain for part in SECRET_PARTS)


def secret_variable(name: str) -> bool:
    """Whether an environment variable (or a ``NAME=value`` setting) called ``name`` holds a
    credential: :func:`secret_name`, or a name with one of :data:`SECRET_ENDINGS`
    (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``SSH_PRIVATE_KEY``, ``MYSQL_PWD``; not
    ``AWS_ACCESS_KEY_ID`` or ``PATH``). A dotted name (``wandb.api_key``, as Hydra writes an
    override) is judged by its last part as well."""
    plain = name.strip().lower().replace("-", "_")
    last = plain.rpartition(".")[2]
    return secret_name(plain) or secret_name(last) or last.endswith(SECRET_ENDINGS)


def shared_root(environ: "Mapping[str, str]") -> "str | None":
    """``CACHEROOT_SHARED`` of ``environ`` normalised; ``None`` when unset or blank.

    Raises :class:`ValueError` for a value that cannot be a directory (not absolute, ...): a
    fleet whose hosts each read a relative path would each publish somewhere else.
    """
    raw = environ.get(CACHEROOT_SHARED)
    if raw is None or _blank(raw):
        return None
    value = _expand(raw.strip(" \t"), environ)
    problem = path_problem(value)
    if problem:
        raise ValueError(f"{CACHEROOT_SHARED}={raw!r} {problem}; set it to an absolute path")
    return _norm(value)


def path_problem(value: str) -> str:
    """Why ``value`` cannot be a cache directory, or ``""`` when it can.

    Only string checks: the hook calls this at start-up and must not touch the disk.
    """
    if "\x00" in value or "\n" in value:
        return "contains a NUL or newline character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not decodable as UTF-8 (tools that export or log it would mangle it)"
    if not os.path.isabs(value):
        return "is not an absolute path"
    if len(value.encode("utf-8")) > _PATH_MAX:
        return f"is longer than {_PATH_MAX} bytes (PATH_MAX)"
    if any(len(part.encode("utf-8")) > _NAME_MAX for part in value.split("/")):
        return f"has a path component longer than {_NAME_MAX} bytes (NAME_MAX)"
    return ""


def _norm(path: str) -> str:
    """``normpath``, but POSIX's implementation-defined leading ``//`` becomes ``/``."""
    path = os.path.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _expand(value: str, environ: "Mapping[str, str]") -> str:
    """``~`` and ``~/x`` against the mapping's ``HOME`` (so :func:`resolve` stays pure)."""
    if not value.startswith("~"):
        return value
    user, _, tail = value[1:].partition("/")
    home = environ.get("HOME")
    if user or home is None or _blank(home):
        return os.path.expanduser(value)  # ~user, or no HOME: the password database decides
    return os.path.join(home.strip(), tail) if tail else home.strip()


def _inherited(environ: "Mapping[str, str]") -> dict[str, str]:
    """What a parent process's hook derived (``CACHEROOT_APPLIED``), by name."""
    raw = environ.get(CACHEROOT_APPLIED)
    if not raw:
        return {}
    found = {}
    for line in raw.split("\n"):
        name, sep, value = line.partition("=")
        if sep:
            found[name] = value
    return found


def _get(environ: "Mapping[str, str]", inherited: dict[str, str], name: str) -> str | None:
    """The user's value of ``name``: ``None`` when unset, or when a parent's hook derived it."""
    value = environ.get(name)
    if value is not None and inherited.get(name) == value:
        return None
    return value


def pin_path(prefix: str | None = None) -> str:
    """The pin file of the environment at ``prefix`` (default: ``CACHEROOT_PIN_FILE``, else
    this interpreter's); ``""`` when ``CACHEROOT_PIN_FILE`` is set but blank (no pin)."""
    if prefix is None:
        override = os.environ.get(CACHEROOT_PIN_FILE)
        if override is not None:
            return override.strip()
        prefix = sys.prefix
    return os.path.join(prefix, *PIN_FILE)


def _trust_problem(what: str, path: str, st: "os.stat_result", owner_fix: str) -> str:
    """Why a pin (or its directory) with status ``st`` may not be trusted, or ``""``.

    The rule ssh applies to ``authorized_keys``: owned by root or by this user, and writable by
    no one else (group included).
    """
    me = os.geteuid()
    if st.st_uid not in (0, me):
        return (
            f"{what} is owned by uid {st.st_uid}, neither root nor this user (uid {me}): "
            f"{owner_fix}"
        )
    mode = st.st_mode & 0o7777
    if mode & 0o022:
        whom = "other users" if mode & 0o002 else "its group"
        return f"{what} is writable by {whom} (mode {mode:04o}): chmod go-w {path}"
    return ""


def pin_dir_problem(directory: str) -> str:
    """Why the hook would not trust a pin in ``directory``, or ``""`` (also when it is absent)."""
    try:
        st = os.stat(directory or ".")
    except OSError:
        return ""
    return _trust_problem(
        f"its directory {directory}", directory, st, "make root or this user its owner (chown)"
    )


def read_pin(path: str | None = None, why: "list[str] | None" = None) -> dict[str, str]:
    """The ``CACHEROOT`` (and ``CACHEROOT_TAG``) a pin file records; ``{}`` when there is none.

    The file holds ``NAME=value`` lines; any other name, and an unreadable file, count as no pin
    (the hook must never fail; the doctor reports what it found). A pin that others could have
    written counts as none too, and ``why`` (when given) receives the reason: a link (never
    followed), not a regular file (a FIFO is opened without blocking), or a file or directory
    owned by another user than root and this one, or writable by group or others.
    """
    where = pin_path() if path is None else path
    if not where:
        return {}
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}  # no pin: the common case costs one failed open
    except OSError:
        if why is not None and os.path.islink(where):  # ELOOP, without importing errno
            why.append(f"{where} is a symbolic link (never followed): replace it with the file")
        return {}
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000:  # not S_ISREG (without importing stat)
            problem = f"{where} is not a regular file: remove it, then pin again"
        else:
            problem = _trust_problem(
                where, where, st, "remove it, then pin again as root or as this user"
            ) or pin_dir_problem(os.path.dirname(where))
        text = "" if problem else os.read(fd, 8192).decode("utf-8")
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    if problem:
        if why is not None:
            why.append(problem)
        return {}
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() in (CACHEROOT, CACHEROOT_TAG):
            found[name.strip()] = value.strip()
    return found


def _root(
    environ: "Mapping[str, str]", inherited: dict[str, str], pin: "Mapping[str, str]"
) -> tuple[str | None, str, str]:
    """The root, which variable it came from, and why it is invalid (or ``""``)."""
    raw = environ.get(CACHEROOT)
    source = CACHEROOT
    if (raw is None or _blank(raw)) and pin.get(CACHEROOT):
        raw, source = pin[CACHEROOT], PINNED
    if raw is not None and not _blank(raw):
        # Newlines and NULs count wherever they are: stripping them would accept a value that
        # every exporter and log line then mangles.
        value = _expand(raw.strip(" \t"), environ)
        problem = path_problem(value)
        if problem:
            name = CACHEROOT if source == CACHEROOT else f"the pinned {CACHEROOT}"
            return None, source, f"{name}={raw!r} {problem}; set it to an absolute path"
        return _norm(value), source, ""
    xdg = _get(environ, inherited, XDG_CACHE_HOME)
    if xdg is not None and not _blank(xdg) and not path_problem(xdg.strip()):
        return _norm(xdg.strip()), XDG_CACHE_HOME, ""
    value = os.path.join(_expand("~", environ), ".cache")
    problem = path_problem(value)
    if problem:
        return None, "~/.cache", f"the default root {value!r} {problem}; set {CACHEROOT}"
    return _norm(value), "~/.cache", ""


def _tag(
    environ: "Mapping[str, str]", tag: str | None, problems: list[str], pin: "Mapping[str, str]"
) -> str | None:
    raw = tag if tag is not None else environ.get(CACHEROOT_TAG)
    if raw is None or _blank(raw):
        raw = pin.get(CACHEROOT_TAG)
    if raw is None or _blank(raw):
        return None
    value = raw.strip().lower()
    if value not in TAGS:
        problems.append(
            f"{CACHEROOT_TAG}={raw!r} is not a known tag: expected one of {', '.join(TAGS)}; "
            "vendor caches are left unset"
        )
        return None
    return value


def _opted_in(environ: "Mapping[str, str]", problems: list[str]) -> frozenset[str]:
    raw = environ.get(CACHEROOT_OPT_IN) or ""
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if "all" in names:
        return frozenset(v.name for v in TABLE if v.mode == OPT_IN)
    unknown = sorted(n for n in names if n not in BY_NAME or BY_NAME[n].mode != OPT_IN)
    if unknown:
        allowed = ", ".join(v.name for v in TABLE if v.mode == OPT_IN)
        problems.append(
            f"{CACHEROOT_OPT_IN} names {', '.join(unknown)}, which cannot be opted into: "
            f"expected a comma-separated list of {allowed} (or 'all')"
        )
    return frozenset(names)


def _explicit(var: Variable, raw: str, environ: "Mapping[str, str]") -> Setting | None:
    """The setting for a value the user gave, or ``None`` when it is to be replaced."""
    value = _expand(raw.strip(" \t"), environ)
    problem = path_problem(value)
    if not problem:
        return Setting(var.name, _norm(value), EXPLICIT)
    if var.name == XDG_CACHE_HOME:
        return None  # the XDG spec: a relative value is ignored, so it is replaced like a blank
    return Setting(var.name, raw, INVALID, f"{var.name}={raw!r} {problem}")


def _given(
    var: Variable, environ: "Mapping[str, str]", inherited: dict[str, str]
) -> Setting | None:
    """The user's own setting of ``var`` (or of a legacy name), or ``None`` to derive it."""
    raw = _get(environ, inherited, var.name)
    if raw is not None and var.blank and _blank(raw):
        return Setting(var.name, raw, EXPLICIT, var.blank)  # the library gives blank a meaning
    if raw is not None and raw.strip() in var.off:
        return Setting(var.name, raw, EXPLICIT, f"{raw.strip()!r} turns it off: kept")
    legacy = ""
    if raw is None:
        for old in var.legacy:
            raw = _get(environ, inherited, old)
            if raw is not None and not _blank(raw):
                legacy = old
                break
    if raw is None or _blank(raw):
        return None
    given = _explicit(var, raw, environ)
    if given is not None and legacy and given.source == EXPLICIT:
        given.source = LEGACY
        given.reason = (
            f"set under the legacy name {legacy}: rename it to {var.name} "
            "(vLLM warns about VLLM_* names it does not define)"
        )
    return given


def _inside(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip("/") + "/")


def _apart(settings: dict[str, Setting], problems: list[str]) -> None:
    """cacheroot's media cache may not share (or nest in) vLLM's, nor the reverse.

    vLLM's eviction deletes every file of its directory whose name does not start with a dot,
    so a shared directory starves cacheroot's cache (and vLLM trips over its sub-directories).
    """
    ours = settings.get(CACHEROOT_MEDIA_CACHE)
    theirs = settings.get(VLLM_MEDIA_CACHE)
    if ours is None or theirs is None or not ours.value or not theirs.value:
        return
    if INVALID in (ours.source, theirs.source):
        return
    if _inside(ours.value, theirs.value) or _inside(theirs.value, ours.value):
        reason = (
            f"{CACHEROOT_MEDIA_CACHE}={ours.value!r} and {VLLM_MEDIA_CACHE}={theirs.value!r} "
            "share a directory, and vLLM's eviction deletes every file in its own: point them at "
            "two separate directories, or turn one of the caches off"
        )
        settings[CACHEROOT_MEDIA_CACHE] = Setting(ours.name, ours.value, INVALID, reason)
        problems.append(reason)


def resolve(
    environ: "Mapping[str, str]", tag: str | None = None, pin: "Mapping[str, str] | None" = None
) -> Layout:
    """Resolve the layout for ``environ`` without changing it.

    A variable is derived only where it is unset or blank (or holds what a parent process's hook
    derived): an explicit value always wins. ``tag`` (``cuda`` or ``rocm``) overrides
    ``CACHEROOT_TAG``. ``pin`` (what :func:`read_pin` found) stands in for an unset
    ``CACHEROOT`` and ``CACHEROOT_TAG``.
    """
    pin = pin or {}
    problems: list[str] = []
    inherited = _inherited(environ)
    root, root_source, root_reason = _root(environ, inherited, pin)
    if root_reason:
        problems.append(root_reason)
    # The pin is a pair: its tag goes with its root, never with a CACHEROOT the user set.
    the_tag = _tag(environ, tag, problems, pin if root_source == PINNED else {})
    opted = _opted_in(environ, problems)
    base_source = DERIVED if root_source in (CACHEROOT, PINNED) else DEFAULT_SOURCE
    settings: dict[str, Setting] = {}
    for var in TABLE:
        if var.mode not in (DEFAULT, OPT_IN) or (var.tags != TAGS and the_tag not in var.tags):
            continue
        given = _given(var, environ, inherited)
        if given is not None:
            settings[var.name] = given
            if given.source == INVALID:
                problems.append(f"{given.reason}; set it to an absolute path")
            continue
        if var.mode == OPT_IN and var.name not in opted:
            settings[var.name] = Setting(
                var.name, None, OPT_IN_OFF, f"add it to {CACHEROOT_OPT_IN} to derive it"
            )
            continue
        parent = settings.get(var.parent) if var.parent else None
        if parent is not None and parent.value and parent.source != INVALID:
            base = parent.value
            source = DERIVED if parent.source in (EXPLICIT, LEGACY) else parent.source
        elif var.parent:
            reason = f"its parent {var.parent} is unusable"
            settings[var.name] = Setting(var.name, None, INVALID, reason)
            continue
        elif root is not None:
            base, source = root, base_source
        else:
            reason = f"the root is unusable: {root_reason}"
            settings[var.name] = Setting(var.name, None, INVALID, reason)
            continue
        # ``base`` is normalised and valid, and the table's paths are clean relative names, so
        # only the length can go wrong: re-check a value only where UTF-8 could exceed PATH_MAX.
        value = f"{base.rstrip('/')}/{var.path}" if var.path else base
        problem = "" if len(value) * 4 <= _PATH_MAX else path_problem(value)
        if problem:
            settings[var.name] = Setting(var.name, None, INVALID, f"{value!r} {problem}")
            problems.append(f"{var.name} would be {value!r}, which {problem}")
            continue
        settings[var.name] = Setting(var.name, value, source)
    _apart(settings, problems)
    return Layout(
        root=root,
        root_source=root_source,
        root_reason=root_reason,
        tag=the_tag,
        settings=settings,
        problems=problems,
    )


def apply(
    environ: "MutableMapping[str, str] | None" = None,
    tag: str | None = None,
    pin: "Mapping[str, str] | None" = None,
) -> Layout:
    """Set every variable that :func:`resolve` derived; leave everything else alone.

    What it sets is recorded in ``CACHEROOT_APPLIED``. A value inherited from a parent's hook
    that this layout no longer derives (the child named an unusable root) is removed, as if the
    parent's hook had not run, rather than left pointing at the parent's root.
    """
    env = os.environ if environ is None else environ
    inherited = _inherited(env)
    layout = resolve(env, tag, pin)
    applied = layout.applied()
    for name, value in inherited.items():
        if name not in applied and env.get(name) == value:
            del env[name]
    for name, value in applied.items():
        env[name] = value
    if applied:
        env[CACHEROOT_APPLIED] = "\n".join(f"{k}={v}" for k, v in applied.items())
    elif CACHEROOT_APPLIED in env:
        del env[CACHEROOT_APPLIED]
    return layout


#: The pin warnings this process gave (:func:`hook`).
_WARNED: set[str] = set()


def hook(environ: "MutableMapping[str, str] | None" = None) -> bool:
    """The start-up hook in full: :func:`apply`, unless disabled; never raises.

    At start-up, :func:`_cacheroot_start.hook` does the same from its templates and
    :func:`_cacheroot_compact.hook` from its compact table; they hand over here only a process
    without ``CACHEROOT`` that finds a pin file. A process without
    ``CACHEROOT`` takes the environment's pinned root, if any. Returns whether the run-time audit
    was asked for (``CACHEROOT_AUDIT`` set, after :func:`apply`, in the real :data:`os.environ`;
    never for a given mapping): the start-up files then call ``_cacheroot_hook.audit()``. The
    layout never imports the audit, which imports the layout.
    """
    env = os.environ if environ is None else environ
    try:
        if truthy(env.get(CACHEROOT_DISABLE)):
            return False
        why: list[str] = []
        apply(env, pin=read_pin(why=why) if _blank(env.get(CACHEROOT)) else None)
        if why and why[0] not in _WARNED:
            # Once per process, however often the hook is called in it.
            _WARNED.add(why[0])
            sys.stderr.write(f"cacheroot: ignoring the pinned root: {why[0]}\n")
        return environ is None and not _blank(env.get(CACHEROOT_AUDIT))
    except Exception:  # noqa: BLE001 - an interpreter must always start; the doctor reports
        return False
