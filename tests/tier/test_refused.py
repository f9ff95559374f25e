"""A shared tier that cannot be used: cacheroot never creates its root, says so once, and runs on
one tier (``fetch``, ``build_once``, snapshots) or refuses (``tier up``, ``sync``, ``evict``).

An unmounted network volume or a typo in ``CACHEROOT_SHARED`` names a directory that is not
there; creating it would quietly fill the host's own disk with a "shared" tier no other host
sees.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_SHARED
from cacheroot.fetch import Fetcher, build_once
from cacheroot.fetch._models.shared import tiers
from cacheroot.fetch._shared import counterpart
from cacheroot.fetch._tier.layers import sync, watch
from cacheroot.fetch._tier.view import up

if TYPE_CHECKING:
    from pathlib import Path

ONE_TIER = (
    "expected the fleet's shared volume, a directory this host can write (cacheroot never "
    "creates it: an unmounted volume or a typo would fill this host's disk instead); mount it "
    "there, or unset CACHEROOT_SHARED to use one tier"
)
OVERLAP = (
    "expected another volume than this host's cache (the fleet's shared one); point "
    "CACHEROOT_SHARED there, or unset it to use one tier"
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _cli(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )


# -- fetch, build_once, snapshots: one warning, one tier ------------------------------------------


def test_a_missing_shared_tier_is_never_created_and_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    l2 = tmp_path / "mnt" / "pvc"
    monkeypatch.setenv(CACHEROOT_SHARED, str(l2))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"alpha")
    (src / "b.bin").write_bytes(b"beta")
    fetcher = Fetcher(allow_file=True)
    with caplog.at_level(logging.WARNING, logger="cacheroot.fetch"):
        a = fetcher.fetch((src / "a.bin").as_uri())
        b = fetcher.fetch((src / "b.bin").as_uri())
        built = build_once("thing", lambda d: (d / "x").write_text("built"))
    assert (a.read_bytes(), b.read_bytes(), (built / "x").read_text()) == (
        b"alpha",
        b"beta",
        "built",
    )
    assert not (tmp_path / "mnt").exists()
    assert _warnings(caplog) == [
        f"shared tier not used by this process: CACHEROOT_SHARED={l2} does not exist: {ONE_TIER}"
    ]


def test_a_shared_tier_that_is_a_file_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    l2 = tmp_path / "pvc"
    l2.write_text("not a directory")
    monkeypatch.setenv(CACHEROOT_SHARED, str(l2))
    root = os.environ[CACHEROOT]
    with caplog.at_level(logging.WARNING, logger="cacheroot.fetch"):
        assert counterpart(os.path.join(root, "vllm", "test_cache", "d", "x")) is None
        assert tiers(os.path.join(root, "vllm", "snapshots", "k.json"), root) is None
    assert l2.read_text() == "not a directory"
    expected = f"CACHEROOT_SHARED={l2} is not a directory: {ONE_TIER}"
    assert _warnings(caplog) == [f"shared tier not used by this process: {expected}"]


@pytest.mark.parametrize(
    ("l1", "l2", "why"),
    [
        ("c", "c", "is the same directory as"),
        ("c", "c/shared", "is inside"),
        ("c/local", "c", "contains"),
    ],
)
def test_a_shared_tier_that_overlaps_the_root_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, l1: str, l2: str, why: str
) -> None:
    (tmp_path / l1).mkdir(parents=True, exist_ok=True)
    (tmp_path / l2).mkdir(parents=True, exist_ok=True)
    env = {CACHEROOT: str(tmp_path / l1), CACHEROOT_SHARED: str(tmp_path / l2)}
    with caplog.at_level(logging.WARNING, logger="cacheroot.fetch"):
        assert counterpart(str(tmp_path / l1 / "vllm" / "x"), env) is None
        assert counterpart(str(tmp_path / l1 / "vllm" / "y"), env) is None
    expected = f"CACHEROOT_SHARED={tmp_path / l2} {why} CACHEROOT={tmp_path / l1}: {OVERLAP}"
    assert _warnings(caplog) == [f"shared tier not used by this process: {expected}"]


def test_a_shared_tier_reached_through_a_link_to_the_root_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "c")
    env = {CACHEROOT: str(tmp_path / "c"), CACHEROOT_SHARED: str(tmp_path / "alias")}
    with caplog.at_level(logging.WARNING, logger="cacheroot.fetch"):
        assert counterpart(str(tmp_path / "c" / "vllm" / "x"), env) is None
    assert len(_warnings(caplog)) == 1
    assert "is the same directory as" in _warnings(caplog)[0]


def test_an_existing_shared_tier_is_used_and_its_sub_directories_made(tmp_path: Path) -> None:
    (tmp_path / "l1").mkdir()
    (tmp_path / "l2").mkdir()
    env = {CACHEROOT: str(tmp_path / "l1"), CACHEROOT_SHARED: str(tmp_path / "l2")}
    got = counterpart(str(tmp_path / "l1" / "vllm" / "test_cache" / "d" / "x"), env)
    assert got == str(tmp_path / "l2" / "vllm" / "test_cache" / "d" / "x")
    assert os.listdir(tmp_path / "l2") == []  # the probe of writability leaves nothing


def _read_only_mount_available() -> str:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "needs root and unshare(1) for a read-only mount in a private namespace"
    probe = ["unshare", "--mount", "--propagation", "private", "true"]
    if subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        return "private mount namespaces are refused here"
    return ""


def test_a_read_only_shared_tier_is_read_through_and_said_once(tmp_path: Path) -> None:
    why = _read_only_mount_available()
    if why:
        pytest.skip(why)
    l2 = tmp_path / "l2"
    l2.mkdir()
    code = (
        "import logging, os; logging.basicConfig(format='%(message)s');"
        "from cacheroot.fetch._shared import counterpart, may_write;"
        "print(counterpart(os.path.join(os.environ['CACHEROOT'], 'vllm', 'x')), may_write());"
        "print(counterpart(os.path.join(os.environ['CACHEROOT'], 'vllm', 'y')))"
    )
    script = f'mount -t tmpfs -o ro tmpfs "{l2}" && "{sys.executable}" -c "{code}"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script],
        env={**os.environ, CACHEROOT_SHARED: str(l2)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{l2}/vllm/x False\n{l2}/vllm/y\n"
    assert done.stderr == (
        f"CACHEROOT_SHARED={l2} is mounted read-only: read through, never written (as with "
        "CACHEROOT_SHARED_MODE=ro)\n"
    )


def test_cacheroot_fetch_names_a_missing_shared_tier_and_fetches_on_one(tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    src.write_bytes(b"alpha")
    l2 = tmp_path / "nonexistent" / "z"
    done = _cli("fetch", "--allow-file", "-q", src.as_uri(), **{CACHEROOT_SHARED: str(l2)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"shared tier not used by this process: CACHEROOT_SHARED={l2} does not exist: {ONE_TIER}\n"
    )
    assert not (tmp_path / "nonexistent").exists()


# -- the library's tier operations never create L2 ---------------------------------------------


def test_sync_and_up_refuse_a_missing_shared_tier(tmp_path: Path) -> None:
    l1 = tmp_path / "l1"
    (l1 / "triton").mkdir(parents=True)
    (l1 / "triton" / "k.so").write_bytes(b"k")
    with pytest.raises(FileNotFoundError, match="the shared tier's root"):
        sync(str(l1), str(tmp_path / "gone" / "l2"), settle=0)
    with pytest.raises(FileNotFoundError, match="the shared tier's root"):
        up(str(l1), str(tmp_path / "gone" / "l2"), str(tmp_path / "merged"), mode="seed")
    assert not (tmp_path / "gone").exists()
    assert not (tmp_path / "merged").exists()


class _Passes(threading.Event):
    """A stop event that is set once ``n`` passes have waited on it (no clock involved)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def wait(self, timeout: float | None = None) -> bool:  # noqa: ARG002 - Event.wait's signature
        self.left -= 1
        return self.left <= 0


def test_the_watchdog_outlives_a_shared_tier_that_goes_and_never_recreates_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "l2"
    (l1 / "triton").mkdir(parents=True)
    (l1 / "triton" / "k.so").write_bytes(b"k")
    with caplog.at_level(logging.WARNING, logger="cacheroot.fetch"):
        assert watch(str(l1), str(l2), 0.0, _Passes(2), settle=0) == 2
    assert not l2.exists()
    assert _warnings(caplog) == [
        f"tier sync pass {n}: {l2}: the shared tier's root is not a directory (it is never "
        "created: mount the volume)"
        for n in (1, 2)
    ]


# -- tier up, sync, evict: exit 1 (unusable) or 2 (overlap), nothing created -------------------


@pytest.mark.parametrize(
    "verb",
    [
        ("sync",),
        ("up", "--merged", "MERGED"),
        ("evict", "--l2-max-size", "1G"),
    ],
)
def test_tier_commands_refuse_a_missing_shared_tier(tmp_path: Path, verb: tuple[str, ...]) -> None:
    l1 = tmp_path / "l1"
    (l1 / "triton").mkdir(parents=True)
    (l1 / "triton" / "k.so").write_bytes(b"k")
    l2 = tmp_path / "nonexistent" / "x"
    argv = [a.replace("MERGED", str(tmp_path / "merged")) for a in verb]
    done = _cli("tier", *argv, **{CACHEROOT: str(l1), CACHEROOT_SHARED: str(l2)})
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr
        == f"cacheroot tier {verb[0]}: CACHEROOT_SHARED={l2} does not exist: {ONE_TIER}\n"
    )
    assert not (tmp_path / "nonexistent").exists()
    assert not (tmp_path / "merged").exists()


def test_tier_evict_of_l1_alone_needs_no_shared_tier(tmp_path: Path) -> None:
    l1, l2 = tmp_path / "l1", tmp_path / "nonexistent" / "x"
    l1.mkdir()
    env = {CACHEROOT: str(l1), CACHEROOT_SHARED: str(l2)}
    done = _cli("tier", "evict", "--l1-max-size", "1G", **env)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("L1: removed 0 (0 B)")
    assert not (tmp_path / "nonexistent").exists()


def test_tier_sync_refuses_a_shared_tier_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "l1").mkdir()
    l2 = tmp_path / "l2"
    l2.write_text("x")
    done = _cli("tier", "sync", **{CACHEROOT: str(tmp_path / "l1"), CACHEROOT_SHARED: str(l2)})
    assert done.returncode == 1
    assert (
        done.stderr
        == f"cacheroot tier sync: CACHEROOT_SHARED={l2} is not a directory: {ONE_TIER}\n"
    )


@pytest.mark.parametrize(
    ("l1", "l2", "why"),
    [
        ("c", "c", "is the same directory as"),
        ("c", "c/shared", "is inside"),
        ("c/local", "c", "contains"),
    ],
)
def test_tier_sync_refuses_a_shared_tier_that_overlaps_the_root(
    tmp_path: Path, l1: str, l2: str, why: str
) -> None:
    (tmp_path / l1 / "triton").mkdir(parents=True)
    (tmp_path / l1 / "triton" / "k.so").write_bytes(b"k")
    (tmp_path / l2).mkdir(parents=True, exist_ok=True)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    env = {CACHEROOT: str(tmp_path / l1), CACHEROOT_SHARED: str(tmp_path / l2)}
    done = _cli("tier", "sync", **env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"cacheroot tier sync: CACHEROOT_SHARED={tmp_path / l2} {why} CACHEROOT={tmp_path / l1}: "
        f"{OVERLAP}\n"
    )
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


# -- tier evict's criteria and the size and age flags ------------------------------------------


def test_tier_evict_without_a_criterion_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "l1").mkdir()
    (tmp_path / "l2").mkdir()
    env = {CACHEROOT: str(tmp_path / "l1"), CACHEROOT_SHARED: str(tmp_path / "l2")}
    done = _cli("tier", "evict", **env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "cacheroot tier evict: say what to remove: --l1-max-size SIZE (e.g. 800G), "
        "--l1-min-free SIZE (e.g. 100G), --l2-max-size SIZE (e.g. 2T) or --l2-older-than AGE "
        "(e.g. 14d); nothing was removed\n"
    )


SIZE_FORM = (
    "expected a number of bytes, or a number with K, M, G or T (1024-based; KB, MB, GB: "
    "1000-based), e.g. 123, 500M, 1.5G, 10GiB"
)
AGE_FORM = (
    "expected a number of seconds, or numbers with w, d, h, m, s (each once, largest first), "
    "e.g. 90, 90s, 45m, 1h30m, 7d, 2w"
)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ("up", "--merged", "M", "--max-size", "abc"),
            f"argument --max-size: size 'abc': {SIZE_FORM}",
        ),
        (
            ("up", "--merged", "M", "--max-size=-5G"),
            f"argument --max-size: size '-5G': {SIZE_FORM}",
        ),
        (
            ("up", "--merged", "M", "--min-free", "1Q"),
            f"argument --min-free: size '1Q': {SIZE_FORM}",
        ),
        (("evict", "--l1-max-size=-1"), f"argument --l1-max-size: size '-1': {SIZE_FORM}"),
        (("evict", "--l2-max-size", "2X"), f"argument --l2-max-size: size '2X': {SIZE_FORM}"),
        (("evict", "--l2-older-than", "1x"), f"argument --l2-older-than: age '1x': {AGE_FORM}"),
    ],
)
def test_size_and_age_flags_say_what_they_accept(argv: tuple[str, ...], error: str) -> None:
    done = _cli("tier", *argv)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"cacheroot tier {argv[0]}: error: {error}"
