"""The bucket tier's values: URLs, records and failure words, each case written out."""

from __future__ import annotations

import json

import pytest

from cacheroot.envs import CACHEROOT_SHARED
from cacheroot.envs._shared_tier import shared_url
from cacheroot.fetch._bucket.failures import describe
from cacheroot.fetch._bucket.location import Location, parse
from cacheroot.fetch._bucket.names import blob_name, record_name
from cacheroot.fetch._bucket.records import parse as parse_record
from cacheroot.fetch._bucket.records import shown_key

DIGEST = "a" * 64


@pytest.mark.parametrize(
    ("raw", "found"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("/mnt/shared", None),
        ("s3://b/p", "s3://b/p"),
        ("  S3://b/p \t", "S3://b/p"),
        ("gs://b", "gs://b"),
        ("az://acct/container/p", "az://acct/container/p"),
        ("http://b/p", None),
    ],
)
def test_shared_url_reads_only_the_scheme(raw: str | None, found: str | None) -> None:
    env = {} if raw is None else {CACHEROOT_SHARED: raw}
    assert shared_url(env) == found


@pytest.mark.parametrize(
    ("value", "location"),
    [
        ("s3://fleet", Location("s3", "fleet", "")),
        ("s3://fleet/", Location("s3", "fleet", "")),
        ("S3://fleet//ci/cache/", Location("s3", "fleet", "ci/cache")),
        ("gs://fleet/x", Location("gs", "fleet", "x")),
    ],
)
def test_bucket_urls_parse(value: str, location: Location) -> None:
    assert parse(value) == location


def test_a_refused_url_never_repeats_its_credentials() -> None:
    with pytest.raises(ValueError, match="credentials belong in the environment") as caught:
        parse("s3://AKIAXX:pa55word@fleet/p?sig=zzz")
    assert "pa55word" not in str(caught.value)
    assert "sig=zzz" not in str(caught.value)
    assert "'s3://fleet/p'" in str(caught.value)


def test_names() -> None:
    assert blob_name(DIGEST) == f"blobs/sha256/{DIGEST}"
    # sha256 of "test-data/x", as `printf test-data/x | sha256sum` prints it
    assert record_name("test-data/x") == (
        "records/26616fc2d1fdd248ac8f26d42ca5f2b1bb8f7205fa08a2ebd58b4add1707b1c9.json"
    )
    with pytest.raises(ValueError, match="64 lowercase hex"):
        blob_name("../../etc/passwd")


def _record(**changes: object) -> bytes:
    doc: dict[str, object] = {
        "version": 1,
        "key_sha256": "b" * 64,
        "url": "https://example.org/x.bin",
        "sha256": DIGEST,
        "size": 3,
        "path": "test-data/example.org/x.bin",
    }
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def test_a_good_record_is_read() -> None:
    found = parse_record(_record())
    assert found is not None
    assert (found.sha256, found.size, found.path) == (DIGEST, 3, "test-data/example.org/x.bin")


@pytest.mark.parametrize(
    "changes",
    [
        {"path": "../outside"},
        {"path": "/etc/passwd"},
        {"path": "a//b"},
        {"path": "vllm/test_cache/downloads/.x.bin.meta.json"},
        {"path": None},
        {"sha256": "../x"},
        {"size": -1},
        {"size": True},
        {"size": "3"},
        {"key_sha256": "short"},
        {"url": 5},
    ],
)
def test_a_record_that_cannot_be_trusted_is_none(changes: dict[str, object]) -> None:
    assert parse_record(_record(**changes)) is None


def test_an_oversized_record_is_not_parsed() -> None:
    assert parse_record(_record(url="x" * 70_000)) is None
    assert parse_record(b"[1, 2]") is None
    assert parse_record(b"\xff") is None


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("https://h/x.bin", "https://h/x.bin"),
        ("https://u:p@h/x.bin?X-Amz-Signature=s#f", "https://h/x.bin"),
        ("https://h/x.bin?token=t", "https://h/x.bin"),
    ],
)
def test_a_record_shows_no_user_and_no_query(key: str, shown: str) -> None:
    assert shown_key(key) == shown


@pytest.mark.parametrize(
    ("text", "words", "fatal"),
    [
        (
            "404 Not Found: <Error><Code>NoSuchBucket</Code><Message>secret-echo</Message>",
            "does not exist (NoSuchBucket)",
            True,
        ),
        (
            "403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code><StringToSign>secret-echo",
            "refused the credentials (SignatureDoesNotMatch)",
            True,
        ),
        ("status code: 403 <Code>AccessDenied</Code> secret-echo", "denied the request", False),
        ("status code: 503 <Code>SlowDown</Code> secret-echo", "asks to slow down", False),
        ("HTTP error: error sending request kind: Connect secret-echo", "nothing answers", True),
    ],
)
def test_failures_are_said_in_fixed_words(text: str, words: str, fatal: bool) -> None:
    found = describe(RuntimeError(text), "s3://fleet/p")
    assert words in found.cause
    assert found.fatal is fatal
    assert "secret-echo" not in found.cause
