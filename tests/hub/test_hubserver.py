"""The local hub itself: what it answers, what it counts, and the faults it injects."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .hubserver import HubRepo, HubServer


def _get(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_hf_resolve_sends_the_headers_the_client_needs(hub: HubServer, tiny_repo: HubRepo) -> None:
    base = f"{hub.url}/{tiny_repo.repo_id}/resolve/main"

    status, headers, body = _get(f"{base}/model.safetensors", "HEAD")
    assert status == 200
    assert body == b""
    assert headers["X-Repo-Commit"] == tiny_repo.commit
    assert headers["X-Linked-Etag"] == f'"{tiny_repo.sha256("model.safetensors")}"'
    assert headers["X-Linked-Size"] == str(len(tiny_repo.files["model.safetensors"]))
    assert not any(h.lower().startswith("x-xet") for h in headers)

    status, headers, body = _get(f"{base}/config.json", headers={"Range": "bytes=5-"})
    assert status == 206
    assert body == tiny_repo.files["config.json"][5:]
    assert headers["ETag"] == f'"{tiny_repo.etag("config.json")}"'

    status, headers, _ = _get(f"{base}/absent.txt")
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound")
    status, headers, _ = _get(f"{hub.url}/{tiny_repo.repo_id}/resolve/nope/config.json")
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")


def test_modelscope_listing_carries_sizes_and_hashes(hub: HubServer, tiny_repo: HubRepo) -> None:
    url = f"{hub.url}/api/v1/models/{tiny_repo.repo_id}/repo/files?Revision=master&Recursive=True"

    status, _, body = _get(url)

    assert status == 200
    files = {f["Path"]: f for f in json.loads(body)["Data"]["Files"]}
    assert set(files) == set(tiny_repo.files)
    for path, data in tiny_repo.files.items():
        assert files[path]["Size"] == len(data)
        assert files[path]["Sha256"] == tiny_repo.sha256(path)


def test_requests_are_counted_and_unknown_ones_recorded(hub: HubServer) -> None:
    status, _, _ = _get(f"{hub.url}/api/spaces/acme/x")

    assert status == 404
    assert hub.unhandled == ["GET /api/spaces/acme/x"]
    assert hub.counts() == {("GET", "/api/spaces/acme/x"): 1}


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_faults_hit_the_next_matching_requests_only(
    hub: HubServer, tiny_repo: HubRepo, method: str
) -> None:
    hub.fail_next(2, status=429, retry_after="3", match=r"config\.json$", method="GET")
    url = f"{hub.url}/{tiny_repo.repo_id}/resolve/main/config.json"

    outcomes = [_get(url, method)[0] for _ in range(3)]

    assert outcomes == ([429, 429, 200] if method == "GET" else [200, 200, 200])
    assert hub.counts()[(method, f"/{tiny_repo.repo_id}/resolve/main/config.json")] == 3
    if method == "GET":
        assert _get(url)[0] == 200
