"""A writer killed with ``kill -9`` mid-upload: no reader takes anything, its lease expires."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .conftest import sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from tests.origin import Server, static

    from .s3server import S3
else:
    from origin import static

#: Three parts of 5 MiB and a bit: the upload is multipart, and stalls after its first part.
BIG = os.urandom((15 << 20) + 12345)


def test_a_writer_killed_mid_upload_publishes_nothing_and_its_lease_is_taken_over(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    url = origin.route("/big.bin", static(BIG))
    shared = f"s3://{bucket}/crash"
    marker = tmp_path / "uploading"
    jobs = tmp_path / "jobs"
    writer = Host(
        jobs,
        "writer",
        host_env(tmp_path / "l1-w", shared, s3),
        urls=[[url, None]],
        ttl=2,
        stall=str(marker),
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert writer.proc.poll() is None, writer.wait().stderr
        assert time.monotonic() < deadline, "the writer never started its upload"
        time.sleep(0.05)
    writer.kill()  # SIGKILL, mid-upload: one part sent, the lease held, no record
    names = sorted(s3.objects(bucket))
    assert len(names) == 1, names
    assert names[0].startswith("crash/leases/"), names

    # A host that may only read takes nothing from the bucket and asks the origin.
    reader = Host(
        jobs, "reader", host_env(tmp_path / "l1-r", shared, s3, mode="ro"), urls=[[url, None]]
    )
    done = reader.wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(BIG)]
    assert sorted(s3.objects(bucket)) == names

    # A writer that comes later waits out the dead lease, takes it over and publishes.
    started = time.monotonic()
    taker = Host(jobs, "taker", host_env(tmp_path / "l1-t", shared, s3), urls=[[url, None]], ttl=2)
    done = taker.wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(BIG)]
    assert time.monotonic() - started < 20
    after = s3.objects(bucket)
    assert f"crash/blobs/sha256/{sha(BIG)}" in after
    assert after[f"crash/blobs/sha256/{sha(BIG)}"] == BIG
    assert [n for n in after if n.startswith("crash/leases/")] == []
    assert len([n for n in after if n.startswith("crash/records/")]) == 1
    # writer, reader, taker: three downloads, none of them a half-published copy.
    assert origin.count("/big.bin", "GET") == 3
    # And the next host is served by the bucket.
    late = Host(jobs, "late", host_env(tmp_path / "l1-l", shared, s3), urls=[[url, None]])
    done = late.wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(BIG)]
    assert origin.count("/big.bin", "GET") == 3
