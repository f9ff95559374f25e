"""The hub cache on a shared network and a shared store: where a file's redirect may send it,
how long it waits for an answer's headers, how much of an answer it holds, who may read what
came with a credential, and where its writes land once a store directory was swapped.

Everything is sent to 127.0.0.x only. A refused redirect target outside loopback (the cloud's
metadata address) is judged by the hub before it connects: the tests that name one prove that
no request and no connection to it was started (aiohttp's own tracing hooks), and that address
is never reachable from here to begin with, as nothing is listening on it for the test.
"""

from __future__ import annotations

import asyncio
import grp
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest
import requests

from cacheroot.fetch._hub.answers import WarmHub, pin_branch
from cacheroot.fetch._hub.redirects import RedirectPolicy, RedirectRefusedError, refused_address
from cacheroot.fetch._hub.redirects import resolve as loop_resolve
from cacheroot.fetch._hub.service import HubProcess, HubStartError
from cacheroot.fetch._hub.store import (
    Answer,
    KeyFileError,
    Store,
    answer_key,
    credential,
    key_of,
)
from cacheroot.fetch._hub.upstream import Upstream, UpstreamError

from .hubserver import lfs_head_headers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.origin import Exchange, Handler, Server, hang

    from .hubserver import HubRepo, HubServer
else:
    from origin import Server, hang

PATH = "/acme/m/resolve/main/w.bin"
DATA = b"gated weights " * 1000
SHA = hashlib.sha256(DATA).hexdigest()
COMMIT = "c" * 40
TOKEN = "Bearer hf_secret_token"  # noqa: S105 - a made-up token the test hub never checks


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def start(store: Path) -> Iterator[Callable[..., HubProcess]]:
    """Start hub caches on ``store``; stop them, and fail the test on a traceback."""
    started: list[HubProcess] = []

    def go(upstream: str, *options: str) -> HubProcess:
        proc = HubProcess.start(upstream=upstream, store=str(store), options=options)
        started.append(proc)
        return proc

    yield go
    said = "\n".join(proc.stop() for proc in started)
    assert "Traceback" not in said


def _head(ex: Exchange, sha: str, data: bytes) -> None:
    """Answer the Hub's ``HEAD`` of an LFS file: ``data``, named by ``sha``, at ``COMMIT``."""
    ex.respond(200, b"", lfs_head_headers(data, COMMIT, sha), length=len(data))


def _hub_answers(body: Handler | None = None, *, location: str | None = None) -> Handler:
    """A Hub: ``PATH``'s metadata names ``DATA``; its bytes are ``body``'s, or a redirect to
    ``location``; any ``/api/`` path is answered a small JSON naming it."""

    def answer(ex: Exchange) -> None:
        path = ex.path.split("?", 1)[0]
        if path.startswith("/api/"):
            ex.respond(200, b'{"path": "%s"}' % path.encode(), {"Content-Type": "application/json"})
        elif path != PATH:
            ex.respond(404, b"{}")
        elif ex.command == "HEAD":
            _head(ex, SHA, DATA)
        elif location is not None:
            ex.respond(302, b"", {"Location": location})
        elif body is not None:
            body(ex)
        else:
            ex.respond(200, DATA, {"Content-Type": "application/octet-stream"})

    return answer


def _cdn(ex: Exchange) -> None:
    ex.respond(200, DATA, {"Content-Type": "application/octet-stream"})


# -- (a) redirects ---------------------------------------------------------------------------
def test_which_addresses_a_redirect_may_reach() -> None:
    assert refused_address("169.254.169.254") == "link-local address 169.254.169.254"
    assert refused_address("fe80::1") == "link-local address fe80::1"
    assert refused_address("127.0.0.2") == "loopback address 127.0.0.2"
    assert refused_address("::1") == "loopback address ::1"
    assert refused_address("10.1.2.3") == "private address 10.1.2.3"
    assert refused_address("172.16.0.1") == "private address 172.16.0.1"
    assert refused_address("192.168.1.1") == "private address 192.168.1.1"
    assert refused_address("fc00::1") == "private address fc00::1"
    assert refused_address("0.0.0.0") == "unspecified address 0.0.0.0"
    assert refused_address("224.0.0.1") == "multicast address 224.0.0.1"
    assert refused_address("::ffff:169.254.169.254") == "link-local address 169.254.169.254"
    assert refused_address("100.64.0.1") == "shared (carrier-grade NAT) address 100.64.0.1"
    assert refused_address("8.8.8.8") is None  # judged only: nothing is sent anywhere
    assert refused_address("2606:4700::1111") is None


def test_a_redirect_is_judged_by_scheme_name_and_resolved_address() -> None:
    async def judge(upstream: str, url: str, allowed: tuple[str, ...] = ()) -> str:
        try:
            hop = await RedirectPolicy(upstream, allowed).hop(url, loop_resolve)
        except RedirectRefusedError as exc:
            return str(exc)
        return f"follow {hop.url}"

    async def cases() -> list[str]:
        up = "http://127.0.0.1:9"
        return [
            await judge("https://hub.test", "http://cdn.test/w.bin"),
            await judge("https://hub.test", "ftp://cdn.test/w.bin"),
            await judge(up, "http://169.254.169.254/latest/meta-data/"),
            await judge(up, "http://127.0.0.2:9/w.bin"),
            await judge(up, "http://127.0.0.2:9/w.bin", ("127.0.0.2",)),
            await judge(up, "http://127.0.0.1:10/w.bin"),
            # A name is resolved (here from the hosts file) and judged by its address.
            await judge(up, "http://localhost:9/w.bin"),
        ]

    assert asyncio.run(cases()) == [
        "the file was redirected from https to http, which the hub cache never follows",
        "the file was redirected to a ftp: URL, which the hub cache never follows",
        (
            "the file was redirected to 169.254.169.254: a link-local address 169.254.169.254, "
            "which the hub cache never connects to (allow a host by name with "
            "--allow-redirect-host)"
        ),
        (
            "the file was redirected to 127.0.0.2: a loopback address 127.0.0.2, which the hub "
            "cache never connects to (allow a host by name with --allow-redirect-host)"
        ),
        "follow http://127.0.0.2:9/w.bin",
        "follow http://127.0.0.1:10/w.bin",
        (
            "the file was redirected to localhost (127.0.0.1): a loopback address 127.0.0.1, "
            "which the hub cache never connects to (allow a host by name with "
            "--allow-redirect-host)"
        ),
    ]


# pytest-socket refuses, in this process, any connection to another address: were the decision
# ever lost, the test fails on that refusal instead of sending a packet to the metadata address.
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_redirect_to_the_metadata_address_is_refused_before_any_connection() -> None:
    """The hub's own download code, with aiohttp's tracing hooks recording every request and
    every connection it starts: none is to 169.254.169.254."""
    started: list[str] = []
    connections: list[str] = []

    async def on_request(_s: object, _c: object, params: aiohttp.TraceRequestStartParams) -> None:
        started.append(str(params.url))

    async def on_connection(_s: object, _c: object, _p: object) -> None:
        connections.append(started[-1])

    async def download(base: str) -> UpstreamError:
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request)
        trace.on_connection_create_start.append(on_connection)
        async with aiohttp.ClientSession(trace_configs=[trace]) as session:
            up = Upstream(base, session, deadline=5.0)

            async def sink(_chunk: bytes) -> None:
                raise AssertionError("no bytes may arrive")

            with pytest.raises(UpstreamError) as failed:
                await up.download(PATH, {"Authorization": TOKEN}, lambda _n: None, sink)
            return failed.value

    with Server(_hub_answers(location="http://169.254.169.254/latest/meta-data/")) as origin:
        err = asyncio.run(download(origin.base))
    assert (err.status, err.contacted, err.outage) == (502, False, False)
    assert "169.254.169.254: a link-local address" in err.reason
    assert started == [origin.base + PATH]
    assert connections == [origin.base + PATH]


def test_a_redirect_to_another_loopback_host_is_refused_unless_allowed(
    start: Callable[..., HubProcess], tmp_path: Path
) -> None:
    with Server(_cdn, host="127.0.0.2") as cdn, Server() as origin:
        origin.handler = _hub_answers(location=cdn.url("/blob/w.bin"))
        hub = start(origin.base)
        refused = requests.get(hub.url + PATH, timeout=30)
        assert refused.status_code == 502
        assert "127.0.0.2: a loopback address 127.0.0.2" in refused.json()["error"]
        assert cdn.count() == 0
        assert origin.count(PATH, "GET") == 1
        hub.stop()

        allowed = HubProcess.start(
            upstream=origin.base,
            store=str(tmp_path / "store2"),
            options=("--allow-redirect-host", "127.0.0.2"),
        )
        try:
            got = requests.get(allowed.url + PATH, headers={"AUTHORIZATION": TOKEN}, timeout=30)
        finally:
            allowed.stop()
        assert (got.status_code, got.content == DATA) == (200, True)
        assert cdn.count("/blob/w.bin", "GET") == 1
        # The credential goes to the upstream, never to the other host, whatever its case.
        assert origin.requests(PATH, "GET")[-1].headers["authorization"] == TOKEN
        assert "authorization" not in cdn.requests("/blob/w.bin", "GET")[0].headers


#: A file large enough to be received off the event loop (``cacheroot.fetch._hub.receive``).
LARGE = bytes(range(256)) * (12 << 10)  # 3 MiB
LARGE_SHA = "f6dd7fec8584ad00219a447071c1fa368a1caee4d9c146083d233713ddccd2c0"


def _large_hub(location: str) -> Handler:
    """A Hub whose ``PATH`` names :data:`LARGE` and redirects its bytes to ``location``."""

    def answer(ex: Exchange) -> None:
        if ex.command == "HEAD":
            _head(ex, LARGE_SHA, LARGE)
        else:
            ex.respond(302, b"", {"Location": location})

    return answer


def test_a_large_file_received_off_the_loop_keeps_the_redirect_rules(
    start: Callable[..., HubProcess],
) -> None:
    """The large file's request is sent outside aiohttp's sessions: the same refusal before
    connecting, the same credential dropped on another host, the same count in ``/metrics``."""

    def cdn(ex: Exchange) -> None:
        ex.respond(200, LARGE, {"Content-Type": "application/octet-stream"})

    with Server(cdn, host="127.0.0.2") as cdn_server, Server() as origin:
        origin.handler = _large_hub(cdn_server.url("/blob/w.bin"))
        refusing = start(origin.base)
        refused = requests.get(refusing.url + PATH, timeout=30)
        assert refused.status_code == 502
        assert "127.0.0.2: a loopback address 127.0.0.2" in refused.json()["error"]
        assert cdn_server.count() == 0
        refusing.stop()

        hub = start(origin.base, "--allow-redirect-host", "127.0.0.2")
        got = requests.get(hub.url + PATH, headers={"AUTHORIZATION": TOKEN}, timeout=30)
        assert (got.status_code, len(got.content), got.content == LARGE) == (200, 3 << 20, True)
        metrics = requests.get(hub.url + "/metrics", timeout=10).text
    assert cdn_server.count("/blob/w.bin", "GET") == 1
    assert origin.requests(PATH, "GET")[-1].headers["authorization"] == TOKEN
    assert "authorization" not in cdn_server.requests("/blob/w.bin", "GET")[0].headers
    assert (
        f'cacheroot_hub_upstream_requests_total{{origin="{cdn_server.base}",status="2xx"}} 1'
        in metrics
    )


# -- (e) a digest is no permission -------------------------------------------------------------
GATED = "/acme/gated/resolve/main/w.bin"
PUBLIC_TWIN = "/evil/public/resolve/main/w.bin"  # its metadata names the gated file's sha256
MIRROR = "/acme/mirror/resolve/main/w.bin"  # a public repository that really has those bytes


def _two_repos(*, down: list[bool]) -> Handler:
    """A Hub where ``GATED`` needs ``TOKEN``; ``PUBLIC_TWIN``'s metadata names the same digest
    but the Hub serves it no bytes (404); ``MIRROR`` is served to anyone. ``down[0]``: every
    ``GET`` is answered 503."""

    def answer(ex: Exchange) -> None:
        path = ex.path.split("?", 1)[0]
        if path == GATED and ex.headers.get("Authorization") != TOKEN:
            ex.respond(401, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"})
        elif path not in (GATED, PUBLIC_TWIN, MIRROR):
            ex.respond(404, b"{}")
        elif ex.command == "HEAD":
            _head(ex, SHA, DATA)
        elif down[0]:
            ex.respond(503, b"down")
        elif path == PUBLIC_TWIN:
            ex.respond(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"})
        elif ex.headers.get("Range") == "bytes=0-0":
            ex.respond(206, DATA[:1], {"Content-Range": f"bytes 0-0/{len(DATA)}"})
        else:
            ex.respond(200, DATA, {"Content-Type": "application/octet-stream"})

    return answer


def test_a_gated_files_bytes_are_not_served_for_another_repository_naming_its_digest(
    start: Callable[..., HubProcess],
) -> None:
    down = [False]
    with Server(_two_repos(down=down)) as origin:
        hub = start(origin.base)
        gated = requests.get(hub.url + GATED, headers={"Authorization": TOKEN}, timeout=30)
        assert (gated.status_code, gated.content == DATA) == (200, True)

        # Anonymous, through a public repository whose metadata names the same sha256.
        twin = requests.get(hub.url + PUBLIC_TWIN, timeout=30)
        assert twin.status_code == 404
        assert DATA not in twin.content
        # The holder of the credential is served from the store, asking nothing more.
        again = requests.get(hub.url + GATED, headers={"Authorization": TOKEN}, timeout=30)
        assert (again.status_code, again.content == DATA) == (200, True)
        assert origin.count(GATED, "GET") == 1

        # A repository the Hub does serve those bytes for: one byte asked, the rest stored.
        mirror = requests.get(hub.url + MIRROR, timeout=30)
        assert (mirror.status_code, mirror.content == DATA) == (200, True)
        asked = origin.requests(MIRROR, "GET")
        assert [r.headers.get("range") for r in asked] == ["bytes=0-0"]

        # While the upstream cannot say, an ungranted request is refused, never served.
        down[0] = True
        refused = requests.get(hub.url + PUBLIC_TWIN, timeout=30)
        assert refused.status_code == 424
        assert DATA not in refused.content
        assert "another credential" in refused.json()["error"]
        granted = requests.get(hub.url + MIRROR, timeout=30)
        assert (granted.status_code, granted.content == DATA) == (200, True)


# -- (f) a credential is asked about again after the TTL ------------------------------------------
AT_COMMIT = f"/acme/gated/resolve/{COMMIT}/w.bin"
OTHER_TOKEN = "Bearer hf_other_token"  # noqa: S105 - made up


def _gated_commit(state: dict[str, bool]) -> Handler:
    """A Hub whose ``AT_COMMIT`` needs ``TOKEN`` (until ``state["revoked"]``); every request
    is answered 503 while ``state["down"]``."""

    def answer(ex: Exchange) -> None:
        if state["down"]:
            ex.respond(503, b"down")
        elif ex.path != AT_COMMIT:
            ex.respond(404, b"{}")
        elif state["revoked"] or ex.headers.get("Authorization") != TOKEN:
            ex.respond(401, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"})
        elif ex.command == "HEAD":
            _head(ex, SHA, DATA)
        else:
            ex.respond(200, DATA, {"Content-Type": "application/octet-stream"})

    return answer


def test_a_commit_fetched_with_a_token_is_asked_about_again_after_the_ttl(
    start: Callable[..., HubProcess],
) -> None:
    state = {"revoked": False, "down": False}
    auth = {"Authorization": TOKEN}
    with Server(_gated_commit(state)) as origin:
        hub = start(origin.base, "--ttl=1", "--negative-ttl=0")
        first = requests.get(hub.url + AT_COMMIT, headers=auth, timeout=30)
        assert (first.status_code, first.content == DATA) == (200, True)
        state["revoked"] = True
        # Within the TTL a commit's answer is kept, as any answer is.
        kept = requests.get(hub.url + AT_COMMIT, headers=auth, timeout=30)
        assert (kept.status_code, kept.content == DATA) == (200, True)
        time.sleep(1.2)
        heads = origin.count(AT_COMMIT, "HEAD")
        revoked = requests.get(hub.url + AT_COMMIT, headers=auth, timeout=30)
        assert revoked.status_code == 401
        assert DATA not in revoked.content
        assert origin.count(AT_COMMIT, "HEAD") == heads + 1  # one cheap HEAD asked again

        # Access back, then the upstream down: the same token is served what it was granted,
        # stale; another token nothing.
        state["revoked"] = False
        requests.get(hub.url + AT_COMMIT, headers=auth, timeout=30).raise_for_status()
        state["down"] = True
        time.sleep(1.2)
        stale = requests.get(hub.url + AT_COMMIT, headers=auth, timeout=30)
        assert (stale.status_code, stale.content == DATA) == (200, True)
        other = requests.get(
            hub.url + AT_COMMIT, headers={"Authorization": OTHER_TOKEN}, timeout=30
        )
        assert other.status_code >= 400
        assert DATA not in other.content


# -- (g) signed answers on a store others may write ---------------------------------------------
def _key_file(path: Path, secret: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(secret)
    path.chmod(mode)
    return path


def test_answers_signed_with_a_key_are_read_only_with_that_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "store")
    answer = Answer(200, (("Content-Type", "application/json"),), b'{"sha": "c"}', 1.0)
    Store(root, answer_key=b"k" * 32).save("a" * 64, answer)
    assert Store(root, answer_key=b"k" * 32).load("a" * 64) == answer
    assert Store(root, answer_key=b"j" * 32).load("a" * 64) is None  # another key
    assert Store(root).load("a" * 64) == answer  # no key: read as before
    # An answer written without the key, or moved to another request's key, is none.
    Store(root).save("b" * 64, answer)
    assert Store(root, answer_key=b"k" * 32).load("b" * 64) is None
    kept = Path(root, "meta", "aa", "a" * 64)
    moved = Path(root, "meta", "cc", "c" * 64)
    moved.parent.mkdir()
    moved.write_bytes(kept.read_bytes())
    assert Store(root, answer_key=b"k" * 32).load("c" * 64) is None

    monkeypatch.setenv("CACHEROOT_HUB_KEY_FILE", str(_key_file(tmp_path / "key", b"s" * 32)))
    assert answer_key() == b"s" * 32
    monkeypatch.setenv(
        "CACHEROOT_HUB_KEY_FILE", str(_key_file(tmp_path / "open", b"s" * 32, 0o644))
    )
    with pytest.raises(KeyFileError, match=r"may be read by others \(mode 0644\)"):
        answer_key()
    monkeypatch.setenv("CACHEROOT_HUB_KEY_FILE", str(_key_file(tmp_path / "short", b"short")))
    with pytest.raises(KeyFileError, match="holds 5 bytes"):
        answer_key()


def test_a_planted_answer_is_not_served_by_a_hub_with_a_key(tmp_path: Path) -> None:
    store = tmp_path / "store"
    key = _key_file(tmp_path / "hub.key", b"0123456789abcdef0123456789abcdef")
    env = dict(os.environ, CACHEROOT_HUB_KEY_FILE=str(key))
    with Server(_hub_answers()) as origin:
        hub = HubProcess.start(upstream=origin.base, store=str(store), env=env)
        try:
            kept = requests.get(hub.url + "/api/models/acme/kept", timeout=30)
            assert kept.json() == {"path": "/api/models/acme/kept"}
            (signed,) = [p for p in (store / "meta").rglob("*") if p.is_file()]
            assert signed.read_bytes().startswith(b"hmac-sha256 ")
            # A writer of the store plants an answer for another request, unsigned.
            planted = key_of(origin.base, "GET", "/api/models/acme/planted", "public")
            path = store / "meta" / planted[:2] / planted
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b'{"status":200,"headers":[],"stored":1e12}\n{"planted": true}')
            hub.set_offline(True)
            assert requests.get(hub.url + "/api/models/acme/kept", timeout=30).json() == {
                "path": "/api/models/acme/kept"
            }
            refused = requests.get(hub.url + "/api/models/acme/planted", timeout=30)
            assert refused.status_code == 424
            assert b"planted" not in refused.content.replace(b"acme/planted", b"")
        finally:
            said = hub.stop()
    assert "Traceback" not in said

    # A key file others may read: the hub refuses to start, and says what to do.
    open_key = _key_file(tmp_path / "open.key", b"0123456789abcdef", 0o644)
    with pytest.raises(HubStartError, match="may be read by others"):
        HubProcess.start(
            upstream="http://127.0.0.1:9",
            store=str(store),
            env=dict(os.environ, CACHEROOT_HUB_KEY_FILE=str(open_key)),
        )


# -- (b) the headers' deadline ---------------------------------------------------------------
def test_an_upstream_that_never_answers_a_download_costs_the_deadline(
    start: Callable[..., HubProcess],
) -> None:
    with Server() as origin:
        origin.handler = _hub_answers(hang())
        hub = start(origin.base, "--deadline", "1")
        began = time.monotonic()
        resp = requests.get(hub.url + PATH, timeout=30)
        took = time.monotonic() - began
    assert resp.status_code == 502
    assert "no answer's headers within 1 s" in resp.json()["error"]
    assert took < 10


# -- (c) the answers' cap --------------------------------------------------------------------
def _huge(ex: Exchange) -> None:
    """768 MiB of JSON-ish bytes, without a Content-Length (the body ends with the
    connection), so only counting what arrives can stop it."""
    ex.send_response(200)
    ex.send_header("Content-Type", "application/json")
    ex.end_headers()
    chunk = b" " * (1 << 20)
    ex.close_connection = True
    try:
        for _ in range(768):
            ex.wfile.write(chunk)
    except OSError:
        return


def _peak_rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", text, re.MULTILINE)
    assert found is not None
    return int(found[1])


def test_a_huge_api_answer_is_refused_without_holding_it(
    start: Callable[..., HubProcess],
) -> None:
    with Server() as origin:
        origin.route("/api/models/acme/huge", _huge)
        hub = start(origin.base, "--deadline", "60")
        resp = requests.get(hub.url + "/api/models/acme/huge", timeout=120)
        peak = _peak_rss_kib(hub.proc.pid)
    assert resp.status_code == 502
    assert "larger than 64 MiB" in resp.json()["error"]
    assert peak < 320 * 1024, f"the hub peaked at {peak // 1024} MiB"


# -- (d) modes and swapped directories -------------------------------------------------------
def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_came_with_a_credential_is_readable_by_the_hubs_user_only(
    start: Callable[..., HubProcess], store: Path
) -> None:
    with Server() as origin:
        origin.handler = _hub_answers()
        hub = start(origin.base)
        public = requests.get(hub.url + "/api/models/acme/open", timeout=30)
        private = requests.get(hub.url + PATH, headers={"AUTHORIZATION": TOKEN}, timeout=30)
        base = origin.base
    assert (public.status_code, private.status_code, private.content == DATA) == (200, 200, True)
    open_key = key_of(base, "GET", "/api/models/acme/open", "public")
    head_key = key_of(base, "HEAD", PATH, credential(TOKEN))
    assert _mode(store / "meta" / open_key[:2] / open_key) == 0o644
    assert _mode(store / "meta" / head_key[:2] / head_key) == 0o600
    assert _mode(store / "blobs" / SHA) == 0o600


def test_a_named_group_may_read_what_came_with_a_credential(
    start: Callable[..., HubProcess], store: Path
) -> None:
    group = next(g for g in grp.getgrall() if g.gr_gid != os.getgid())
    with Server() as origin:
        origin.handler = _hub_answers()
        hub = start(origin.base, "--private-group", group.gr_name)
        got = requests.get(hub.url + PATH, headers={"Authorization": TOKEN}, timeout=30)
    assert got.status_code == 200
    blob = (store / "blobs" / SHA).stat()
    assert (stat.S_IMODE(blob.st_mode), blob.st_gid) == (0o640, group.gr_gid)


def test_a_store_directory_swapped_for_a_link_never_redirects_a_write(
    start: Callable[..., HubProcess], store: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with Server() as origin:
        origin.handler = _hub_answers()
        hub = start(origin.base)
        assert requests.get(hub.url + "/api/models/acme/first", timeout=30).status_code == 200
        # Made before the hub served (none is made on its event loop).
        assert [(store / name).is_dir() for name in ("meta", "blobs", "locks")] == [True] * 3
        # Another job swaps the directories the hub made (or will use) for links.
        for name in ("meta", "blobs", "locks"):
            (store / name).rename(store / f"{name}.moved")
            (store / name).symlink_to(elsewhere)
        again = requests.get(hub.url + "/api/models/acme/second", timeout=30)
        blob = requests.get(hub.url + PATH, timeout=30)
    assert again.status_code == 200
    assert again.json() == {"path": "/api/models/acme/second"}
    assert blob.status_code == 507
    assert "is a symbolic link or not a directory" in blob.json()["error"]
    assert sorted(p.name for p in elsewhere.rglob("*")) == []


def _default_store() -> Path:
    """Where the store is by default: ``$CACHEROOT/hubcache``, on the volume."""
    return Path(os.environ["CACHEROOT"]) / "hubcache"


def test_a_store_on_the_volume_planted_as_a_link_is_refused_at_start(tmp_path: Path) -> None:
    """A co-tenant of the volume made the store's own directory a link before the hub
    started: the hub names it and stops, and writes nothing where the link leads."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = _default_store()
    store.symlink_to(elsewhere)
    with Server() as origin, pytest.raises(HubStartError) as refused:
        HubProcess.start(upstream=origin.base, store=str(store)).stop()
    said = str(refused.value)
    assert "is a symbolic link or not a directory: not followed (refused)" in said
    assert "pass --store with the real directory, or remove the link" in said
    assert sorted(p.name for p in elsewhere.rglob("*")) == []


def test_a_store_on_the_volume_swapped_for_a_link_never_redirects_a_write(
    tmp_path: Path,
) -> None:
    """The store's own directory (``$CACHEROOT/hubcache``) is swapped for a link while the
    hub runs: its writes never land where the link leads (the walk starts at the cache root)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = _default_store()
    with Server() as origin:
        origin.handler = _hub_answers()
        hub = HubProcess.start(upstream=origin.base, store=str(store))
        try:
            first = requests.get(hub.url + "/api/models/acme/first", timeout=30)
            assert (store / "meta").is_dir()
            store.rename(store.with_name("hubcache.moved"))
            store.symlink_to(elsewhere)
            again = requests.get(hub.url + "/api/models/acme/second", timeout=30)
            blob = requests.get(hub.url + PATH, timeout=30)
        finally:
            said = hub.stop()
    assert "Traceback" not in said
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == {"path": "/api/models/acme/second"}
    assert blob.status_code == 507
    assert "is a symbolic link or not a directory" in blob.json()["error"]
    assert sorted(p.name for p in elsewhere.rglob("*")) == []


def test_a_credential_in_any_case_keeps_a_modelscope_listing_its_own(
    start: Callable[..., HubProcess], hub: HubServer, tiny_repo: HubRepo
) -> None:
    """A ModelScope file's listing asked with ``authorization`` (lower case, as some clients
    send it) is kept under that credential: an anonymous request after it is not answered
    from it, but asked of the upstream again. The look-up of the credential in the mapping the
    hub builds is by name in any case; aiohttp also gives a known header its canonical name,
    so this guards the behaviour rather than reproduces a failure seen."""
    proxy = start(hub.url, "--modelscope-upstream", hub.url)
    url = f"{proxy.url}/api/v1/models/{tiny_repo.repo_id}/repo"
    query = {"Revision": "master", "FilePath": "config.json"}
    listing = f"/api/v1/models/{tiny_repo.repo_id}/repo/files"
    with_token = requests.get(url, params=query, headers={"authorization": TOKEN}, timeout=30)
    assert with_token.status_code == 200
    assert hub.count_path(listing, "GET") == 1
    anonymous = requests.get(url, params=query, timeout=30)
    assert anonymous.status_code == 200
    assert hub.count_path(listing, "GET") == 2


def test_the_branch_answers_a_warm_writes_with_a_credential_stay_its_holders(
    tmp_path: Path,
) -> None:
    """A warm run with a token pins a branch from the commit's answer it asked with that token:
    the answers it writes for the branch are kept 0600, as the hub keeps what came with one."""
    upstream, repo, commit = "http://127.0.0.1:9", "acme/gated", "d" * 40
    hub = WarmHub(url="http://127.0.0.1:9", upstream=upstream, store=str(tmp_path / "store"))
    store = Store(hub.store)
    cred = credential(TOKEN)
    body = json.dumps({"id": repo, "sha": commit}).encode()
    source = f"/api/models/{repo}/revision/{commit}"
    store.save(key_of(upstream, "GET", source, cred), Answer(200, (), body), private=True)
    targets = pin_branch(
        hub, repo_type="model", repo_id=repo, branch="main", commit=commit, authorization=TOKEN
    )
    assert targets == [f"/api/models/{repo}/revision/main", f"/api/models/{repo}"]
    for target in targets:
        key = key_of(upstream, "GET", target, cred)
        mode = os.stat(tmp_path / "store" / "meta" / key[:2] / key).st_mode
        assert stat.S_IMODE(mode) == 0o600, target
