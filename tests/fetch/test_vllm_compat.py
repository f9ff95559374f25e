"""``cacheroot.fetch.vllm_compat``: upstream vLLM's test-cache helper, on cacheroot's fetcher.

What upstream's helper (vLLM's ``tests/cache_utils.py``) does is written out here as literals:
the names it gives files (digests computed with ``printf %s URL | sha256sum``), its signatures,
its exceptions. The files it would have written are plain files with no sidecar.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE, VLLM_TEST_CACHE_ONLY
from cacheroot.fetch import _store as store
from cacheroot.fetch import cache_dir, fetch, reset_stats, stats
from cacheroot.fetch._upkeep.cache import entries
from cacheroot.fetch.store import partials
from cacheroot.fetch.vllm_compat import (
    download_to_vllm_test_cache,
    download_url_to_file,
    get_vllm_test_cache_dir,
)

from .origin import Origin, body, sha256
from .procs import open_gate, result, spawn, wait_ready

if TYPE_CHECKING:
    from collections.abc import Callable

EMPTY = inspect.Parameter.empty
POS = inspect.Parameter.POSITIONAL_OR_KEYWORD
KW = inspect.Parameter.KEYWORD_ONLY
#: Upstream's signatures: (name, kind, default) of each parameter, and the return annotation.
UPSTREAM: dict[Callable[..., Any], list[tuple[str, Any, Any]]] = {
    get_vllm_test_cache_dir: [("namespace", POS, None)],
    download_url_to_file: [
        ("url", POS, EMPTY),
        ("path", POS, EMPTY),
        ("timeout", POS, 300),
        ("local_only", KW, None),
        ("expected_sha256", KW, None),
    ],
    download_to_vllm_test_cache: [
        ("url", POS, EMPTY),
        ("namespace", POS, EMPTY),
        ("filename", POS, None),
        ("timeout", POS, 300),
        ("local_only", KW, None),
        ("expected_sha256", KW, None),
    ],
}

#: URL -> the name upstream's helper gives its file (16 hex digits of sha256 of the whole URL as
#: given, then the last segment of the URL's path as urlparse splits it, or "download").
NAMES = {
    "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken": (
        "26b9c229141b3d34-cl100k_base.tiktoken"
    ),
    "https://vllm-public-assets.s3.us-west-2.amazonaws.com/ci-datasets/gsm8k/test.jsonl": (
        "2b82721d948eb86b-test.jsonl"
    ),
    "https://example.com/data/test.jsonl": "e0228219951c1293-test.jsonl",
    # query and fragment: hashed, never part of the name
    "https://example.com/data/test.jsonl?rev=2#part": "f0ccb23e09f508d3-test.jsonl",
    "https://example.com/": "0f115db062b7c0dd-download",
    "https://example.com": "100680ad546ce6a5-download",
    "https://example.com/dir/": "7312b85582d115d1-dir",  # the trailing slash is dropped
    "https://example.com/a%20b.txt": "9f9ec86a2c13411f-a%20b.txt",  # not percent-decoded
    "https://example.com/x/file.bin;v=1": "92f31df6bf1aca6c-file.bin",  # ;params split off
}

#: What cache-only says, in either spelling upstream or cacheroot gives it.
ON = [("local_only", None), ("env", VLLM_TEST_CACHE_ONLY), ("env", CACHEROOT_OFFLINE)]


@pytest.fixture(autouse=True)
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither cache-only switch set, whatever the outer shell says."""
    monkeypatch.delenv(VLLM_TEST_CACHE_ONLY, raising=False)
    monkeypatch.delenv(CACHEROOT_OFFLINE, raising=False)


def _root() -> Path:
    return Path(cache_dir())


def _visible(directory: Path) -> list[str]:
    """What a reader that ignores dot-files sees in ``directory``."""
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


def _prefill(path: Path, data: bytes) -> Path:
    """A file as upstream's helper leaves it: the bytes, nothing beside them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- the interface -------------------------------------------------------------------------------
@pytest.mark.parametrize("function", list(UPSTREAM), ids=lambda f: f.__name__)
def test_signatures_are_upstreams(function: Callable[..., Any]) -> None:
    signature = inspect.signature(function)
    params = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
    assert params == UPSTREAM[function]
    assert signature.return_annotation in ("Path", Path)


def test_module_exports_the_three_functions() -> None:
    import cacheroot.fetch.vllm_compat as compat

    assert compat.__all__ == sorted(compat.__all__)
    assert set(compat.__all__) == {f.__name__ for f in UPSTREAM}


def test_cache_dir_is_the_layouts_and_is_created(tmp_path: Path) -> None:
    root = get_vllm_test_cache_dir()
    assert type(root) is type(Path())
    assert root == Path(os.environ[VLLM_TEST_CACHE])  # what upstream's helper reads
    nested = get_vllm_test_cache_dir("gpt_oss/tiktoken")
    assert nested == root / "gpt_oss" / "tiktoken"
    assert nested.is_dir()


def test_cache_dir_follows_an_explicit_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VLLM_TEST_CACHE, str(tmp_path / "mine"))
    assert get_vllm_test_cache_dir("gsm8k") == tmp_path / "mine" / "gsm8k"
    assert (tmp_path / "mine" / "gsm8k").is_dir()


# -- names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "expected"), list(NAMES.items()))
def test_names_are_upstreams(url: str, expected: str) -> None:
    # A file upstream's helper wrote (a plain file, no sidecar) is found under upstream's name,
    # and nothing is asked of the network (cache-only: a wrong name would be a miss).
    data = b"written by upstream's helper\n"
    path = _prefill(_root() / "gsm8k" / expected, data)
    got = download_to_vllm_test_cache(url, "gsm8k", local_only=True)
    assert got == path
    assert type(got) is type(Path())
    assert got.read_bytes() == data
    digest = sha256(data)
    assert download_to_vllm_test_cache(url, "gsm8k", local_only=True, expected_sha256=digest) == (
        path
    )


def test_derived_name_from_the_origin(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}?size=1000#frag")
    path = download_to_vllm_test_cache(url, "gsm8k")
    # The prefix hashes the URL exactly as given; hashlib stands in for sha256sum here, since
    # the origin's port changes from run to run.
    prefix = hashlib.sha256(url.encode()).hexdigest()[:16]
    assert path == _root() / "gsm8k" / f"{prefix}-{name}"
    assert path.read_bytes() == body(name, 1000)
    assert origin.gets[f"/ok/{name}"] == 1


def test_nested_namespace_and_given_filename(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    path = download_to_vllm_test_cache(
        url, "gpt_oss/tiktoken", filename="cl100k_base.tiktoken", expected_sha256=digest
    )
    assert path == _root() / "gpt_oss" / "tiktoken" / "cl100k_base.tiktoken"
    assert path.read_bytes() == body(name)
    again = download_to_vllm_test_cache(
        url, "gpt_oss/tiktoken", filename="cl100k_base.tiktoken", expected_sha256=digest
    )
    assert again == path
    assert origin.gets[f"/ok/{name}"] == 1
    assert _visible(path.parent) == ["cl100k_base.tiktoken"]


def test_a_nested_entry_is_one_entry_of_the_cache_maintenance(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    digest = sha256(body(name))
    download_to_vllm_test_cache(
        url, "gpt_oss/tiktoken", filename="cl100k_base.tiktoken", expected_sha256=digest
    )
    found = [
        (e.namespace, e.name, e.kind, e.size, e.url, (e.meta or {}).get("sha256"))
        for e in entries(str(_root()))
    ]
    assert found == [
        ("gpt_oss/tiktoken", "cl100k_base.tiktoken", "file", len(body(name)), url, digest)
    ]


@pytest.mark.parametrize(
    ("namespace", "filename"),
    [
        ("", None),
        ("../outside", None),
        ("/outside", None),
        ("a/../../outside", None),
        ("a/..", None),
        ("suite", ""),
        ("suite", "."),
        ("suite", ".."),
        ("suite", "../outside"),
        ("suite", "/outside"),
        ("suite", "nested/file"),
    ],
)
def test_unsafe_names_are_refused(
    origin: Origin, name: str, tmp_path: Path, namespace: str, filename: str | None
) -> None:
    with pytest.raises(ValueError, match="safe cache path"):
        download_to_vllm_test_cache(origin.url(f"/ok/{name}"), namespace, filename)
    assert origin.gets[f"/ok/{name}"] == 0
    assert not (_root().parent / "outside").exists()


@pytest.mark.parametrize("namespace", ["", "../x", "/abs", "a/../b"])
def test_unsafe_namespace_for_the_directory(namespace: str) -> None:
    with pytest.raises(ValueError, match="safe cache path"):
        get_vllm_test_cache_dir(namespace)


@pytest.mark.parametrize("digest", ["short", "g" * 64, "sha256:" + "0" * 64, " " + "0" * 64])
def test_malformed_digest_is_refused(origin: Origin, name: str, digest: str) -> None:
    with pytest.raises(ValueError, match="64 hexadecimal digits"):
        download_to_vllm_test_cache(origin.url(f"/ok/{name}"), "gsm8k", expected_sha256=digest)
    assert origin.gets[f"/ok/{name}"] == 0


def test_digest_in_capitals_is_accepted(origin: Origin, name: str) -> None:
    digest = sha256(body(name)).upper()
    path = download_to_vllm_test_cache(origin.url(f"/ok/{name}"), "gsm8k", expected_sha256=digest)
    assert path.read_bytes() == body(name)


# -- cache-only ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("how", "variable"), ON)
def test_cache_only_miss_is_file_not_found(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch, how: str, variable: str | None
) -> None:
    url = origin.url(f"/ok/{name}")
    local_only: bool | None = None
    if variable is None:
        local_only = True
    else:
        monkeypatch.setenv(variable, "1")
    with pytest.raises(FileNotFoundError) as info:
        download_to_vllm_test_cache(url, "gsm8k", local_only=local_only)
    assert url in str(info.value)
    assert VLLM_TEST_CACHE_ONLY in str(info.value)  # what to unset
    with pytest.raises(FileNotFoundError):
        download_url_to_file(url, _root() / "elsewhere.bin", local_only=local_only)
    assert origin.gets[f"/ok/{name}"] == 0
    if how == "env":  # an explicit local_only=False downloads all the same
        path = download_to_vllm_test_cache(url, "gsm8k", local_only=False)
        assert path.read_bytes() == body(name)
        assert download_to_vllm_test_cache(url, "gsm8k") == path  # and a hit needs nothing
        assert origin.gets[f"/ok/{name}"] == 1


def test_cache_only_with_a_wrong_file_is_a_miss(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = _prefill(_root() / "gsm8k" / "given.bin", b"stale")
    with pytest.raises(FileNotFoundError):
        download_to_vllm_test_cache(
            url, "gsm8k", "given.bin", local_only=True, expected_sha256=sha256(body(name))
        )
    assert path.read_bytes() == b"stale"
    assert origin.gets[f"/ok/{name}"] == 0


# -- digests -------------------------------------------------------------------------------------
def test_digest_mismatch_publishes_nothing(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    with pytest.raises(ValueError, match="sha256 mismatch"):
        download_to_vllm_test_cache(url, "gsm8k", expected_sha256="0" * 64)
    directory = _root() / "gsm8k"
    assert _visible(directory) == []
    assert [n for n in os.listdir(directory) if n.endswith(".partial")] == []


def test_digest_mismatch_leaves_the_old_file(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = _prefill(_root() / "gsm8k" / "given.bin", b"stale")
    with pytest.raises(ValueError, match="sha256 mismatch"):
        download_to_vllm_test_cache(url, "gsm8k", "given.bin", expected_sha256="0" * 64)
    assert path.read_bytes() == b"stale"
    assert partials(str(path)) == []


def test_wrong_file_is_downloaded_again_and_replaced(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = _prefill(_root() / "gsm8k" / "given.bin", b"stale")
    digest = sha256(body(name))
    assert download_to_vllm_test_cache(url, "gsm8k", "given.bin", expected_sha256=digest) == path
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


def test_upstream_file_is_a_hit_and_hashed_once(
    origin: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = origin.url(f"/ok/{name}")
    prefix = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = _prefill(_root() / "gsm8k" / f"{prefix}-{name}", body(name))
    calls: list[str] = []
    real = store.sha256_file

    def counting(p: str) -> tuple[str, int]:
        calls.append(p)
        return real(p)

    monkeypatch.setattr(store, "sha256_file", counting)
    reset_stats()
    digest = sha256(body(name))
    for _ in range(3):
        assert download_to_vllm_test_cache(url, "gsm8k", expected_sha256=digest) == path
    assert download_to_vllm_test_cache(url, "gsm8k") == path
    assert origin.gets[f"/ok/{name}"] == 0
    assert calls == [str(path)]  # verified once, as upstream verifies it, then remembered
    assert stats()["hits"] == 4


def test_empty_file_is_not_a_hit(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = _prefill(_root() / "gsm8k" / "given.bin", b"")
    assert download_to_vllm_test_cache(url, "gsm8k", "given.bin") == path
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/ok/{name}"] == 1


def test_empty_body_is_a_value_error_and_publishes_nothing(origin: Origin, name: str) -> None:
    with pytest.raises(ValueError, match="empty body"):
        download_to_vllm_test_cache(origin.url(f"/ok/{name}?size=0"), "gsm8k")
    assert _visible(_root() / "gsm8k") == []


# -- what is at the path -------------------------------------------------------------------------
def test_directory_at_the_path(origin: Origin, name: str) -> None:
    (_root() / "gsm8k" / "given.bin").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        download_to_vllm_test_cache(origin.url(f"/ok/{name}"), "gsm8k", "given.bin")
    assert origin.gets[f"/ok/{name}"] == 0


def test_symbolic_link_is_replaced_not_followed(origin: Origin, name: str, tmp_path: Path) -> None:
    target = tmp_path / "target.bin"
    target.write_bytes(b"untrusted")
    path = _root() / "gsm8k" / "given.bin"
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    with pytest.raises(FileNotFoundError):
        download_to_vllm_test_cache(
            origin.url(f"/ok/{name}"), "gsm8k", "given.bin", local_only=True
        )
    assert download_to_vllm_test_cache(origin.url(f"/ok/{name}"), "gsm8k", "given.bin") == path
    assert not path.is_symlink()
    assert path.read_bytes() == body(name)
    assert target.read_bytes() == b"untrusted"


def test_published_file_is_what_upstream_accepts(origin: Origin, name: str) -> None:
    # Upstream's helper takes a non-empty regular file (not a link) at the final path, of the
    # expected digest, and looks at nothing else: cacheroot's files beside it all start with a
    # dot, so the final path is the only name a reader sees.
    path = download_to_vllm_test_cache(
        origin.url(f"/ok/{name}"), "gpt_oss/tiktoken", "cl100k_base.tiktoken"
    )
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_size > 0
    assert stat.S_IMODE(st.st_mode) & 0o444 == 0o444 & ~_umask()  # readable as upstream's
    assert sha256(path.read_bytes()) == sha256(body(name))
    assert _visible(path.parent) == ["cl100k_base.tiktoken"]
    assert len(os.listdir(path.parent)) > 1  # the sidecars are there, and hidden


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_download_url_to_file_returns_the_path_as_given(
    origin: Origin, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    got = download_url_to_file(origin.url(f"/ok/{name}"), "data/train.jsonl")
    assert got == Path("data/train.jsonl")
    assert type(got) is type(Path())
    assert (tmp_path / "data" / "train.jsonl").read_bytes() == body(name)
    again = download_url_to_file(origin.url(f"/ok/{name}"), str(tmp_path / "data/train.jsonl"))
    assert again == tmp_path / "data" / "train.jsonl"
    assert origin.gets[f"/ok/{name}"] == 1


def test_one_entry_for_fetch_and_the_helper(origin: Origin, name: str) -> None:
    # For a URL without query or fragment and a clean basename, cacheroot's fetch() and
    # upstream's naming agree: either API finds what the other downloaded.
    url = origin.url(f"/ok/{name}")
    first = fetch(url, namespace="gsm8k")
    assert download_to_vllm_test_cache(url, "gsm8k", expected_sha256=sha256(body(name))) == first
    assert origin.gets[f"/ok/{name}"] == 1


def test_file_urls_as_upstreams_urlopen(tmp_path: Path) -> None:
    src = tmp_path / "mirror" / "test.jsonl"
    src.parent.mkdir()
    src.write_bytes(b'{"q": 1}\n')
    path = download_to_vllm_test_cache(src.as_uri(), "gsm8k")
    assert path.read_bytes() == b'{"q": 1}\n'
    assert path.name.endswith("-test.jsonl")


# -- many processes ------------------------------------------------------------------------------
#: As procs.CHILD, through the helper: build nothing, import the miss path, say "ready", wait.
COMPAT_CHILD = """
import json, sys
from cacheroot.fetch import stats
from cacheroot.fetch.vllm_compat import download_to_vllm_test_cache
import cacheroot.fetch._http
job = json.loads(sys.argv[1])
print("ready", flush=True)
if job.get("gate"):
    sys.stdin.readline()
paths = [
    str(download_to_vllm_test_cache(url, "gsm8k", expected_sha256=digest))
    for url, digest in job["urls"]
]
print(json.dumps({"paths": paths, "stats": stats()}), flush=True)
"""


def test_eight_processes_one_get(origin: Origin, name: str) -> None:
    size = 1 << 20
    # Slow enough (about 0.5 s) that all eight are waiting while the first downloads.
    url = origin.url(f"/slow/{name}?size={size}&rate={2 << 20}")
    digest = sha256(body(name, size))
    procs = [spawn([(url, digest)], child=COMPAT_CHILD) for _ in range(8)]
    for proc in procs:
        wait_ready(proc)
    open_gate(procs)
    reports = [result(proc) for proc in procs]
    paths = {p for r in reports for p in r["paths"]}  # type: ignore[attr-defined]
    assert len(paths) == 1
    assert origin.gets[f"/slow/{name}"] == 1
    path = Path(paths.pop())
    assert path.parent == _root() / "gsm8k"
    assert sha256(path.read_bytes()) == digest
    assert sum(r["stats"]["downloads"] for r in reports) == 1  # type: ignore[index]
    assert partials(str(path)) == []
