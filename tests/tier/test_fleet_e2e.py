"""The fleet over a real network file system: each host mounts the shared tier over sshfs.

sshfs (FUSE over SFTP to a local sshd on 127.0.0.1) keeps ``flock`` locks on the client, so
no lock taken on one host is seen by another, as on NFS mounts without working locks: only
the lease (create-if-absent on the server) and atomic publishing hold the fleet together.
Slow (an sshd, one sshfs client per host): run by ``nox -s e2e`` and ``nox -s stress``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from typing import TYPE_CHECKING

import pytest

from .fleet import Host, hidden_partials, need_namespaces, visible_files, wait_for
from .test_fleet import ASSETS, data, sha
from .test_sync import _tree

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.origin import Server, gated, paced, static
else:
    from origin import Server, gated, paced, static

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshfs(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    """An sshd on 127.0.0.1 serving ``tmp_path/backing``; yields the sshfs command (without
    the mount point) that mounts it, and the backing directory."""
    need_namespaces()
    missing = [t for t in ("sshfs", "ssh-keygen", SSHD) if shutil.which(t) is None]
    if missing or not os.path.exists("/dev/fuse"):
        pytest.skip(
            f"sshfs over a local sshd needs {', '.join(missing) or '/dev/fuse'}: "
            "apt-get install -y openssh-server sshfs"
        )
    keys = tmp_path / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True
        )
    shutil.copy(keys / "client.pub", keys / "authorized_keys")
    port = _free_port()
    (keys / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\n"
        f"UsePAM no\nPidFile {keys / 'sshd.pid'}\nSubsystem sftp internal-sftp\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    sshd = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(keys / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, what="sshd to listen")
    backing = tmp_path / "backing"
    backing.mkdir()
    options = (
        f"IdentityFile={keys / 'client'},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,"
        "BatchMode=yes,cache=no"
    )
    yield ["sshfs", "-p", str(port), "-o", options, f"root@127.0.0.1:{backing}"], backing
    sshd.terminate()
    sshd.wait()


def test_four_hosts_over_sshfs_ask_the_origin_once_per_asset(
    sshfs: tuple[list[str], Path], tmp_path: Path
) -> None:
    command, backing = sshfs
    server = Server()
    for name in ASSETS:
        server.route(f"/{name}", paced(static(data(name)), chunk=16384, every=0.01))
    with server:
        urls = [server.url(f"/{n}") for n in ASSETS]
        gate = tmp_path / "gate"
        mount = str(tmp_path / "l2")
        hosts = [
            Host(
                f"nfs{i}", tmp_path, mount, urls=urls[i:] + urls[:i], gate=str(gate), sshfs=command
            )
            for i in range(4)
        ]
        gate.write_text("go")
        reports = [h.report() for h in hosts]
        counts = [server.count(f"/{n}") for n in ASSETS]
    assert counts == [1] * len(ASSETS)
    for r in reports:
        assert r["fs"]["l2"].startswith("fuse"), r["fs"]
        assert r["files"] == {server.url(f"/{n}"): sha(data(n)) for n in ASSETS}
    assert sorted(sha(b) for b in visible_files(str(backing)).values()) == sorted(
        sha(data(n)) for n in ASSETS
    )
    assert hidden_partials(str(backing)) == []


def test_a_stale_lease_over_sshfs_is_taken_over(
    sshfs: tuple[list[str], Path], tmp_path: Path
) -> None:
    command, backing = sshfs
    gate_origin = threading.Event()
    body = data("held.bin")
    with Server() as origin:
        origin.route("/held.bin", gated(static(body), gate_origin))
        url = origin.url("/held.bin")
        mount = str(tmp_path / "l2")
        lease = {"stale_after": 2.0, "beat": 0.3, "sshfs": command}
        a = Host("nfsA", tmp_path, mount, urls=[url], **lease)
        wait_for(
            lambda: any(p.name.endswith(".lease") for p in backing.rglob(".*")),
            what="host A's lease on the server",
        )
        a.kill()
        gate_origin.set()
        started = time.monotonic()
        b = Host("nfsB", tmp_path, mount, urls=[url], **lease).report()
    assert b["files"] == {url: sha(body)}
    assert any("took over the lease" in line for line in b["log"]), b["log"]
    assert time.monotonic() - started >= 2.0
    assert list(visible_files(str(backing)).values()) == [body]


def test_two_hosts_sync_one_tree_over_sshfs(sshfs: tuple[list[str], Path], tmp_path: Path) -> None:
    command, backing = sshfs
    tree = _tree(tmp_path / "source", 120, 16 * 1024)
    mount = str(tmp_path / "l2")
    gate = tmp_path / "gate"
    job = {
        "sshfs": command,
        "l1_from": str(tmp_path / "source"),
        "cli": ["tier", "sync", "--settle", "0"],
        "gate": str(gate),
    }
    hosts = [Host(f"sync{i}", tmp_path, mount, **job) for i in range(2)]
    gate.write_text("go")
    reports = [h.report() for h in hosts]
    assert [r["cli"] for r in reports] == [0, 0]
    assert visible_files(str(backing)) == tree
    assert hidden_partials(str(backing)) == []
