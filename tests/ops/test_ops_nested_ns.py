"""Nested namespaces (``gpt_oss/tiktoken``): written by the drop-in, ``cacheroot fetch`` and
``warm``, and seen entry by entry by ``cacheroot cache ls``, ``du``, ``verify`` and ``prune``."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher, build_once
from cacheroot.fetch._cachedir import cache_dir
from cacheroot.fetch._store import read_meta
from cacheroot.fetch._upkeep.cache import entries
from cacheroot.fetch._used import used_path
from cacheroot.fetch._warm.manifest import ManifestError, parse_manifest
from cacheroot.fetch.store import lock_path
from cacheroot.fetch.vllm_compat import download_to_vllm_test_cache

from .conftest import cli, cli_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .origin import Origin

#: A small stand-in for a tiktoken ranks file: 300 bytes.
TIKTOKEN = b"IQ== 0\nIg== 1\nIw== 2\n" * 14 + b"JA== 3"
#: ``sha256sum`` of :data:`TIKTOKEN`.
TIKTOKEN_SHA = "913f45fff7fb35f1eceb726a871871fa53a01495f73561a397c7999420e5a479"
#: 2024-01-02 03:04:00 UTC, as ``cacheroot cache ls`` prints it (minutes).
USED = 1704164640
USED_TEXT = "2024-01-02 03:04"
HEADER = "ENTRY\tSIZE\tLAST USED (UTC)\tSOURCE\n"


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(read_timeout=10.0, retries=1, backoff=0.01, lock_timeout=30.0)
    yield f
    f.close()


def set_used(entry: Path, when: float) -> None:
    used = used_path(str(entry))
    Path(used).touch()
    os.utime(used, (when, when))


def listed(*args: str) -> list[dict[str, Any]]:
    """The test cache's entries as ``cacheroot cache ls --json`` lists them."""
    rows: list[dict[str, Any]] = cli_json("cache", "ls", *args)["test_cache"]["entries"]
    return rows


def tiktoken(origin: Origin) -> tuple[str, Path]:
    """The GPQA tokenizer file as vLLM's tests cache it, through the drop-in."""
    url = origin.serve("encodings/cl100k_base.tiktoken", TIKTOKEN)
    path = download_to_vllm_test_cache(
        url, "gpt_oss/tiktoken", "cl100k_base.tiktoken", expected_sha256=TIKTOKEN_SHA
    )
    return url, path


def test_the_stand_in_is_what_its_digest_says() -> None:
    assert len(TIKTOKEN) == 300
    assert hashlib.sha256(TIKTOKEN).hexdigest() == TIKTOKEN_SHA


def test_ls_du_verify_see_the_file_of_a_vllm_compat_nested_namespace(origin: Origin) -> None:
    url, path = tiktoken(origin)
    assert path == Path(cache_dir(), "gpt_oss", "tiktoken", "cl100k_base.tiktoken")
    set_used(path, USED)

    done = cli("cache", "ls")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"test cache (_VLLM_TEST_CACHE): {cache_dir()}\n"
        f"{HEADER}gpt_oss/tiktoken/cl100k_base.tiktoken\t300 B\t{USED_TEXT}\t{url}\n"
    )
    rows = listed()
    assert [
        (r["namespace"], r["name"], r["kind"], r["size"], r["last_used"], r["url"], r["sha256"])
        for r in rows
    ] == [("gpt_oss/tiktoken", "cl100k_base.tiktoken", "file", 300, USED, url, TIKTOKEN_SHA)]
    # A filter at either level covers what is nested in it.
    for ns in ("gpt_oss", "gpt_oss/tiktoken"):
        assert [r["name"] for r in listed("--namespace", ns)] == ["cl100k_base.tiktoken"]

    done = cli("cache", "verify")
    assert (done.returncode, done.stdout) == (
        0,
        "verified 1 entry: 0 corrupt, 0 unreadable, 0 without a record\n",
    )
    # Only the level that holds something of its own is a line of du; the sidecars count too.
    usage = cli_json("cache", "du")
    assert list(usage["namespaces"]) == ["gpt_oss/tiktoken"]
    assert usage["namespaces"]["gpt_oss/tiktoken"] > 300
    assert usage["total"] == usage["namespaces"]["gpt_oss/tiktoken"]


def test_cacheroot_fetch_and_warm_write_nested_namespaces(origin: Origin, tmp_path: Path) -> None:
    data_url = origin.serve("data.bin", b"d" * 2000)
    top_url = origin.serve("top.bin", b"t" * 100)
    base = [sys.executable, "-m", "cacheroot.envs._cli", "fetch", "-q"]
    for extra in (
        ["--namespace", "a/b", data_url],
        ["--namespace", "a", "--filename", "top.bin", top_url],
    ):
        done = subprocess.run([*base, *extra], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    # hashlib stands in for sha256sum: the origin's port changes from run to run.
    derived = hashlib.sha256(data_url.encode()).hexdigest()[:16] + "-data.bin"
    rows = listed()
    assert [(r["namespace"], r["name"], r["size"], r["url"]) for r in rows] == [
        ("a", "top.bin", 100, top_url),
        ("a/b", derived, 2000, data_url),
    ]
    assert list(cli_json("cache", "du")["namespaces"]) == ["a", "a/b"]

    manifest = tmp_path / "gpqa.toml"
    manifest.write_text(
        textwrap.dedent(
            f"""
            [[asset]]
            url = "{origin.serve("o200k_base.tiktoken", TIKTOKEN)}"
            sha256 = "{TIKTOKEN_SHA}"
            namespace = "gpt_oss/tiktoken"
            filename = "o200k_base.tiktoken"
            """
        )
    )
    report = cli_json("warm", str(manifest))
    assert (report["misses"], report["failures"]) == (1, 0)
    assert Path(cache_dir(), "gpt_oss/tiktoken/o200k_base.tiktoken").read_bytes() == TIKTOKEN
    names = [(r["namespace"], r["name"]) for r in listed()]
    assert names == [
        ("a", "top.bin"),
        ("a/b", derived),
        ("gpt_oss/tiktoken", "o200k_base.tiktoken"),
    ]


@pytest.mark.parametrize("command", ["ls", "verify"])
def test_a_namespace_filter_that_names_nothing_says_so(origin: Origin, command: str) -> None:
    tiktoken(origin)
    done = cli("cache", command, "--namespace", "gpt_oss/tiktokn")
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        f"cacheroot cache {command}: no namespace 'gpt_oss/tiktokn' in {cache_dir()} "
        "('gpt_oss/tiktokn' does not exist); its namespaces are: gpt_oss, gpt_oss/tiktoken\n"
    ) == done.stderr
    done = cli("cache", command, "--namespace", "gpt_oss/tiktoken/cl100k_base.tiktoken")
    assert done.returncode == 2
    assert (
        "'gpt_oss/tiktoken/cl100k_base.tiktoken' is an entry of namespace 'gpt_oss/tiktoken', "
        "not a namespace" in done.stderr
    )
    done = cli("cache", command, "--namespace", "../gpt_oss")
    assert done.returncode == 2
    assert "namespace '../gpt_oss' is not allowed: its part '..'" in done.stderr


def test_du_of_a_test_cache_that_does_not_exist_says_so() -> None:
    assert not os.path.exists(cache_dir())
    du = cli("cache", "du")
    assert du.returncode == 0
    assert du.stdout.splitlines()[0] == (
        f"no test cache: {cache_dir()} does not exist: nothing has been fetched into it yet "
        "($_VLLM_TEST_CACHE or $CACHEROOT decide where it is)"
    )
    assert "total" not in du.stdout
    assert cli_json("cache", "du")["exists"] is False


def test_verify_quarantines_a_corrupted_nested_file(origin: Origin) -> None:
    path = tiktoken(origin)[1]
    path.write_bytes(b"garbage\n")
    done = cli("cache", "verify")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "corrupt: gpt_oss/tiktoken/cl100k_base.tiktoken: sha256 "
        "233d4809807d21d1b24ae54639eede42f519dcbe35ca71d51bd051bca59c6a68 over 8 bytes, "
        f"recorded {TIKTOKEN_SHA} -> {cache_dir()}/.quarantine/gpt_oss/tiktoken/"
        "cl100k_base.tiktoken."
    )
    assert lines[1:] == ["verified 1 entry: 1 corrupt, 0 unreadable, 0 without a record"]
    assert not path.exists()
    moved = list(Path(cache_dir(), ".quarantine", "gpt_oss", "tiktoken").iterdir())
    assert len(moved) == 2  # the file and its record
    # The quarantine is listed (and pruned) entry by entry too, in its nested place.
    prune = cli_json("cache", "prune", "--max-size", "0", "--dry-run")
    [label] = [r["label"] for r in prune["removed"]]
    assert label.startswith(".quarantine/gpt_oss/tiktoken/cl100k_base.tiktoken.")
    # The next call downloads a good copy again.
    assert tiktoken(origin)[1].read_bytes() == TIKTOKEN
    assert origin.requests["/encodings/cl100k_base.tiktoken"] == 2


HOLDER = textwrap.dedent(
    """
    import sys
    from cacheroot.fetch.store import PathLock
    with PathLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.readline()
    """
)


def test_prune_removes_nested_entries_by_lru_and_keeps_a_held_one(
    origin: Origin, fetcher: Fetcher
) -> None:
    paths = {}
    for name, ns in (
        ("old.bin", "a/b"),
        ("held.bin", "a/b"),
        ("new.bin", "a/b/c"),
        ("top.bin", "a"),
    ):
        url = origin.serve(name, name.encode() * 100)
        paths[name] = fetcher.fetch(url, namespace=ns, filename=name)
    for name, age in (("held.bin", 900), ("old.bin", 600), ("top.bin", 300), ("new.bin", 100)):
        set_used(paths[name], USED + 10_000 - age)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_path(str(paths["held.bin"]))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        # 2300 bytes in all: 700 or less means three go, least recently used first.
        report = cli_json("cache", "prune", "--max-size", "700")
    finally:
        holder.communicate("done\n", timeout=30)
    assert [(r["label"], r["size"]) for r in report["removed"]] == [
        ("a/b/old.bin", 700),
        ("a/top.bin", 700),
    ]
    assert [(k["label"], k["reason"].split(" pid")[0]) for k in report["kept"]] == [
        ("a/b/held.bin", "locked by")
    ]
    assert [p.exists() for p in paths.values()] == [False, True, True, False]
    assert read_meta(str(paths["old.bin"])) is None
    assert not Path(used_path(str(paths["old.bin"]))).exists()
    # The levels stay, and what is left is listed where it was.
    names = [(r["namespace"], r["name"]) for r in listed()]
    assert names == [("a/b", "held.bin"), ("a/b/c", "new.bin")]


def test_a_record_of_a_gone_nested_entry_is_a_stray(origin: Origin, fetcher: Fetcher) -> None:
    path = fetcher.fetch(origin.serve("x.bin", b"x" * 10), namespace="a/b/c")
    path.unlink()
    old = USED
    record = path.parent / f".{path.name}.meta.json"
    os.utime(record, (old, old))
    report = cli_json("cache", "prune", "--strays")
    assert [(s["path"], s["reason"]) for s in report["strays"]] == [
        (str(record), "record of a missing entry")
    ]
    assert not record.exists()


def _tar(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    return out.getvalue()


def test_unpacked_and_built_directories_stay_one_entry(origin: Origin, fetcher: Fetcher) -> None:
    url = origin.serve("pack.tar", _tar({"pack/a.txt": b"a" * 10, "pack/sub/b.txt": b"b" * 20}))
    unpacked = fetcher.fetch(url, namespace="sets/x", filename="pack.tar", extract=True)
    built = build_once("tree", lambda out: (out / "w.bin").write_bytes(b"w" * 7), namespace="b/y")
    rows = listed()
    assert [(r["namespace"], r["name"], r["kind"], r["size"]) for r in rows] == [
        ("b/y", built.name, "dir", 7),
        ("sets/x", "pack.tar", "file", 10240),
        ("sets/x", "pack.tar.extracted", "dir", 30),
    ]
    assert unpacked == Path(cache_dir(), "sets/x/pack.tar.extracted")
    done = cli("cache", "verify")
    assert done.stdout == "verified 3 entries: 0 corrupt, 0 unreadable, 0 without a record\n"
    (unpacked / "pack" / "sub" / "b.txt").write_bytes(b"c" * 20)
    report = cli_json("cache", "verify", "--namespace", "sets", "--no-quarantine", status=1)
    assert [(r["name"], r["status"]) for r in report["entries"]] == [
        ("pack.tar", "ok"),
        ("pack.tar.extracted", "corrupt"),
    ]


def test_manifest_namespaces_nest_but_not_through_an_entry() -> None:
    asset = textwrap.dedent(
        """
        [[asset]]
        url = "https://example.org/{name}"
        sha256 = "{sha}"
        namespace = "{ns}"
        filename = "{name}"
        """
    )
    ok = asset.format(name="cl100k_base.tiktoken", sha=TIKTOKEN_SHA, ns="gpt_oss/tiktoken")
    assert [a.namespace for a in parse_manifest(ok, path="m.toml").assets] == ["gpt_oss/tiktoken"]
    through = ok + asset.format(
        name="x.bin", sha=TIKTOKEN_SHA, ns="gpt_oss/tiktoken/cl100k_base.tiktoken"
    )
    with pytest.raises(ManifestError) as info:
        parse_manifest(through, path="m.toml")
    assert (
        "'gpt_oss/tiktoken/cl100k_base.tiktoken' runs through the entry "
        "'gpt_oss/tiktoken/cl100k_base.tiktoken' of [[asset]] #1" in str(info.value)
    )
    bad = asset.format(name="x.bin", sha=TIKTOKEN_SHA, ns="gpt_oss//tiktoken")
    with pytest.raises(ManifestError, match="field 'namespace'"):
        parse_manifest(bad, path="m.toml")


def test_levels_end_at_the_deepest_namespace_a_fetch_can_name(tmp_path: Path) -> None:
    deepest = tmp_path.joinpath("a", "b", "c", "d", "e", "f", "g", "h")
    (deepest / "tree" / "sub").mkdir(parents=True)
    (deepest / "tree" / "sub" / "w.bin").write_bytes(b"w" * 5)
    (deepest / "file.bin").write_bytes(b"f" * 3)
    (tmp_path / "a" / "b" / ".hidden").mkdir()
    (tmp_path / "a" / "b" / ".hidden" / "x.bin").write_bytes(b"x")
    (tmp_path / "root.bin").write_bytes(b"r")
    found = [(e.namespace, e.name, e.kind, e.size) for e in entries(str(tmp_path))]
    assert found == [
        ("a/b/c/d/e/f/g/h", "file.bin", "file", 3),
        ("a/b/c/d/e/f/g/h", "tree", "dir", 5),
    ]
