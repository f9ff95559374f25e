# ruff: noqa: I002 - no `from __future__` import: one module less at every interpreter start
"""The start-up hook: the layout applied to a plain environment from one template per tag.

Every Python process of the environment runs :func:`start` (``cacheroot.pth``: its one line
imports this module and calls it), so what this module loads and does is paid at every
interpreter start. It ships in cacheroot-sitecustomize beside ``cacheroot.pth``, so the line
needs no ``try`` (which would cost a compile of the line's code at every start): one is never
installed without the other.

Most processes start in one of two plain environments: a fresh one that names a root
(``CACHEROOT``, or ``HOME`` for ``~/.cache``) and none of the layout's variables, or a child of
a hooked process that inherited exactly what its parent derived (``CACHEROOT_APPLIED``). In
both, the layout derives the same thing: every row of the tag, the root followed by the row's
path, in the table's order. So this module holds that record as one ``bytes`` template per tag
(with the names it reads), written by ``python tests/envs/start_table.py``
(``nox -s start_table``) from what :func:`_cacheroot_layout.hook` derives, and applies it in
one pass over the bytes that :data:`os.environ` keeps: no decoding, no ``KeyError`` per absent
name, a ``putenv`` only for what changes.

Anything else is handed on, unchanged, to :mod:`_cacheroot_compact` (the layout's rules over a
compact copy of its table), which hands a pin file on to :mod:`_cacheroot_layout`: a variable of
the layout the user set, a legacy name, an opt-in, a root that is relative, not ASCII, spelt
with ``.``, ``..`` or ``//``, or longer than :data:`_PLAIN_MAX` bytes, a pin that may exist.
``tests/envs/test_start.py`` checks that what this module does is what the layout does, on
written-out and drawn environments, and that the plain ones are not handed on.

Like the layout, this is a top-level module that imports only :mod:`os` and :mod:`sys` (loaded
before ``site`` runs), and :func:`start` never raises.
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only; never imported at run time
    from collections.abc import Callable, MutableMapping

# generated: templates (python tests/envs/start_table.py writes them from _cacheroot_layout)
TEMPLATES = {
    b"": (
        b"XDG_CACHE_HOME=\n"
        b"HF_HOME=/huggingface\n"
        b"MODELSCOPE_CACHE=/modelscope\n"
        b"VLLM_CACHE_ROOT=/vllm\n"
        b"VLLM_ASSETS_CACHE=/vllm/assets\n"
        b"VLLM_XLA_CACHE_PATH=/vllm/xla_cache\n"
        b"_VLLM_TEST_CACHE=/vllm/test_cache\n"
        b"TIKTOKEN_CACHE_DIR=/tiktoken\n"
        b"TIKTOKEN_RS_CACHE_DIR=/tiktoken-rs\n"
        b"TORCH_HOME=/torch\n"
        b"TORCHINDUCTOR_CACHE_DIR=/torchinductor\n"
        b"TRITON_CACHE_DIR=/triton\n"
        b"TVM_FFI_CACHE_DIR=/tvm-ffi\n"
        b"TILELANG_CACHE_DIR=/tilelang\n"
        b"CUPY_CACHE_DIR=/cupy/kernel_cache\n"
        b"NUMBA_CACHE_DIR=/numba"
    ),
    b"cuda": (
        b"XDG_CACHE_HOME=\n"
        b"HF_HOME=/huggingface\n"
        b"MODELSCOPE_CACHE=/modelscope\n"
        b"VLLM_CACHE_ROOT=/vllm\n"
        b"VLLM_ASSETS_CACHE=/vllm/assets\n"
        b"VLLM_XLA_CACHE_PATH=/vllm/xla_cache\n"
        b"_VLLM_TEST_CACHE=/vllm/test_cache\n"
        b"TIKTOKEN_CACHE_DIR=/tiktoken\n"
        b"TIKTOKEN_RS_CACHE_DIR=/tiktoken-rs\n"
        b"TORCH_HOME=/torch\n"
        b"TORCHINDUCTOR_CACHE_DIR=/torchinductor\n"
        b"TRITON_CACHE_DIR=/triton\n"
        b"TVM_FFI_CACHE_DIR=/tvm-ffi\n"
        b"TILELANG_CACHE_DIR=/tilelang\n"
        b"CUDA_CACHE_PATH=/nv/ComputeCache\n"
        b"CUTE_DSL_CACHE_DIR=/cute_dsl\n"
        b"CUTE_EXPERIMENTAL_DSL_CACHE_DIR=/cute_dsl_experimental\n"
        b"FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/flash_attention_cute_dsl\n"
        b"QUACK_CACHE_DIR=/quack\n"
        b"HUMMING_CACHE_DIR=/humming/cache\n"
        b"HUMMING_TMP_DIR=/humming/tmp\n"
        b"MINFER_FMHA_CACHE_DIR=/minfer/fmha_sm100\n"
        b"MM_SPARSE_ATTN_AOT_CACHE=/minfer/mm_sparse_attn\n"
        b"DG_JIT_CACHE_DIR=/deep_gemm\n"
        b"FLASHINFER_WORKSPACE_BASE=/flashinfer\n"
        b"FLASHINFER_MOE_EP_KNOB_CACHE=/flashinfer/.cache/flashinfer/moe_ep_knob_cache.json\n"
        b"CUPY_CACHE_DIR=/cupy/kernel_cache\n"
        b"NUMBA_CACHE_DIR=/numba"
    ),
    b"rocm": (
        b"XDG_CACHE_HOME=\n"
        b"HF_HOME=/huggingface\n"
        b"MODELSCOPE_CACHE=/modelscope\n"
        b"VLLM_CACHE_ROOT=/vllm\n"
        b"VLLM_ASSETS_CACHE=/vllm/assets\n"
        b"VLLM_XLA_CACHE_PATH=/vllm/xla_cache\n"
        b"_VLLM_TEST_CACHE=/vllm/test_cache\n"
        b"TIKTOKEN_CACHE_DIR=/tiktoken\n"
        b"TIKTOKEN_RS_CACHE_DIR=/tiktoken-rs\n"
        b"TORCH_HOME=/torch\n"
        b"TORCHINDUCTOR_CACHE_DIR=/torchinductor\n"
        b"TRITON_CACHE_DIR=/triton\n"
        b"TVM_FFI_CACHE_DIR=/tvm-ffi\n"
        b"TILELANG_CACHE_DIR=/tilelang\n"
        b"MIOPEN_USER_DB_PATH=/miopen/db\n"
        b"MIOPEN_CUSTOM_CACHE_DIR=/miopen/cache\n"
        b"AITER_JIT_DIR=/aiter/jit\n"
        b"FLYDSL_RUNTIME_CACHE_DIR=/flydsl/cache\n"
        b"CUPY_CACHE_DIR=/cupy/kernel_cache\n"
        b"NUMBA_CACHE_DIR=/numba"
    ),
}
OTHERS = (
    b"AITER_ROOT_DIR",
    b"CACHEROOT_MEDIA_CACHE",
    b"CACHEROOT_OPT_IN",
    b"VLLM_MEDIA_CACHE",
    b"VLLM_TEST_CACHE",
)
TRUE = (b"1", b"on", b"true", b"yes")
CACHEROOT = b"CACHEROOT"
CACHEROOT_APPLIED = b"CACHEROOT_APPLIED"
CACHEROOT_AUDIT = b"CACHEROOT_AUDIT"
CACHEROOT_DISABLE = b"CACHEROOT_DISABLE"
CACHEROOT_PIN_FILE = b"CACHEROOT_PIN_FILE"
CACHEROOT_TAG = b"CACHEROOT_TAG"
PIN_FILE = ("etc", "cacheroot", "pin")
# generated part ends

#: The longest plain root, in bytes: every derived value stays far below ``PATH_MAX`` and every
#: component below ``NAME_MAX``, so no value needs the layout's length checks.
_PLAIN_MAX = 200
#: Whether :func:`start` ran in this interpreter.
_started = False


def start() -> None:
    """Apply the layout, then install the run-time audit where it is asked for; once per
    interpreter, and never raises.

    This is what ``cacheroot.pth`` runs (``site`` reads a venv's ``.pth`` files twice: the
    second call returns at once), what ``cacheroot.start`` names for Python 3.15 and later, and
    what the ``PYTHONPATH`` folder's ``sitecustomize`` calls. ``_cacheroot_hook`` is imported
    only when ``CACHEROOT_AUDIT`` is set.
    """
    global _started  # noqa: PLW0603 - once per interpreter, whoever calls
    if _started:
        return
    _started = True
    try:
        if hook():
            import _cacheroot_hook  # noqa: PLC0415 - only when the audit is asked for

            _cacheroot_hook.audit()
    except Exception:  # noqa: BLE001, S110 - an interpreter must always start
        pass


def hook(environ: "MutableMapping[str, str] | None" = None) -> bool:
    """:func:`_cacheroot_layout.hook`: the same variables set, the same return value (whether
    the run-time audit was asked for); never raises.

    The real environment is applied here when it is plain; a given mapping, and every other
    environment, by :func:`_cacheroot_compact.hook`.
    """
    if environ is None and os.supports_bytes_environ:
        data = getattr(os.environ, "_data", None)
        if type(data) is dict:
            applied = plain(data, os.putenv)
            if applied is not None:
                return applied
    try:
        import _cacheroot_compact  # noqa: PLC0415 - not a plain environment
    except Exception:  # noqa: BLE001 - an interpreter must always start
        return False
    return _cacheroot_compact.hook(environ)


def plain(data: "dict[bytes, bytes]", putenv: "Callable[[bytes, bytes], None]") -> "bool | None":
    """Apply the layout to ``data`` (an environment as :data:`os.environ` holds it on POSIX,
    bytes to bytes) if it is plain, calling ``putenv`` for each value it writes; return whether
    the run-time audit was asked for (never where ``CACHEROOT_DISABLE`` is on, which writes
    nothing). ``None``, with nothing written: not plain.
    """
    off = data.get(CACHEROOT_DISABLE)
    if off is not None:
        off = off.strip().lower()
        if off in TRUE:
            return False
        if not off.isascii() or not off.decode().isprintable():
            return None  # the layout's reading of the switch decides
    for name in OTHERS:
        if name in data:
            return None
    tag = data.get(CACHEROOT_TAG)
    template = TEMPLATES.get(tag.strip().lower() if tag else b"")
    root = _root(data)
    if template is None or root is None:
        return None  # a tag that is not one (the layout reads it), or no plain root
    missing = _missing(data, template.replace(b"=", b"=" + root))
    if missing is None:
        return None
    for name, value in missing:
        putenv(name, value)
        data[name] = value
    audit = data.get(CACHEROOT_AUDIT)
    return audit is not None and bool(os.fsdecode(audit).strip())


def _root(data: "dict[bytes, bytes]") -> "bytes | None":
    """The root, when ``CACHEROOT`` (or, without it and without a pin, ``HOME``) is plain."""
    root = data.get(CACHEROOT)
    if root is not None and root.strip():
        return _clean(root) if root.strip(b" \t") == root else None
    if _pin_may_exist():
        return None
    home = data.get(b"HOME")
    if not home or home.strip() != home:
        return None
    return _clean(home.rstrip(b"/") + b"/.cache")


def _clean(path: bytes) -> "bytes | None":
    """``path`` without trailing slashes if it is absolute, printable ASCII of at most
    :data:`_PLAIN_MAX` bytes, and has no ``.``, ``..`` or empty component; else ``None``."""
    slashed = path + b"/"
    if (
        path[:1] != b"/"
        or len(path) > _PLAIN_MAX
        or not path.isascii()
        or not path.decode().isprintable()
        or b"//" in path
        or b"/./" in slashed
        or b"/../" in slashed
    ):
        return None
    return path.rstrip(b"/") or None


def _missing(data: "dict[bytes, bytes]", record: bytes) -> "list[tuple[bytes, bytes]] | None":
    """What to write for ``record`` (the layout's ``CACHEROOT_APPLIED`` for this root and tag):
    every value that is absent, and the record itself in a fresh environment. ``None`` where a
    row holds a value of its own, or the environment inherited another record."""
    inherited = data.get(CACHEROOT_APPLIED)
    if inherited is not None and inherited != record:
        return None
    missing = []
    for line in record.split(b"\n"):
        name, _, value = line.partition(b"=")
        old = data.get(name)
        if old is None:
            missing.append((name, value))
        elif old != value or inherited is None:
            return None  # the user's own value, even one spelt as the layout would derive it
    if inherited is None:
        missing.append((CACHEROOT_APPLIED, record))
    return missing


def _pin_may_exist() -> bool:
    """Whether anything sits where :func:`_cacheroot_layout.pin_path` looks: the real
    environment's ``CACHEROOT_PIN_FILE``, as the layout reads it, or the default under
    ``sys.prefix`` (only "no such file" counts as no pin)."""
    where = os.environ.get(CACHEROOT_PIN_FILE.decode())
    if where is not None:
        where = where.strip()
        if not where:
            return False
    try:
        os.lstat(os.path.join(sys.prefix, *PIN_FILE) if where is None else where)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True
