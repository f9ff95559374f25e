"""``cacheroot warm`` on a host of a fleet: what the shared tier gives is said as such.

A first host warms a manifest (its downloads are written through to the shared tier); a second
host with an empty cache of its own then checks and warms the same manifest. Its per-entry lines
and its summary must agree, and ``--check`` (which never downloads) must not copy anything
into its cache either.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_APPLIED, TABLE, resolve

from .conftest import cli, cli_json
from .test_ops_warm import asset

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin


def _host(tmp_path: Path, name: str, l2: Path) -> dict[str, str]:
    drop = {CACHEROOT_APPLIED, *(v.name for v in TABLE)}  # derived from the host's root
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(CACHEROOT=str(tmp_path / name), CACHEROOT_SHARED=str(l2))
    env.update(resolve(env).applied())
    return env


def test_a_second_host_says_what_came_from_the_shared_tier(origin: Origin, tmp_path: Path) -> None:
    l2 = tmp_path / "l2"
    l2.mkdir()
    bodies = {f"f{i}.txt": f"file {i}\n".encode() * 100 for i in range(3)}
    manifest = tmp_path / "suite.toml"
    manifest.write_text("".join(asset(origin.serve(n, b), b) for n, b in bodies.items()))
    first = cli_json("warm", str(manifest), env=_host(tmp_path, "a", l2))
    assert (first["hits"], first["misses"], first["bytes"], first["copied"]) == (0, 3, 2100, 0)

    b = _host(tmp_path, "b", l2)
    check = cli("warm", str(manifest), "--check", env=b)
    assert check.returncode == 1
    assert "0 complete, 3 missing" in check.stdout
    assert [p for p in (tmp_path / "b").rglob("*") if p.is_file()] == []

    second = cli("warm", str(manifest), env=b)
    assert second.returncode == 0, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.startswith("cacheroot warm:")]
    assert sorted(line.split()[2] for line in lines) == ["miss"] * 3
    assert all(line.endswith("from shared tier") for line in lines), lines
    assert "0 hits, 3 misses (0 B downloaded, 2.1 KiB from the shared tier), 0 failures" in (
        second.stdout
    )
    assert origin.total == 3  # the second host asked the origin nothing
    again = cli_json("warm", str(manifest), env=b)
    assert (again["hits"], again["copied"]) == (3, 0)
