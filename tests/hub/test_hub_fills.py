"""The hub cache's files at every size and under every race, over real HTTP: ``cacheroot hub
serve`` in child processes in front of origins that misbehave in one exact way, read by
``requests`` and by huggingface_hub itself.

Every hub here runs in asyncio debug mode (``PYTHONASYNCIODEBUG=1``): a step of its event loop
that takes over 100 ms is logged as ``Executing ... took``, and the ``start`` fixture fails the
test on it. Files above 4 GiB are sparse: they cost no disk, only the CPU time of reading them.
Another hub process on the same store is played by the test where the exact moment matters: it
holds the store's lock of a file and publishes the file, as a hub does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import filelock
import pytest
import requests

from cacheroot.fetch._hub import fills
from cacheroot.fetch._hub.service import HubProcess

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.origin import Exchange, Handler, Server, files, hold, paced, static
else:
    from origin import Server, files, hold, paced, static

PATH = "/acme/m/resolve/main/w.bin"
COMMIT = "c" * 40
#: The sparse file: 4 GiB + 100 MiB + 10 bytes, zeros but for two markers.
BIG = 4_399_824_906
PAST_4_GIB = b"past-4-GiB"  # at 2**32
THE_END = b"the-end!!!"  # the last 10 bytes
BIG_SHA256 = "682004faf8903603d6f4e96891bf6b2316ef5989670e2258781ed1f73a59125f"


class Start(Protocol):
    """The ``start`` fixture: a running hub cache in front of ``upstream``."""

    def __call__(self, upstream: str, *options: str) -> HubProcess: ...


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def start(store: Path) -> Iterator[Start]:
    """Start hub caches on ``store`` in asyncio debug mode; stop them, and fail the test if one
    blocked its event loop for over 100 ms."""
    started: list[HubProcess] = []

    def go(upstream: str, *options: str) -> HubProcess:
        env = dict(os.environ, PYTHONASYNCIODEBUG="1")
        proc = HubProcess.start(upstream=upstream, store=str(store), options=options, env=env)
        started.append(proc)
        return proc

    yield go
    said = "\n".join(proc.stop() for proc in started)
    slow = [line for line in said.splitlines() if "Executing" in line and " took " in line]
    assert slow == []
    assert "Traceback" not in said


def _lfs(body: Handler, sha: str, size: int | None) -> Handler:
    """A Hub whose file ``PATH`` is named by ``sha`` and ``size`` (``None``: no size given) in
    its metadata, and whose bytes ``body`` answers."""

    def answer(ex: Exchange) -> None:
        if ex.info.path != PATH:
            ex.respond(404, b"{}")
        elif ex.command == "HEAD":
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"'}
            if size is not None:
                headers["X-Linked-Size"] = str(size)
            ex.respond(200, b"", headers, length=size)
        else:
            body(ex)

    return answer


def _sent(data: bytes, *, length: int | None) -> Handler:
    """``data`` announced as ``length`` bytes (``None``: no ``Content-Length``, the body ends
    when the connection closes)."""

    def answer(ex: Exchange) -> None:
        ex.respond(200, data, {"Content-Type": "application/octet-stream"}, length=length)

    return answer


def _announce(size: int, first: bytes, release: threading.Event) -> Handler:
    """``size`` bytes announced, ``first`` sent, then nothing until ``release``: a long
    download under way (it then ends short)."""

    def answer(ex: Exchange) -> None:
        ex.send_response(200)
        ex.send_header("Content-Length", str(size))
        ex.end_headers()
        ex.wfile.write(first)
        ex.wfile.flush()
        ex.wait(release)
        ex.close_connection = True

    return answer


def _in_turn(*bodies: Handler) -> Handler:
    """The n-th ``GET`` gets the n-th body; the last answers the rest."""
    asked = iter(range(len(bodies)))
    lock = threading.Lock()

    def answer(ex: Exchange) -> None:
        with lock:
            n = next(asked, len(bodies) - 1)
        bodies[n](ex)

    return answer


def _wait_for(ready: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _counts(proxy: HubProcess) -> dict[str, int]:
    counts: dict[str, int] = proxy.stats()["counts"]
    return counts


def _partials(store: Path) -> list[str]:
    blobs = store / "blobs"
    if not blobs.is_dir():
        return []
    return sorted(p.name for p in blobs.iterdir() if p.name.endswith(".partial"))


def _partial_sizes(store: Path) -> list[int]:
    return [(store / "blobs" / name).stat().st_size for name in _partials(store)]


def _sparse(path: Path) -> Path:
    """The sparse file of :data:`BIG` bytes at ``path``."""
    with path.open("wb") as f:
        f.truncate(BIG)
        f.seek(2**32)
        f.write(PAST_4_GIB)
        f.seek(BIG - len(THE_END))
        f.write(THE_END)
    return path


def _publish(store: Path, name: str, write: Callable[[Path], object]) -> None:
    """Publish a stored file as another hub process does: written aside, renamed into place."""
    blobs = store / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    aside = blobs / f".{name}.publishing"
    write(aside)
    aside.replace(blobs / name)


def _store_lock(store: Path, name: str) -> filelock.FileLock:
    """The store's lock of the file ``name``: held by the hub process that fetches it."""
    (store / "locks").mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(store / "locks" / f"{name}.lock"), thread_local=False)


def _get(url: str, spec: str | None = None) -> tuple[int, dict[str, str], str, int, bytes]:
    """Status, headers, sha256 and length of the body, and its last 10 bytes."""
    headers = {} if spec is None else {"Range": spec}
    with requests.get(url, headers=headers, stream=True, timeout=120) as resp:
        hasher, n, tail = hashlib.sha256(), 0, b""
        for chunk in resp.iter_content(1 << 20):
            hasher.update(chunk)
            n += len(chunk)
            tail = (tail + chunk)[-10:]
        return resp.status_code, dict(resp.headers), hasher.hexdigest(), n, tail


# -- a fill that finds the file stored -------------------------------------------------------
def test_a_fill_that_finds_the_file_stored_hands_it_over_with_no_copy_and_no_partial(
    start: Start, store: Path
) -> None:
    data = b"weights!" * 4096
    sha = hashlib.sha256(data).hexdigest()
    with Server(_lfs(static(data), sha, len(data))) as origin:
        proxy = start(origin.base, "--deadline=30")  # how long a fill waits for the lock
        lock = _store_lock(store, sha)
        lock.acquire()
        try:
            with ThreadPoolExecutor(1) as pool:
                asked = pool.submit(requests.get, proxy.url + PATH, timeout=30)
                # The fill waits for the lock another hub process holds while it downloads;
                # that process then publishes the file and lets go.
                _wait_for(lambda: _counts(proxy).get("file_miss") == 1)
                _publish(store, sha, lambda p: p.write_bytes(data))
                lock.release()
                got = asked.result()
        finally:
            lock.release()
        assert (got.status_code, got.content, got.headers["X-Cacheroot-Hub"]) == (
            200,
            data,
            "miss",
        )
        assert origin.count(PATH, "GET") == 0
        assert sorted(p.name for p in (store / "blobs").iterdir()) == [sha]
        assert _counts(proxy)["file_handed_over"] == 1


# -- two hub processes on one store ----------------------------------------------------------
def test_a_second_hub_process_streams_the_first_ones_download(start: Start, store: Path) -> None:
    """The second process serves its client from the first one's partial as it grows (it
    waited for the whole download before): one upstream download for both."""
    data = bytes(range(256)) * (32 << 10)  # 8 MiB
    sha = hashlib.sha256(data).hexdigest()
    reached, release = threading.Event(), threading.Event()
    body = hold(static(data), at=3 << 20, reached=reached, release=release)
    with Server(_lfs(body, sha, len(data))) as origin:
        first, second = start(origin.base), start(origin.base)
        try:
            with ThreadPoolExecutor(1) as pool:
                one = pool.submit(_get, first.url + PATH)
                assert reached.wait(10)
                with requests.get(second.url + PATH, stream=True, timeout=30) as resp:
                    # The upstream still holds back all but 3 MiB: these came from the partial.
                    head = resp.raw.read(1 << 20)
                    assert (resp.status_code, head == data[: 1 << 20]) == (200, True)
                    assert origin.count(PATH, "GET") == 1
                    release.set()
                    two = head + resp.raw.read()
                got = one.result()
        finally:
            release.set()
    assert (got[0], got[2], got[3]) == (200, sha, 8 << 20)
    assert (len(two), two == data) == (8 << 20, True)
    assert origin.count(PATH, "GET") == 1
    assert _counts(second)["file_followed"] == 1
    assert sorted(p.name for p in (store / "blobs").iterdir()) == [sha]


#: 512 MiB, and its sha256 (computed once, outside the hub).
SLOW = bytes(range(256)) * (2 << 20)
SLOW_SHA256 = "c047731a3c134f3d34286d608e9c173027d50f43ab9d2064f3c360939977e908"


def _timed_get(url: str, began: float) -> tuple[int, str, int, float, float]:
    """Status, sha256 and length of the body, and the seconds after ``began`` at which its
    first and its last bytes came."""
    with requests.get(url, stream=True, timeout=120) as resp:
        hasher, n, first = hashlib.sha256(), 0, 0.0
        for chunk in resp.iter_content(1 << 20):
            if not n:
                first = time.monotonic() - began
            hasher.update(chunk)
            n += len(chunk)
        return resp.status_code, hasher.hexdigest(), n, first, time.monotonic() - began


@pytest.mark.slow
def test_two_hubs_on_one_store_stream_one_slow_download(start: Start, store: Path) -> None:
    """512 MiB from an upstream at 50 MiB/s (over 10 s): one upstream download, and the
    client of each hub has its first bytes long before that download ends."""
    body = paced(static(SLOW), chunk=1 << 20, every=0.02)
    with Server(_lfs(body, SLOW_SHA256, len(SLOW))) as origin:
        first, second = start(origin.base), start(origin.base)
        began = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            one = pool.submit(_timed_get, first.url + PATH, began)
            _wait_for(lambda: _partials(store) != [])
            two = pool.submit(_timed_get, second.url + PATH, began)
            a, b = one.result(), two.result()
    assert a[:3] == (200, SLOW_SHA256, 512 << 20)
    assert b[:3] == (200, SLOW_SHA256, 512 << 20)
    assert origin.count(PATH, "GET") == 1
    assert _counts(second)["file_followed"] == 1
    assert a[4] > 10  # the upstream's pace: the download took its time
    # Both streamed: neither waited for the end of the download.
    assert a[3] < 3, a
    assert b[3] < 3, b


def test_a_followed_download_that_stops_cuts_the_second_hubs_client_short(
    start: Start, store: Path
) -> None:
    """The first process's download ends short (its partial removed): the second cuts its
    client (which asks again), never hangs, and sends no byte it did not check."""
    release = threading.Event()
    with Server(_lfs(_announce(BIG, b"\0" * (3 << 20), release), BIG_SHA256, BIG)) as origin:
        first, second = start(origin.base), start(origin.base)
        try:
            with ThreadPoolExecutor(1) as pool:
                one = pool.submit(_get, first.url + PATH)
                _wait_for(lambda: _partial_sizes(store) == [3 << 20])
                with requests.get(second.url + PATH, stream=True, timeout=30) as resp:
                    assert resp.raw.read(1 << 20) == b"\0" * (1 << 20)
                    release.set()
                    with pytest.raises(requests.exceptions.ChunkedEncodingError):
                        b"".join(resp.iter_content(1 << 20))  # short of the length announced
                with pytest.raises(requests.exceptions.RequestException):
                    one.result()
        finally:
            release.set()
    assert origin.count(PATH, "GET") == 1
    assert _counts(second)["file_followed"] == 1
    _wait_for(lambda: _partials(store) == [])


@pytest.mark.slow
def test_a_file_above_4_gib_is_whole_and_ranged_through_a_fill_and_from_the_store(
    start: Start, store: Path
) -> None:
    """The fill hands the stored file over (no copy: the one `sendfile` of old stopped 2 GiB
    in, with the loop blocked for seconds), then serves it from the store."""
    with Server(_lfs(static(b""), BIG_SHA256, BIG)) as origin:
        proxy = start(origin.base, "--deadline=30")  # how long a fill waits for the lock
        url = proxy.url + PATH
        lock = _store_lock(store, BIG_SHA256)
        lock.acquire()
        try:
            with ThreadPoolExecutor(4) as pool:
                whole = pool.submit(_get, url)
                _wait_for(lambda: _counts(proxy).get("file_miss") == 1)
                past = pool.submit(_get, url, "bytes=4294967296-4294967305")
                tail = pool.submit(_get, url, "bytes=-10")
                # A range past the end is refused at once, while the fill waits.
                beyond = requests.get(url, headers={"Range": f"bytes={BIG}-"}, timeout=10)
                _wait_for(lambda: _counts(proxy).get("file_joined") == 3)
                _publish(store, BIG_SHA256, _sparse)
                lock.release()
                got = [whole.result(), past.result(), tail.result()]
        finally:
            lock.release()
        status, headers, sha, n, _ = got[0]
        assert (status, headers["Content-Length"], sha, n) == (200, "4399824906", BIG_SHA256, BIG)
        assert (beyond.status_code, beyond.headers.get("Content-Range")) == (
            416,
            "bytes */4399824906",
        )
        assert [(g[0], g[1]["Content-Range"], g[4]) for g in got[1:]] == [
            (206, "bytes 4294967296-4294967305/4399824906", PAST_4_GIB),
            (206, "bytes 4399824896-4399824905/4399824906", THE_END),
        ]
        assert origin.count(PATH, "GET") == 0
        assert _partials(store) == []

        # From the store now.
        assert [
            (g[0], g[1]["X-Cacheroot-Hub"], g[1].get("Content-Range"), g[4])
            for g in (
                _get(url, "bytes=4294967296-4294967305"),
                _get(url, "bytes=-10"),
                _get(url, f"bytes={BIG}-"),
            )
        ] == [
            (206, "hit", "bytes 4294967296-4294967305/4399824906", PAST_4_GIB),
            (206, "hit", "bytes 4399824896-4399824905/4399824906", THE_END),
            (416, "hit", "bytes */4399824906", b""),
        ]


def test_a_download_above_4_gib_announces_its_size_and_refuses_ranges_past_it(
    start: Start, store: Path
) -> None:
    release = threading.Event()
    first = b"\0" * (3 << 20)
    with Server(_lfs(_announce(BIG, first, release), BIG_SHA256, BIG)) as origin:
        proxy = start(origin.base)
        url = proxy.url + PATH
        try:
            with requests.get(url, stream=True, timeout=30) as resp:
                assert (resp.status_code, resp.headers["Content-Length"]) == (200, "4399824906")
                assert len(resp.raw.read(1 << 20)) == 1 << 20
                beyond = requests.get(url, headers={"Range": "bytes=5000000000-"}, timeout=10)
                assert (beyond.status_code, beyond.headers["Content-Range"]) == (
                    416,
                    "bytes */4399824906",
                )
                assert beyond.headers["X-Cacheroot-Hub"] == "joined"
                release.set()
                with pytest.raises(requests.exceptions.RequestException):
                    resp.content  # noqa: B018 - the upstream ended short: so does the client
        finally:
            release.set()
        _wait_for(lambda: _partials(store) == [])
        # A download cut short is no fault of the file's: it is not remembered, and asked again.
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url, timeout=10).content  # noqa: B018 - it ends short again
        assert origin.count(PATH, "GET") == 2


def test_a_hub_stopped_during_a_stalled_download_stops_at_once(start: Start, store: Path) -> None:
    """A large file is received in a thread blocked on its socket: stopping the hub ends that
    read rather than waiting out its timeout, and leaves no partial."""
    release = threading.Event()
    with Server(_lfs(_announce(BIG, b"\0" * (3 << 20), release), BIG_SHA256, BIG)) as origin:
        proxy = start(origin.base)
        try:
            with requests.get(proxy.url + PATH, stream=True, timeout=30) as resp:
                assert len(resp.raw.read(1 << 20)) == 1 << 20
                # All that was sent is written: the receiving thread now waits on its socket.
                _wait_for(lambda: _partial_sizes(store) == [3 << 20])
                began = time.monotonic()
                said = proxy.stop()
                took = time.monotonic() - began
        finally:
            release.set()
    assert proxy.proc.returncode == 0, said
    assert took < 5, f"the hub took {took:.1f} s to stop"
    assert _partials(store) == []


# -- bytes that are not the file -------------------------------------------------------------
@pytest.mark.parametrize("length", [12, None], ids=["announced", "unannounced"])
def test_bytes_beyond_the_declared_size_never_reach_a_client(
    start: Start, store: Path, length: int | None
) -> None:
    declared = b"the-weight"  # what the Hub's metadata names: 10 bytes, this sha256
    sha = hashlib.sha256(declared).hexdigest()
    with Server(_lfs(_sent(b"XXXXXXXXXXYY", length=length), sha, 10)) as origin:
        proxy = start(origin.base)
        got = requests.get(proxy.url + PATH, timeout=10)
        assert got.status_code == 502
        assert b"XXXXXXXXXX" not in got.content
        reason = (
            "the upstream announced 12 bytes for a file the Hub gave 10 for"
            if length
            else "the upstream sent more than the 10 bytes the Hub gave as the file's size"
        )
        assert got.headers["X-Error-Message"] == reason
        # Asked again at once: the failure is remembered, the upstream not asked.
        again = requests.get(proxy.url + PATH, timeout=10)
        assert again.status_code == 502
        assert again.headers["X-Error-Message"].startswith(reason + "; the hub cache asks the")
        assert origin.count(PATH, "GET") == 1
        assert sorted(p.name for p in (store / "blobs").iterdir()) == []


HF_DOWNLOAD = """
import json, sys
from huggingface_hub import hf_hub_download
try:
    hf_hub_download("acme/m", "w.bin", cache_dir=sys.argv[1])
    print(json.dumps({"error": None}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def _hf_download(proxy: HubProcess, cache: Path) -> dict[str, Any]:
    env = dict(
        os.environ,
        HF_ENDPOINT=proxy.url,
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run(
        [sys.executable, "-c", HF_DOWNLOAD, str(cache)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_a_file_failing_its_digest_costs_one_download_and_the_client_is_told_why(
    start: Start, store: Path, tmp_path: Path
) -> None:
    """Real huggingface_hub: its GET is cut once the bytes fail (the headers were out), it
    resumes with a Range, and the hub answers the failure it remembers, which the client
    raises with the hub's reason."""
    good = bytes(range(256)) * (12 << 10)  # 3 MiB: larger than what is held until checked
    sent = good[:-1] + b"!"
    sha = hashlib.sha256(good).hexdigest()
    with Server(_lfs(static(sent), sha, len(good))) as origin:
        proxy = start(origin.base)
        first = _hf_download(proxy, tmp_path / "hf-1")
        assert first["error"] == "HfHubHTTPError"
        expected = (
            f"the upstream sent bytes that do not match the file's digest: sha256 {sha} was "
            f"expected, the bytes have {hashlib.sha256(sent).hexdigest()}; the hub cache asks "
            "the upstream again in "
        )
        assert expected in first["message"]
        assert "502" in first["message"]
        assert origin.count(PATH, "GET") == 1
        # Another client call meanwhile is answered at once, and costs no download.
        second = _hf_download(proxy, tmp_path / "hf-2")
        assert (second["error"], origin.count(PATH, "GET")) == ("HfHubHTTPError", 1)
        assert expected in second["message"]
        assert _counts(proxy)["digest_mismatch"] == 1
        assert sorted(p.name for p in (store / "blobs").iterdir()) == []


# -- ranges ------------------------------------------------------------------------------------
def test_ranges_are_answered_right_while_a_fill_runs_and_after(start: Start, store: Path) -> None:
    data = bytes(range(256)) * (16 << 10)  # 4 MiB
    sha = hashlib.sha256(data).hexdigest()
    reached, release = threading.Event(), threading.Event()
    body = hold(static(data), at=2 << 20, reached=reached, release=release)
    with Server(_lfs(body, sha, len(data))) as origin:
        proxy = start(origin.base)
        url = proxy.url + PATH
        try:
            with ThreadPoolExecutor(3) as pool:
                whole = pool.submit(_get, url)
                assert reached.wait(10)
                # What has arrived is served at once; what is past the end refused at once.
                part = requests.get(url, headers={"Range": "bytes=100-199"}, timeout=10)
                beyond = requests.get(url, headers={"Range": "bytes=4194304-"}, timeout=10)
                empty = requests.get(url, headers={"Range": "bytes=-0"}, timeout=10)
                # The tail, and several ranges (answered whole), wait for the bytes.
                tail = pool.submit(_get, url, "bytes=-10")
                several = pool.submit(_get, url, "bytes=0-1,5-6")
                _wait_for(lambda: _counts(proxy).get("file_joined") == 5)
                release.set()
                answers = [whole.result(), tail.result(), several.result()]
        finally:
            release.set()
        assert (part.status_code, part.headers["Content-Range"], part.content) == (
            206,
            "bytes 100-199/4194304",
            data[100:200],
        )
        assert part.headers["X-Cacheroot-Hub"] == "joined"
        for refused in (beyond, empty):
            assert (refused.status_code, refused.headers["Content-Range"]) == (
                416,
                "bytes */4194304",
            )
        assert [(a[0], a[1].get("Content-Range"), a[2], a[4]) for a in answers] == [
            (200, None, sha, data[-10:]),
            (
                206,
                "bytes 4194294-4194303/4194304",
                hashlib.sha256(data[-10:]).hexdigest(),
                data[-10:],
            ),
            (200, None, sha, data[-10:]),
        ]
        # The same from the store, once the fill is over: its clients have every byte before
        # the file is synced and published, and a request meanwhile still joins the fill. (A
        # file's HEAD is metadata, a hit from the start: the published name is what to wait for.)
        _wait_for((store / "blobs" / sha).is_file)
        stored = [
            requests.get(url, headers={"Range": spec}, timeout=10)
            for spec in ("bytes=100-199", "bytes=4194304-", "bytes=-10")
        ]
        assert [(s.status_code, s.headers["X-Cacheroot-Hub"]) for s in stored] == [
            (206, "hit"),
            (416, "hit"),
            (206, "hit"),
        ]
        assert [s.headers["Content-Range"] for s in stored] == [
            "bytes 100-199/4194304",
            "bytes */4194304",
            "bytes 4194294-4194303/4194304",
        ]
        assert (stored[0].content, stored[2].content) == (data[100:200], data[-10:])
        assert origin.count(PATH, "GET") == 1


def test_a_range_of_a_file_whose_size_is_not_known_yet_waits_for_it(start: Start) -> None:
    """No size in the metadata, none announced with the bytes: a 206 still names the range
    and the size (it waits for the end of the download to know it)."""
    data = b"0123456789" * 100
    sha = hashlib.sha256(data).hexdigest()
    with Server(_lfs(_sent(data, length=None), sha, None)) as origin:
        proxy = start(origin.base)
        got = requests.get(proxy.url + PATH, headers={"Range": "bytes=10-19"}, timeout=10)
        assert (got.status_code, got.headers["Content-Range"], got.content) == (
            206,
            "bytes 10-19/1000",
            b"0123456789",
        )
        assert origin.count(PATH, "GET") == 1


# -- files with no digest --------------------------------------------------------------------
def test_a_file_with_no_digest_is_streamed_through_and_never_stored(
    start: Start, store: Path
) -> None:
    """Stored, it would be kept under its branch URL: the bytes of a moved branch would be
    served for good."""
    current = {"data": b"first version of the notes\n"}

    def answer(ex: Exchange) -> None:
        data = current["data"]
        headers = {"X-Repo-Commit": COMMIT, "Content-Type": "text/plain"}
        ex.respond(200, b"" if ex.command == "HEAD" else data, headers, length=len(data))

    with Server(answer) as origin:
        proxy = start(origin.base, "--ttl=0")
        url = proxy.url + "/acme/m/resolve/main/notes.txt"
        first = requests.get(url, timeout=10)
        assert (first.status_code, first.content) == (200, b"first version of the notes\n")
        assert first.headers["X-Cacheroot-Hub"] == "pass"
        current["data"] = b"the branch moved: second version\n"
        again = requests.get(url, timeout=10)
        assert (again.status_code, again.content) == (200, b"the branch moved: second version\n")
        part = requests.get(url, headers={"Range": "bytes=4-9"}, timeout=10)
        assert (part.status_code, part.headers["Content-Range"], part.content) == (
            206,
            "bytes 4-9/33",
            b"branch",
        )
        beyond = requests.get(url, headers={"Range": "bytes=33-"}, timeout=10)
        assert (beyond.status_code, beyond.headers["Content-Range"]) == (416, "bytes */33")
        assert origin.count("/acme/m/resolve/main/notes.txt", "GET") == 3
        assert not (store / "blobs").exists() or list((store / "blobs").iterdir()) == []


def test_a_file_with_no_digest_never_sends_more_than_its_declared_size(start: Start) -> None:
    def answer(ex: Exchange) -> None:
        if ex.command == "HEAD":
            ex.respond(200, b"", {"X-Repo-Commit": COMMIT}, length=10)
        else:
            ex.respond(200, b"0123456789AB", length=None)

    with Server(answer) as origin:
        proxy = start(origin.base)
        got = requests.get(proxy.url + "/acme/m/resolve/main/notes.txt", timeout=10)
        assert (got.status_code, got.headers["X-Error-Message"]) == (
            502,
            "the upstream sent more than the 10 bytes the Hub gave as the file's size",
        )
        assert b"0123456789" not in got.content


@pytest.mark.slow
def test_a_file_above_4_gib_with_no_digest_is_ranged_through(start: Start, tmp_path: Path) -> None:
    files_dir = tmp_path / "origin"
    files_dir.mkdir()
    _sparse(files_dir / "big.bin")
    with Server(files(str(files_dir))) as origin:
        proxy = start(origin.base)
        url = proxy.url + "/acme/m/resolve/main/big.bin"
        got = _get(url, "bytes=4294967296-4294967305")
        assert (got[0], got[1]["Content-Range"], got[4]) == (
            206,
            "bytes 4294967296-4294967305/4399824906",
            PAST_4_GIB,
        )
        beyond = requests.get(url, headers={"Range": f"bytes={BIG}-"}, timeout=10)
        assert (beyond.status_code, beyond.headers["Content-Range"]) == (416, "bytes */4399824906")


# -- partials of dead hubs -------------------------------------------------------------------
def _prune(store: Path) -> str:
    argv = ["prune", "--older-than", "14d", "--store", str(store)]
    out = subprocess.run(
        [sys.executable, "-m", "cacheroot.fetch._hub", *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def test_no_partial_outlives_a_hub_killed_mid_download_and_no_live_one_is_touched(
    start: Start, store: Path
) -> None:
    data = bytes(range(256)) * (16 << 10)  # 4 MiB
    sha = hashlib.sha256(data).hexdigest()
    held = [(threading.Event(), threading.Event()) for _ in range(2)]
    body = _in_turn(
        *(hold(static(data), at=2 << 20, reached=r, release=g) for r, g in held), static(data)
    )
    with Server(_lfs(body, sha, len(data))) as origin, ThreadPoolExecutor(2) as pool:
        try:
            a = start(origin.base)
            pool.submit(requests.get, a.url + PATH, timeout=60)
            assert held[0][0].wait(10)
            _wait_for(lambda: len(_partials(store)) == 1)
            (mine,) = _partials(store)
            assert mine.startswith(f".{sha}.")
            assert f"{a.proc.pid}." in mine  # its writer's pid

            # Another hub starting on the store, and a prune, leave a live download alone.
            b = start(origin.base)
            out = _prune(store)
            assert "partial file" not in out
            assert _partials(store) == [mine]

            # Killed mid-download: the next hub to start removes its partial.
            a.proc.kill()
            a.proc.wait()
            assert _partials(store) == [mine]
            start(origin.base)
            assert _partials(store) == []

            # ... and so does a prune.
            pool.submit(requests.get, b.url + PATH, timeout=60)
            assert held[1][0].wait(10)
            _wait_for(lambda: len(_partials(store)) == 1)
            b.proc.kill()
            b.proc.wait()
            out = _prune(store)
            assert "removed 1 partial file (" in out
            assert "of downloads whose hub is gone" in out
            assert _partials(store) == []
        finally:
            for _reached, release in held:
                release.set()


def test_prune_removes_a_partial_only_when_its_writer_is_surely_gone(tmp_path: Path) -> None:
    """On this machine a partial goes when its pid runs nothing; any partial goes when it was
    not written to for an hour (its pid means nothing here, or may have been reused)."""
    from cacheroot.fetch._hub.prune import prune
    from cacheroot.fetch._proc import machine_tag

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    dead_pid = int(dead.stdout)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            here, sha = machine_tag(), "a" * 64
            planted = {
                f".{sha}.{here}-{dead_pid}.00000001.partial": 0,  # written a moment ago
                f".{sha}.{here}-{live.pid}.00000002.partial": 600,
                f".{sha}.{here}-{live.pid}.00000003.partial": 7200,
                f".{sha}.0badc0de-{dead_pid}.00000004.partial": 600,
                f".{sha}.{dead_pid}.0a0b0c0d.partial": 7200,
                f".{sha}.{dead_pid}.0a0b0c0e.partial": 600,
            }
            blobs = tmp_path / "store" / "blobs"
            blobs.mkdir(parents=True)
            now = time.time()
            for name, age in planted.items():
                (blobs / name).write_bytes(b"x" * 100)
                os.utime(blobs / name, (now - age, now - age))
            (blobs / f".{sha}.{here}-{dead_pid}.00000005.partial").symlink_to(tmp_path)
            (blobs / f".{sha}.{here}-{dead_pid}.00000006.partial").mkdir()
            done = prune(str(tmp_path / "store"), older_than=14 * 86400, now=now)
        finally:
            live.kill()
    assert (done.partials, done.partial_bytes) == (3, 300)
    assert sorted(p.name for p in blobs.iterdir()) == sorted(
        [
            f".{sha}.{here}-{live.pid}.00000002.partial",
            f".{sha}.0badc0de-{dead_pid}.00000004.partial",
            f".{sha}.{dead_pid}.0a0b0c0e.partial",
            f".{sha}.{here}-{dead_pid}.00000005.partial",
            f".{sha}.{here}-{dead_pid}.00000006.partial",
        ]
    )
    assert (done.removed, done.kept) == (0, 0)


def test_readers_get_the_last_byte_before_the_sync_and_nothing_is_published_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Syncing a large file takes seconds: its readers need not wait for it, as long as the
    digest checked out; the fill is done (and may be published) only once the sync is over."""
    data = os.urandom(3 << 20)
    syncing, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        syncing.set()
        release.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)

    async def run() -> None:
        fd = os.open(tmp_path / "partial", os.O_RDWR | os.O_CREAT, 0o644)
        fill = fills.Fill(str(tmp_path / "blob"), len(data))
        fill.write_to(str(tmp_path / "partial"), fd)
        sink = fills.Sink(fill, fd, hashlib.sha256(data).hexdigest())
        sink.started(len(data))
        for at in range(0, len(data), 100_000):
            await sink(data[at : at + 100_000])
        finishing = asyncio.ensure_future(sink.finish())
        while not syncing.is_set():
            await asyncio.sleep(0.01)
        assert fill.readable() == len(data)  # every byte, while the sync runs
        assert os.pread(fd, len(data), 0) == data
        assert not finishing.done()  # the publish comes after it: never unsynced
        release.set()
        await finishing
        fill.leave()

    try:
        asyncio.run(run())
    finally:
        release.set()
