"""``cacheroot cache prune`` weighs the hub cache's store with every other cache of the root.

The store (``$CACHEROOT/hubcache``, of ``cacheroot hub serve``) is laid out as the hub lays it
out (:mod:`cacheroot.fetch._hub.store`): answers in ``meta/<2 hex>/<key>``, files in
``blobs/<digest>``, a fill's bytes in ``blobs/.<digest>.<machine>-<pid>.<id>.partial``, and
beside them ``grants/``, ``verified/``, ``locks/``, ``served/`` and ``state/``, which are never
units. Each answer or file was last used when its mtime says (the hub stamps it on each serve).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cacheroot.fetch._proc import machine_tag

from .conftest import cli, cli_json

DAY = 86400
#: A client being sent a file: it holds it open until killed.
READER = "import sys, time; f = open(sys.argv[1], 'rb'); print('open', flush=True); time.sleep(120)"
#: Digests and keys of the store's files and answers.
A, B, C, D = "a" * 64, "b" * 64, "c" * 64, "d" * 64
K1, K2 = "ab" + "1" * 62, "cd" + "2" * 62
BLOB_A, BLOB_B, BLOB_C, BLOB_D = (f"blobs/{x}" for x in (A, B, C, D))
ANSWER_1, ANSWER_2 = f"meta/ab/{K1}", f"meta/cd/{K2}"
#: What the hub keeps beside answers and files: never pruned, whatever their age.
NOT_UNITS = (
    f"grants/{A}/{'9' * 32}",
    f"verified/{A}",
    f"locks/{K1}.lock",
    "served/host-1234",
    "state/huggingface.co",
)


def plant(store: Path, files: dict[str, tuple[int, float]], now: float) -> None:
    """``rel -> (size, seconds since last use)``: each file written and stamped so."""
    for rel, (size, ago) in files.items():
        path = store / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.startswith("meta/"):
            head = b'{"status": 200, "headers": {}, "when": 0}\n'
            path.write_bytes(head + b"x" * (size - len(head)))
        else:
            path.write_bytes(b"x" * size)
        os.utime(path, (now - ago, now - ago))


def files_of(top: Path) -> list[str]:
    """Every name under ``top`` that is no directory, links included, relative to it."""
    return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_symlink() or p.is_file())


@pytest.fixture
def store(isolated_cache: Path) -> Path:
    path = isolated_cache / "hubcache"
    path.mkdir()
    return path


def _removed(report: dict[str, object]) -> list[tuple[str, str, int, str, str]]:
    rows = report["removed"]
    assert isinstance(rows, list)
    return [(r["cache"], r["label"], r["size"], r["kind"], r["reason"]) for r in rows]


def test_cache_prune_removes_the_store_s_old_answers_and_files(store: Path) -> None:
    now = time.time()
    plant(
        store,
        {
            BLOB_A: (1000, 21 * DAY),
            ANSWER_1: (200, 20 * DAY),
            BLOB_B: (1000, 1 * DAY),
            ANSWER_2: (200, 1 * DAY),
            **dict.fromkeys(NOT_UNITS, (50, 30 * DAY)),
        },
        now,
    )
    report = cli_json("cache", "prune", "--older-than", "14d")
    why = "unused for longer than the limit"
    assert _removed(report) == [
        ("CACHEROOT/hubcache", BLOB_A, 1000, "hub-file", why),
        ("CACHEROOT/hubcache", ANSWER_1, 200, "hub-answer", why),
    ]
    assert report["caches"]["CACHEROOT/hubcache"] == {
        "path": str(store),
        "removed": 2,
        "freed": 1200,
    }
    assert report["total_before"] == 2400
    assert report["total_after"] == 1200
    assert report["kept"] == []
    assert files_of(store) == sorted([BLOB_B, ANSWER_2, *NOT_UNITS])


def test_a_size_budget_removes_the_least_recently_used_first(store: Path) -> None:
    now = time.time()
    plant(
        store,
        {
            BLOB_B: (2000, 4 * DAY),
            BLOB_A: (3000, 5 * DAY),
            ANSWER_1: (100, 3 * DAY),
            BLOB_C: (1000, 2 * DAY),
            **dict.fromkeys(NOT_UNITS, (50, 30 * DAY)),
        },
        now,
    )
    before = files_of(store)
    why = "over the size budget (least recently used)"
    expected = [
        ("CACHEROOT/hubcache", BLOB_A, 3000, "hub-file", why),
        ("CACHEROOT/hubcache", BLOB_B, 2000, "hub-file", why),
    ]

    dry = cli_json("cache", "prune", "--max-size", "2000", "--dry-run")
    assert dry["dry_run"] is True
    assert _removed(dry) == expected
    assert (dry["total_before"], dry["total_after"], dry["freed"]) == (6100, 1100, 5000)
    assert files_of(store) == before  # a dry run removes nothing

    text = cli("cache", "prune", "--max-size", "2000", "--dry-run")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[:4] == [
        f"CACHEROOT/hubcache ({store}):",
        f"  would remove {BLOB_A} (2.9 KiB): {why}",
        f"  would remove {BLOB_B} (2.0 KiB): {why}",
        "  2 entries, 4.9 KiB",
    ]
    assert files_of(store) == before

    done = cli_json("cache", "prune", "--max-size", "2000")
    assert _removed(done) == expected
    assert files_of(store) == sorted([ANSWER_1, BLOB_C, *NOT_UNITS])


def test_a_planted_link_is_never_followed(store: Path, tmp_path: Path) -> None:
    now = time.time()
    outside = tmp_path / "outside"
    (outside / "ab").mkdir(parents=True)
    plant(outside, {"target": (100, 30 * DAY), f"ab/{K1}": (100, 30 * DAY)}, now)
    plant(store, {BLOB_A: (1000, 30 * DAY)}, now)
    (store / "blobs" / B).symlink_to(outside / "target")
    (store / "meta").mkdir()
    (store / "meta" / "ab").symlink_to(outside / "ab")
    for link in (store / "blobs" / B, store / "meta" / "ab"):
        os.utime(link, (now - 30 * DAY, now - 30 * DAY), follow_symlinks=False)

    report = cli_json("cache", "prune", "--older-than", "1d")
    assert [r["label"] for r in report["removed"]] == [BLOB_A]
    assert files_of(store) == [f"blobs/{B}", "meta/ab"]  # the links stay, never counted
    assert files_of(outside) == [f"ab/{K1}", "target"]
    assert (outside / "target").read_bytes() == b"x" * 100


def test_a_store_that_is_a_link_is_skipped(isolated_cache: Path, tmp_path: Path) -> None:
    now = time.time()
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, {BLOB_A: (1000, 30 * DAY), ANSWER_1: (100, 30 * DAY)}, now)
    (isolated_cache / "hubcache").symlink_to(elsewhere)
    report = cli_json("cache", "prune", "--older-than", "1d")
    assert report["removed"] == []
    assert "CACHEROOT/hubcache" not in report["caches"]
    assert any(
        n.startswith(f"skipped CACHEROOT/hubcache ({isolated_cache / 'hubcache'}): ")
        for n in report["notes"]
    )
    assert files_of(elsewhere) == [BLOB_A, ANSWER_1]


def test_a_live_writer_s_partial_and_a_file_being_read_are_kept(store: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    here = machine_tag()
    live_partial = f"blobs/.{C}.{here}-{os.getpid()}.00000001.partial"
    dead_partial = f"blobs/.{D}.{here}-{int(dead.stdout)}.00000002.partial"
    now = time.time()
    plant(
        store,
        {
            BLOB_A: (1000, 30 * DAY),
            BLOB_B: (1000, 30 * DAY),
            live_partial: (300, 600),  # written to ten minutes ago by a writer that lives
            dead_partial: (400, 600),
        },
        now,
    )
    with subprocess.Popen(  # a client being sent the file
        [
            sys.executable,
            "-c",
            READER,
            str(store / BLOB_B),
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as reader:
        try:
            assert reader.stdout is not None
            assert reader.stdout.readline() == "open\n"
            report = cli_json("cache", "prune", "--older-than", "1d")
        finally:
            reader.kill()
    assert _removed(report) == [
        (
            "CACHEROOT/hubcache",
            dead_partial,
            400,
            "hub-partial",
            "the partial file of a download whose hub is gone",
        ),
        ("CACHEROOT/hubcache", BLOB_A, 1000, "hub-file", "unused for longer than the limit"),
    ]
    kept = [(k["label"], k["reason"]) for k in report["kept"]]
    assert kept == [(BLOB_B, f"in use by pid {reader.pid} ({store / BLOB_B})")]
    assert files_of(store) == [live_partial, BLOB_B]


def test_a_file_served_since_it_was_listed_stays(tmp_path: Path) -> None:
    from cacheroot.fetch._hub.prune import remove, stored

    now = time.time()
    plant(tmp_path, {BLOB_A: (1000, 30 * DAY), ANSWER_1: (100, 20 * DAY)}, now)
    units = stored(str(tmp_path))
    assert [(u.kind, u.rel, u.size) for u in units] == [
        ("file", BLOB_A, 1000),
        ("answer", ANSWER_1, 100),
    ]
    os.utime(tmp_path / BLOB_A, (now, now))  # the hub served it meanwhile
    assert remove(str(tmp_path), units[0]) == "used meanwhile"
    assert remove(str(tmp_path), units[1]) == ""
    assert remove(str(tmp_path), units[1]) == "gone meanwhile"
    assert files_of(tmp_path) == [BLOB_A]
