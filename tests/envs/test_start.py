"""The start-up hook's fast path (``_cacheroot_start``) against the layout it is generated from.

Its generated part must be what ``start_table.py`` writes from ``_cacheroot_layout`` now, and
its ``hook()`` must leave every environment exactly as ``_cacheroot_layout.hook()`` leaves it:
the same variables set and removed, the same ``CACHEROOT_APPLIED``, the same return value. A few
environments are written out with the expected result as literals; many more are drawn at
random (hypothesis) from values that exercise each rule: blank, relative, ``~``, too long,
undecodable, a library's "off", legacy names, tags, opt-ins, a parent's hook's values.
"""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING

import _cacheroot_layout
import _cacheroot_start
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.envs import start_table
else:
    # pytest puts tests/envs on sys.path (no package there); mypy names it tests.envs.
    import start_table


def both(env: dict[str, str]) -> tuple[tuple[bool, dict[str, str]], tuple[bool, dict[str, str]]]:
    """``(returned, environment after)`` of the fast hook and of the layout's, each on a copy."""
    fast, full = dict(env), dict(env)
    return (_cacheroot_start.hook(fast), fast), (_cacheroot_layout.hook(full), full)


def fast_hook(env: dict[str, str]) -> dict[str, str]:
    """The environment after the fast hook, checked equal to the layout's result."""
    (fast_returned, fast), (full_returned, full) = both(env)
    assert fast == full
    assert fast_returned is full_returned is False  # a given mapping never asks for the audit
    return fast


# -- the generated part -----------------------------------------------------------------------


def test_the_generated_table_is_fresh() -> None:
    text = start_table.START.read_text(encoding="utf-8")
    assert start_table.current(text) == start_table.block(), (
        f"{start_table.START.name} is stale: the layout changed since it was generated; run "
        "`nox -s start_table` (or `python tests/envs/start_table.py`) and commit the result"
    )


def test_a_new_row_makes_the_generated_table_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The freshness check sees a row added to the layout (or a path changed)."""
    text = start_table.START.read_text(encoding="utf-8")
    row = _cacheroot_layout.Variable(
        "NEW_CACHE_DIR", "new", purpose="a test row", replaces="~/.new", upstream=("doc: test",)
    )
    monkeypatch.setattr(_cacheroot_layout, "TABLE", (*_cacheroot_layout.TABLE, row))
    assert '("NEW_CACHE_DIR", "new", "", (), False, False, (), ()),' in start_table.block()
    assert start_table.current(text) != start_table.block()


def test_the_fast_path_holds_the_rows_the_hook_may_set() -> None:
    names = [row[0] for row in _cacheroot_start.ROWS]
    assert names[:4] == ["XDG_CACHE_HOME", "HF_HOME", "MODELSCOPE_CACHE", "VLLM_CACHE_ROOT"]
    # Never-set rows are not there: the hook does not need them.
    assert "HF_HUB_CACHE" not in names
    assert "TRITON_HOME" not in names
    assert _cacheroot_start.TAGS == ("cuda", "rocm")


def test_the_fast_path_imports_os_and_sys_and_the_layout_only_for_a_pin() -> None:
    tree = ast.parse(start_table.START.read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in top] == ["import os", "import sys"]
    (hook,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "hook")
    inner = [n for n in ast.walk(hook) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in inner] == ["import _cacheroot_layout"]


# -- literal cases ----------------------------------------------------------------------------

ROCM_FROM_R = {
    "XDG_CACHE_HOME": "/r",
    "HF_HOME": "/r/huggingface",
    "MODELSCOPE_CACHE": "/r/modelscope",
    "VLLM_CACHE_ROOT": "/r/vllm",
    "VLLM_ASSETS_CACHE": "/r/vllm/assets",
    "VLLM_XLA_CACHE_PATH": "/r/vllm/xla_cache",
    "_VLLM_TEST_CACHE": "/r/vllm/test_cache",
    "TIKTOKEN_CACHE_DIR": "/r/tiktoken",
    "TIKTOKEN_RS_CACHE_DIR": "/r/tiktoken-rs",
    "TORCH_HOME": "/r/torch",
    "TORCHINDUCTOR_CACHE_DIR": "/r/torchinductor",
    "TRITON_CACHE_DIR": "/r/triton",
    "TVM_FFI_CACHE_DIR": "/r/tvm-ffi",
    "TILELANG_CACHE_DIR": "/r/tilelang",
    "MIOPEN_USER_DB_PATH": "/r/miopen/db",
    "MIOPEN_CUSTOM_CACHE_DIR": "/r/miopen/cache",
    "AITER_JIT_DIR": "/r/aiter/jit",
    "FLYDSL_RUNTIME_CACHE_DIR": "/r/flydsl/cache",
    "CUPY_CACHE_DIR": "/r/cupy/kernel_cache",
    "NUMBA_CACHE_DIR": "/r/numba",
}


def test_rocm_tag_sets_the_rocm_rows_under_the_root() -> None:
    after = fast_hook({"CACHEROOT": "/r/", "CACHEROOT_TAG": " ROCm ", "HOME": "/h"})
    assert after == {
        "CACHEROOT": "/r/",
        "CACHEROOT_TAG": " ROCm ",
        "HOME": "/h",
        **ROCM_FROM_R,
        "CACHEROOT_APPLIED": (
            "XDG_CACHE_HOME=/r\nHF_HOME=/r/huggingface\nMODELSCOPE_CACHE=/r/modelscope\n"
            "VLLM_CACHE_ROOT=/r/vllm\nVLLM_ASSETS_CACHE=/r/vllm/assets\n"
            "VLLM_XLA_CACHE_PATH=/r/vllm/xla_cache\n_VLLM_TEST_CACHE=/r/vllm/test_cache\n"
            "TIKTOKEN_CACHE_DIR=/r/tiktoken\nTIKTOKEN_RS_CACHE_DIR=/r/tiktoken-rs\n"
            "TORCH_HOME=/r/torch\nTORCHINDUCTOR_CACHE_DIR=/r/torchinductor\n"
            "TRITON_CACHE_DIR=/r/triton\nTVM_FFI_CACHE_DIR=/r/tvm-ffi\n"
            "TILELANG_CACHE_DIR=/r/tilelang\nMIOPEN_USER_DB_PATH=/r/miopen/db\n"
            "MIOPEN_CUSTOM_CACHE_DIR=/r/miopen/cache\nAITER_JIT_DIR=/r/aiter/jit\n"
            "FLYDSL_RUNTIME_CACHE_DIR=/r/flydsl/cache\nCUPY_CACHE_DIR=/r/cupy/kernel_cache\n"
            "NUMBA_CACHE_DIR=/r/numba"
        ),
    }


def test_user_values_win_and_carry_their_children() -> None:
    env = {
        "CACHEROOT": "/r",
        "CACHEROOT_TAG": "rocm",
        "VLLM_CACHE_ROOT": "~/v",  # explicit: kept as given, its children follow it
        "VLLM_TEST_CACHE": "/old/test",  # the legacy name: copied to _VLLM_TEST_CACHE
        "TIKTOKEN_CACHE_DIR": "",  # blank means "no cache" to tiktoken: kept
        "TORCH_HOME": "relative",  # invalid: kept, nothing derived for it
        "CACHEROOT_OPT_IN": "AITER_ROOT_DIR, VLLM_MEDIA_CACHE",
        "HOME": "/h",
    }
    applied = {
        "XDG_CACHE_HOME": "/r",
        "HF_HOME": "/r/huggingface",
        "MODELSCOPE_CACHE": "/r/modelscope",
        "VLLM_ASSETS_CACHE": "/h/v/assets",
        "VLLM_XLA_CACHE_PATH": "/h/v/xla_cache",
        "_VLLM_TEST_CACHE": "/old/test",
        "VLLM_MEDIA_CACHE": "/h/v/media_cache",
        "TIKTOKEN_RS_CACHE_DIR": "/r/tiktoken-rs",
        "TORCHINDUCTOR_CACHE_DIR": "/r/torchinductor",
        "TRITON_CACHE_DIR": "/r/triton",
        "TVM_FFI_CACHE_DIR": "/r/tvm-ffi",
        "TILELANG_CACHE_DIR": "/r/tilelang",
        "MIOPEN_USER_DB_PATH": "/r/miopen/db",
        "MIOPEN_CUSTOM_CACHE_DIR": "/r/miopen/cache",
        "AITER_JIT_DIR": "/r/aiter/jit",
        "AITER_ROOT_DIR": "/r/aiter",
        "FLYDSL_RUNTIME_CACHE_DIR": "/r/flydsl/cache",
        "CUPY_CACHE_DIR": "/r/cupy/kernel_cache",
        "NUMBA_CACHE_DIR": "/r/numba",
    }
    record = (
        "XDG_CACHE_HOME=/r\nHF_HOME=/r/huggingface\nMODELSCOPE_CACHE=/r/modelscope\n"
        "VLLM_ASSETS_CACHE=/h/v/assets\nVLLM_XLA_CACHE_PATH=/h/v/xla_cache\n"
        "_VLLM_TEST_CACHE=/old/test\nVLLM_MEDIA_CACHE=/h/v/media_cache\n"
        "TIKTOKEN_RS_CACHE_DIR=/r/tiktoken-rs\nTORCHINDUCTOR_CACHE_DIR=/r/torchinductor\n"
        "TRITON_CACHE_DIR=/r/triton\nTVM_FFI_CACHE_DIR=/r/tvm-ffi\n"
        "TILELANG_CACHE_DIR=/r/tilelang\nMIOPEN_USER_DB_PATH=/r/miopen/db\n"
        "MIOPEN_CUSTOM_CACHE_DIR=/r/miopen/cache\nAITER_JIT_DIR=/r/aiter/jit\n"
        "AITER_ROOT_DIR=/r/aiter\nFLYDSL_RUNTIME_CACHE_DIR=/r/flydsl/cache\n"
        "CUPY_CACHE_DIR=/r/cupy/kernel_cache\nNUMBA_CACHE_DIR=/r/numba"
    )
    assert fast_hook(env) == {**env, **applied, "CACHEROOT_APPLIED": record}


def test_no_root_falls_back_to_the_home_cache_and_sets_no_vendor_rows() -> None:
    after = fast_hook({"HOME": "/home/u", "CACHEROOT_TAG": "bogus"})
    assert after["XDG_CACHE_HOME"] == "/home/u/.cache"
    assert after["HF_HOME"] == "/home/u/.cache/huggingface"
    assert after["NUMBA_CACHE_DIR"] == "/home/u/.cache/numba"
    assert "CUDA_CACHE_PATH" not in after
    assert "MIOPEN_USER_DB_PATH" not in after


def test_a_child_told_of_another_root_rederives_what_it_inherited() -> None:
    parent = fast_hook({"CACHEROOT": "/a", "HOME": "/h"})
    assert parent["HF_HOME"] == "/a/huggingface"
    child = fast_hook({**parent, "CACHEROOT": "/b"})
    assert child["HF_HOME"] == "/b/huggingface"
    assert child["TORCH_HOME"] == "/b/torch"
    # An unusable root in a grandchild: what the parents derived is removed, not kept.
    grandchild = fast_hook({**child, "CACHEROOT": "not/absolute"})
    assert "HF_HOME" not in grandchild
    assert "CACHEROOT_APPLIED" not in grandchild
    assert grandchild["CACHEROOT"] == "not/absolute"


def test_cacheroots_media_cache_is_not_set_inside_vllms() -> None:
    """vLLM's eviction would delete cacheroot's media cache: it is left unset there."""
    env = {"CACHEROOT": "/r", "CACHEROOT_OPT_IN": "CACHEROOT_MEDIA_CACHE", "HOME": "/h"}
    assert fast_hook({**env, "VLLM_MEDIA_CACHE": "/elsewhere"})["CACHEROOT_MEDIA_CACHE"] == (
        "/r/mediacache"
    )
    assert "CACHEROOT_MEDIA_CACHE" not in fast_hook({**env, "VLLM_MEDIA_CACHE": "/r"})
    assert "CACHEROOT_MEDIA_CACHE" not in fast_hook({**env, "VLLM_MEDIA_CACHE": "/r/mediacache/v"})


def test_disabled_changes_nothing() -> None:
    env = {"CACHEROOT": "/r", "CACHEROOT_DISABLE": " Yes "}
    assert fast_hook(env) == env


# -- the real environment, the audit switch and the pin ---------------------------------------


@pytest.fixture
def real_environ() -> Iterator[None]:
    """Restore the whole :data:`os.environ` after a test that lets a hook change it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.usefixtures("real_environ")
@pytest.mark.parametrize(
    ("audit", "asked"), [(None, False), ("", False), (" ", False), ("1", True)]
)
def test_the_audit_is_asked_for_only_in_the_real_environment(
    audit: str | None, asked: bool
) -> None:
    for name in [*(row[0] for row in _cacheroot_start.ROWS), "CACHEROOT_APPLIED"]:
        os.environ.pop(name, None)
    os.environ["CACHEROOT"] = "/r"
    os.environ.pop("CACHEROOT_AUDIT", None)
    if audit is not None:
        os.environ["CACHEROOT_AUDIT"] = audit
    assert _cacheroot_start.hook() is asked
    fast = dict(os.environ)
    assert _cacheroot_layout.hook() is asked
    assert dict(os.environ) == fast
    assert fast["HF_HOME"] == "/r/huggingface"
    assert _cacheroot_start.hook({"CACHEROOT": "/r", "CACHEROOT_AUDIT": "1"}) is False


def write_pin(folder: Path, text: str, mode: int = 0o644) -> Path:
    folder.mkdir(mode=0o755, exist_ok=True)
    folder.chmod(0o755)
    pin = folder / "pin"
    pin.write_text(text, encoding="utf-8")
    pin.chmod(mode)
    return pin


@pytest.mark.usefixtures("real_environ")
def test_a_pin_is_read_by_the_layout(tmp_path: Path) -> None:
    pin = write_pin(tmp_path / "etc", "CACHEROOT=/pinned\nCACHEROOT_TAG=cuda\n")
    os.environ["CACHEROOT_PIN_FILE"] = str(pin)
    after = fast_hook({"HOME": "/h"})
    assert after["HF_HOME"] == "/pinned/huggingface"
    assert after["CUDA_CACHE_PATH"] == "/pinned/nv/ComputeCache"
    # A user's CACHEROOT wins over the pin, and the pin's tag goes with the pin's root only.
    after = fast_hook({"HOME": "/h", "CACHEROOT": "/mine"})
    assert after["HF_HOME"] == "/mine/huggingface"
    assert "CUDA_CACHE_PATH" not in after


@pytest.mark.usefixtures("real_environ")
def test_an_untrusted_pin_is_ignored_with_the_layouts_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pin = write_pin(tmp_path / "etc", "CACHEROOT=/pinned\n", mode=0o666)
    os.environ["CACHEROOT_PIN_FILE"] = str(pin)
    _cacheroot_layout._WARNED.clear()
    after = {"HOME": "/h"}
    assert _cacheroot_start.hook(after) is False
    assert after["HF_HOME"] == "/h/.cache/huggingface"
    assert f"cacheroot: ignoring the pinned root: {pin} is writable by other users" in (
        capsys.readouterr().err
    )


# -- drawn environments -----------------------------------------------------------------------

#: Roots and paths whose derived values cross PATH_MAX (4095 bytes), or a component NAME_MAX.
DEEP = "/" + "/".join(["d" * 254] * 16)
WIDE = "/r/" + "w" * 256

PATHS = st.sampled_from(
    [
        "/r",
        "/r/",
        "//r//x/../y",
        "/r/vllm/media_cache",
        "/r/mediacache",
        "/m",
        "/m/inner",
        "~",
        "~/c",
        "~nosuchuser/c",
        " /padded\t",
        "relative",
        "",
        "   ",
        "0",
        " 0 ",
        "/nul\x00",
        "/new\nline",
        "/undecodable/\udcff",
        DEEP,
        DEEP[:-200],
        WIDE,
    ]
)
TAG_VALUES = st.sampled_from(["cuda", "rocm", " ROCM ", "Cuda", "bogus", "", " "])
OPT_IN_VALUES = st.sampled_from(
    [
        "all",
        " all ",
        "VLLM_MEDIA_CACHE",
        "CACHEROOT_MEDIA_CACHE, VLLM_MEDIA_CACHE",
        "AITER_ROOT_DIR,bogus",
        "HF_HOME",
        ",",
        "",
    ]
)
SWITCHES = st.sampled_from(["1", "0", "", " true ", "no"])
#: The variables a drawn environment may hold, with the values drawn for each.
KEYS = {
    "CACHEROOT": PATHS,
    "CACHEROOT_TAG": TAG_VALUES,
    "CACHEROOT_OPT_IN": OPT_IN_VALUES,
    "CACHEROOT_DISABLE": SWITCHES,
    "HOME": st.sampled_from(["/h", "/h/", "", "relative-home"]),
    "XDG_CACHE_HOME": PATHS,
    "HF_HOME": PATHS,
    "VLLM_CACHE_ROOT": PATHS,
    "VLLM_TEST_CACHE": PATHS,
    "_VLLM_TEST_CACHE": PATHS,
    "VLLM_MEDIA_CACHE": PATHS,
    "CACHEROOT_MEDIA_CACHE": PATHS,
    "TIKTOKEN_CACHE_DIR": PATHS,
    "FLASHINFER_WORKSPACE_BASE": PATHS,
    "FLASHINFER_MOE_EP_KNOB_CACHE": PATHS,
    "FLYDSL_RUNTIME_CACHE_DIR": PATHS,
    "CUDA_CACHE_PATH": PATHS,
    "NUMBA_CACHE_DIR": PATHS,
}
ENVIRONMENTS = st.fixed_dictionaries({}, optional=KEYS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=ENVIRONMENTS, child=ENVIRONMENTS)
def test_drawn_environments_end_alike(env: dict[str, str], child: dict[str, str]) -> None:
    """Any environment, and a child of it that changes some values, ends as the layout's."""
    after = fast_hook(env)
    fast_hook({**after, **child})
    fast_hook({**env, **child})


@pytest.mark.parametrize("name", [row[0] for row in _cacheroot_start.ROWS])
def test_each_row_set_by_hand_ends_alike(name: str) -> None:
    for value in ("/x", "", " ", "rel", "0", "~/y", DEEP):
        for tag in ("cuda", "rocm", ""):
            fast_hook({"CACHEROOT": "/r", "CACHEROOT_TAG": tag, name: value, "HOME": "/h"})
            fast_hook({"CACHEROOT": DEEP, "CACHEROOT_TAG": tag, name: value, "HOME": "/h"})


def test_the_path_checks_agree_with_the_layouts() -> None:
    for value in ["/ok", "rel", "", "/a\x00", "/a\n", "/\udcff", DEEP, DEEP + "/" + "z" * 80, WIDE]:
        expected = bool(_cacheroot_layout.path_problem(value))
        assert _cacheroot_start._problem(value) is expected, value
    assert _cacheroot_start._norm("//a//b/../c") == "/a/c"
