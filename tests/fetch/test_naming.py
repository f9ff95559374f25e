"""Names: deterministic, distinct, recognisable, short, and never outside the namespace."""

from __future__ import annotations

import os
import re
import tempfile

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cacheroot.fetch import check_filename, check_namespace, entry_name, entry_path
from cacheroot.fetch._store import MAX_NAME

CACHE = "/cache/vllm/test_cache"
#: The machine is shared: a slow example is not a failure here.
RELAXED = settings(deadline=None)
_NAME = re.compile(r"[0-9a-f]{16}-[A-Za-z0-9._-]+")

urls = st.builds(
    lambda scheme, host, path, query: f"{scheme}://{host}/{path}{query}",
    st.sampled_from(["http", "https", "file"]),
    st.text(min_size=0, max_size=30),
    st.text(min_size=0, max_size=400),
    st.one_of(st.just(""), st.text(max_size=40).map(lambda q: "?" + q)),
)
names = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["..", ".", "/", "a/b", "/etc", "CON", "nul.txt", "a\x00b", ".hidden", "-x"]),
)


def _inside(path: str, directory: str) -> bool:
    real = os.path.normpath(path)
    return os.path.dirname(real) == directory and os.path.commonpath([real, directory]) == directory


@RELAXED
@given(urls)
def test_url_names_are_safe(url: str) -> None:
    name = entry_name(url)
    assert _NAME.fullmatch(name)
    assert not name.startswith(".")
    assert len(name.encode()) <= MAX_NAME
    assert name == entry_name(url)
    assert _inside(entry_path(CACHE, "ns", url), os.path.join(CACHE, "ns"))


@RELAXED
@given(urls, urls)
def test_distinct_urls_distinct_names(a: str, b: str) -> None:
    assume(a.split("#", maxsplit=1)[0] != b.split("#", maxsplit=1)[0])
    assert entry_name(a) != entry_name(b)


@RELAXED
@given(names, urls)
def test_namespaces_are_checked(namespace: str, url: str) -> None:
    try:
        path = entry_path(CACHE, namespace, url)
    except ValueError:
        return
    assert check_namespace(namespace) == namespace
    assert _inside(path, os.path.join(CACHE, namespace))
    assert os.path.join(CACHE, namespace) != CACHE


@RELAXED
@given(names)
def test_filenames_are_checked(filename: str) -> None:
    try:
        path = entry_path(CACHE, "ns", "http://h/x", filename)
    except ValueError:
        return
    assert check_filename(filename) == filename
    assert _inside(path, os.path.join(CACHE, "ns"))
    assert not filename.startswith(".")


@settings(max_examples=50, deadline=None)
@given(urls)
def test_names_can_be_created(url: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = entry_path(d, "ns", url)
        os.makedirs(os.path.dirname(path))
        with open(path, "wb"):
            pass
        assert os.listdir(os.path.join(d, "ns")) == [os.path.basename(path)]


@pytest.mark.parametrize(
    ("url", "suffix"),
    [
        ("https://openaipublic.blob.core.windows.net/gsm8k/test.jsonl", "-test.jsonl"),
        ("https://h/a/b/x.tif?download=1#frag", "-x.tif"),
        ("https://h/", "-index"),
        ("https://h/%2e%2e", "-index"),
        ("https://h/dir/caf%C3%A9 menu.txt", "-caf_menu.txt"),
        ("https://h/" + "a" * 300 + ".safetensors", ".safetensors"),
    ],
)
def test_recognisable(url: str, suffix: str) -> None:
    assert entry_name(url).endswith(suffix)


def test_fragment_does_not_matter() -> None:
    assert entry_name("https://h/x#a") == entry_name("https://h/x#b") == entry_name("https://h/x")
