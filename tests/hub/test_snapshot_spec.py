"""Model, records and errors: everything that needs no hub client."""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

import pytest

from cacheroot.fetch import Model
from cacheroot.fetch._errors import CacheMissError, LockTimeout
from cacheroot.fetch._lock import PathLock
from cacheroot.fetch._models.hubs import select
from cacheroot.fetch._models.snapshot import (
    UnpinnedRevisionWarning,
    check_snapshot,
    lock_path,
    offline_snapshot_path,
    record_path,
    warm_snapshot,
)
from cacheroot.fetch.store import retry_after

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_a_spec_normalises_patterns_and_knows_when_it_is_pinned() -> None:
    spec = Model("acme/tiny", COMMIT, allow_patterns="*.json", ignore_patterns=["a", "b"])

    assert spec.allow_patterns == ("*.json",)
    assert spec.ignore_patterns == ("a", "b")
    assert spec.pinned
    assert not Model("acme/tiny", "main").pinned
    assert not Model("acme/tiny", COMMIT.upper()).pinned  # hub commits are lower-case hex
    assert Model("gpt2", COMMIT).uri == f"hf://gpt2@{COMMIT}"
    assert Model("a/b", "v1", repo_type="dataset").uri == "hf://datasets/a/b@v1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hub": "github"}, "hub must be one of hf, modelscope"),
        ({"repo_type": "space"}, "repo_type must be one of model, dataset"),
        ({"repo_id": "a/b/c"}, "repo_id must look like"),
        ({"repo_id": "../x"}, "repo_id must look like"),
        ({"repo_id": "solo", "hub": "modelscope"}, "owner/name"),
        ({"revision": " "}, "revision must be a commit hash"),
        ({"allow_patterns": [""]}, "allow_patterns must be"),
    ],
)
def test_a_bad_spec_says_what_was_expected(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"repo_id": "acme/tiny", "revision": COMMIT, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        Model(**args)


def test_the_manifest_entry_round_trips_through_toml() -> None:
    # tomllib is 3.11+; cacheroot-fetch depends on tomli below that.
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    spec = Model(
        "acme/tiny",
        COMMIT,
        hub="modelscope",
        repo_type="dataset",
        allow_patterns=["*.json", "weights/*"],
    )

    (entry,) = tomllib.loads(spec.to_toml())["model"]

    assert Model.from_mapping(entry) == spec


def test_a_manifest_entry_with_unknown_or_missing_keys_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown key"):
        Model.from_mapping({"repo_id": "a/b", "revision": COMMIT, "revison": "x"})
    with pytest.raises(ValueError, match="needs revision"):
        Model.from_mapping({"repo_id": "a/b"})


def test_records_and_locks_live_under_the_vllm_cache_root() -> None:
    spec = Model("acme/tiny", COMMIT)
    root = os.environ["VLLM_CACHE_ROOT"]

    assert str(record_path(spec)).startswith(os.path.join(root, "snapshots") + os.sep)
    assert str(lock_path(spec)).startswith(os.path.join(root, "locks", "snapshots") + os.sep)
    # Patterns get their own record (completeness is per pattern set) but share the lock.
    narrow = Model("acme/tiny", COMMIT, allow_patterns="*.json")
    assert record_path(narrow) != record_path(spec)
    assert lock_path(narrow) == lock_path(spec)
    odd = Model("acme/tiny", "refs/pr/1" + "x" * 300)
    assert "/" not in record_path(odd).name
    assert len(record_path(odd).name) < 255


def test_a_never_warmed_snapshot_is_a_miss_that_names_the_manifest_entry() -> None:
    spec = Model("acme/tiny", COMMIT, allow_patterns=["*.json"])

    report = check_snapshot(spec)
    assert not report.complete
    assert "never warmed" in report.problems[0]
    with pytest.raises(CacheMissError) as caught:
        offline_snapshot_path(spec)

    message = str(caught.value)
    assert spec.to_toml() in message
    assert "cacheroot warm" in message
    assert pickle.loads(pickle.dumps(caught.value)).args  # noqa: S301 - our own bytes == caught.value.args


def test_an_offline_warm_of_a_miss_raises_without_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The endpoint is a port nothing listens on: a request would fail differently.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("CACHEROOT_OFFLINE", "1")

    with pytest.raises(CacheMissError, match="acme/tiny"):
        warm_snapshot(Model("acme/tiny", COMMIT))
    with (
        pytest.warns(UnpinnedRevisionWarning, match="'main' is a branch or tag"),
        pytest.raises(CacheMissError),
    ):
        warm_snapshot(Model("acme/tiny", "main", hub="modelscope"))


def test_hf_hub_offline_counts_as_offline_for_hugging_face_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    with pytest.raises(CacheMissError):
        warm_snapshot(Model("acme/tiny", COMMIT))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        (3, 3.0),
        (-1, 0.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_takes_seconds_or_a_date(value: object, seconds: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after(value, now=now) == seconds


PATHS = ["config.json", ".gitattributes", "weights/model.bin", "tokenizer.json"]


@pytest.mark.parametrize(
    ("hub", "allow", "ignore", "expected"),
    [
        ("hf", "*.json", None, ["config.json", "tokenizer.json"]),
        ("hf", None, ".*", ["config.json", "weights/model.bin", "tokenizer.json"]),
        ("hf", "weights/", None, ["weights/model.bin"]),  # a directory means what is in it
        ("hf", "*.bin", None, ["weights/model.bin"]),  # "*" crosses "/"
        (
            "modelscope",
            "*.json,*.bin",
            None,
            ["config.json", "weights/model.bin", "tokenizer.json"],
        ),
        # The legacy regex-like form: ".*" also read as "*".
        ("modelscope", None, [".*.bin"], ["config.json", ".gitattributes", "tokenizer.json"]),
        ("modelscope", "*.bin", None, ["weights/model.bin"]),
    ],
)
def test_patterns_select_files_as_each_client_does(
    hub: str, allow: str | None, ignore: str | list[str] | None, expected: list[str]
) -> None:
    spec = Model("acme/tiny", COMMIT, hub=hub, allow_patterns=allow, ignore_patterns=ignore)
    assert select(spec, PATHS) == expected


def test_waiting_for_another_warmer_has_a_timeout() -> None:
    spec = Model("acme/tiny", COMMIT)
    lock_path(spec).parent.mkdir(parents=True, exist_ok=True)

    with PathLock(str(lock_path(spec))), pytest.raises(LockTimeout) as caught:
        warm_snapshot(spec, lock_timeout=0.2)

    assert caught.value.path == str(lock_path(spec))
    assert f"pid {os.getpid()}" in str(caught.value)
