"""``cacheroot cache``: ls, du, verify (a flipped byte), prune (LRU, and never what is busy)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs.units import parse_age, parse_size
from cacheroot.fetch import Fetcher, _proc, _used
from cacheroot.fetch._build import build_once
from cacheroot.fetch._cachedir import cache_dir
from cacheroot.fetch._store import partials, read_meta
from cacheroot.fetch._used import touch_used, used_path
from cacheroot.fetch.store import lock_path, sha256_file

from .conftest import OtherUser, cli, cli_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .origin import Origin


def data(name: str, size: int) -> bytes:
    return (name.encode() * (size // len(name) + 1))[:size]


@pytest.fixture
def fetcher() -> Iterator[Fetcher]:
    f = Fetcher(read_timeout=10.0, retries=1, backoff=0.01, lock_timeout=30.0)
    yield f
    f.close()


def put(origin: Origin, fetcher: Fetcher, name: str, size: int = 1000, ns: str = "ns") -> Path:
    url = origin.serve(name, data(name, size))
    return fetcher.fetch(url, namespace=ns)


def set_used(entry: Path, when: float) -> None:
    used = used_path(str(entry))
    Path(used).touch()
    os.utime(used, (when, when))


def test_touch_used_writes_at_most_once_an_hour(tmp_path: Path) -> None:
    entry = tmp_path / "e.bin"
    entry.write_bytes(b"x")
    used = Path(used_path(str(entry)))
    assert not used.exists()
    touch_used(entry)
    assert used.exists()
    old = time.time() - 1800
    os.utime(used, (old, old))
    _used._fresh_until.clear()
    touch_used(entry)  # recorded 30 min ago: fresh, not rewritten
    assert used.stat().st_mtime == pytest.approx(old)
    stale = time.time() - 7200
    os.utime(used, (stale, stale))
    touch_used(entry)  # remembered as fresh in this process: not even a stat
    assert used.stat().st_mtime == pytest.approx(stale)
    _used._fresh_until.clear()
    touch_used(entry)  # two hours old: refreshed
    assert used.stat().st_mtime > time.time() - 60


def test_units() -> None:
    assert parse_size("1500") == 1500
    assert parse_size("2K") == 2048
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("10MB") == 10_000_000
    assert parse_age("90") == 90
    assert parse_age("15m") == 900
    assert parse_age("7d") == 7 * 86400
    with pytest.raises(ValueError, match="expected a number"):
        parse_size("lots")
    with pytest.raises(ValueError, match="expected a number"):
        parse_age("soon")


def test_ls_and_du(origin: Origin, fetcher: Fetcher) -> None:
    a = put(origin, fetcher, "a.bin", 1000)
    put(origin, fetcher, "b.bin", 3000, ns="other")
    rows = cli_json("cache", "ls", "--namespace", "ns")["test_cache"]["entries"]
    assert [(r["name"], r["size"], r["url"]) for r in rows] == [(a.name, 1000, origin.url("a.bin"))]
    assert rows[0]["last_used"] > time.time() - 600
    hf_home = Path(os.environ["HF_HOME"])
    (hf_home / "hub").mkdir(parents=True)
    (hf_home / "hub" / "blob").write_bytes(bytes(5000))
    usage = cli_json("cache", "du")
    assert usage["namespaces"]["ns"] >= 1000
    assert usage["namespaces"]["other"] >= 3000
    by_var = {c["variable"]: c for c in usage["caches"]}
    assert by_var["HF_HOME"]["size"] == 5000
    assert by_var["_VLLM_TEST_CACHE"]["path"] == cache_dir()
    assert by_var["_VLLM_TEST_CACHE"]["size"] >= 4000


def test_verify_finds_a_single_flipped_byte(origin: Origin, fetcher: Fetcher) -> None:
    good = put(origin, fetcher, "good.bin", 4096)
    bad = put(origin, fetcher, "bad.bin", 4096)
    st = bad.stat()
    with open(bad, "r+b") as f:  # bit rot: one byte, size and mtime unchanged
        f.seek(1234)
        byte = f.read(1)
        f.seek(1234)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    built = build_once("tree", lambda out: (out / "w.bin").write_bytes(b"weights"))
    report = cli_json("cache", "verify", status=1)
    status = {r["name"]: r["status"] for r in report["entries"]}
    assert status == {good.name: "ok", bad.name: "corrupt", built.name: "ok"}
    row = next(r for r in report["entries"] if r["status"] == "corrupt")
    assert not bad.exists()
    assert Path(row["quarantined"]).read_bytes() != data("bad.bin", 4096)
    assert ".quarantine" in row["quarantined"]
    # The next fetch downloads a good copy again.
    assert fetcher.fetch(origin.url("bad.bin"), namespace="ns") == bad
    assert bad.read_bytes() == data("bad.bin", 4096)
    assert origin.requests["/bad.bin"] == 2
    # A changed file in a built tree is caught by the tree digest.
    (built / "w.bin").write_bytes(b"weightz")
    report = cli_json("cache", "verify", "--namespace", "built", "--no-quarantine", status=1)
    assert [r["status"] for r in report["entries"]] == ["corrupt"]
    assert built.exists()


def test_prune_to_a_budget_removes_least_recently_used_first(
    origin: Origin, fetcher: Fetcher
) -> None:
    now = time.time()
    paths = [put(origin, fetcher, f"e{i}.bin", 1000) for i in range(5)]
    # Used in the order e3, e0, e4, e1, e2 (oldest first).
    for path, age in zip(paths, (400, 200, 100, 500, 300), strict=True):
        set_used(path, now - age)
    plan = cli_json("cache", "prune", "--max-size", "2500", "--dry-run")
    assert [r["name"] for r in plan["removed"]] == [paths[3].name, paths[0].name, paths[4].name]
    assert all(p.exists() for p in paths)
    done = cli_json("cache", "prune", "--max-size", "2500")
    assert [r["name"] for r in done["removed"]] == [paths[3].name, paths[0].name, paths[4].name]
    assert done["total_after"] == 2000
    assert [p.exists() for p in paths] == [False, True, True, False, False]
    assert not Path(used_path(str(paths[3]))).exists()
    assert read_meta(str(paths[3])) is None
    # Age: only what has not been used for 150 s goes.
    done = cli_json("cache", "prune", "--older-than", "150s")
    assert [r["name"] for r in done["removed"]] == [paths[1].name]
    assert paths[2].exists()


HOLDER = textwrap.dedent(
    """
    import sys
    from cacheroot.fetch.store import PathLock
    with PathLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.readline()
    """
)

DOWNLOADER = textwrap.dedent(
    """
    import sys
    from cacheroot.fetch import Fetcher
    f = Fetcher(read_timeout=60.0, retries=1, lock_timeout=60.0)
    print(f.fetch(sys.argv[1], sha256=sys.argv[2], namespace="ns"), flush=True)
    """
)


def _dead_pid() -> int:
    p = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(p.stdout)


def _dead_partial(entry: Path, age: float) -> Path:
    tag = _proc.machine_tag()
    path = entry.parent / f".{entry.name}.{tag}-{_dead_pid()}.{uuid.uuid4().hex[:8]}.partial"
    path.write_bytes(b"half a file")
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_prune_while_downloads_run_loses_nothing_in_flight(
    origin: Origin, fetcher: Fetcher
) -> None:
    old = [put(origin, fetcher, f"old{i}.bin", 2000) for i in range(3)]
    for path in old:
        set_used(path, time.time() - 86400)
    locked = put(origin, fetcher, "locked.bin", 2000)
    set_used(locked, time.time() - 86400)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_path(str(locked))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"

    slow = {f"slow{i}.bin": os.urandom(256 * 1024) for i in range(3)}
    downloads = []
    for name, body in slow.items():
        origin.hold(name)
        url = origin.serve(name, body)
        digest = hashlib.sha256(body).hexdigest()
        downloads.append(
            subprocess.Popen(
                [sys.executable, "-c", DOWNLOADER, url, digest], stdout=subprocess.PIPE, text=True
            )
        )
    for _ in slow:  # every download has received half its body and is waiting for the rest
        assert origin.holding.acquire(timeout=30)
    dests = [
        Path(cache_dir(), "ns", fetcher.path(origin.url(n), namespace="ns").name) for n in slow
    ]
    deadline = time.monotonic() + 10
    while not all(any(os.path.getsize(p) > 0 for p in partials(str(d))) for d in dests):
        assert time.monotonic() < deadline, "the downloads never wrote their partials"
        time.sleep(0.02)
    live = {p for d in dests for p in partials(str(d))}

    ghost = Path(cache_dir(), "ns", "ghost.bin")
    abandoned = _dead_partial(ghost, age=7200)
    recent = _dead_partial(Path(cache_dir(), "ns", "recent.bin"), age=60)

    try:
        report = cli_json("cache", "prune", "--max-size", "0", "--grace", "30m")
    finally:
        origin.release()
        outputs = [p.communicate(timeout=60)[0].strip() for p in downloads]
        holder.communicate("done\n", timeout=30)

    assert sorted(r["name"] for r in report["removed"]) == sorted(p.name for p in old)
    assert [(k["name"], k["reason"].split(" pid")[0]) for k in report["kept"]] == [
        (locked.name, "locked by")
    ]
    assert [s["path"] for s in report["strays"]] == [str(abandoned)]
    assert not abandoned.exists()
    assert recent.exists()
    assert live.isdisjoint(s["path"] for s in report["strays"])
    # Every download in flight completed and verified; the locked entry is intact.
    assert [p.returncode for p in downloads] == [0, 0, 0]
    for out, (name, body) in zip(outputs, slow.items(), strict=True):
        assert Path(out).read_bytes() == body, name
        assert sha256_file(out)[0] == (read_meta(out) or {}).get("sha256")
    assert locked.read_bytes() == data("locked.bin", 2000)
    assert not any(p.exists() for p in old)


def test_prune_json_and_text_outputs_agree(origin: Origin, fetcher: Fetcher) -> None:
    put(origin, fetcher, "x.bin", 100)

    text = cli("cache", "prune", "--max-size", "0", "--dry-run")
    assert text.returncode == 0
    assert "would remove ns/" in text.stdout
    assert "would remove 1 entry and 0 stray files" in text.stdout
    again = json.loads(cli("cache", "ls", "--json").stdout)
    assert len(again["test_cache"]["entries"]) == 1


STRESS_CHILD = textwrap.dedent(
    """
    import hashlib, json, sys
    from cacheroot.fetch import Fetcher
    f = Fetcher(read_timeout=30.0, retries=2, backoff=0.01, lock_timeout=60.0)
    ok = gone = 0
    for url, digest in json.loads(sys.argv[1]):
        path = f.fetch(url, sha256=digest, namespace="stress")
        try:
            data = open(path, "rb").read()
        except FileNotFoundError:
            gone += 1  # pruned after it was published and returned: allowed
            continue
        assert hashlib.sha256(data).hexdigest() == digest, url
        ok += 1
    print(json.dumps({"ok": ok, "gone": gone}))
    """
)


@pytest.mark.slow
def test_prune_in_a_loop_while_processes_download(origin: Origin) -> None:
    from cacheroot.fetch._upkeep.cache import prune

    jobs = []
    for i in range(4):
        urls = []
        for j in range(25):
            body = os.urandom(64 * 1024 + j)
            urls.append((origin.serve(f"s{i}-{j}.bin", body), hashlib.sha256(body).hexdigest()))
        jobs.append(urls)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STRESS_CHILD, json.dumps(urls)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for urls in jobs
    ]
    rounds = 0
    while any(p.poll() is None for p in procs):
        report = prune(cache_dir(), max_size=0, grace=0.0)
        assert report["kept"] == [] or all("locked" in k["reason"] for k in report["kept"])
        rounds += 1
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4
    assert sum(o["ok"] + o["gone"] for o in outs) == 100
    assert rounds > 1


def test_verify_calls_a_directory_in_place_of_a_file_corrupt(
    origin: Origin, fetcher: Fetcher
) -> None:
    path = put(origin, fetcher, "d.bin", 2000)
    kept = put(origin, fetcher, "kept.bin", 2000)
    path.unlink()
    path.mkdir()
    (path / "x").write_bytes(b"not the entry")
    link = put(origin, fetcher, "link.bin", 2000)
    link.unlink()
    link.symlink_to(path)  # a link to a directory is no file either
    text = cli("cache", "verify", "--no-quarantine")
    assert text.returncode == 1, text.stdout + text.stderr
    assert "Traceback" not in text.stderr
    assert f"corrupt: ns/{path.name}: expected a file (its record holds the file's sha256)" in (
        text.stdout
    )
    report = cli_json("cache", "verify", status=1)
    rows = {r["name"]: r for r in report["entries"]}
    assert rows[path.name]["status"] == rows[link.name]["status"] == "corrupt"
    assert "found a directory" in rows[path.name]["detail"]
    assert rows[kept.name]["status"] == "ok"
    assert Path(rows[path.name]["quarantined"], "x").read_bytes() == b"not the entry"
    assert fetcher.fetch(origin.url("d.bin"), namespace="ns").read_bytes() == data("d.bin", 2000)


def test_prune_and_verify_by_a_user_who_cannot_open_an_entry_or_its_lock(
    origin: Origin, fetcher: Fetcher, other_user: OtherUser
) -> None:
    """A shared cache, another user: what it cannot open is reported and kept, no traceback."""
    private = put(origin, fetcher, "private.bin", 3000)
    locked = put(origin, fetcher, "locked.bin", 3000)
    other_user.shut_out(private)
    lock = Path(lock_path(str(locked)))
    lock.touch()
    other_user.shut_out(lock, readable_by_owner=False)

    verify = other_user.cli("cache", "verify", "--json")
    assert "Traceback" not in verify.stderr, verify.stderr
    assert verify.returncode == 1, verify.stdout + verify.stderr
    rows = {r["name"]: r for r in json.loads(verify.stdout)["entries"]}
    assert rows[private.name]["status"] == "unreadable"
    assert "Permission denied" in rows[private.name]["detail"]
    assert "as the user that owns the cache" in rows[private.name]["detail"]
    text = other_user.cli("cache", "verify")
    assert text.returncode == 1
    assert f"unreadable: ns/{private.name}: cannot read" in text.stdout
    assert "1 unreadable" in text.stdout

    prune = other_user.cli("cache", "prune", "--max-size", "0", "--json")
    assert "Traceback" not in prune.stderr, prune.stderr
    assert prune.returncode == 1, prune.stdout + prune.stderr
    report = json.loads(prune.stdout)
    kept = {k["name"]: k["reason"] for k in report["kept"]}
    assert f"cannot open its lock {lock}" in kept[locked.name]
    assert "Permission denied" in kept[locked.name]
    assert locked.read_bytes() == data("locked.bin", 3000)
    text = other_user.cli("cache", "prune", "--max-size", "0")
    assert text.returncode == 1
    assert f"could not remove ns/{locked.name}: cannot open its lock" in text.stdout


DIES_HOLDING = textwrap.dedent(
    """
    import os, signal, sys
    from cacheroot.fetch.store import PathLock
    PathLock(sys.argv[1]).acquire()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_prune_removes_lock_files_of_dead_holders_and_gone_entries_only(
    origin: Origin, fetcher: Fetcher
) -> None:
    ns = Path(cache_dir(), "ns")
    kept = put(origin, fetcher, "kept.bin", 100)
    old = put(origin, fetcher, "old.bin", 100)
    set_used(old, time.time() - 86400)
    dead = ns / ".ghost.bin.lock"
    died = subprocess.Popen([sys.executable, "-c", DIES_HOLDING, str(dead)])
    assert died.wait(timeout=60) == -9
    assert Path(f"{dead}.holder").exists()  # its record says who held it
    live = ns / ".busy.bin.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(live)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    hour_ago = time.time() - 3600
    for lock in ns.glob(".*.lock*"):
        os.utime(lock, (hour_ago, hour_ago))
    try:
        plan = cli_json("cache", "prune", "--older-than", "1d", "--dry-run")
        assert [s["path"] for s in plan["strays"]] == [str(dead)]
        assert dead.exists()
        report = cli_json("cache", "prune", "--older-than", "1d")
        live_after = live.exists() and Path(f"{live}.holder").exists()
    finally:
        holder.communicate("done\n", timeout=30)
    assert [r["name"] for r in report["removed"]] == [old.name]
    strays = {s["path"]: s["reason"] for s in report["strays"]}
    assert strays == {str(dead): f"lock of a dead holder (pid {died.pid})"}
    assert not dead.exists()
    assert not Path(f"{dead}.holder").exists()
    assert live_after  # a live holder's lock is never touched
    assert Path(lock_path(str(kept))).exists()  # an entry's own free lock stays
    assert not Path(lock_path(str(old))).exists()  # removed with its entry


def test_cache_help_says_prune_covers_the_whole_root() -> None:
    done = cli("--help")
    assert done.returncode == 0, done.stderr
    assert (
        "list what the root holds; verify the test cache; measure and prune every cache under "
        "the root" in " ".join(done.stdout.split())
    )


def test_verify_counts_one_entry_in_the_singular(origin: Origin, fetcher: Fetcher) -> None:
    put(origin, fetcher, "one.bin", 16)
    done = cli("cache", "verify")
    assert (done.returncode, done.stdout) == (
        0,
        "verified 1 entry: 0 corrupt, 0 unreadable, 0 without a record\n",
    )
