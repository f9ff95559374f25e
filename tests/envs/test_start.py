"""The start-up hook (``_cacheroot_start``, ``_cacheroot_compact``) against the layout.

The generated parts of both modules must be what ``start_table.py`` writes from
``_cacheroot_layout`` now, and the hook must leave every environment exactly as
``_cacheroot_layout.hook()`` leaves it: the same variables set and removed, the same
``CACHEROOT_APPLIED``, the same return value. ``_cacheroot_start.plain`` is held to that on the
bytes a POSIX :data:`os.environ` keeps, must write (``putenv``) exactly what changes, and must
take the plain environments itself: a fresh one that names a root, and a child of a hooked
process. A few environments are written out with the expected result as literals; many more are
drawn at random (hypothesis) from values that exercise each rule: blank, relative, ``~``, too
long, undecodable, a library's "off", legacy names, tags, opt-ins, a parent's hook's values.
"""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import _cacheroot_compact
import _cacheroot_layout
import _cacheroot_start
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Iterator

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


STALE = "is stale: the layout changed since it was generated; run `nox -s start_table` (or "
STALE += "`python tests/envs/start_table.py`) and commit the result"


def test_the_generated_table_is_fresh() -> None:
    text = start_table.COMPACT.read_text(encoding="utf-8")
    assert start_table.current(text) == start_table.block(), f"{start_table.COMPACT.name} {STALE}"


def test_the_generated_templates_are_fresh() -> None:
    text = start_table.START.read_text(encoding="utf-8")
    fresh = start_table.templates_block()
    assert start_table.current(text, start_table.BEGIN_TEMPLATES) == fresh, (
        f"{start_table.START.name} {STALE}"
    )


def test_a_new_row_makes_the_generated_parts_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """The freshness checks see a row added to the layout (or a path changed)."""
    compact = start_table.COMPACT.read_text(encoding="utf-8")
    start = start_table.START.read_text(encoding="utf-8")
    row = _cacheroot_layout.Variable(
        "NEW_CACHE_DIR", "new", purpose="a test row", replaces="~/.new", upstream=("doc: test",)
    )
    monkeypatch.setattr(_cacheroot_layout, "TABLE", (*_cacheroot_layout.TABLE, row))
    assert '("NEW_CACHE_DIR", "new", "", (), False, False, (), ()),' in start_table.block()
    assert start_table.current(compact) != start_table.block()
    assert '        b"NEW_CACHE_DIR=/new"\n' in start_table.templates_block()
    assert start_table.current(start, start_table.BEGIN_TEMPLATES) != (
        start_table.templates_block()
    )


def test_the_compact_table_holds_the_rows_the_hook_may_set() -> None:
    names = [row[0] for row in _cacheroot_compact.ROWS]
    assert names[:4] == ["XDG_CACHE_HOME", "HF_HOME", "MODELSCOPE_CACHE", "VLLM_CACHE_ROOT"]
    # Never-set rows are not there: the hook does not need them.
    assert "HF_HUB_CACHE" not in names
    assert "TRITON_HOME" not in names
    assert _cacheroot_compact.TAGS == ("cuda", "rocm")


def test_the_templates_hold_each_tags_rows_under_an_empty_root() -> None:
    assert sorted(_cacheroot_start.TEMPLATES) == [b"", b"cuda", b"rocm"]
    untagged = _cacheroot_start.TEMPLATES[b""].split(b"\n")
    assert untagged[:3] == [
        b"XDG_CACHE_HOME=",
        b"HF_HOME=/huggingface",
        b"MODELSCOPE_CACHE=/modelscope",
    ]
    assert b"VLLM_ASSETS_CACHE=/vllm/assets" in untagged
    assert len(untagged) == 16
    cuda = _cacheroot_start.TEMPLATES[b"cuda"].split(b"\n")
    assert b"CUDA_CACHE_PATH=/nv/ComputeCache" in cuda
    assert (
        b"FLASHINFER_MOE_EP_KNOB_CACHE=/flashinfer/.cache/flashinfer/moe_ep_knob_cache.json" in cuda
    )
    assert b"MIOPEN_USER_DB_PATH=/miopen/db" not in cuda
    # Opt-in rows are never in a template: their presence hands the environment on.
    assert b"VLLM_MEDIA_CACHE=/vllm/media_cache" not in cuda
    assert _cacheroot_start.TRUE == (b"1", b"on", b"true", b"yes")
    assert _cacheroot_start.OTHERS == (
        b"AITER_ROOT_DIR",
        b"CACHEROOT_MEDIA_CACHE",
        b"CACHEROOT_OPT_IN",
        b"VLLM_MEDIA_CACHE",
        b"VLLM_TEST_CACHE",
    )


def _imports(path: Path, function: str) -> tuple[list[str], list[str]]:
    """The module's top-level imports, and those inside ``function``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    (body,) = (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    inner = [n for n in ast.walk(body) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return [ast.unparse(n) for n in top], [ast.unparse(n) for n in inner]


def test_the_start_up_modules_import_os_and_sys_and_the_next_step_only_when_needed() -> None:
    assert _imports(start_table.START, "hook") == (
        ["import os", "import sys"],
        ["import _cacheroot_compact"],
    )
    assert _imports(start_table.START, "start") == (
        ["import os", "import sys"],
        ["import _cacheroot_hook"],
    )
    assert _imports(start_table.START, "plain") == (["import os", "import sys"], [])
    assert _imports(start_table.COMPACT, "hook") == (
        ["import os", "import sys"],
        ["import _cacheroot_layout"],
    )


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
    for name in [*(row[0] for row in _cacheroot_compact.ROWS), "CACHEROOT_APPLIED"]:
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


@pytest.mark.parametrize("name", [row[0] for row in _cacheroot_compact.ROWS])
def test_each_row_set_by_hand_ends_alike(name: str) -> None:
    for value in ("/x", "", " ", "rel", "0", "~/y", DEEP):
        for tag in ("cuda", "rocm", ""):
            fast_hook({"CACHEROOT": "/r", "CACHEROOT_TAG": tag, name: value, "HOME": "/h"})
            fast_hook({"CACHEROOT": DEEP, "CACHEROOT_TAG": tag, name: value, "HOME": "/h"})


def test_the_path_checks_agree_with_the_layouts() -> None:
    for value in ["/ok", "rel", "", "/a\x00", "/a\n", "/\udcff", DEEP, DEEP + "/" + "z" * 80, WIDE]:
        expected = bool(_cacheroot_layout.path_problem(value))
        assert _cacheroot_compact._problem(value) is expected, value
    assert _cacheroot_compact._norm("//a//b/../c") == "/a/c"


# -- the plain environments: _cacheroot_start.plain on the bytes os.environ keeps --------------


def _encoded(env: dict[str, str]) -> dict[bytes, bytes]:
    return {os.fsencode(k): os.fsencode(v) for k, v in env.items()}


def plain_hook(env: dict[str, str]) -> dict[str, str] | None:
    """The environment after :func:`_cacheroot_start.plain`, or ``None`` where it handed on.

    Either way it is checked: handed on, nothing was written; taken, the result is the layout's,
    ``putenv`` was called for exactly what changed, and the return value says whether the audit
    was asked for.
    """
    data = _encoded(env)
    before = dict(data)
    written: list[tuple[bytes, bytes]] = []
    asked = _cacheroot_start.plain(data, lambda name, value: written.append((name, value)))
    if asked is None:
        assert data == before
        assert written == []
        return None
    after = {os.fsdecode(k): os.fsdecode(v) for k, v in data.items()}
    full = dict(env)
    _cacheroot_layout.hook(full)
    assert after == full
    assert sorted(written) == sorted((k, v) for k, v in data.items() if before.get(k) != v)
    assert asked is bool(env.get("CACHEROOT_AUDIT", "").strip())
    return after


def test_a_fresh_environment_with_a_root_is_plain() -> None:
    after = plain_hook({"CACHEROOT": "/r/", "CACHEROOT_TAG": " ROCm ", "HOME": "/h"})
    assert after == fast_hook({"CACHEROOT": "/r/", "CACHEROOT_TAG": " ROCm ", "HOME": "/h"})
    assert after is not None
    assert {k: after[k] for k in ROCM_FROM_R} == ROCM_FROM_R
    assert after["CACHEROOT_APPLIED"].startswith("XDG_CACHE_HOME=/r\nHF_HOME=/r/huggingface\n")


def test_a_child_of_a_hooked_process_is_plain_and_writes_nothing() -> None:
    parent = plain_hook({"CACHEROOT": "/r", "CACHEROOT_TAG": "cuda", "HOME": "/h"})
    assert parent is not None
    assert parent["CUDA_CACHE_PATH"] == "/r/nv/ComputeCache"
    data = _encoded(parent)
    written: list[tuple[bytes, bytes]] = []
    assert _cacheroot_start.plain(data, lambda k, v: written.append((k, v))) is False
    assert written == []
    # A child that lost one of the derived values gets it back, and only it.
    del data[b"TORCH_HOME"]
    assert _cacheroot_start.plain(data, lambda k, v: written.append((k, v))) is False
    assert written == [(b"TORCH_HOME", b"/r/torch")]


def test_no_root_is_plain_under_home() -> None:
    after = plain_hook({"HOME": "/home/u/", "CACHEROOT": " "})
    assert after is not None
    assert after["XDG_CACHE_HOME"] == "/home/u/.cache"
    assert after["HF_HOME"] == "/home/u/.cache/huggingface"
    assert "CUDA_CACHE_PATH" not in after


def test_the_audit_switch_is_read_in_a_plain_environment() -> None:
    assert _cacheroot_start.plain(_encoded({"CACHEROOT": "/r", "CACHEROOT_AUDIT": "1"}), _no_putenv)
    assert not _cacheroot_start.plain(
        _encoded({"CACHEROOT": "/r", "CACHEROOT_AUDIT": " "}), _no_putenv
    )


@pytest.mark.parametrize(
    ("switch", "applied"), [("1", False), (" YES ", False), ("0", True), ("", True)]
)
def test_the_off_switch_is_read_in_a_plain_environment(switch: str, applied: bool) -> None:
    after = plain_hook({"CACHEROOT": "/r", "CACHEROOT_DISABLE": switch})
    assert after is not None
    assert ("HF_HOME" in after) is applied


def _no_putenv(name: bytes, value: bytes) -> None:
    """A ``putenv`` for calls whose writes this test does not look at."""


@pytest.mark.parametrize(
    "env",
    [
        {"CACHEROOT": "/r", "HF_HOME": "/mine"},  # the user's value of a row
        {"CACHEROOT": "/r", "HF_HOME": "/r/huggingface"},  # the same, spelt as derived
        {"CACHEROOT": "/r", "VLLM_TEST_CACHE": "/old"},  # a legacy name
        {"CACHEROOT": "/r", "CACHEROOT_OPT_IN": ""},  # an opt-in, even blank
        {"CACHEROOT": "/r", "CACHEROOT_DISABLE": "1\x1c"},  # on, as str.strip() reads it
        {"CACHEROOT": "/r", "CACHEROOT_TAG": "bogus"},
        {"CACHEROOT": "relative"},
        {"CACHEROOT": "~/c", "HOME": "/h"},
        {"CACHEROOT": " /r"},
        {"CACHEROOT": "/a/./b"},
        {"CACHEROOT": "/a/.."},
        {"CACHEROOT": "//r"},
        {"CACHEROOT": "/"},
        {"CACHEROOT": "/caf\u00e9"},
        {"CACHEROOT": "/r\x1c"},
        {"CACHEROOT": "/" + "r" * 200},
        {"HOME": "relative"},
        {"HOME": " /h"},
        {},  # no HOME: the password database decides
    ],
)
def test_other_environments_are_handed_on_untouched(env: dict[str, str]) -> None:
    assert plain_hook(env) is None


def test_a_child_told_of_another_root_is_handed_on() -> None:
    parent = plain_hook({"CACHEROOT": "/a", "HOME": "/h"})
    assert parent is not None
    assert plain_hook({**parent, "CACHEROOT": "/b"}) is None
    assert plain_hook({**parent, "CACHEROOT_TAG": "rocm"}) is None
    assert plain_hook({**parent, "HF_HOME": "/elsewhere"}) is None


@pytest.mark.usefixtures("real_environ")
def test_a_pin_that_may_be_there_is_handed_on(tmp_path: Path) -> None:
    """Where the pin is comes from the real environment, as the layout reads it."""
    pin = write_pin(tmp_path / "etc", "CACHEROOT=/pinned\n")
    os.environ["CACHEROOT_PIN_FILE"] = str(pin)
    assert plain_hook({"HOME": "/h"}) is None
    assert plain_hook({"HOME": "/h", "CACHEROOT": "/r"}) is not None  # a root: no pin is read
    os.environ["CACHEROOT_PIN_FILE"] = str(tmp_path / "none")
    after = plain_hook({"HOME": "/h"})
    assert after is not None
    assert after["HF_HOME"] == "/h/.cache/huggingface"
    os.environ["CACHEROOT_PIN_FILE"] = " "
    assert plain_hook({"HOME": "/h"}) is not None


@pytest.mark.usefixtures("real_environ")
def test_start_applies_the_layout_once_per_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """``site`` runs a venv's ``.pth`` line twice; the second ``start()`` changes nothing."""
    for name in [
        *(row[0] for row in _cacheroot_compact.ROWS),
        "CACHEROOT_APPLIED",
        "CACHEROOT_TAG",
    ]:
        os.environ.pop(name, None)
    os.environ.pop("CACHEROOT_AUDIT", None)
    monkeypatch.setattr(_cacheroot_start, "_started", False)
    os.environ["CACHEROOT"] = "/first"
    _cacheroot_start.start()
    assert os.environ["HF_HOME"] == "/first/huggingface"
    os.environ["CACHEROOT"] = "/second"
    _cacheroot_start.start()
    assert os.environ["HF_HOME"] == "/first/huggingface"


@pytest.mark.usefixtures("real_environ")
def test_the_real_environment_is_applied_for_child_processes_too() -> None:
    """``plain`` writes through ``putenv``: a child started with the inherited environment sees
    the values (``subprocess`` passes the C environment, not :data:`os.environ`)."""
    for name in [
        *(row[0] for row in _cacheroot_compact.ROWS),
        "CACHEROOT_APPLIED",
        "CACHEROOT_TAG",
    ]:
        os.environ.pop(name, None)
    os.environ["CACHEROOT"] = "/real-root"
    os.environ.pop("CACHEROOT_AUDIT", None)
    assert _cacheroot_start.hook() is False
    assert os.environ["TORCH_HOME"] == "/real-root/torch"
    shell = subprocess.run(
        ["sh", "-c", 'printf "%s|%s" "$TORCH_HOME" "$XDG_CACHE_HOME"'],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert shell.stdout == "/real-root/torch|/real-root"


PLAIN_ROOTS = st.sampled_from(["/r", "/r/", "/home/u/.cache", "/x/y-z/", "/a b", "/v1.2/c"])
PLAIN_TAGS = st.sampled_from(["", " ", "cuda", "rocm", " CUDA ", "Rocm"])


@settings(max_examples=200, deadline=None)
@given(
    root=st.one_of(st.none(), PLAIN_ROOTS),
    home=PLAIN_ROOTS,
    tag=st.one_of(st.none(), PLAIN_TAGS),
    audit=st.sampled_from([None, "", "1"]),
)
def test_drawn_plain_environments_and_their_children_are_taken(
    root: str | None, home: str, tag: str | None, audit: str | None
) -> None:
    drawn = {"CACHEROOT": root, "CACHEROOT_TAG": tag, "CACHEROOT_AUDIT": audit}
    env = {"HOME": home, **{k: v for k, v in drawn.items() if v is not None}}
    parent = plain_hook(env)
    assert parent is not None
    child = plain_hook(parent)
    assert child == parent


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=ENVIRONMENTS, child=ENVIRONMENTS)
def test_drawn_environments_are_taken_as_the_layout_would_or_handed_on(
    env: dict[str, str], child: dict[str, str]
) -> None:
    """Whatever ``plain`` takes ends as the layout's; what it hands on it leaves untouched."""
    after = fast_hook(env)
    plain_hook(env)
    plain_hook(after)
    plain_hook({**after, **child})
