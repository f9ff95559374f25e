"""A server that ignores conditional writes: found by the probe, used without leases, one note."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import ASSETS, sha
from .fleet import Host, host_env
from .s3server import Forgetful

if TYPE_CHECKING:
    from tests.origin import Server

    from .s3server import S3


def test_without_conditional_writes_hosts_may_download_twice_and_publish_whole_entries(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    if not s3.moto:
        pytest.skip("the proxy drops signed headers: only moto, which checks no signature")
    gate = tmp_path / "gate"
    urls = [[origin.url(p), None] for p in ASSETS]
    with Forgetful(s3.endpoint) as proxy:
        hosts = [
            Host(
                tmp_path,
                f"h{i}",
                host_env(
                    tmp_path / f"l1-{i}",
                    f"s3://{bucket}/nc",
                    s3,
                    AWS_ENDPOINT_URL=proxy.endpoint,
                ),
                urls=urls,
                gate=str(gate),
            )
            for i in range(2)
        ]
        time.sleep(1.0)
        gate.write_text("go")
        done = [h.wait() for h in hosts]
    for d in done:
        assert d.rc == 0, d.stderr
        assert d.served == [sha(data) for data in ASSETS.values()]
        notes = d.stderr.strip().splitlines()
        assert len(notes) == 1, notes
        assert "ignores conditional writes (If-None-Match): used without leases" in notes[0]
    objects = s3.objects(bucket)
    assert not [n for n in objects if n.startswith(("nc/leases/", "nc/probes/"))]
    for data in ASSETS.values():
        assert objects[f"nc/blobs/sha256/{sha(data)}"] == data
    assert len([n for n in objects if n.startswith("nc/records/")]) == 3
    for path in ASSETS:
        assert 1 <= origin.count(path, "GET") <= 2
