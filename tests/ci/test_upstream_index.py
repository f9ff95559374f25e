"""How ``nox -s upstream`` finds the pinned sdist: pip's configured index, its simple API.

The session must work behind any mirror and name no host, so it asks pip which index it uses and
reads the file's URL from that index's page. Here the index is one served on 127.0.0.1 by the
origin toolkit, and pip is this Python's (or the pip wheel its ``ensurepip`` bundles, as in a venv
made by uv): nothing leaves the machine, so these run in the default suite.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.origin import Server, redirect, static
    from tests.upstream.index import (
        ChecksumError,
        NoIndexError,
        NotOnIndexError,
        configured_index,
        download,
        normalize,
        redact,
        sdist_url,
    )
else:
    # pytest puts tests/ on sys.path (its conftest.py has no package); mypy names it tests.
    from origin import Server, redirect, static
    from upstream.index import (
        ChecksumError,
        NoIndexError,
        NotOnIndexError,
        configured_index,
        download,
        normalize,
        redact,
        sdist_url,
    )

SDIST = "made_up_project-1.0.tar.gz"
#: The made-up sdist's bytes and their sha256.
PAYLOAD = b"made-up sdist\n"
PAYLOAD_SHA256 = "611487ca40886975de45cb5f4f409d7e97bd95069fac9a2024789db2ccb70257"
#: The PEP 503 page: an older release first, then the sdist by a relative link with its hash.
HTML_PAGE = f"""<!DOCTYPE html>
<html><body>
<a href="../../files/made_up_project-0.9.tar.gz#sha256=00">made_up_project-0.9.tar.gz</a><br>
<a href="../../files/{SDIST}#sha256={PAYLOAD_SHA256}">{SDIST}</a><br>
</body></html>
""".encode()
OLD_ONLY_PAGE = b'<a href="../../files/made_up_project-0.9.tar.gz">made_up_project-0.9.tar.gz</a>'
HTML = "text/html; charset=utf-8"


def _pip_missing() -> str:
    """Why this Python has no pip for :func:`configured_index` to ask, or ``""``."""
    if importlib.util.find_spec("pip") is not None:
        return ""
    spec = importlib.util.find_spec("ensurepip")
    places = [Path(spec.origin).parent / "_bundled"] if spec is not None and spec.origin else []
    if packaged := sysconfig.get_config_var("WHEEL_PKG_DIR"):
        places.append(Path(packaged))  # a distribution's Python (Debian's) bundles none
    if any(any(place.glob("pip-*.whl")) for place in places):
        return ""
    return f"{sys.executable} has no pip, and no pip wheel for ensurepip"


needs_pip = pytest.mark.skipif(bool(_pip_missing()), reason=_pip_missing() or "pip is there")


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib sends even 127.0.0.1 through a proxy from the environment: keep it on loopback."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_the_json_page_gives_the_files_url() -> None:
    """PEP 691 JSON is asked for first, by the normalised name; its ``url`` is the answer."""
    with Server() as origin:
        page = {
            "meta": {"api-version": "1.1"},
            "name": "made-up-project",
            "files": [
                {"filename": "made_up_project-1.0-py3-none-any.whl", "url": "/w/a.whl"},
                {"filename": SDIST, "url": origin.url(f"/packages/ab/cd/{SDIST}#sha256=00")},
            ],
        }
        json_type = "application/vnd.pypi.simple.v1+json"
        origin.route(
            "/simple/made-up-project/", static(json.dumps(page).encode(), content_type=json_type)
        )
        url = sdist_url(origin.url("/simple"), "Made_Up.Project", SDIST)
        assert url == f"http://127.0.0.1:{origin.port}/packages/ab/cd/made_up_project-1.0.tar.gz"
        assert [(r.path, r.header("Accept")) for r in origin.requests()] == [
            ("/simple/made-up-project/", "application/vnd.pypi.simple.v1+json, text/html;q=0.1")
        ]


def test_the_html_page_gives_the_link_made_absolute() -> None:
    """An index that answers HTML: the anchor's relative href, joined to the page, no hash."""
    with Server() as origin:
        origin.route("/simple/made-up-project/", static(HTML_PAGE, content_type=HTML))
        url = sdist_url(origin.url("/simple/"), "made-up-project", SDIST)
        assert url == f"http://127.0.0.1:{origin.port}/files/made_up_project-1.0.tar.gz"


def test_the_page_is_read_after_a_redirect() -> None:
    """Relative links are resolved against where the page was found, not where it was asked."""
    with Server() as origin:
        origin.route("/simple/made-up-project/", redirect("/mirror/simple/made-up-project/"))
        origin.route("/mirror/simple/made-up-project/", static(HTML_PAGE, content_type=HTML))
        url = sdist_url(origin.url("/simple"), "made-up-project", SDIST)
        assert url == f"http://127.0.0.1:{origin.port}/mirror/files/made_up_project-1.0.tar.gz"


@pytest.mark.parametrize("listed", [True, False], ids=["page-without-the-file", "no-page"])
def test_a_missing_file_is_named_and_the_credentials_are_not(listed: bool) -> None:
    """The error names the index and the file; the credentials went to it, not into the text."""
    with Server() as origin:
        if listed:
            origin.route("/simple/made-up-project/", static(OLD_ONLY_PAGE, content_type=HTML))
        index = f"http://user:secret@127.0.0.1:{origin.port}/simple"
        with pytest.raises(NotOnIndexError) as caught:
            sdist_url(index, "made-up-project", SDIST)
        auth = [r.header("Authorization") for r in origin.requests()]
    port = origin.port
    if listed:
        expected = (
            f"made_up_project-1.0.tar.gz: not listed on http://***@127.0.0.1:{port}/simple/"
            f"made-up-project/, the page of 'made-up-project' on the index "
            f"http://***@127.0.0.1:{port}/simple"
        )
    else:
        expected = (
            f"made_up_project-1.0.tar.gz: the index http://***@127.0.0.1:{port}/simple has no "
            f"page for 'made-up-project' (http://***@127.0.0.1:{port}/simple/made-up-project/ "
            "answered 404)"
        )
    assert str(caught.value) == expected
    assert auth == ["Basic dXNlcjpzZWNyZXQ="]


def test_a_file_on_a_private_index_downloads_with_its_credentials(tmp_path: Path) -> None:
    """A relative link keeps the index's credentials, and the download sends them; checked."""
    with Server() as origin:
        origin.route("/simple/made-up-project/", static(HTML_PAGE, content_type=HTML))
        origin.route(f"/files/{SDIST}", static(PAYLOAD))
        index = f"http://us%40er:s%3Acret@127.0.0.1:{origin.port}/simple"
        url = sdist_url(index, "made-up-project", SDIST)
        assert url == f"http://us%40er:s%3Acret@127.0.0.1:{origin.port}/files/{SDIST}"
        download(url, tmp_path / "cache" / SDIST, PAYLOAD_SHA256)
        auth = [(r.path, r.header("Authorization")) for r in origin.requests()]
    assert (tmp_path / "cache" / SDIST).read_bytes() == b"made-up sdist\n"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [SDIST]
    assert auth == [
        ("/simple/made-up-project/", "Basic dXNAZXI6czpjcmV0"),
        ("/files/made_up_project-1.0.tar.gz", "Basic dXNAZXI6czpjcmV0"),
    ]


def test_credentials_do_not_follow_a_redirect_to_another_host(tmp_path: Path) -> None:
    """A mirror that redirects the download to storage elsewhere does not hand it the token."""
    with Server() as storage, Server() as mirror:
        storage.route(f"/bucket/{SDIST}", static(PAYLOAD))
        mirror.route(f"/files/{SDIST}", redirect(storage.url(f"/bucket/{SDIST}")))
        url = f"http://token@127.0.0.1:{mirror.port}/files/{SDIST}"
        download(url, tmp_path / SDIST, PAYLOAD_SHA256)
        assert [r.header("Authorization") for r in mirror.requests()] == ["Basic dG9rZW46"]
        assert [r.header("Authorization") for r in storage.requests()] == [None]
    assert (tmp_path / SDIST).read_bytes() == b"made-up sdist\n"


def test_other_bytes_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    """A file whose sha256 is not the pinned one is neither kept nor left half-written."""
    with Server() as origin:
        origin.route(f"/files/{SDIST}", static(b"other bytes\n"))
        with pytest.raises(ChecksumError) as caught:
            download(origin.url(f"/files/{SDIST}"), tmp_path / SDIST, PAYLOAD_SHA256)
    assert str(caught.value) == (
        f"http://127.0.0.1:{origin.port}/files/made_up_project-1.0.tar.gz: sha256 "
        "671bf4eed8c3b3a2f75a9c40ccbfe5f2e078e894fb85d63bfd98dc5ab232933c, expected "
        "611487ca40886975de45cb5f4f409d7e97bd95069fac9a2024789db2ccb70257"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:secret@127.0.0.1:9/simple", "http://***@127.0.0.1:9/simple"),
        ("https://token@127.0.0.1:9/simple", "https://***@127.0.0.1:9/simple"),
        ("http://127.0.0.1:9/simple", "http://127.0.0.1:9/simple"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    """Only the credentials are hidden: the host and path still say which index it was."""
    assert redact(url) == shown


def test_normalize() -> None:
    """PEP 503: runs of ``-``, ``_`` and ``.`` are one ``-``, all lower case."""
    assert normalize("Made_Up.._Project") == "made-up-project"


def test_pip_index_url_is_taken_without_asking_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PIP_INDEX_URL`` is what pip would use first: the Python is not even run."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    assert configured_index(str(tmp_path / "no-python")) == "http://127.0.0.1:9/simple"


@needs_pip
def test_the_index_of_pips_configuration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blank ``PIP_INDEX_URL`` counts as unset; then pip's configuration file says."""
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\n", encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_INDEX_URL", " ")
    assert configured_index(sys.executable) == "http://127.0.0.1:9/simple"


@needs_pip
def test_pips_precedence_and_credentials_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[download]`` over ``[global]``, ``[install]`` unread (as ``pip download`` does); the
    password pip's help hides is recovered from the configuration, not lost."""
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = http://127.0.0.1:9/simple\n"
        "[install]\nindex-url = http://127.0.0.1:7/simple\n"
        "[download]\nindex-url = http://us%40er:s%3Acret@127.0.0.1:8/simple\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert configured_index(sys.executable) == "http://us%40er:s%3Acret@127.0.0.1:8/simple"


def test_no_python_to_ask_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``PIP_INDEX_URL`` and without a Python to run pip, the error says what to set."""
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    python = str(tmp_path / "no-python")
    with pytest.raises(NoIndexError) as caught:
        configured_index(python)
    assert str(caught.value) == (
        f"PIP_INDEX_URL is not set and {python} cannot be run to ask its pip ([Errno 2] No such "
        f"file or directory: '{python}'); set PIP_INDEX_URL"
    )
