"""A local stand-in for the Hugging Face Hub and ModelScope HTTP APIs, for tests.

The real hub clients (``huggingface_hub``, ``modelscope`` / ``modelscope_hub``) are pointed at
it through ``HF_ENDPOINT`` and ``MODELSCOPE_ENDPOINT``, so tests exercise the code that CI runs,
not a mock of it. It serves only what those clients call for a snapshot download of a small
repository, as read in their installed sources (huggingface_hub 2.4: ``_snapshot_download.py``,
``file_download.py``, ``hf_api.py``; modelscope_hub 0.5: ``_download.py``, ``_legacy_api.py``).

Implemented, and nothing else (any other request is answered 404 and recorded in
:attr:`HubServer.unhandled`, so a test notices when a client starts calling something new):

Hugging Face (model repos under ``/``, dataset repos under ``/datasets/``):

- ``GET /api/agent-harnesses``: ``{"standardEnvVars": [], "harnesses": {}}``, the client's own
  "no agent known" registry. huggingface_hub fetches it (at most once a day, cached in
  ``$HF_HOME/.agent_harnesses.json``) while building its request headers.
- ``GET /api/{models,datasets}/{repo_id}/revision/{rev}``: ``{"id", "sha", "siblings"}``; the
  client asks for it to resolve a branch or tag to a commit (``HfApi.repo_info``). Without
  ``/revision/{rev}`` (``HfApi.model_info(repo_id)``), the same for the default branch.
- ``GET /api/{models,datasets}/{repo_id}/tree/{rev}[/{path}]?recursive=&expand=``: the file
  list (``type``, ``path``, ``size``, ``oid`` = git blob sha1, and for LFS files ``lfs`` with
  the sha256, size and pointer size). One page, no ``Link`` header; ``expand`` is ignored (the
  client asks for ``expand=false``).
- ``HEAD`` and ``GET /[datasets/]{repo_id}/resolve/{rev}/{path}``: ``X-Repo-Commit``,
  ``ETag`` (git blob sha1, or the sha256 for LFS files), ``X-Linked-Etag`` and
  ``X-Linked-Size`` for LFS files, ``Content-Length``; ``GET`` honours ``Range: bytes=N-``.
  LFS files are served directly (200), not through a redirect to a CDN. No Xet headers are
  sent, so the client downloads over plain HTTP. Errors carry ``X-Error-Code``
  (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), which the client maps to its
  exception types.
- ``GET /api/{models,datasets}/{repo_id}/revision/{rev}?blobs=true`` (``model_info`` with
  ``files_metadata``): the siblings also carry ``size``, ``blobId`` and, for LFS files, ``lfs``.
- ``POST /api/{models,datasets}/{repo_id}/paths-info/{rev}`` (form ``paths``, repeatable): the
  tree entries of those paths.
- Adding a repository again (:meth:`HubServer.add_hf`) is a new commit on its branches; the
  earlier commits stay reachable by their hash, as on the Hub.
- :attr:`HubServer.xet`: answer as the Hub does for a Xet-backed repository. LFS files get a
  ``xetHash`` in the listings (``/tree``, ``/paths-info``, ``?blobs=true``) and ``X-Xet-Hash``,
  ``X-Xet-Refresh-Route`` and ``Link: <...>; rel="xet-auth"`` on ``/resolve``;
  ``GET /api/{models,datasets}/{repo_id}/xet-read-token/{rev}`` answers a token whose Xet
  storage (``X-Xet-Cas-Url``) is this server's ``/xet-cas``, where nothing is implemented: a
  client that went there is counted (and fails).

ModelScope (model repos only):

- ``GET /api/v1/repos/internalAccelerationInfo``: 404. The client probes it once per process to
  find an Alibaba Cloud region; a 404 means "no region", as on any machine outside that cloud.
- ``GET /api/v1/models/{owner}/{name}/repo/files?Revision=&Recursive=[&Root=]``:
  ``{"Code": 200, "Data": {"Files": [{"Name", "Path", "Type": "blob", "Size", "Sha256",
  "Revision"}]}, "Success": true}``. ``Recursive`` and ``Root`` are honoured.
- ``GET /api/v1/models/{owner}/{name}/repo?Revision=&FilePath=``: the bytes, with
  ``Content-Length``; ``Range: bytes=N-`` honoured. Served directly, not redirected to OSS.

Faults and accounting: :meth:`HubServer.fail_next` makes the next ``n`` requests whose path
matches a regex fail with a status (429 by default) and a ``Retry-After`` header;
:meth:`HubServer.fail_rate` makes a share of them fail, drawn from a seeded generator;
:meth:`HubServer.stall_next` holds one request unanswered until released, and
:meth:`HubServer.hang_all` every matching request until the server stops. Every request
is counted by ``(method, path)`` (the path without its query string), failed ones included,
by the origin toolkit's server (``tests/origin``) this hub runs on.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote

if TYPE_CHECKING:
    from types import TracebackType

    from tests.origin import Exchange, Request, Server, hang, static
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, hang, static

#: Files served as LFS objects (sha256 ETag), as the Hub does for weights.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub sends as the ETag of a regular file."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def xet_hash(data: bytes) -> str:
    """A stand-in for a file's Xet hash: 64 hex digits, the form huggingface_hub accepts."""
    return hashlib.sha256(b"xet\x00" + data).hexdigest()


def lfs_head_headers(data: bytes, commit: str, sha: str | None = None) -> dict[str, str]:
    """The headers of the Hub's answer to a ``HEAD`` of the LFS file ``data`` at ``commit``,
    named by ``sha`` (its sha256 unless given), for a test's own hand-made Hub."""
    sha = hashlib.sha256(data).hexdigest() if sha is None else sha
    return {
        "X-Repo-Commit": commit,
        "ETag": f'"{sha}"',
        "X-Linked-Etag": f'"{sha}"',
        "X-Linked-Size": str(len(data)),
    }


def lfs_pointer(data: bytes) -> bytes:
    """The git-lfs pointer file that a repository commits in place of a large file."""
    sha = hashlib.sha256(data).hexdigest()
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()
    )


@dataclass
class HubRepo:
    """One repository at one commit: its files, which of them are LFS, and its branches."""

    repo_id: str
    files: dict[str, bytes]
    commit: str = ""
    branches: dict[str, str] = field(default_factory=dict)
    lfs_suffixes: tuple[str, ...] = LFS_SUFFIXES

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(usedforsecurity=False)
            for path in sorted(self.files):
                digest.update(path.encode() + b"\x00" + self.files[path])
            self.commit = digest.hexdigest()
        if not self.branches:
            self.branches = {"main": self.commit, "master": self.commit}

    def resolve(self, revision: str) -> str | None:
        """The commit a revision names, or ``None`` when it names nothing."""
        if revision == self.commit:
            return self.commit
        return self.branches.get(revision)

    def is_lfs(self, path: str) -> bool:
        """Whether the Hub would store ``path`` through LFS."""
        return path.endswith(self.lfs_suffixes)

    def sha256(self, path: str) -> str:
        """The sha256 of a file's content."""
        return hashlib.sha256(self.files[path]).hexdigest()

    def etag(self, path: str) -> str:
        """The ETag the Hub sends: the sha256 for LFS files, the git blob sha1 otherwise."""
        data = self.files[path]
        return self.sha256(path) if self.is_lfs(path) else git_blob_sha1(data)


@dataclass
class _Fault:
    remaining: int
    status: int
    retry_after: str | None
    match: re.Pattern[str]
    method: str | None
    #: For a stall: set when a request is held, and what releases it (unanswered).
    reached: threading.Event | None = None
    release: threading.Event | None = None
    #: The share of matching requests that fail (1.0: every one, while ``remaining`` lasts).
    rate: float = 1.0


class HubServer:
    """A threaded HTTP server on 127.0.0.1 that answers as both hubs do (see module docstring).

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(self) -> None:
        self._hf: dict[tuple[str, str], HubRepo] = {}
        self._ms: dict[str, HubRepo] = {}
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._random = random.Random(0)  # noqa: S311 - repeatable faults, not secrets
        self.unhandled: list[str] = []
        self._server: Server | None = None
        #: Answer as the Hub does for Xet-backed repositories (see the module docstring).
        self.xet = False
        #: Earlier commits of the repositories added again, by ``(repo_type, repo_id)``.
        self._hf_commits: dict[tuple[str, str], dict[str, HubRepo]] = {}

    # -- set-up -----------------------------------------------------------------------------
    def add_hf(self, repo: HubRepo, repo_type: str = "model") -> None:
        """Serve ``repo`` through the Hugging Face API (``repo_type``: model or dataset).

        A repository added again moves its branches to the new commit; the commits it had
        before stay reachable by their hash.
        """
        earlier = self._hf.get((repo_type, repo.repo_id))
        if earlier is not None:
            self._hf_commits.setdefault((repo_type, repo.repo_id), {})[earlier.commit] = earlier
        self._hf[(repo_type, repo.repo_id)] = repo

    def add_modelscope(self, repo: HubRepo) -> None:
        """Serve ``repo`` through the ModelScope API (model repositories)."""
        self._ms[repo.repo_id] = repo

    def fail_next(
        self,
        n: int,
        *,
        status: int = 429,
        retry_after: str | None = "1",
        match: str = "",
        method: str | None = None,
    ) -> None:
        """Answer the next ``n`` requests whose path matches the regex ``match`` with ``status``.

        ``method`` (``GET``, ``HEAD``) restricts the fault to one method; default: any.
        """
        with self._lock:
            self._faults.append(_Fault(n, status, retry_after, re.compile(match), method))

    def stall_next(
        self, *, match: str, method: str | None = None
    ) -> tuple[threading.Event, threading.Event]:
        """Hold the next matching request without answering; return ``(reached, release)``.

        ``reached`` is set once the request is held. Setting ``release`` drops the connection
        unanswered, as a hub that hangs and then goes away would.
        """
        reached, release = threading.Event(), threading.Event()
        with self._lock:
            self._faults.append(_Fault(1, 0, None, re.compile(match), method, reached, release))
        return reached, release

    def fail_rate(
        self,
        rate: float,
        *,
        status: int = 429,
        retry_after: str | None = None,
        match: str = "",
        seed: int = 0,
    ) -> None:
        """Answer a share ``rate`` (0 to 1) of the requests matching ``match`` with ``status``.

        Which ones is drawn from a generator seeded with ``seed``, so a run is repeatable.
        """
        with self._lock:
            self._random.seed(seed)
            fault = _Fault(1 << 62, status, retry_after, re.compile(match), None, rate=rate)
            self._faults.append(fault)

    def hang_all(self, *, match: str = "") -> threading.Event:
        """Hold every request matching ``match`` unanswered until the server stops.

        Returns the event set once the first is held.
        """
        reached = threading.Event()
        with self._lock:
            fault = _Fault(1 << 62, 0, None, re.compile(match), None, reached, threading.Event())
            self._faults.append(fault)
        return reached

    def start(self) -> HubServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        self._server = Server(
            lambda ex: _Handler(self, ex).dispatch(), methods=("GET", "HEAD", "POST")
        ).start()
        return self

    def close(self) -> None:
        """Stop serving (held requests let go) and release the port."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The endpoint to put into ``HF_ENDPOINT`` / ``MODELSCOPE_ENDPOINT``."""
        assert self._server is not None, "start() the server first"
        return self._server.base

    # -- accounting -------------------------------------------------------------------------
    def counts(self) -> Counter[tuple[str, str]]:
        """A copy of the request counts by ``(method, path)``."""
        return Counter() if self._server is None else self._server.counts()

    def count_path(self, path: str, method: str | None = None) -> int:
        """How many requests for ``path`` (with ``method``, if given) were received."""
        return 0 if self._server is None else self._server.count(path, method)

    def requests_for(self, path: str, method: str | None = None) -> list[Request]:
        """The requests for ``path`` (with ``method``, if given), in the order received."""
        return [] if self._server is None else self._server.requests(path, method)

    def total(self) -> int:
        """How many requests were received since the last :meth:`reset`."""
        return 0 if self._server is None else self._server.count()

    def reset(self) -> None:
        """Forget counts, pending faults and unhandled requests."""
        if self._server is not None:
            self._server.clear()
        with self._lock:
            self._faults.clear()
            self.unhandled.clear()

    def _fault(self, method: str, path: str) -> _Fault | None:
        """The fault a request must answer with, if one is pending (it is used up)."""
        with self._lock:
            for fault in self._faults:
                if (
                    fault.remaining > 0
                    and fault.method in (None, method)
                    and fault.match.search(path)
                    and (fault.rate >= 1.0 or self._random.random() < fault.rate)
                ):
                    fault.remaining -= 1
                    return fault
        return None


_HF_API = re.compile(
    r"^/api/(?P<kind>models|datasets)/(?P<repo>.+?)"
    r"/(?P<op>revision|tree|paths-info|xet-read-token)/(?P<rest>.+)$"
)
_HF_INFO = re.compile(r"^/api/(?P<kind>models|datasets)/(?P<repo>[^/]+(?:/[^/]+)?)$")
_HF_RESOLVE = re.compile(r"^/(?P<ds>datasets/)?(?P<repo>.+?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_MS_FILES = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo/files$")
_MS_FILE = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo$")
_MS_ACCEL = "/api/v1/repos/internalAccelerationInfo"
#: Where the tokens of a Xet-backed repository send a client (nothing answers there).
XET_STORAGE = "/xet-cas"
_HF_AGENTS = "/api/agent-harnesses"


def _xet_token(base: str) -> dict[str, str]:
    """The headers of a Xet read token, as the Hub sends them (valid for an hour)."""
    return {
        "X-Xet-Cas-Url": base + XET_STORAGE,
        "X-Xet-Access-Token": "xet-test-token",
        "X-Xet-Token-Expiration": str(int(time.time()) + 3600),
    }


class _Handler:
    """Answers one request as the hubs do."""

    def __init__(self, hub: HubServer, ex: Exchange) -> None:
        self.hub, self.ex, self.command = hub, ex, ex.command

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.ex.respond(status, body, headers)

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

    def _content(self, data: bytes, headers: dict[str, str]) -> None:
        """Send a file's bytes, honouring ``Range`` as the clients use it to resume."""
        headers = {"Content-Type": "application/octet-stream", **headers}
        etag = headers.pop("ETag", None)
        static(data, etag=etag, headers=headers, conditional=False)(self.ex)

    def dispatch(self) -> None:
        """Answer with a pending fault, else as the hub whose API the path belongs to."""
        method, path, query = self.command, self.ex.info.path, self.ex.info.query
        fault = self.hub._fault(method, path)
        if fault is not None and fault.release is not None and fault.reached is not None:
            hang(fault.reached, fault.release)(self.ex)
            return
        if fault is not None:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            self._json(fault.status, {"error": f"injected {fault.status}"}, headers)
            return
        if path == _MS_ACCEL:
            self._json(404, {"Code": 404, "Message": "not an Alibaba Cloud region"})
            return
        if path == _HF_AGENTS and method == "GET":
            self._json(200, {"standardEnvVars": [], "harnesses": {}})
            return
        for pattern, handler in (
            (_MS_FILES, self._ms_files),
            (_MS_FILE, self._ms_file),
            (_HF_API, self._hf_api),
            (_HF_INFO, self._hf_info),
            (_HF_RESOLVE, self._hf_resolve),
        ):
            match = pattern.match(path)
            if match is not None:
                handler(match, query)
                return
        self._unhandled()

    def _unhandled(self) -> None:
        with self.hub._lock:
            self.hub.unhandled.append(f"{self.command} {self.ex.info.target}")
        message = f"not implemented by the test hub: {self.command} {self.ex.info.target}"
        self._json(404, {"error": message})

    # -- Hugging Face -----------------------------------------------------------------------
    def _hf_error(self, status: int, code: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"error": code}, {"X-Error-Code": code, **(headers or {})})

    def _hf_repo(self, kind: str, repo_id: str) -> HubRepo | None:
        repo = self.hub._hf.get((kind, repo_id))
        if repo is None:
            self._hf_error(401, "RepoNotFound")
        return repo

    def _hf_at(self, kind: str, repo: HubRepo, revision: str) -> tuple[HubRepo, str] | None:
        """The repository as it is at ``revision`` (an earlier commit included), and that
        commit; ``None`` after answering 404 when the revision names nothing."""
        commit = repo.resolve(revision)
        if commit is not None:
            return repo, commit
        earlier = self.hub._hf_commits.get((kind, repo.repo_id), {}).get(revision)
        if earlier is not None:
            return earlier, earlier.commit
        self._hf_error(404, "RevisionNotFound")
        return None

    def _hf_api(self, match: re.Match[str], query: dict[str, str]) -> None:
        if self.command != ("POST" if match["op"] == "paths-info" else "GET") or (
            match["op"] == "xet-read-token" and not self.hub.xet
        ):
            self._unhandled()
            return
        kind = "model" if match["kind"] == "models" else "dataset"
        latest = self._hf_repo(kind, match["repo"])
        if latest is None:
            return
        # The client quotes the revision with safe="", so the first "/" ends it.
        raw_rev, _, sub = match["rest"].partition("/")
        found = self._hf_at(kind, latest, unquote(raw_rev))
        if found is None:
            return
        repo, commit = found
        xet = self.hub.xet
        if match["op"] == "xet-read-token":
            self._json(200, {}, _xet_token(self.hub.url))
            return
        if match["op"] == "paths-info":
            length = int(self.ex.headers.get("Content-Length") or 0)
            form = parse_qs(self.ex.rfile.read(length).decode())
            paths = [p for p in form.get("paths", []) if p in repo.files]
            self._json(200, [self._hf_entry(repo, p, xet=xet) for p in paths])
            return
        if match["op"] == "revision":
            siblings: list[dict[str, object]] = [{"rfilename": p} for p in sorted(repo.files)]
            if query.get("blobs", "") == "true":
                for sibling in siblings:
                    entry = self._hf_entry(repo, str(sibling["rfilename"]), xet=xet)
                    sibling.update(size=entry["size"], blobId=entry["oid"])
                    lfs = entry.get("lfs")
                    if isinstance(lfs, dict):  # model_info names the digest sha256, not oid
                        sibling["lfs"] = {("sha256" if k == "oid" else k): lfs[k] for k in lfs}
                    if "xetHash" in entry:
                        sibling["xetHash"] = entry["xetHash"]
            self._json(200, {"id": repo.repo_id, "sha": commit, "siblings": siblings})
            return
        recursive = query.get("recursive", "") == "true"
        self._json(200, self._hf_tree(repo, unquote(sub), recursive, xet=xet))

    def _hf_info(self, match: re.Match[str], _query: dict[str, str]) -> None:
        """``model_info(repo_id)`` / ``dataset_info``: the default branch's revision info."""
        if self.command != "GET":
            self._unhandled()
            return
        repo = self._hf_repo("model" if match["kind"] == "models" else "dataset", match["repo"])
        if repo is None:
            return
        commit = repo.resolve("main") or repo.commit
        siblings = [{"rfilename": p} for p in sorted(repo.files)]
        self._json(200, {"id": repo.repo_id, "sha": commit, "siblings": siblings})

    @staticmethod
    def _hf_entry(repo: HubRepo, path: str, *, xet: bool = False) -> dict[str, object]:
        """A file's entry in the listings (``/tree``, ``/paths-info``)."""
        data = repo.files[path]
        entry: dict[str, object] = {"type": "file", "path": path, "size": len(data)}
        if repo.is_lfs(path):
            pointer = lfs_pointer(data)
            entry["oid"] = git_blob_sha1(pointer)
            entry["lfs"] = {
                "oid": repo.sha256(path),
                "size": len(data),
                "pointerSize": len(pointer),
            }
            if xet:
                entry["xetHash"] = xet_hash(data)
        else:
            entry["oid"] = git_blob_sha1(data)
        return entry

    @staticmethod
    def _hf_tree(
        repo: HubRepo, root: str, recursive: bool, *, xet: bool = False
    ) -> list[dict[str, object]]:
        prefix = f"{root.strip('/')}/" if root.strip("/") else ""
        entries: list[dict[str, object]] = []
        folders: set[str] = set()
        for path in sorted(repo.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            if not recursive and "/" in rest:
                folders.add(prefix + rest.split("/", 1)[0])
                continue
            entries.append(_Handler._hf_entry(repo, path, xet=xet))
        entries.extend(
            {"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)
        )
        return entries

    def _hf_resolve(self, match: re.Match[str], _query: dict[str, str]) -> None:
        kind = "dataset" if match["ds"] else "model"
        latest = self._hf_repo(kind, match["repo"])
        if latest is None:
            return
        found = self._hf_at(kind, latest, unquote(match["rev"]))
        if found is None:
            return
        repo, commit = found
        path = unquote(match["file"])
        if path not in repo.files:
            self._hf_error(404, "EntryNotFound", {"X-Repo-Commit": commit})
            return
        data = repo.files[path]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{repo.etag(path)}"'}
        if repo.is_lfs(path):
            headers["X-Linked-Etag"] = f'"{repo.sha256(path)}"'
            headers["X-Linked-Size"] = str(len(data))
            if self.hub.xet:
                refresh = f"{self.hub.url}/api/{kind}s/{repo.repo_id}/xet-read-token/{commit}"
                headers["X-Xet-Hash"] = xet_hash(data)
                headers["X-Xet-Refresh-Route"] = refresh
                headers["Link"] = f'<{refresh}>; rel="xet-auth"'
        self._content(data, headers)

    # -- ModelScope -------------------------------------------------------------------------
    def _ms_repo(self, match: re.Match[str], query: dict[str, str]) -> tuple[HubRepo, str] | None:
        repo = self.hub._ms.get(match["repo"])
        if repo is None:
            self._json(404, {"Code": 10010205001, "Message": "model not found", "Success": False})
            return None
        commit = repo.resolve(query.get("Revision", "master"))
        if commit is None:
            self._json(
                404, {"Code": 10010205001, "Message": "revision not found", "Success": False}
            )
            return None
        return repo, commit

    def _ms_files(self, match: re.Match[str], query: dict[str, str]) -> None:
        found = self._ms_repo(match, query)
        if found is None or self.command != "GET":
            if found is not None:
                self._unhandled()
            return
        repo, commit = found
        root = query.get("Root", "").strip("/")
        recursive = query.get("Recursive", "True").lower() == "true"
        files: list[dict[str, object]] = []
        folders: set[str] = set()
        prefix = f"{root}/" if root else ""
        for path in sorted(repo.files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            if not recursive and "/" in rest:
                folders.add(prefix + rest.split("/", 1)[0])
                continue
            files.append(
                {
                    "Name": path.rsplit("/", 1)[-1],
                    "Path": path,
                    "Type": "blob",
                    "Size": len(repo.files[path]),
                    "Sha256": repo.sha256(path),
                    "Revision": commit,
                }
            )
        files.extend(
            {"Name": f.rsplit("/", 1)[-1], "Path": f, "Type": "tree"} for f in sorted(folders)
        )
        self._json(200, {"Code": 200, "Data": {"Files": files}, "Success": True})

    def _ms_file(self, match: re.Match[str], query: dict[str, str]) -> None:
        found = self._ms_repo(match, query)
        if found is None:
            return
        repo, _commit = found
        path = query.get("FilePath", "")
        if path not in repo.files:
            self._json(404, {"Code": 10010205001, "Message": "file not found", "Success": False})
            return
        self._content(repo.files[path], {})
