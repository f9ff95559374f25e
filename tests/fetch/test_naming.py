"""Names: deterministic, distinct, recognisable, short, and never outside the namespace."""

from __future__ import annotations

import os
import re
import tempfile
from typing import TYPE_CHECKING

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cacheroot.fetch._store import MAX_NAME
from cacheroot.fetch.store import check_filename, check_namespace, entry_name, entry_path

if TYPE_CHECKING:
    from collections.abc import Callable

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
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_RESERVED = ("CON", "PRN", "AUX", "NUL", *(f"{p}{i}" for p in ("COM", "LPT") for i in range(1, 10)))
#: Both checks (and entry_path) with their length limits.
CHECKS = {"namespace": (check_namespace, 64), "filename": (check_filename, MAX_NAME)}


def valid_names(limit: int) -> st.SearchStrategy[str]:
    """Names the checks accept, by construction: a letter or digit, then ``[A-Za-z0-9._-]``."""
    return st.builds(
        str.__add__,
        st.sampled_from(_ALNUM),
        st.text(alphabet=_ALNUM + "._-", max_size=limit - 1),
    ).filter(lambda n: n.split(".", 1)[0].upper() not in _RESERVED and not n.endswith(".extracted"))


def valid_namespaces() -> st.SearchStrategy[str]:
    """Nested namespaces the check accepts: 1 to 8 valid names joined by ``/``."""
    return st.lists(valid_names(64), min_size=1, max_size=8).map("/".join)


def invalid_names(limit: int, *, nested: bool = False) -> st.SearchStrategy[str]:
    """Names the checks refuse, each for one reason (shape, character, length, reserved);
    ``nested``: as namespaces, where ``a/b`` is allowed."""
    ok = valid_names(30)
    bad = ["\\", "\x00", " ", "\n", ":", "*", "\u00e9", "/..", "~", "//", "/.x", "/-"]
    bad_char = st.sampled_from(bad if nested else [*bad, "/"])
    shapes = ["", ".", "..", "/", "/etc", "../x", "a\x00b", ".hidden", "-x", "a/", "a//b"]
    return st.one_of(
        st.sampled_from(shapes if nested else [*shapes, "a/b"]),
        st.builds(str.__add__, st.sampled_from(".-_/"), ok),  # a bad first character
        st.builds(lambda a, c, b: a + c + b, ok, bad_char, ok),  # a bad character inside
        ok.map(lambda n: (n * (limit // len(n) + 2))[: limit + 1 + len(n)]),  # too long
        st.sampled_from(_RESERVED).flatmap(
            lambda r: st.sampled_from([r, r.lower(), f"{r}.txt", f"{r.lower()}.tar.gz"])
        ),
    )


def run_counted(test: Callable[[list[int]], None]) -> None:
    """Run a hypothesis ``test`` (given a ``[run, reached]`` counter to bump) and require that
    most of its examples got through every assertion, not out by an early return."""
    counter = [0, 0]
    test(counter)
    run, reached = counter
    assert run >= 50, f"only {run} examples ran"
    assert reached >= 0.95 * run, f"{reached} of {run} examples reached the assertions"


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


def test_valid_namespaces_stay_inside_their_directory() -> None:
    @RELAXED
    @given(valid_namespaces(), urls)
    def check(counter: list[int], namespace: str, url: str) -> None:
        counter[0] += 1
        path = entry_path(CACHE, namespace, url)
        assert check_namespace(namespace) == namespace
        assert _inside(path, os.path.join(CACHE, namespace))
        assert os.path.join(CACHE, namespace) != CACHE
        assert os.path.relpath(os.path.dirname(path), CACHE).split(os.sep) == namespace.split("/")
        counter[1] += 1

    run_counted(check)


def test_valid_filenames_stay_inside_the_namespace() -> None:
    @RELAXED
    @given(valid_names(MAX_NAME))
    def check(counter: list[int], filename: str) -> None:
        counter[0] += 1
        path = entry_path(CACHE, "ns", "http://h/x", filename)
        assert check_filename(filename) == filename
        assert _inside(path, os.path.join(CACHE, "ns"))
        assert os.path.basename(path) == filename
        assert not filename.startswith(".")
        counter[1] += 1

    run_counted(check)


@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_invalid_names_are_refused(kind: str) -> None:
    checker, limit = CHECKS[kind]

    @RELAXED
    @given(invalid_names(limit, nested=kind == "namespace"), urls)
    def check(counter: list[int], name: str, url: str) -> None:
        counter[0] += 1
        with pytest.raises(ValueError, match=f"^{kind} "):
            checker(name)
        where = (CACHE, name, url) if kind == "namespace" else (CACHE, "ns", url, name)
        with pytest.raises(ValueError, match=f"^{kind} "):
            entry_path(*where)
        counter[1] += 1

    run_counted(check)


@pytest.mark.parametrize(
    ("namespace", "refused"),
    [
        (None, "expected one name (e.g. gsm8k) or several joined by '/'"),
        ("", "expected one name (e.g. gsm8k) or several joined by '/'"),
        ("gsm8k", None),
        ("a/b", None),
        ("gpt_oss/tiktoken", None),
        ("a/b/c/d/e/f/g/h", None),
        ("a/b/c/d/e/f/g/h/i", "9 levels, at most 8"),
        ("../x", "its part '..': expected letters"),
        ("a/../b", "its part '..': expected letters"),
        ("a/./b", "its part '.': expected letters"),
        ("/abs", "it is absolute"),
        ("a//b", "it has an empty part"),
        ("a/", "it has an empty part"),
        (".hidden/x", "its part '.hidden': expected letters"),
        ("x/.hidden", "its part '.hidden': expected letters"),
        ("a\\b/c", "its part 'a\\\\b': expected letters"),
        ("a/CON", "its part 'CON': a reserved device name"),
        ("a/" + "b" * 65, "longer than 64 characters"),
        ("data.tar.extracted", None),
        ("a/data.tar.extracted", "ends in '.extracted', which names the unpacked archive"),
    ],
)
def test_check_namespace_rules(namespace: str | None, refused: str | None) -> None:
    if refused is None:
        assert check_namespace(namespace) == namespace  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match=r"^namespace ") as info:
        check_namespace(namespace)  # type: ignore[arg-type]
    assert refused in str(info.value)


def test_reserved_for_unpacked_archives() -> None:
    with pytest.raises(ValueError, match="reserved for unpacked archives"):
        check_filename("data.tar.extracted")
    assert check_filename("data.extracted.tar") == "data.extracted.tar"


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
