"""The planted-object matrix of the hub cache's store: ``cacheroot hub serve``, ``hub prune`` and
``hub export-manifest`` against every kind of object a writer of the store's volume can plant,
at every name a hub process touches.

The store is shared as the documentation says a volume is (``chgrp GROUP && chmod 2775``). Each
case plants one object (a link to a directory or to a root-only file outside the volume, a hard
link to that file, a FIFO, a socket, a character device that never ends, a directory where a file
belongs, a file where a directory belongs, a sparse giant) at one component:

- a directory of the store: ``blobs/``, ``meta/``, the answer's shard ``meta/ab/``, ``grants/``,
  ``verified/``, ``locks/``, ``served/``, ``state/``;
- a name in it: the file's blob, the metadata answer, the verified record of the blob, the lock
  of the blob, the served log of the hub process (named by its pid), the record of how long the
  upstream asked to be left alone (read before each request sent upstream), and the partial of a
  download another live process seems to run (named by this process's pid, written to just now;
  this test holds the file's lock meanwhile, as that process would, so that the hub follows the
  partial rather than download the file itself, until the lock is let go).

It plants either where the store is empty (``miss``) or where another hub process filled it
before (``hit``: the entry, or the directory holding it, is what the planted object replaces),
then asks a hub process, each request with a timeout, for a file twice (a miss, then a hit) and
for metadata twice; then runs what ``hub prune`` and ``hub export-manifest`` run, in this
process. It checks that:

- nothing outside the volume was read, listed, written, chmod-ed or removed: every name there
  with its access, change and modification times is as before. Beside the root-only secret, the
  outside directory a planted link leads to holds a file named by the blob's digest with the
  blob's bytes, and one named by the answer's key holding a valid answer, as another user's
  cache of the same files could: a hub that followed the link would read, stamp and serve them;
- no request hung, the hub still answers its counters afterwards, and prune and export ended in
  time;
- no fresh file of the hub's one-step writes (an answer, a record) is left in the store: one
  whose rename met a planted directory is removed, not left for every request to add another;
- the hub's peak resident memory stayed under :data:`RSS_BOUND` (a sparse giant read whole
  would cost gigabytes), and prune and export allocated at most ``MEMORY_BOUND`` for one;
- each answer is the upstream's bytes. Only where the file cannot be kept (its blob's name or
  directory taken) or where the partial followed fails its digest (:data:`MAY_FAIL`) may the
  file be answered a clear error instead: an error status with a message (``X-Error-Message``
  or a JSON ``error``), or for the followed partial a cut connection, as
  :mod:`cacheroot.fetch._hub.fills` documents for a larger file. Metadata is always answered,
  stored or not. The hub logged no traceback.

Starting a hub per case would take most of a minute, so each xdist worker runs two hub processes
for all its cases, each on a store path that is a link the test points at the case's own store
(the store's path is the operator's setting and is followed; everything below it is the
volume's): a *filler* that fills the store of a ``hit`` case, and a *server* that never saw it,
asked once the object is planted, so what it trusts it read from the store. Every case asks for
a repository of its own with bytes of its own, so nothing the server remembers of one case (a
file it checked, a row it recorded, a fill) is met by another.

Every case runs as root, the hub's user; a member of the group (a second uid, from a forked
child: :func:`tests.planted.plant_as`) plants the kinds it can (``MEMBER_KINDS``) where the store
is empty, owning what it plants, as a co-tenant would.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest
import requests

from cacheroot.fetch import _store
from cacheroot.fetch._hub import prune as prune_module
from cacheroot.fetch._hub.export import manifest_text
from cacheroot.fetch._hub.prune import prune
from cacheroot.fetch._hub.service import HubProcess
from cacheroot.fetch._hub.store import Store, key_of

from .hubserver import lfs_head_headers

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fetch.test_multiuser import GROUP, UID_A, need_root
    from tests.origin import Exchange, Server
    from tests.planted import (
        DIR_KINDS,
        FILE_KINDS,
        HANG,
        LONG_AGO,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )
else:
    from fetch.test_multiuser import GROUP, UID_A, need_root
    from origin import Server
    from planted import (
        DIR_KINDS,
        FILE_KINDS,
        HANG,
        LONG_AGO,
        MEMBER_KINDS,
        MEMBER_REFUSED,
        MEMORY_BOUND,
        PLANTERS,
        bounded,
        group_volume,
        outside_dir,
        plant,
        plant_as,
        state,
    )

COMMIT = "c" * 40
#: The large file's bytes, but for the case's own number at the end: over a MiB, so that another
#: process's download of it is followed from its partial.
BIG = bytes(range(256)) * 6000
#: The hub's peak resident memory (``VmHWM``), at most: it idles at about 50 MiB.
RSS_BOUND = 256 << 20
#: Seconds the server waits for metadata, and for a partial to show while a file's lock is held
#: (then, as long again, for the lock).
DEADLINE = 1.0
#: The case's number, unique within this worker (its repository and bytes are its own).
_SERIAL = itertools.count(1)
_PATHS = re.compile(
    rf"^/(?:api/models/)?acme/m(?P<n>\d+)/(?:revision/{COMMIT}$|resolve/{COMMIT}/(?P<file>.+)$)"
)

#: The components where a planted object may cost the file an error answer, and how many of its
#: two requests: where its blob cannot be kept (its name or directory taken: 507, the store
#: cannot be written), and the first request, whose followed partial fails its digest (502).
#: Every other answer is the upstream's bytes: elsewhere a planted object costs no answer.
MAY_FAIL = {"blobs": 2, "blob": 2, "partial": 1}

#: The components, whether each is a directory, and the states of the store they are planted in.
COMPONENTS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "blobs": (True, ("miss", "hit")),
    "meta": (True, ("miss", "hit")),
    "answer-dir": (True, ("miss", "hit")),
    "grants": (True, ("miss",)),
    "verified": (True, ("miss", "hit")),
    "locks": (True, ("miss",)),
    "served": (True, ("miss",)),
    "state": (True, ("miss",)),
    "blob": (False, ("miss", "hit")),
    "answer": (False, ("miss", "hit")),
    "record": (False, ("miss", "hit")),
    "lock": (False, ("miss",)),
    "served-log": (False, ("miss",)),
    "wait": (False, ("miss",)),
    "partial": (False, ("miss",)),
}


def _cases() -> Iterator[Any]:
    for planter in PLANTERS:
        for component, (is_dir, ops) in COMPONENTS.items():
            for op in ops:
                if planter == "member" and op != "miss":
                    continue  # the member plants where the store is empty (module docstring)
                for kind in DIR_KINDS if is_dir else FILE_KINDS:
                    if planter == "member" and (kind not in MEMBER_KINDS or kind in MEMBER_REFUSED):
                        continue
                    id_ = f"{op}-{component}-{kind}-{planter}"
                    yield pytest.param(op, component, kind, planter, id=id_)


# -- the case's repository -------------------------------------------------------------------
def _small(n: int) -> bytes:
    """The small file of case ``n``: 17 bytes, as long as the root-only secret outside, so that
    a hard link to the secret under its blob's name passes the size check."""
    return b"model bytes %04d\n" % n


def _big(n: int) -> bytes:
    """The large file of case ``n``: over a MiB (see :data:`BIG`)."""
    return BIG + b"%04d" % n


class Case(NamedTuple):
    """Case ``n``'s requests and names: the file asked for, its bytes and digest, the
    metadata asked for, the key of its answer in the store, and the upstream's key in
    ``state/``."""

    n: int
    file: str
    data: bytes
    sha: str
    meta: str
    answer_key: str
    wait_key: str

    @classmethod
    def new(cls, upstream: str, component: str) -> Case:
        n = next(_SERIAL)
        name = "big.bin" if component == "partial" else "w.bin"
        data = _big(n) if name == "big.bin" else _small(n)
        meta = f"/api/models/acme/m{n}/revision/{COMMIT}"
        return cls(
            n,
            f"/acme/m{n}/resolve/{COMMIT}/{name}",
            data,
            hashlib.sha256(data).hexdigest(),
            meta,
            key_of(upstream.rstrip("/"), "GET", meta, "public"),
            key_of(upstream.rstrip("/"), "", "", ""),
        )

    @property
    def meta_body(self) -> bytes:
        """What the upstream answers for :attr:`meta`."""
        return json.dumps({"id": f"acme/m{self.n}", "sha": COMMIT}).encode()


def _upstream(ex: Exchange) -> None:
    """The Hub: each case's repository, its revision answer and its two files (LFS, named by
    their sha256)."""
    found = _PATHS.match(ex.path.split("?", 1)[0])
    if found is None or found["file"] not in (None, "w.bin", "big.bin"):
        ex.respond(404, b"{}")
        return
    n = int(found["n"])
    if found["file"] is None:
        body = json.dumps({"id": f"acme/m{n}", "sha": COMMIT}).encode()
        ex.respond(200, body, {"Content-Type": "application/json"})
        return
    data = _big(n) if found["file"] == "big.bin" else _small(n)
    if ex.command == "HEAD":
        ex.respond(200, b"", lfs_head_headers(data, COMMIT), length=len(data))
    else:
        ex.respond(200, data, {"Content-Type": "application/octet-stream"})


# -- the hub processes -----------------------------------------------------------------------
class Hub:
    """A hub process whose store is the link ``link``, pointed at each case's store, and what
    it wrote on stderr (read as it comes: a full pipe would stop the hub)."""

    def __init__(self, upstream: str, link: Path, *options: str) -> None:
        self.link = link
        idle = link.with_name(link.name + "-idle")  # until a case points it at its own store
        idle.mkdir()
        link.symlink_to(idle)
        self.proc = HubProcess.start(upstream=upstream, store=str(link), options=options)
        self.said: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stderr = self.proc.proc.stderr
        assert stderr is not None
        self.said.extend(iter(stderr.readline, ""))

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def point(self, store: Path) -> None:
        """Make ``store`` this hub's store (one rename: no request sees no store)."""
        new = self.link.with_name(self.link.name + ".new")
        new.symlink_to(store)
        os.replace(new, self.link)

    def stop(self) -> None:
        """Stop the hub (SIGTERM, then SIGKILL), let its stderr's reader finish, and close its
        pipes (left to the garbage collector, they warn in whichever test runs next)."""
        if self.proc.proc.poll() is None:
            self.proc.proc.terminate()
        try:
            self.proc.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hub that would not stop
            self.proc.proc.kill()
            self.proc.proc.wait()
        self._reader.join(timeout=10)
        for pipe in (self.proc.proc.stdin, self.proc.proc.stdout, self.proc.proc.stderr):
            if pipe is not None:
                pipe.close()


class Hubs(NamedTuple):
    """The upstream's URL, the hub that fills a ``hit`` case's store, and the hub asked."""

    upstream: str
    filler: Hub
    server: Hub


@pytest.fixture(scope="module")
def hubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hubs]:
    """The upstream, and this worker's two hub processes (see the module docstring)."""
    top = tmp_path_factory.mktemp("hubs")
    with Server(_upstream) as srv:
        upstream = srv.url("")
        filler = Hub(upstream, top / "filler")
        try:
            server = Hub(upstream, top / "server", "--deadline", str(DEADLINE))
            try:
                yield Hubs(upstream, filler, server)
            finally:
                server.stop()
        finally:
            filler.stop()


# -- the store, and what is planted in it ----------------------------------------------------
def _shared_store(path: Path) -> Path:
    """A store at ``path``, shared with the group as the documentation says a volume is."""
    path.mkdir()
    group_volume(path, GROUP)
    return path


def _made(directory: Path, store: Path) -> None:
    """The store's directories down to ``directory``, as the hub makes its own in a setgid
    store (``2775``: the group may write them)."""
    missing = [p for p in (directory, *directory.parents) if store in p.parents]
    for path in reversed(missing):
        if not path.exists():
            path.mkdir()
            os.chmod(path, _store.SHARED_DIR)


def _position(store: Path, component: str, case: Case, hub_pid: int) -> Path:
    answer = store / "meta" / case.answer_key[:2] / case.answer_key
    blob = store / "blobs" / case.sha
    return {
        "blobs": store / "blobs",
        "meta": store / "meta",
        "answer-dir": answer.parent,
        "grants": store / "grants",
        "verified": store / "verified",
        "locks": store / "locks",
        "served": store / "served",
        "state": store / "state",
        "blob": blob,
        "answer": answer,
        "record": store / "verified" / case.sha,
        "lock": store / "locks" / f"{case.sha}.lock",
        "served-log": store / "served" / f"{socket.gethostname()}-{hub_pid}",
        "wait": store / "state" / case.wait_key,
        "partial": Path(_store.partial_path(str(blob))),
    }[component]


def _plant(where: Path, kind: str, outside: Path, *, planter: str, store: Path) -> None:
    """Plant ``kind`` at ``where`` as ``planter``. A socket with a long name is bound under a
    short one and renamed (a socket's path is limited to 108 bytes; a partial's name alone is
    longer)."""
    at = where.with_name(".planted") if kind == "socket" and len(where.name) > 64 else where
    if planter == "member":
        plant_as(UID_A, GROUP, at, kind, outside, volume=store)
    else:
        plant(at, kind, outside)
    if at != where:
        os.replace(at, where)
    if planter == "member":
        assert os.lstat(where).st_uid == UID_A


@contextlib.contextmanager
def _holding(path: Path, *, hold: bool) -> Iterator[None]:
    """The store's lock at ``path``, held by this process (``hold``) as the hub process that
    downloads the file would hold it, and let go once the hub stopped looking for its partial."""
    if not hold:
        yield
        return
    _made(path.parent, path.parent.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o664)
    let_go = threading.Timer(DEADLINE + 0.05, fcntl.flock, (fd, fcntl.LOCK_UN))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        let_go.start()
        yield
    finally:
        let_go.cancel()
        let_go.join()
        os.close(fd)


# -- outside the volume ----------------------------------------------------------------------
def _outside(top: Path, case: Case) -> Path:
    """:func:`tests.planted.outside_dir`, with the blob and a valid answer under their names in
    its ``keep`` directory (all of it as old as the rest)."""
    outside = outside_dir(top)
    keep = outside / "keep"
    answer = b'{"status":200,"headers":[],"stored":%.3f}\n{"decoy": "outside"}' % time.time()
    (keep / case.sha).write_bytes(case.data)
    (keep / case.answer_key).write_bytes(answer)
    for path in (keep / case.sha, keep / case.answer_key, keep, outside):
        os.utime(path, (LONG_AGO, LONG_AGO))
    return outside


def _outside_state(outside: Path, case: Case, *, counted: bool) -> dict[str, tuple[int, ...]]:
    """:func:`tests.planted.state`, and the decoys' (``lstat`` only)."""
    found = state(outside, names_counted=counted)
    for rel in (f"keep/{case.sha}", f"keep/{case.answer_key}"):
        st = os.lstat(outside / rel)
        found[rel] = (st.st_mode, st.st_size, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)
    return found


# -- asking the hub --------------------------------------------------------------------------
class Got(NamedTuple):
    """One answer: its status, body and error message; ``cut`` when the body was cut short."""

    status: int
    body: bytes
    message: str
    cut: bool


def _get(url: str) -> Got:
    """``GET url``; a wait of :data:`HANG` seconds for any byte fails the test as a hang."""
    start = time.monotonic()
    try:
        resp = requests.get(url, timeout=HANG)
    except (requests.exceptions.ChunkedEncodingError, requests.ConnectionError) as exc:
        if time.monotonic() - start >= HANG:
            pytest.fail(f"GET {url} hung: {exc}")
        return Got(0, b"", str(exc), cut=True)
    except requests.Timeout as exc:
        pytest.fail(f"GET {url} hung: {exc}")
    message = resp.headers.get("X-Error-Message", "")
    if not message and resp.status_code >= 400:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            message = str(resp.json().get("error") or "")
    return Got(resp.status_code, resp.content, message, cut=False)


def _judge(what: str, got: Got, expected: bytes, *, may_fail: bool, may_cut: bool) -> None:
    """``got`` is ``expected`` whole; or, ``may_fail``, a clear error (or, ``may_cut``, a cut
    connection)."""
    if got.cut:
        assert may_cut, f"{what}: the connection was cut ({got.message})"
    elif got.status == 200:
        assert got.body == expected, f"{what}: other bytes served: {got.body[:80]!r}"
    else:
        assert may_fail, f"{what}: answered {got.status}: {got.message or got.body[:200]!r}"
        assert got.status >= 400, f"{what}: answered {got.status}"
        assert got.message, f"{what}: {got.status} without a message: {got.body[:200]!r}"


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory, in bytes (``VmHWM`` of ``/proc/PID/status``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    raise AssertionError(f"no VmHWM for pid {pid}")  # pragma: no cover - Linux always has it


#: The fresh file of one of the hub's one-step writes (an answer, a record): ``.NAME.PID.HEX``.
_FRESH = re.compile(r"^\..+\.\d+\.[0-9a-f]{8}$")


def _fresh_left(store: Path) -> list[str]:
    """The fresh files of one-step writes left in ``store`` (walked without following a
    link): a write whose rename failed (a directory planted under its name) must remove its
    own, or every request would leave one more."""
    return sorted(
        os.path.relpath(os.path.join(here, name), store)
        for here, _dirs, names in os.walk(store)
        for name in names
        if _FRESH.match(name)
    )


def _counts(hub: Hub) -> dict[str, int]:
    """The hub's counters: what it did with a case's requests, for the failure's message."""
    counts: dict[str, int] = hub.proc.stats()["counts"]
    return counts


@pytest.mark.parametrize(("op", "component", "kind", "planter"), list(_cases()))
def test_planted_object(
    *,
    op: str,
    component: str,
    kind: str,
    planter: str,
    hubs: Hubs,
    tmp_path: Path,
) -> None:
    if planter == "member":
        need_root()
    case = Case.new(hubs.upstream, component)
    outside = _outside(tmp_path / "outside", case)
    assert (outside / "secret").stat().st_size == len(_small(0))
    store = _shared_store(tmp_path / "store")
    if op == "hit":  # filled by another hub process
        hubs.filler.point(store)
        for path in (case.file, case.meta):
            requests.get(hubs.filler.url + path, timeout=HANG).raise_for_status()
        assert (store / "blobs" / case.sha).read_bytes() == case.data
    where = _position(store, component, case, hubs.server.pid)
    _made(where.parent, store)
    _plant(where, kind, outside, planter=planter, store=store)
    if component == "partial":
        # Written to just now: a live download's, not one its writer abandoned.
        os.utime(where, (LONG_AGO, time.time()), follow_symlinks=False)
    counted = kind != "hardlink"
    before = _outside_state(outside, case, counted=counted)
    server = hubs.server
    server.point(store)
    said = len(server.said)
    counts_before = _counts(server)
    lock = store / "locks" / f"{case.sha}.lock"
    with _holding(lock, hold=component == "partial"):
        files = [_get(server.url + case.file)]
    files.append(_get(server.url + case.file))
    metas = [_get(server.url + case.meta) for _ in range(2)]
    counts_after = _counts(server)  # it still answers
    rss = _peak_rss(server.pid)
    left = _fresh_left(store)
    with bounded(memory=kind == "sparse") as peak:
        prune(str(store), older_than=0.0, max_size=0)
        manifest_text(Store(str(store)).served_rows())
    news = {
        k: v - counts_before.get(k, 0)
        for k, v in counts_after.items()
        if v != counts_before.get(k, 0)
    }
    logged = "".join(server.said[said:])
    assert "Traceback" not in logged, logged
    assert _outside_state(outside, case, counted=counted) == before, (
        f"what lies outside was touched; the hub counted {news}"
    )
    assert rss < RSS_BOUND, f"the hub's resident memory peaked at {rss >> 20} MiB"
    assert left == [], f"fresh files of one-step writes left behind; the hub counted {news}"
    if peak:
        assert peak[0] < MEMORY_BOUND, f"prune and export allocated {peak[0]} bytes"
    for n, got in enumerate(files):
        may_fail = n < MAY_FAIL.get(component, 0)
        may_cut = may_fail and component == "partial"
        what = f"file, request {n + 1} (the hub counted {news})"
        _judge(what, got, case.data, may_fail=may_fail, may_cut=may_cut)
    for n, got in enumerate(metas):
        what = f"metadata, request {n + 1} (the hub counted {news})"
        _judge(what, got, case.meta_body, may_fail=False, may_cut=False)


def test_prune_removes_only_what_is_as_it_listed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between ``hub prune``'s listing and its removal, one old file is served (stamped) and
    another one's name is taken by a file another job put there: both stay, as they do for
    ``cacheroot cache prune``. Only what is still the file listed, unused since, is removed."""
    blobs = tmp_path / "store" / "blobs"
    blobs.mkdir(parents=True)
    served, swapped, idle = (blobs / (c * 64) for c in "abc")
    for path in (served, swapped, idle):
        path.write_bytes(b"listed bytes")
        os.utime(path, (LONG_AGO, LONG_AGO))
    listed = prune_module.stored(str(tmp_path / "store"))
    os.utime(served, None)
    theirs = blobs / ".theirs"
    theirs.write_bytes(b"their bytes")
    os.utime(theirs, (LONG_AGO, LONG_AGO))
    os.replace(theirs, swapped)
    monkeypatch.setattr(prune_module, "stored", lambda _root, **_kw: listed)

    done = prune(str(tmp_path / "store"), older_than=0.0)

    assert (done.removed, done.kept) == (1, 2)
    assert sorted(p.name for p in blobs.iterdir()) == ["a" * 64, "b" * 64]
    assert swapped.read_bytes() == b"their bytes"
