# ruff: noqa: I002 - no `from __future__` import: one module less at every interpreter start
"""The layout's rules over a compact copy of its table: the start-up hook's second step.

:mod:`_cacheroot_start` applies the layout itself only to a plain environment (a root and none
of the layout's variables, or exactly what a parent's hook derived); every other environment,
and every given mapping, comes here. :mod:`_cacheroot_layout` is the source of truth: every
variable with its documentation, the resolver that reports why a value is unusable, the pin
file's checks; loading it costs about 0.4 ms (some fifty table rows, three classes and their
docstrings). This module holds what applying needs and nothing more: the rows the hook may set,
as one literal tuple (a single constant of the bytecode: nothing to execute), and the rules of
:func:`_cacheroot_layout.apply` over them, with no classes and no explanations.

The part between the ``generated`` markers is written from the layout by
``python tests/envs/start_table.py`` (``nox -s start_table``); ``tests/envs/test_start.py``
fails when it is stale, and checks that :func:`hook` leaves every environment as
:func:`_cacheroot_layout.hook` leaves it. A process without ``CACHEROOT`` whose environment has a
pin file (``cacheroot hook pin``) is handed to :func:`_cacheroot_layout.hook`, which reads the
pin and judges whether it may be trusted; without a pin file, looking costs one failed ``lstat``.

Like the layout, this is a top-level module that imports only :mod:`os` and :mod:`sys` (both
loaded before ``site`` runs) and never raises from :func:`hook`.
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only; never imported at run time
    from collections.abc import Mapping, MutableMapping

# generated: start (python tests/envs/start_table.py writes it from _cacheroot_layout)
CACHEROOT = "CACHEROOT"
CACHEROOT_APPLIED = "CACHEROOT_APPLIED"
CACHEROOT_AUDIT = "CACHEROOT_AUDIT"
CACHEROOT_DISABLE = "CACHEROOT_DISABLE"
CACHEROOT_MEDIA_CACHE = "CACHEROOT_MEDIA_CACHE"
CACHEROOT_OPT_IN = "CACHEROOT_OPT_IN"
CACHEROOT_PIN_FILE = "CACHEROOT_PIN_FILE"
CACHEROOT_TAG = "CACHEROOT_TAG"
PIN_FILE = ("etc", "cacheroot", "pin")
TAGS = ("cuda", "rocm")
VLLM_MEDIA_CACHE = "VLLM_MEDIA_CACHE"
XDG_CACHE_HOME = "XDG_CACHE_HOME"
_NAME_MAX = 255
_PATH_MAX = 4095
_TRUE = ("1", "on", "true", "yes")
ROWS = (
    ("XDG_CACHE_HOME", "", "", (), False, False, (), ()),
    ("HF_HOME", "huggingface", "", (), False, False, (), ()),
    ("MODELSCOPE_CACHE", "modelscope", "", (), False, False, (), ()),
    ("VLLM_CACHE_ROOT", "vllm", "", (), False, False, (), ()),
    ("VLLM_ASSETS_CACHE", "assets", "VLLM_CACHE_ROOT", (), False, False, (), ()),
    ("VLLM_XLA_CACHE_PATH", "xla_cache", "VLLM_CACHE_ROOT", (), False, False, (), ()),
    (
        "_VLLM_TEST_CACHE",
        "test_cache",
        "VLLM_CACHE_ROOT",
        (),
        False,
        False,
        ("VLLM_TEST_CACHE",),
        (),
    ),
    ("VLLM_MEDIA_CACHE", "media_cache", "VLLM_CACHE_ROOT", (), True, True, (), ()),
    ("CACHEROOT_MEDIA_CACHE", "mediacache", "", (), True, False, (), ()),
    ("TIKTOKEN_CACHE_DIR", "tiktoken", "", (), False, True, (), ()),
    ("TIKTOKEN_RS_CACHE_DIR", "tiktoken-rs", "", (), False, False, (), ()),
    ("TORCH_HOME", "torch", "", (), False, False, (), ()),
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor", "", (), False, False, (), ()),
    ("TRITON_CACHE_DIR", "triton", "", (), False, False, (), ()),
    ("TVM_FFI_CACHE_DIR", "tvm-ffi", "", (), False, False, (), ()),
    ("TILELANG_CACHE_DIR", "tilelang", "", (), False, False, (), ()),
    ("CUDA_CACHE_PATH", "nv/ComputeCache", "", ("cuda",), False, False, (), ()),
    ("CUTE_DSL_CACHE_DIR", "cute_dsl", "", ("cuda",), False, False, (), ()),
    (
        "CUTE_EXPERIMENTAL_DSL_CACHE_DIR",
        "cute_dsl_experimental",
        "",
        ("cuda",),
        False,
        False,
        (),
        (),
    ),
    (
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
        "flash_attention_cute_dsl",
        "",
        ("cuda",),
        False,
        False,
        (),
        (),
    ),
    ("QUACK_CACHE_DIR", "quack", "", ("cuda",), False, False, (), ()),
    ("HUMMING_CACHE_DIR", "humming/cache", "", ("cuda",), False, False, (), ()),
    ("HUMMING_TMP_DIR", "humming/tmp", "", ("cuda",), False, False, (), ()),
    ("MINFER_FMHA_CACHE_DIR", "minfer/fmha_sm100", "", ("cuda",), False, False, (), ()),
    ("MM_SPARSE_ATTN_AOT_CACHE", "minfer/mm_sparse_attn", "", ("cuda",), False, False, (), ()),
    ("DG_JIT_CACHE_DIR", "deep_gemm", "", ("cuda",), False, False, (), ()),
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer", "", ("cuda",), False, False, (), ()),
    (
        "FLASHINFER_MOE_EP_KNOB_CACHE",
        ".cache/flashinfer/moe_ep_knob_cache.json",
        "FLASHINFER_WORKSPACE_BASE",
        ("cuda",),
        False,
        False,
        (),
        ("0",),
    ),
    ("MIOPEN_USER_DB_PATH", "miopen/db", "", ("rocm",), False, False, (), ()),
    ("MIOPEN_CUSTOM_CACHE_DIR", "miopen/cache", "", ("rocm",), False, False, (), ()),
    ("AITER_JIT_DIR", "aiter/jit", "", ("rocm",), False, False, (), ()),
    ("AITER_ROOT_DIR", "aiter", "", ("rocm",), True, False, (), ()),
    ("FLYDSL_RUNTIME_CACHE_DIR", "flydsl/cache", "", ("rocm",), False, True, (), ()),
    ("CUPY_CACHE_DIR", "cupy/kernel_cache", "", (), False, False, (), ()),
    ("NUMBA_CACHE_DIR", "numba", "", (), False, False, (), ()),
)


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def _expand(value: str, environ: "Mapping[str, str]") -> str:
    """``~`` and ``~/x`` against the mapping's ``HOME`` (so :func:`resolve` stays pure)."""
    if not value.startswith("~"):
        return value
    user, _, tail = value[1:].partition("/")
    home = environ.get("HOME")
    if user or home is None or _blank(home):
        return os.path.expanduser(value)  # ~user, or no HOME: the password database decides
    return os.path.join(home.strip(), tail) if tail else home.strip()


def _get(environ: "Mapping[str, str]", inherited: dict[str, str], name: str) -> str | None:
    """The user's value of ``name``: ``None`` when unset, or when a parent's hook derived it."""
    value = environ.get(name)
    if value is not None and inherited.get(name) == value:
        return None
    return value


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


def _inside(path: str, other: str) -> bool:
    return path == other or path.startswith(other.rstrip("/") + "/")


def _norm(path: str) -> str:
    """``normpath``, but POSIX's implementation-defined leading ``//`` becomes ``/``."""
    path = os.path.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def truthy(value: str | None) -> bool:
    """Whether a switch variable is on (``1``, ``true``, ``yes``, ``on``; any case)."""
    return value is not None and value.strip().lower() in _TRUE


# generated part ends

#: Where a value came from, as :mod:`_cacheroot_layout` names it (``EXPLICIT``, ...): only
#: ``derived``, ``default`` and ``legacy`` values are set, and an ``invalid`` one has no children.
_EXPLICIT = "explicit"
_DERIVED = "derived"
_DEFAULT = "default"
_LEGACY = "legacy"
_OFF = "off"
_INVALID = "invalid"
_SETS = (_DERIVED, _DEFAULT, _LEGACY)


def hook(environ: "MutableMapping[str, str] | None" = None) -> bool:
    """:func:`_cacheroot_layout.hook`, from the compact table: the same variables set, the same
    return value (whether the run-time audit was asked for); never raises."""
    env = os.environ if environ is None else environ
    try:
        if truthy(env.get(CACHEROOT_DISABLE)):
            return False
        if _blank(env.get(CACHEROOT)) and _pin_may_exist():
            import _cacheroot_layout  # noqa: PLC0415 - a pin to read and judge: the full layout

            return _cacheroot_layout.hook(environ)
        _apply(env)
        return environ is None and not _blank(env.get(CACHEROOT_AUDIT))
    except Exception:  # noqa: BLE001 - an interpreter must always start; the doctor reports
        return False


def _pin_may_exist() -> bool:
    """Whether anything sits where :func:`_cacheroot_layout.pin_path` looks (only "no such
    file" counts as no pin: every other outcome is the layout's to judge)."""
    where = os.environ.get(CACHEROOT_PIN_FILE)
    where = os.path.join(sys.prefix, *PIN_FILE) if where is None else where.strip()
    if not where:
        return False
    try:
        os.lstat(where)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _apply(env: "MutableMapping[str, str]") -> None:
    """:func:`_cacheroot_layout.apply` without a pin: set what is derived, record it, and drop
    what a parent's hook derived that this layout no longer derives."""
    inherited = _inherited(env)
    applied = _derive(env, inherited)
    for name, value in inherited.items():
        if name not in applied and env.get(name) == value:
            del env[name]
    # A child of a hooked process mostly derives what it inherited: a value already there is
    # not written again (the same environment, without a putenv per variable).
    for name, value in applied.items():
        if inherited.get(name) != value or env.get(name) != value:
            env[name] = value
    if applied:
        record = "\n".join(f"{k}={v}" for k, v in applied.items())
        if env.get(CACHEROOT_APPLIED) != record:
            env[CACHEROOT_APPLIED] = record
    elif CACHEROOT_APPLIED in env:
        del env[CACHEROOT_APPLIED]


def _derive(env: "Mapping[str, str]", inherited: "dict[str, str]") -> "dict[str, str]":
    """What :func:`_cacheroot_layout.resolve` derives for ``env`` (no pin), by name, in order."""
    root, root_source = _root(env, inherited)
    base_source = _DERIVED if root_source == CACHEROOT else _DEFAULT
    tag = _tag(env)
    opted = {n.strip() for n in (env.get(CACHEROOT_OPT_IN) or "").split(",")}
    every = "all" in opted
    settings: dict[str, tuple[str | None, str]] = {}
    for name, path, parent, tags, opt_in, keeps_blank, legacy, off in ROWS:
        if tags and tag not in tags:
            continue
        given = _given(env, inherited, name, keeps_blank=keeps_blank, legacy=legacy, off=off)
        if given is not None:
            settings[name] = given
            continue
        if opt_in and not every and name not in opted:
            settings[name] = (None, _OFF)
            continue
        if parent:
            base, source = settings.get(parent, (None, _INVALID))
            if not base or source == _INVALID:
                settings[name] = (None, _INVALID)
                continue
            if source in (_EXPLICIT, _LEGACY):
                source = _DERIVED
        elif root is not None:
            base, source = root, base_source
        else:
            settings[name] = (None, _INVALID)
            continue
        value = f"{base.rstrip('/')}/{path}" if path else base
        if len(value) * 4 > _PATH_MAX and _problem(value):
            settings[name] = (None, _INVALID)
            continue
        settings[name] = (value, source)
    ours = settings.get(CACHEROOT_MEDIA_CACHE, (None, _INVALID))
    theirs = settings.get(VLLM_MEDIA_CACHE, (None, _INVALID))
    if (
        ours[0]
        and theirs[0]
        and _INVALID not in (ours[1], theirs[1])
        and (_inside(ours[0], theirs[0]) or _inside(theirs[0], ours[0]))
    ):
        settings[CACHEROOT_MEDIA_CACHE] = (ours[0], _INVALID)
    return {n: v for n, (v, s) in settings.items() if v and s in _SETS}


def _root(env: "Mapping[str, str]", inherited: "dict[str, str]") -> "tuple[str | None, str]":
    """The root (``None`` when unusable) and where it came from."""
    raw = env.get(CACHEROOT)
    if raw is not None and not _blank(raw):
        value = _expand(raw.strip(" \t"), env)
        return (None if _problem(value) else _norm(value)), CACHEROOT
    xdg = _get(env, inherited, XDG_CACHE_HOME)
    if xdg is not None and not _blank(xdg) and not _problem(xdg.strip()):
        return _norm(xdg.strip()), XDG_CACHE_HOME
    value = os.path.join(_expand("~", env), ".cache")
    return (None if _problem(value) else _norm(value)), "~/.cache"


def _tag(env: "Mapping[str, str]") -> "str | None":
    raw = env.get(CACHEROOT_TAG)
    if raw is None or _blank(raw):
        return None
    value = raw.strip().lower()
    return value if value in TAGS else None


def _given(
    env: "Mapping[str, str]",
    inherited: "dict[str, str]",
    name: str,
    *,
    keeps_blank: bool,
    legacy: "tuple[str, ...]",
    off: "tuple[str, ...]",
) -> "tuple[str | None, str] | None":
    """The user's own value of a row and its source, or ``None`` to derive it."""
    raw = _get(env, inherited, name)
    if raw is not None and keeps_blank and _blank(raw):
        return raw, _EXPLICIT
    if raw is not None and raw.strip() in off:
        return raw, _EXPLICIT
    old = ""
    if raw is None:
        for old_name in legacy:
            raw = _get(env, inherited, old_name)
            if raw is not None and not _blank(raw):
                old = old_name
                break
    if raw is None or _blank(raw):
        return None
    value = _expand(raw.strip(" \t"), env)
    if _problem(value):
        return None if name == XDG_CACHE_HOME else (raw, _INVALID)
    return _norm(value), (_LEGACY if old else _EXPLICIT)


def _problem(value: str) -> bool:
    """Whether :func:`_cacheroot_layout.path_problem` finds ``value`` unusable."""
    if "\x00" in value or "\n" in value or not os.path.isabs(value):
        return True
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return len(encoded) > _PATH_MAX or any(len(p) > _NAME_MAX for p in encoded.split(b"/"))
