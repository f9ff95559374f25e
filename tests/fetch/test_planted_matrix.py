"""The planted-object matrix: every reader and writer of the test cache, against every kind of
object a writer of the volume can plant, at every path component from the root to the entry.

Each case plants one object (a link to a directory or to a root-only file outside the volume, a
hard link to that file, a FIFO, a socket, a character device that never ends, a directory where
a file belongs, a file where a directory belongs, a sparse giant) at one component, then runs
one operation (a fetch that misses, a fetch that hits, ``cache ls``, ``cache verify``,
``cache prune``) in this process, and checks:

- nothing outside the volume was read, listed, written, chmod-ed or removed (every name there,
  with its access, change and modification times, is as before);
- the operation ended within its time (a FIFO or a device read would block or never end);
- a fetch either returned a regular file holding the origin's bytes, or raised cacheroot's own
  :class:`~cacheroot.fetch.FetchError`; the upkeep commands raised nothing;
- with a sparse giant, at most a few MiB were allocated while the operation ran.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.fetch import Fetcher, FetchError
from cacheroot.fetch._upkeep.cache import disk_usage as du
from cacheroot.fetch._upkeep.cache import entries, prune, verify
from cacheroot.fetch.store import lock_path

from .origin import body

if TYPE_CHECKING:
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        MEMORY_BOUND,
        bounded,
        outside_dir,
        plant,
        state,
    )
else:
    from planted import DIR_KINDS, FILE_KINDS, MEMORY_BOUND, bounded, outside_dir, plant, state

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .origin import Origin

NAMESPACE = "ns"

#: The components from the root down, and whether each is a directory.
COMPONENTS = {
    "vllm": True,
    "test_cache": True,
    "namespace": True,
    "entry": False,
    "record": False,
    "lock": False,
    "used": False,
}
OPERATIONS = ("fetch-miss", "fetch-hit", "ls", "verify", "prune")


def _cases() -> Iterator[Any]:
    for op in OPERATIONS:
        for component, is_dir in COMPONENTS.items():
            for kind in DIR_KINDS if is_dir else FILE_KINDS:
                yield pytest.param(op, component, kind, id=f"{op}-{component}-{kind}")


def _position(cache: Path, dest: Path, component: str) -> Path:
    return {
        "vllm": cache.parent,
        "test_cache": cache,
        "namespace": cache / NAMESPACE,
        "entry": dest,
        "record": dest.with_name(f".{dest.name}.meta.json"),
        "lock": Path(lock_path(str(dest))),
        "used": dest.with_name(f".{dest.name}.used"),
    }[component]


def _run(op: str, fetcher: Fetcher, url: str, cache: Path) -> Callable[[], object]:
    if op.startswith("fetch"):
        return lambda: fetcher.fetch(url, namespace=NAMESPACE)
    if op == "ls":
        return lambda: (entries(str(cache)), du(str(cache)))
    if op == "verify":
        return lambda: verify(str(cache))
    return lambda: prune(str(cache), max_size=0, grace=0.0)


@pytest.mark.parametrize(("op", "component", "kind"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    origin: Origin,
    name: str,
    isolated_cache: Path,
    tmp_path: Path,
) -> None:
    os.chmod(isolated_cache, 0o2775)  # noqa: S103 - a volume shared by a group, as documented
    cache = isolated_cache / "vllm" / "test_cache"
    assert os.environ["_VLLM_TEST_CACHE"] == str(cache)
    outside = outside_dir(tmp_path / "outside")
    url = origin.url(f"/ok/{name}")
    fetcher = Fetcher(retries=0, connect_timeout=5.0, read_timeout=5.0, lock_timeout=2.0)
    dest = fetcher.path(url, namespace=NAMESPACE)
    if op != "fetch-miss":
        fetcher.fetch(url, namespace=NAMESPACE)  # a real entry, record, lock and stamp
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
    plant(_position(cache, dest, component), kind, outside)
    counted = kind != "hardlink"
    before = state(outside, names_counted=counted)
    run = _run(op, fetcher, url, cache)
    outcome: object = None
    with bounded(memory=kind == "sparse") as peak:
        try:
            outcome = run()
        except FetchError as exc:
            outcome = exc  # a clear refusal: allowed of a fetch only
        finally:
            fetcher.close()
    assert op.startswith("fetch") or not isinstance(outcome, FetchError), outcome
    assert state(outside, names_counted=counted) == before, f"{op} touched what lies outside"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"{op} allocated {peak[0]} bytes for a sparse giant"
    if op.startswith("fetch") and not isinstance(outcome, FetchError):
        assert isinstance(outcome, Path), outcome
        got = os.fspath(outcome)
        assert stat.S_ISREG(os.lstat(got).st_mode)
        assert os.lstat(got).st_nlink == 1
        with open(got, "rb") as f:
            assert f.read() == body(name)
