"""A namespace of the test cache swapped for a link while ``cacheroot cache ls/du/prune`` walk it.

On a 2775 volume a co-tenant (another uid of the volume's group) owns a namespace directory of
the test cache; the first time this process opens or lists it, the co-tenant renames it aside
and plants a link to a root-only directory outside the volume. The walk must list and size
nothing behind the link, touch nothing there, and say once that it met a link.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import _cli
from cacheroot.fetch._upkeep.cache import prune

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fetch.test_multiuser import GROUP, UID_A, shared_volume
    from tests.ops.test_prune_swap import SECRET, _secret_state, _swap_when_reached, _untouched
else:
    from fetch.test_multiuser import GROUP, UID_A, shared_volume

    from ops.test_prune_swap import SECRET, _secret_state, _swap_when_reached, _untouched

NAMESPACE = "models"


@pytest.fixture
def volume(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """``(test cache, secret)``: a test cache on a 2775 volume whose namespace ``models`` (the
    co-tenant's) holds an entry, and a root-only directory outside it with ``secret-name``."""
    with shared_volume() as vol:
        secret = vol.parent / "private"
        secret.mkdir(mode=0o700)
        (secret / SECRET).write_bytes(b"root only")
        cache = vol / "test_cache"
        ns = cache / NAMESPACE
        ns.mkdir(parents=True)
        for d in (cache, ns):
            os.chown(d, UID_A, GROUP)
            os.chmod(d, 0o2775)  # noqa: S103 - the volume's directories, as members make them
        (ns / "weights.bin").write_bytes(b"x" * 100)
        long_ago = time.time() - 10 * 86400
        os.utime(secret / SECRET, (long_ago, long_ago))
        st = os.stat(secret)
        os.utime(secret, ns=(st.st_mtime_ns - 10**12, st.st_mtime_ns))  # a listing would stamp it
        for name in ("CACHEROOT", "CACHEROOT_ROOT"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
        yield cache, secret


def _notes(err: str, link: Path) -> list[str]:
    return [line for line in err.splitlines() if str(link) in line and "symbolic link" in line]


@pytest.mark.parametrize("op", ["ls", "du", "prune"])
def test_a_namespace_swapped_for_a_link_mid_walk_lists_nothing_behind_it(
    volume: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    op: str,
) -> None:
    cache, secret = volume
    ns = cache / NAMESPACE
    before = _secret_state(secret)
    done = _swap_when_reached(monkeypatch, ns, "link", secret)
    try:
        if op == "prune":
            out = json.dumps(prune(str(cache), grace=0.0))
            status = 0
        else:
            status = _cli.main(["cache", op, "--json"])
            out = ""
    finally:
        assert done(), "the walk never reached the namespace: the swap was not made"
    captured = capsys.readouterr()
    out += captured.out
    assert status == 0, captured
    if op != "prune":
        json.loads(out)  # the format is unchanged: one JSON document
    assert SECRET not in out, out
    assert SECRET not in captured.err, captured.err
    _untouched(secret, before)
    assert stat.S_ISLNK(os.lstat(ns).st_mode)  # the planted link itself is left alone
    assert len(_notes(captured.err, ns)) == 1, captured.err
    assert os.listdir(ns.with_name(NAMESPACE + ".aside")) == ["weights.bin"]
