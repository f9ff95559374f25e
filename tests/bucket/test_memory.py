"""Streams, never whole objects: a 64 MiB entry goes up and comes down in a few parts' memory."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .fleet import Host, host_env

if TYPE_CHECKING:
    from tests.origin import Server, files

    from .s3server import S3
else:
    from origin import files

SIZE = 64 << 20
#: The most a host's peak memory may rise while it moves the 64 MiB entry: half of it (measured:
#: about 21 MiB up, 10 MiB down; a whole object in memory rises past 64 MiB).
BOUND_KIB = (SIZE // 2) >> 10


def test_a_large_entry_moves_with_bounded_memory(
    s3: S3, bucket: str, origin: Server, tmp_path: Path
) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    big = assets / "big.bin"
    digest = hashlib.sha256()
    with big.open("wb") as f:
        for _ in range(SIZE >> 20):
            block = os.urandom(1 << 20)
            digest.update(block)
            f.write(block)
    origin.route("/files/big.bin", files(str(assets)))
    origin.route("/files/warm.bin", files(str(assets)))
    (assets / "warm.bin").write_bytes(b"warm up the client\n")
    urls = [[origin.url("/files/warm.bin"), None], [origin.url("/files/big.bin"), None]]
    shared = f"s3://{bucket}/m"
    jobs = tmp_path / "jobs"
    up = Host(jobs, "up", host_env(tmp_path / "l1-up", shared, s3), urls=urls).wait()
    assert up.rc == 0, up.stderr
    down = Host(jobs, "down", host_env(tmp_path / "l1-down", shared, s3), urls=urls).wait()
    assert down.rc == 0, down.stderr
    assert up.served[1] == down.served[1] == digest.hexdigest()
    assert origin.count("/files/big.bin", "GET") == 1  # the second host pulled it
    for done in (up, down):
        assert done.grown_kib[1] < BOUND_KIB, done.grown_kib
