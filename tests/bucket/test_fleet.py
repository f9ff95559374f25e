"""Hosts sharing a bucket: one origin download per asset, whatever the number of hosts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from .conftest import ASSETS, sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from tests.origin import Server

    from .s3server import S3


def test_hosts_fetching_at_once_cost_the_origin_one_download_per_asset(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    urls = [[origin.url(p), None] for p in ASSETS]
    hosts = [
        Host(
            tmp_path / "jobs",
            f"h{i}",
            host_env(tmp_path / f"l1-{i}", f"s3://{bucket}/fleet", s3),
            urls=urls,
            gate=str(gate),
        )
        for i in range(4)
    ]
    time.sleep(1.0)  # every host started and waits at the gate
    gate.write_text("go")
    done = [h.wait() for h in hosts]
    expected = [sha(data) for data in ASSETS.values()]
    for d in done:
        assert d.rc == 0, d.stderr
        assert d.served == expected
        assert d.stderr == "", d.stderr
    for path in ASSETS:
        assert origin.count(path, "GET") == 1, (path, origin.count(path, "GET"))
    names = sorted(s3.objects(bucket))
    assert [n for n in names if not n.startswith("fleet/records/")] == sorted(
        f"fleet/blobs/sha256/{sha(data)}" for data in ASSETS.values()
    )
    assert len([n for n in names if n.startswith("fleet/records/")]) == 3
