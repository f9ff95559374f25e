"""Honest, fast failures and no false outages: the hub cache's breakers, over real HTTP.

``cacheroot hub serve`` runs in a child process in front of the local test hub, or of origins
that fail in one exact way (a CDN that answers 503, a redirect to ``file://``, downloads that
hold their connections, a 429 that names its wait in ``RateLimit`` headers). The client is the
real huggingface_hub in a subprocess where its retries matter, ``requests`` elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest
import requests

from cacheroot.fetch._hub.breaker import asked_wait
from cacheroot.fetch._hub.service import HubProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Exchange, Server, hold, static

    from .hubserver import HubRepo, HubServer
else:
    from origin import Server, hold, static


class Start(Protocol):
    """The ``start`` fixture: a running hub cache in front of ``upstream``."""

    def __call__(self, upstream: str, *options: str) -> HubProcess: ...


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start hub caches (``start(upstream, *options)``) with a store in ``tmp_path``; stop them."""
    started: list[HubProcess] = []

    def go(upstream: str, *options: str) -> HubProcess:
        proc = HubProcess.start(upstream=upstream, store=str(tmp_path / "store"), options=options)
        started.append(proc)
        return proc

    yield go
    for proc in started:
        proc.stop()


def _breaker(proxy: HubProcess, origin: str) -> dict[str, object]:
    """The hub's report of one origin's breaker (closed and unused when it has none yet)."""
    unused: dict[str, object] = {"state": "closed", "failures": 0}
    found: dict[str, object] = proxy.stats()["breakers"].get(origin, unused)
    return found


def _api(repo_id: str, rev: str) -> str:
    return f"/api/models/{repo_id}/revision/{rev}"


# -- fail fast, and say why ------------------------------------------------------------------

_CLIENT = """\
import json, sys, time
import huggingface_hub as hh

repo = sys.argv[1]
calls = {
    "hf_hub_download": lambda: hh.hf_hub_download(repo, "config.json"),
    "snapshot_download": lambda: hh.snapshot_download(repo),
    "model_info": lambda: hh.model_info(repo),
}
out = {}
for name, call in calls.items():
    start = time.monotonic()
    chain = []
    try:
        call()
    except Exception as exc:
        error = exc
        while error is not None:
            chain.append(f"{type(error).__name__}: {error}")
            error = error.__cause__
    out[name] = {"seconds": time.monotonic() - start, "errors": chain}
print(json.dumps(out))
"""

#: What every call is told once the hub left the failing upstream alone (numbers vary).
_GAVE_UP = (
    r"cacheroot hub cache: the upstream {up} failed \d+ times in a row \(last: HTTP 503\); it "
    r"is left alone for \d+ s more, and the hub cache has no answer for {what} yet\. To have it "
    r'answer without the upstream, add a \[\[model\]\] entry with hub = "hf", repo_id = '
    r'"acme/never-seen", revision = "main" to the test manifest and run `cacheroot warm '
    r"MANIFEST` while the upstream answers"
)


def test_a_model_the_store_never_saw_fails_within_seconds_during_an_outage(
    start: Start, hub: HubServer, tmp_path: Path
) -> None:
    """huggingface_hub retries 503 five times, and obeys ``Retry-After``: a hub that answered
    with the rest of its cool-off kept one ``hf_hub_download`` waiting 95 s."""
    proxy = start(hub.url)
    hub.fail_rate(1.0, status=503)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=proxy.url,
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _CLIENT, "acme/never-seen"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    seconds = {name: round(call["seconds"], 1) for name, call in out.items()}
    assert all(s < 5 for s in seconds.values()), (seconds, proc.stderr[-3000:])

    up = re.escape(hub.url)
    download = out["hf_hub_download"]["errors"]
    assert download[0].startswith("LocalEntryNotFoundError: An error happened"), download
    assert download[1].startswith("HfHubHTTPError: Client error '424 Failed Dependency'")
    what = r"the model acme/never-seen at main \(file config\.json\)"
    assert re.fullmatch(_GAVE_UP.format(up=up, what=what), download[1].splitlines()[-1])

    info = out["model_info"]["errors"][0]
    what = r"the model acme/never-seen"
    assert re.fullmatch(_GAVE_UP.format(up=up, what=what), info.splitlines()[-1]), info
    snapshot = out["snapshot_download"]["errors"]
    assert snapshot[0].startswith("LocalEntryNotFoundError: Got: HfHubHTTPError: "), snapshot
    what = r"the model acme/never-seen at main"
    assert any(re.fullmatch(_GAVE_UP.format(up=up, what=what), x) for x in snapshot[0].split("\n"))


# -- a breaker per origin, opened by failures in a row ----------------------------------------


def test_one_timeout_leaves_the_breaker_closed_three_failures_in_a_row_open_it(
    start: Start, hub: HubServer, tiny_repo: HubRepo
) -> None:
    proxy = start(hub.url, "--deadline=1", "--cooloff=5", "--ttl=0")
    repo = tiny_repo.repo_id
    reached, release = hub.stall_next(match="/revision/main$")
    timed_out = requests.get(proxy.url + _api(repo, "main"), timeout=10)
    assert reached.is_set()
    release.set()
    # The breaker stays closed: the next request is sent, and its answer ends the failures.
    again = requests.get(proxy.url + _api(repo, "main"), timeout=10)
    assert (again.json()["sha"], hub.count_path(_api(repo, "main"))) == (tiny_repo.commit, 2)
    assert (_breaker(proxy, hub.url)["state"], _breaker(proxy, hub.url)["failures"]) == (
        "closed",
        0,
    )
    # The one that waited out the deadline was told at once not to retry.
    assert (timed_out.status_code, "Retry-After" in timed_out.headers) == (424, False)

    hub.fail_next(3, status=503, retry_after=None)
    got = [requests.get(proxy.url + _api(repo, f"v{n}"), timeout=10) for n in (1, 2, 3)]
    # The first two may be retried at once (the upstream is still asked); the third opens it.
    assert [g.status_code for g in got] == [503, 503, 424]
    assert (_breaker(proxy, hub.url)["state"], _breaker(proxy, hub.url)["failures"]) == ("open", 3)
    before = hub.total()
    unseen = requests.get(proxy.url + _api(repo, "v4"), timeout=10)
    kept = requests.get(proxy.url + _api(repo, "main"), timeout=10)
    assert (unseen.status_code, kept.status_code, kept.headers["X-Cacheroot-Hub"]) == (
        424,
        200,
        "stale",
    )
    assert hub.total() == before  # nothing sent while open

    # Half-open after the cool-off: one probe goes; it fails, so the breaker opens again.
    time.sleep(5.2)
    hub.fail_next(1, status=503, retry_after=None)
    probe = requests.get(proxy.url + _api(repo, "v5"), timeout=10)
    assert (probe.status_code, hub.total()) == (424, before + 1)
    assert requests.get(proxy.url + _api(repo, "v6"), timeout=10).status_code == 424
    assert hub.total() == before + 1
    # The next probe is answered (a "not found" is an answer): closed, everything asked again.
    time.sleep(5.2)
    assert requests.get(proxy.url + _api(repo, "v7"), timeout=10).status_code == 404
    assert _breaker(proxy, hub.url)["state"] == "closed"
    assert requests.get(proxy.url + _api(repo, "v8"), timeout=10).status_code == 404
    assert hub.total() == before + 3


def _api_with_cdn(cdn: str, files: dict[str, tuple[bytes, str]]) -> Server:
    """An upstream whose files (at any revision) redirect (302) to ``cdn`` + the path ``files``
    names for them, and whose ``/api/models/acme/m/revision/REV`` answers any revision."""

    def answer(ex: Exchange) -> None:
        path = ex.info.path
        if path.startswith("/api/models/acme/m/revision/"):
            body = json.dumps({"id": "acme/m", "sha": "c" * 40, "siblings": []}).encode()
            ex.respond(200, body, {"Content-Type": "application/json"})
            return
        name = path.rsplit("/", 1)[-1]
        if not path.startswith("/acme/m/resolve/") or name not in files:
            ex.respond(404, b"{}")
            return
        data, where = files[name]
        sha = hashlib.sha256(data).hexdigest()
        headers = {
            "Location": where if "://" in where else cdn + where,
            "X-Repo-Commit": "c" * 40,
            "ETag": f'"{sha}"',
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(len(data)),
        }
        ex.respond(302, b"", headers)

    return Server(answer).start()


def test_a_cdn_outage_opens_the_cdns_breaker_and_leaves_the_api_alone(start: Start) -> None:
    cdn = Server(lambda ex: ex.respond(503, b"down\n")).start()
    api = _api_with_cdn(cdn.base, {"w.bin": (b"weights" * 1000, "/blob")})
    try:
        proxy = start(api.base)
        url = f"{proxy.url}/acme/m/resolve/main/w.bin"
        for _ in range(3):
            with pytest.raises(requests.exceptions.RequestException):
                requests.get(url, timeout=10).raise_for_status()
        assert cdn.count("/blob", "GET") == 3
        # The API is asked as before: an unseen revision is answered by it.
        got = requests.get(proxy.url + _api("acme/m", "v1"), timeout=10)
        assert (got.status_code, got.headers["X-Cacheroot-Hub"]) == (200, "miss")
        assert _breaker(proxy, cdn.base)["state"] == "open"
        assert _breaker(proxy, api.base) == {
            "state": "closed",
            "failures": 0,
            "open_for": 0.0,
            "last_failure": "",
        }
        # The CDN is left alone: the next try of the file is not sent to it.
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url, timeout=10).raise_for_status()
        assert cdn.count("/blob", "GET") == 3
    finally:
        api.close()
        cdn.close()


def test_a_redirect_to_a_file_url_is_refused_and_counts_against_no_host(start: Start) -> None:
    api = _api_with_cdn("", {"x.bin": (b"x" * 100, "file:///etc/hostname")})
    try:
        proxy = start(api.base)
        for _ in range(4):
            with pytest.raises(requests.exceptions.RequestException):
                requests.get(
                    f"{proxy.url}/acme/m/resolve/main/x.bin", timeout=10
                ).raise_for_status()
        got = requests.get(proxy.url + _api("acme/m", "v1"), timeout=10)
        assert (got.status_code, got.headers["X-Cacheroot-Hub"]) == (200, "miss")
        assert proxy.stats()["counts"].get("upstream_errors", 0) == 0
        assert proxy.stats()["breakers"] == {
            api.base: {"state": "closed", "failures": 0, "open_for": 0.0, "last_failure": ""}
        }
    finally:
        api.close()


# -- downloads and metadata on pools of their own ---------------------------------------------

#: Downloads held at once: as many as one pool's connections to a host.
_HELD = 32


def test_downloads_holding_every_connection_never_starve_metadata(start: Start) -> None:
    files = {f"f{i}.bin": bytes([i]) * 65536 for i in range(_HELD)}
    reached = {name: threading.Event() for name in files}
    release = threading.Event()

    def answer(ex: Exchange) -> None:
        path = ex.info.path
        if path.startswith("/api/models/acme/m/revision/"):
            info = json.dumps({"id": "acme/m", "sha": "c" * 40, "siblings": []}).encode()
            ex.respond(200, info, {"Content-Type": "application/json"})
            return
        name = path.rsplit("/", 1)[-1]
        data = files[name]
        sha = hashlib.sha256(data).hexdigest()
        headers = {"X-Repo-Commit": "c" * 40, "X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"'}
        headers["X-Linked-Size"] = str(len(data))
        send = static(data, headers=headers, conditional=False, ranges=False)
        if ex.command == "GET":  # a slow CDN: the first KiB, then nothing until released
            send = hold(send, 1024, reached=reached[name], release=release)
        send(ex)

    origin = Server(answer).start()
    try:
        proxy = start(origin.base, "--deadline=2")

        def fetch(name: str) -> bytes:
            return requests.get(f"{proxy.url}/acme/m/resolve/main/{name}", timeout=60).content

        with ThreadPoolExecutor(_HELD) as pool:
            try:
                bodies = pool.map(fetch, files)
                for event in reached.values():
                    assert event.wait(30)
                # Every download connection is held: metadata is answered all the same, at once.
                began = time.monotonic()
                got = requests.get(proxy.url + _api("acme/m", "v1"), timeout=10)
                took = time.monotonic() - began
                assert (got.status_code, got.headers["X-Cacheroot-Hub"]) == (200, "miss")
                # A starved request waits out the 2 s deadline and gets 504 (the status above);
                # the time is bounded by it too, with room for a loaded 2-core machine.
                assert took < 2.0, took
                assert _breaker(proxy, origin.base)["state"] == "closed"
            finally:
                release.set()
            assert list(bodies) == list(files.values())
        assert proxy.stats()["counts"].get("upstream_errors", 0) == 0
    finally:
        release.set()
        origin.close()


# -- the wait an upstream asks for -------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit": '"api";r=0;t=6', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'},
        {"RateLimit-Limit": "500", "RateLimit-Remaining": "0", "RateLimit-Reset": "6"},
    ],
    ids=["the Hub's RateLimit", "RateLimit-Remaining and RateLimit-Reset"],
)
def test_a_spent_rate_limit_sets_how_long_the_upstream_is_left_alone(
    start: Start, headers: dict[str, str]
) -> None:
    limited = threading.Event()

    def answer(ex: Exchange) -> None:
        if not limited.is_set():
            limited.set()
            ex.respond(429, b'{"error": "rate limited"}', headers)
            return
        body = json.dumps({"id": "acme/m", "sha": "c" * 40, "siblings": []}).encode()
        ex.respond(200, body, {"Content-Type": "application/json"})

    origin = Server(answer).start()
    try:
        proxy = start(origin.base)
        first = requests.get(proxy.url + _api("acme/m", "main"), timeout=10)
        time.sleep(1.5)  # past the 1 s a 429 that names no wait would be left alone for
        during = requests.get(proxy.url + _api("acme/m", "v1"), timeout=10)
        assert origin.count() == 1
        time.sleep(5)
        got = requests.get(proxy.url + _api("acme/m", "v2"), timeout=10)
        assert (got.status_code, origin.count()) == (200, 2)
        # A 6 s wait is not passed on: the client is told at once, not put to sleep.
        assert (first.status_code, "Retry-After" in first.headers) == (424, False)
        assert (during.status_code, "Retry-After" in during.headers) == (424, False)
        assert first.json()["error"].startswith(
            f"cacheroot hub cache: the upstream {origin.base} asked to be left alone (HTTP 429); "
            "it is left alone for 6 s more, and the hub cache has no answer for the model acme/m "
            "at main yet."
        )
    finally:
        origin.close()


@pytest.mark.parametrize(
    ("status", "headers", "wait"),
    [
        (429, {"RateLimit": '"api";r=0;t=55'}, 55.0),
        (429, {"ratelimit": '"api";r=12;t=55'}, 1.0),  # not spent: a bare 429's pause
        (429, {"RateLimit": '"resolvers";r=3;t=9, "api";r=0;t=40'}, 40.0),
        (429, {"RateLimit": '"api";r=0', "RateLimit-Policy": '"api";q=500;w=300'}, 300.0),
        (429, {"RateLimit": "limit=100, remaining=0, reset=30"}, 30.0),
        (429, {"RateLimit-Remaining": "0", "RateLimit-Reset": "20"}, 20.0),
        (429, {"Retry-After": "7", "RateLimit": '"api";r=0;t=3'}, 7.0),
        (503, {"Retry-After": "12"}, 12.0),
        (503, {"RateLimit-Remaining": "5", "RateLimit-Reset": "20"}, None),
        (503, {}, None),
        (429, {}, 1.0),
    ],
)
def test_the_wait_a_failed_answer_asks_for(
    status: int, headers: dict[str, str], wait: float | None
) -> None:
    assert asked_wait(status, headers) == wait
