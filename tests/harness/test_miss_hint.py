"""What an offline run's miss tells the user to do: only a command that can still work.

A test's server on loopback is gone once the run ends, so no ``cacheroot fetch`` of its URL is
suggested, only the manifest entry to add; a miss in a root the test made for itself names no URL
and no manifest (nothing before the run reaches that root).
"""

from __future__ import annotations

import sys

import pytest

from cacheroot.fetch._plugin.offline import manifest_entry, miss_hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

SHA = "AB" * 32
ENTRY = (
    "[[asset]]\n"
    'url = "https://data.example.org/gsm8k/test.jsonl"\n'
    f'sha256 = "{"ab" * 32}"\n'
    'namespace = "gsm8k"\n'
    'filename = "test.jsonl"'
)


def test_the_entry_is_toml_a_manifest_reads() -> None:
    entry = manifest_entry(
        "https://data.example.org/gsm8k/test.jsonl",
        sha256=SHA,
        namespace="gsm8k",
        filename="test.jsonl",
    )
    assert entry == ENTRY
    assert tomllib.loads(entry) == {
        "asset": [
            {
                "url": "https://data.example.org/gsm8k/test.jsonl",
                "sha256": "ab" * 32,
                "namespace": "gsm8k",
                "filename": "test.jsonl",
            }
        ]
    }


def test_an_unknown_digest_says_what_to_put_there() -> None:
    entry = manifest_entry("https://h.example/x.bin", sha256=None)
    assert entry == (
        "[[asset]]\n"
        'url = "https://h.example/x.bin"\n'
        'sha256 = "<64 hex digits: sha256sum of the file>"\n'
        'namespace = "downloads"'
    )


def test_a_remote_url_gets_the_fetch_command_and_the_entry() -> None:
    hint = miss_hint(
        "https://data.example.org/gsm8k/test.jsonl",
        sha256=SHA,
        namespace="gsm8k",
        filename="test.jsonl",
        paths=["/src/tests/manifest.toml"],
    )
    assert hint == (
        "warm it with `cacheroot fetch https://data.example.org/gsm8k/test.jsonl --namespace "
        "gsm8k --filename test.jsonl`, or add this entry to this run's manifest "
        "(/src/tests/manifest.toml) and run `cacheroot warm /src/tests/manifest.toml` before "
        f"the tests:\n{ENTRY}"
    )


@pytest.mark.parametrize(
    "host", ["127.0.0.1:26648", "127.3.4.5:8000", "[::1]:26648", "localhost:26648"]
)
def test_a_loopback_url_gets_no_fetch_command(host: str) -> None:
    url = f"http://{host}/datasets/gsm8k/test.jsonl"
    hint = miss_hint(url, sha256=SHA, namespace="gsm8k")
    assert "cacheroot fetch http" not in hint
    assert hint == (
        f"its server ({host}) is on the machine that ran the tests, so no later `cacheroot "
        "fetch` reaches it: add this entry to the run's manifest and run `cacheroot warm "
        f"MANIFEST` while a server listens at {host}, before the tests:\n"
        f'[[asset]]\nurl = "{url}"\nsha256 = "{"ab" * 32}"\nnamespace = "gsm8k"'
    )


def test_a_miss_in_the_test_s_own_root_names_no_url_and_no_manifest() -> None:
    hint = miss_hint(
        "http://127.0.0.1:26648/datasets/gsm8k/test.jsonl",
        sha256=SHA,
        paths=["/src/tests/manifest.toml"],
        own_root=True,
    )
    assert hint == (
        "the test reads a cache root it made for itself, which nothing before the run can "
        "warm: let that test fetch with the offline switches off for its own root (data from "
        "a server it starts needs no network), or have it read the run's volume"
    )


def test_credentials_never_appear() -> None:
    hint = miss_hint("https://alice:S3cr3t@data.example.org/x.bin", sha256=SHA)
    assert "S3cr3t" not in hint
    assert "`cacheroot fetch https://alice:***@data.example.org/x.bin`" in hint
    assert 'url = "https://alice:***@data.example.org/x.bin"' in hint
    loopback = miss_hint("http://bob:S3cr3t@127.0.0.1:9/x.bin", sha256=SHA)
    assert "S3cr3t" not in loopback
    assert "its server (127.0.0.1:9)" in loopback
