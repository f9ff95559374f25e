"""resolve() and apply(): the root, provenance, tags, opt-in and bad input."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from _cacheroot_layout import BY_NAME, DEFAULT, NEVER, OPT_IN

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_APPLIED,
    CACHEROOT_OPT_IN,
    CACHEROOT_TAG,
    DEFAULT_SOURCE,
    DERIVED,
    EXPLICIT,
    INVALID,
    OPT_IN_OFF,
    TABLE,
    XDG_CACHE_HOME,
    apply,
    hook,
    resolve,
)

HOME = {"HOME": "/home/u"}
ALL_TAG_DEFAULTS = [v.name for v in TABLE if v.mode == DEFAULT and len(v.tags) == 2]


def full_path(name: str, root: str) -> str:
    """Where ``name`` should land, following the parent chain of the table."""
    var = BY_NAME[name]
    base = full_path(var.parent, root) if var.parent else root
    return os.path.normpath(os.path.join(base, var.path)) if var.path else root


@pytest.mark.parametrize("raw", ["/mnt/cache", "/mnt/cache/", "  /mnt/cache  ", "//mnt//cache"])
def test_cacheroot_is_the_root(raw: str) -> None:
    layout = resolve({**HOME, CACHEROOT: raw})
    assert layout.root == "/mnt/cache"
    assert layout.root_source == CACHEROOT
    assert layout.valid
    for name in ALL_TAG_DEFAULTS:
        setting = layout.settings[name]
        assert setting.value == full_path(name, "/mnt/cache")
        assert setting.source == DERIVED


@pytest.mark.parametrize(
    ("env", "root", "source"),
    [
        ({}, "/home/u/.cache", "~/.cache"),
        ({CACHEROOT: ""}, "/home/u/.cache", "~/.cache"),
        ({CACHEROOT: "   "}, "/home/u/.cache", "~/.cache"),
        ({XDG_CACHE_HOME: "/x"}, "/x", XDG_CACHE_HOME),
        ({XDG_CACHE_HOME: " /x "}, "/x", XDG_CACHE_HOME),
        ({XDG_CACHE_HOME: ""}, "/home/u/.cache", "~/.cache"),
        ({XDG_CACHE_HOME: "relative"}, "/home/u/.cache", "~/.cache"),
        ({CACHEROOT: "~"}, "/home/u", CACHEROOT),
        ({CACHEROOT: "~/c"}, "/home/u/c", CACHEROOT),
        ({CACHEROOT: "/c", XDG_CACHE_HOME: "/x"}, "/c", CACHEROOT),
    ],
)
def test_root_fallbacks(env: dict[str, str], root: str, source: str) -> None:
    # expanduser reads HOME from the process, so pin it there too.
    old = os.environ.get("HOME")
    os.environ["HOME"] = HOME["HOME"]
    try:
        layout = resolve({**HOME, **env})
    finally:
        if old is not None:
            os.environ["HOME"] = old
    assert (layout.root, layout.root_source) == (root, source)
    expected = DERIVED if source == CACHEROOT else DEFAULT_SOURCE
    assert layout.settings["HF_HOME"].source == expected


def test_empty_xdg_is_replaced_not_kept() -> None:
    layout = resolve({**HOME, XDG_CACHE_HOME: ""})
    assert layout.applied()[XDG_CACHE_HOME] == "/home/u/.cache"
    assert layout.applied()["HF_HOME"] == "/home/u/.cache/huggingface"


@pytest.mark.parametrize(
    "raw",
    [
        "relative/dir",
        "./x",
        "~nosuchuser_cacheroot/x",
        "/a\x00b",
        "/" + "a" * 5000,
        "/" + "b" * 300,
        "/caf\udce9",
        "/data/cache\n",
        "\n/data/cache",
        "/data/cache\x00",
    ],
    ids=[
        "relative",
        "dot",
        "unknown-user",
        "nul",
        "too-long",
        "long-name",
        "not-utf8",
        "trailing-newline",
        "leading-newline",
        "trailing-nul",
    ],
)
def test_invalid_cacheroot_derives_nothing(raw: str) -> None:
    layout = resolve({**HOME, CACHEROOT: raw})
    assert layout.root is None
    assert not layout.valid
    assert layout.applied() == {}
    assert CACHEROOT in layout.problems[0]
    assert all(s.source in (INVALID, OPT_IN_OFF) for s in layout.settings.values())


def test_explicit_values_win_and_children_follow_their_parent() -> None:
    env = {**HOME, CACHEROOT: "/r", "HF_HOME": "/mine/hf", "VLLM_CACHE_ROOT": "/v"}
    layout = resolve(env)
    assert layout.settings["HF_HOME"].source == EXPLICIT
    assert layout.settings["HF_HOME"].value == "/mine/hf"
    assert "HF_HOME" not in layout.applied()
    assert layout.settings["VLLM_ASSETS_CACHE"].value == "/v/assets"
    assert layout.settings["VLLM_ASSETS_CACHE"].source == DERIVED
    assert layout.settings["_VLLM_TEST_CACHE"].value == "/v/test_cache"


def test_children_of_a_default_parent_are_default() -> None:
    layout = resolve({**HOME, "VLLM_CACHE_ROOT": "/v"})
    assert layout.settings["VLLM_XLA_CACHE_PATH"].value == "/v/xla_cache"
    assert layout.settings["VLLM_XLA_CACHE_PATH"].source == DERIVED
    assert layout.settings["TORCH_HOME"].source == DEFAULT_SOURCE


def test_explicit_relative_value_is_invalid_and_left_alone() -> None:
    layout = resolve({**HOME, CACHEROOT: "/r", "VLLM_CACHE_ROOT": "rel"})
    assert layout.settings["VLLM_CACHE_ROOT"].source == INVALID
    assert layout.settings["VLLM_ASSETS_CACHE"].source == INVALID
    assert "VLLM_CACHE_ROOT" not in layout.applied()
    assert any("VLLM_CACHE_ROOT" in p for p in layout.problems)


@pytest.mark.parametrize("tag", [None, "cuda", "rocm", "CUDA"])
def test_tags_select_vendor_caches(tag: str | None) -> None:
    layout = resolve({**HOME, CACHEROOT: "/r"}, tag=tag)
    wanted = (tag or "").lower()
    for var in TABLE:
        if var.mode == NEVER:
            assert var.name not in layout.settings
        elif len(var.tags) == 2 or wanted in var.tags:
            assert var.name in layout.settings
        else:
            assert var.name not in layout.settings
    assert layout.tag == (wanted or None)


def test_tag_from_environment_and_unknown_tag() -> None:
    assert resolve({**HOME, CACHEROOT_TAG: "rocm"}).settings["MIOPEN_USER_DB_PATH"].value
    layout = resolve({**HOME, CACHEROOT_TAG: "tpu"})
    assert layout.tag is None
    assert any("tpu" in p and "cuda" in p for p in layout.problems)


def test_opt_in_is_off_unless_asked() -> None:
    opt_ins = {v.name: v.tags for v in TABLE if v.mode == OPT_IN}
    assert sorted(opt_ins) == ["AITER_ROOT_DIR", "CACHEROOT_MEDIA_CACHE", "VLLM_MEDIA_CACHE"]
    for name, tags in opt_ins.items():
        off = resolve({**HOME, CACHEROOT: "/r"}, tag=tags[0])
        assert off.settings[name].source == OPT_IN_OFF
        assert name not in off.applied()
        every = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "all"}, tag=tags[0])
        assert name in every.applied()
    on = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: " VLLM_MEDIA_CACHE "})
    assert on.applied()["VLLM_MEDIA_CACHE"] == "/r/vllm/media_cache"


def test_a_vendor_opt_in_needs_its_tag() -> None:
    """AITER's template-op builds are ROCm's, and opt-in (not keyed by GPU arch)."""
    env = {**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "AITER_ROOT_DIR"}
    assert resolve(env, tag="rocm").applied()["AITER_ROOT_DIR"] == "/r/aiter"
    assert resolve(env, tag="rocm").applied()["AITER_JIT_DIR"] == "/r/aiter/jit"
    assert "AITER_ROOT_DIR" not in resolve(env, tag="cuda").settings
    assert "AITER_ROOT_DIR" not in resolve({**HOME, CACHEROOT: "/r"}, tag="rocm").applied()


def test_flashinfer_knob_cache_lies_beside_its_jit_cache() -> None:
    """A file, not a directory: under FLASHINFER_WORKSPACE_BASE as FlashInfer's own cache."""
    applied = resolve({**HOME, CACHEROOT: "/r"}, tag="cuda").applied()
    assert applied["FLASHINFER_WORKSPACE_BASE"] == "/r/flashinfer"
    assert applied["FLASHINFER_MOE_EP_KNOB_CACHE"] == (
        "/r/flashinfer/.cache/flashinfer/moe_ep_knob_cache.json"
    )
    moved = resolve({**HOME, CACHEROOT: "/r", "FLASHINFER_WORKSPACE_BASE": "/fi"}, tag="cuda")
    assert moved.applied()["FLASHINFER_MOE_EP_KNOB_CACHE"] == (
        "/fi/.cache/flashinfer/moe_ep_knob_cache.json"
    )
    assert "FLASHINFER_MOE_EP_KNOB_CACHE" not in resolve({**HOME, CACHEROOT: "/r"}).settings


def test_names_documented_as_never_set_are_never_set() -> None:
    never = sorted(v.name for v in TABLE if v.mode == NEVER)
    assert never == [
        "B12X_COMPILE_CACHE_DIR",
        "B12X_ROCE_CACHE_DIR",
        "CUPY_CUDA_LIB_PATH",
        "FLASHINFER_AUTOTUNE_CACHE_DIR",
        "FLASHINFER_KDA_PTX_CACHE_DIR",
        "HF_HUB_CACHE",
        "MINIMAX_KERNELS_CUTE_AOT_CACHE",
        "MODELSCOPE_HOME",
        "OUTLINES_CACHE_DIR",
        "PYTORCH_PRETRAINED_BERT_CACHE",
        "TILELANG_TMP_DIR",
        "TRITON_HOME",
        "VLLM_CONFIG_ROOT",
        "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
        "VLLM_LORA_RESOLVER_CACHE_DIR",
    ]
    for tag in (None, "cuda", "rocm"):
        applied = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "all"}, tag=tag).applied()
        assert [n for n in never if n in applied] == []


def test_unknown_opt_in_is_reported() -> None:
    layout = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "HF_HOME,NOPE"})
    assert any("NOPE" in p and "HF_HOME" in p for p in layout.problems)


def test_resolve_is_pure_and_apply_sets_only_derived() -> None:
    env = {**HOME, CACHEROOT: "/r", "HF_HOME": "/mine"}
    before = dict(env)
    resolve(env)
    assert env == before
    layout = apply(env)
    assert env["HF_HOME"] == "/mine"
    assert env["TORCH_HOME"] == "/r/torch"
    assert set(env) - set(before) == {*layout.applied(), CACHEROOT_APPLIED}


def test_apply_is_idempotent() -> None:
    env = {**HOME, CACHEROOT: "/r"}
    apply(env)
    once = dict(env)
    apply(env)
    assert env == once


def test_hook_respects_disable_and_never_raises() -> None:
    env = {**HOME, CACHEROOT: "/r", "CACHEROOT_DISABLE": "1"}
    hook(env)
    assert "HF_HOME" not in env

    class Exploding(dict[str, str]):
        def get(self, *_: object, **__: object) -> str:  # type: ignore[override,unused-ignore]
            raise RuntimeError("boom")

    hook(Exploding())


def test_every_table_row_is_documented() -> None:
    names = [v.name for v in TABLE]
    assert len(names) == len(set(names))
    for var in TABLE:
        assert var.purpose
        assert var.replaces
        assert var.upstream
        assert not var.parent or names.index(var.parent) < names.index(var.name)


def test_a_child_with_another_root_rederives_what_its_parent_derived() -> None:
    parent = {**HOME, CACHEROOT: "/a"}
    apply(parent)
    child = {**parent, CACHEROOT: "/b"}
    layout = apply(child)
    assert child["HF_HOME"] == "/b/huggingface"
    assert child[XDG_CACHE_HOME] == "/b"
    assert layout.settings["HF_HOME"].source == DERIVED
    assert "HF_HOME=/b/huggingface" in child[CACHEROOT_APPLIED].split("\n")


def test_a_value_changed_after_the_parent_derived_it_is_explicit() -> None:
    parent = {**HOME, CACHEROOT: "/a"}
    apply(parent)
    child = {**parent, CACHEROOT: "/b", "TORCH_HOME": "/mine"}
    apply(child)
    assert child["TORCH_HOME"] == "/mine"
    assert child["HF_HOME"] == "/b/huggingface"


def test_a_child_naming_an_unusable_root_drops_the_inherited_values() -> None:
    parent = {**HOME, CACHEROOT: "/a", "HF_HOME": "/explicit"}
    apply(parent)
    child = {**parent, CACHEROOT: "relative"}
    apply(child)
    assert "TORCH_HOME" not in child
    assert CACHEROOT_APPLIED not in child
    assert child["HF_HOME"] == "/explicit"


def test_without_cacheroot_a_child_falls_back_past_the_inherited_xdg() -> None:
    parent = {**HOME, CACHEROOT: "/a"}
    apply(parent)
    child = {k: v for k, v in parent.items() if k != CACHEROOT}
    apply(child)
    assert child[XDG_CACHE_HOME] == "/home/u/.cache"
    assert child["HF_HOME"] == "/home/u/.cache/huggingface"


@pytest.mark.parametrize(
    ("raw", "value"), [("~/hf", "/home/u/hf"), ("~", "/home/u"), (" ~/hf/ ", "/home/u/hf")]
)
def test_explicit_values_expand_home_from_the_mapping(raw: str, value: str) -> None:
    layout = resolve({"HOME": "/home/u", CACHEROOT: "/r", "VLLM_CACHE_ROOT": raw})
    assert layout.settings["VLLM_CACHE_ROOT"].value == value
    assert layout.settings["VLLM_CACHE_ROOT"].source == EXPLICIT
    assert layout.settings["VLLM_ASSETS_CACHE"].value == f"{value}/assets"
    assert layout.valid


def test_cacheroot_tilde_uses_the_mappings_home() -> None:
    assert resolve({"HOME": "/elsewhere", CACHEROOT: "~/c"}).root == "/elsewhere/c"
    assert resolve({"HOME": "/elsewhere"}).root == "/elsewhere/.cache"


# -- names vLLM accepts, legacy names, blanks with a meaning, media caches apart, the pin -----
def test_the_test_cache_has_upstreams_name_and_no_vllm_name_is_invented() -> None:
    layout = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "all"}, tag="cuda")
    applied = layout.applied()
    assert applied["_VLLM_TEST_CACHE"] == "/r/vllm/test_cache"
    assert "VLLM_TEST_CACHE" not in applied
    # Every VLLM_* name the layout sets is one vLLM 0.33's vllm/envs.py defines (the upstream
    # nox session checks the same against the real file).
    assert sorted(n for n in applied if n.startswith("VLLM_")) == [
        "VLLM_ASSETS_CACHE",
        "VLLM_CACHE_ROOT",
        "VLLM_MEDIA_CACHE",
        "VLLM_XLA_CACHE_PATH",
    ]


def test_a_legacy_test_cache_name_is_honoured_and_copied_to_the_new_name() -> None:
    env = {**HOME, CACHEROOT: "/r", "VLLM_TEST_CACHE": "/old/cache"}
    setting = resolve(env).settings["_VLLM_TEST_CACHE"]
    assert (setting.value, setting.source) == ("/old/cache", "legacy")
    assert "rename it to _VLLM_TEST_CACHE" in setting.reason
    assert apply(dict(env)).applied()["_VLLM_TEST_CACHE"] == "/old/cache"
    new_wins = resolve({**env, "_VLLM_TEST_CACHE": "/new/cache"}).settings["_VLLM_TEST_CACHE"]
    assert (new_wins.value, new_wins.source) == ("/new/cache", EXPLICIT)


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_tiktoken_cache_dir_means_no_cache_and_is_kept(blank: str) -> None:
    env = {**HOME, CACHEROOT: "/r", "TIKTOKEN_CACHE_DIR": blank}
    layout = resolve(env)
    setting = layout.settings["TIKTOKEN_CACHE_DIR"]
    assert (setting.value, setting.source) == (blank, EXPLICIT)
    assert "TIKTOKEN_CACHE_DIR" not in layout.applied()
    environ = dict(env)
    apply(environ)
    assert environ["TIKTOKEN_CACHE_DIR"] == blank
    # where a blank means "unset" to the library, it is still derived
    assert resolve({**HOME, CACHEROOT: "/r", "HF_HOME": ""}).applied()["HF_HOME"] == (
        "/r/huggingface"
    )


def test_both_media_caches_are_opt_in_and_apart() -> None:
    on = resolve({**HOME, CACHEROOT: "/r", CACHEROOT_OPT_IN: "all"}).applied()
    assert on["CACHEROOT_MEDIA_CACHE"] == "/r/mediacache"
    assert on["VLLM_MEDIA_CACHE"] == "/r/vllm/media_cache"
    off = resolve({**HOME, CACHEROOT: "/r"}).applied()
    assert "CACHEROOT_MEDIA_CACHE" not in off
    assert "VLLM_MEDIA_CACHE" not in off


@pytest.mark.parametrize(
    ("ours", "vllms"),
    [("/m", "/m"), ("/m/ours", "/m"), ("/m", "/m/vllm"), ("/m/", "/m")],
)
def test_media_caches_sharing_a_directory_are_refused(ours: str, vllms: str) -> None:
    env = {**HOME, CACHEROOT: "/r", "CACHEROOT_MEDIA_CACHE": ours, "VLLM_MEDIA_CACHE": vllms}
    layout = resolve(env)
    setting = layout.settings["CACHEROOT_MEDIA_CACHE"]
    assert setting.source == INVALID
    assert "two separate directories" in setting.reason
    assert not layout.valid
    apart = resolve({**env, "VLLM_MEDIA_CACHE": "/m2"})
    assert apart.valid
    assert apart.settings["CACHEROOT_MEDIA_CACHE"].source == EXPLICIT


def test_a_pinned_root_stands_in_for_an_unset_cacheroot() -> None:
    pin = {CACHEROOT: "/pinned", CACHEROOT_TAG: "rocm"}
    layout = resolve({}, pin=pin)
    assert (layout.root, layout.root_source, layout.tag) == ("/pinned", "pinned root", "rocm")
    assert layout.applied()["HF_HOME"] == "/pinned/huggingface"
    assert layout.applied()["MIOPEN_USER_DB_PATH"] == "/pinned/miopen/db"
    assert layout.settings["HF_HOME"].source == DERIVED
    # CACHEROOT (and CACHEROOT_TAG) win over the pin
    set_root = resolve({CACHEROOT: "/set", CACHEROOT_TAG: "cuda"}, pin=pin)
    assert (set_root.root, set_root.tag) == ("/set", "cuda")
    bad = resolve({}, pin={CACHEROOT: "relative"})
    assert bad.root is None
    assert "the pinned CACHEROOT='relative' is not an absolute path" in bad.problems[0]


def test_read_pin_takes_only_the_roots_names(tmp_path: Path) -> None:
    from cacheroot.envs import read_pin

    pin = tmp_path / "pin"
    assert read_pin(str(pin)) == {}
    pin.write_text("CACHEROOT=/v\nCACHEROOT_TAG = cuda\nHF_HOME=/x\ngarbage\n")
    assert read_pin(str(pin)) == {CACHEROOT: "/v", CACHEROOT_TAG: "cuda"}


def test_the_pin_file_can_be_moved_or_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cacheroot.envs import pin_path, read_pin

    other = tmp_path / "elsewhere"
    other.write_text("CACHEROOT=/moved\n")
    monkeypatch.setenv("CACHEROOT_PIN_FILE", str(other))
    assert pin_path() == str(other)
    assert read_pin() == {CACHEROOT: "/moved"}
    monkeypatch.setenv("CACHEROOT_PIN_FILE", " ")
    assert pin_path() == ""
    assert read_pin() == {}
    monkeypatch.delenv("CACHEROOT_PIN_FILE")
    assert pin_path() == os.path.join(sys.prefix, "etc", "cacheroot", "pin")
    assert pin_path("/some/venv") == "/some/venv/etc/cacheroot/pin"
