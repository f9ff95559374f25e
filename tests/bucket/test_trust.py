"""Trust tiers on a bucket: ``ro`` reads and never writes, ``off`` ignores; no secret anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from _cacheroot_layout import AWS_SESSION_TOKEN

from .conftest import ASSETS, sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from tests.origin import Server, static

    from .s3server import S3
else:
    from origin import static

SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLEsessiontokenQ7v"  # noqa: S105 - looked for in outputs


def test_an_ro_host_reads_through_and_leaves_the_bucket_as_it_was(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/t"
    jobs = tmp_path / "jobs"
    a, b = origin.url("/a.bin"), origin.url("/b.bin")
    done = Host(jobs, "rw", host_env(tmp_path / "l1-rw", shared, s3), urls=[[a, None]]).wait()
    assert done.rc == 0, done.stderr
    before = s3.objects(bucket)
    assert sorted(n.split("/")[1] for n in before) == ["blobs", "records"]
    assert before[f"t/blobs/sha256/{sha(ASSETS['/a.bin'])}"] == ASSETS["/a.bin"]

    ro = Host(
        jobs, "ro", host_env(tmp_path / "l1-ro", shared, s3, mode="ro"), urls=[[a, None], [b, None]]
    )
    done = ro.wait()
    assert done.rc == 0, done.stderr
    assert done.stderr == ""
    assert done.served == [sha(ASSETS["/a.bin"]), sha(ASSETS["/b.bin"])]
    assert origin.count("/a.bin", "GET") == 1  # a.bin from the bucket
    assert origin.count("/b.bin", "GET") == 1  # b.bin from the origin, not written through
    assert s3.objects(bucket) == before


def test_off_ignores_the_bucket(s3: S3, bucket: str, origin: Server, tmp_path: Path) -> None:
    env = host_env(tmp_path / "l1", f"s3://{bucket}/t", s3, mode="off")
    done = Host(tmp_path / "jobs", "off", env, urls=[[origin.url("/a.bin"), None]]).wait()
    assert done.rc == 0, done.stderr
    assert done.stderr == ""
    assert s3.objects(bucket) == {}


def test_records_and_outputs_hold_no_credential_and_no_query_string(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    signed = origin.route("/signed.bin", static(b"signed asset bytes\n"))
    url = signed + "?X-Amz-Credential=AKIAQUERY&X-Amz-Signature=querysig0123456789"
    # moto takes any session token; a real server refuses one it did not issue.
    token = {AWS_SESSION_TOKEN: SESSION_TOKEN} if s3.moto else {}
    env = host_env(tmp_path / "l1", f"s3://{bucket}/t", s3, **token)
    jobs = tmp_path / "jobs"
    outputs = []
    for name in ("first", "second"):
        done = Host(jobs, name, env, urls=[[url, None], [origin.url("/c.txt"), None]]).wait()
        assert done.rc == 0, done.stderr
        outputs += [done.stdout, done.stderr]
    objects = s3.objects(bucket)
    records = [json.loads(v) for k, v in objects.items() if k.startswith("t/records/")]
    assert sorted(r["url"] for r in records) == sorted([signed, origin.url("/c.txt")])
    assert sorted(records[0]) in (
        ["etag", "key_sha256", "path", "sha256", "size", "url", "version"],
        ["key_sha256", "path", "sha256", "size", "url", "version"],
    )
    everything = "".join(outputs).encode() + b"".join(objects.values())
    for secret in (s3.secret, SESSION_TOKEN, "querysig0123456789", "AKIAQUERY"):
        assert secret.encode() not in everything, secret
    assert origin.count("/signed.bin", "GET") == 1  # the second host was served by the bucket
