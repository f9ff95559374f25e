"""Credentials in a URL are sent to the origin and never written down or shown anywhere.

``http://alice:S3cr3t@host/...``: the sidecar, every other file under the cache root, the log,
exception messages, ``cacheroot cache ls`` (text and JSON), ``cacheroot fetch`` and ``cacheroot
warm`` output all lack the password. The entry keeps the name it always had (so caches warmed
before keep their hits), and a record written by an older version is scrubbed on its next hit.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from cacheroot.envs import CACHEROOT
from cacheroot.fetch import CacheMissError, ChecksumError, DownloadError, Fetcher, FetchError
from cacheroot.fetch.store import read_meta, redact_url, write_meta

from .origin import Origin, body, sha256
from .procs import cli

SECRET = "S3cr3t"  # noqa: S105 - a test credential, sent to the local origin only
TOKEN = "ghp0tok3n"  # noqa: S105 - the same


def with_credentials(url: str, userinfo: str = f"alice:{SECRET}") -> str:
    return url.replace("://", f"://{userinfo}@", 1)


def files_containing(root: Path, secret: str) -> list[str]:
    """Every file (by content or by name) under ``root`` that holds ``secret``."""
    found = []
    for here, dirs, names in os.walk(root):
        for name in names + dirs:
            path = Path(here, name)
            if secret in name or (
                path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
            ):
                found.append(str(path))
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://alice:S3cr3t@h/x", "http://alice:***@h/x"),
        ("https://ghp0tok3n@h:8443/x?q=1", "https://***@h:8443/x?q=1"),
        ("http://u:p@ss@h/x", "http://u:***@h/x"),  # the client splits at the last '@'
        ("http://:pw@h/", "http://:***@h/"),
        ("http://h/x?mail=a@b", "http://h/x?mail=a@b"),
        ("http://h/x", "http://h/x"),
        (
            "from http://a:b@h1/x to 'https://c:d@h2/y'",
            "from http://a:***@h1/x to 'https://c:***@h2/y'",
        ),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    assert redact_url(text) == expected


def test_credentials_are_sent_but_never_stored_logged_or_shown(
    origin: Origin,
    fetcher: Fetcher,
    name: str,
    isolated_cache: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="cacheroot.fetch")
    plain = origin.url(f"/ok/{name}")
    url = with_credentials(plain)
    path = fetcher.fetch(url, sha256=sha256(body(name)), namespace="private")
    assert path.read_bytes() == body(name)
    # The credentials reached the origin as basic auth.
    assert origin.auths[f"/ok/{name}"] == ["Basic " + base64.b64encode(b"alice:S3cr3t").decode()]
    # The entry's name is what it always was (a digest of the URL as given), so caches warmed
    # before keep their entries; the record names the URL with the password redacted.
    assert path.name == hashlib.sha256(url.encode()).hexdigest()[:16] + f"-{name}"
    meta = read_meta(str(path))
    assert meta is not None
    assert meta["url"] == with_credentials(plain, "alice:***")
    assert fetcher.fetch(url, namespace="private") == path  # a hit with the redacted record
    assert origin.gets[f"/ok/{name}"] == 1

    errors: list[BaseException] = []
    with pytest.raises(ChecksumError) as checksum:
        fetcher.fetch(url, sha256="0" * 64, namespace="private")
    errors.append(checksum.value)
    for path_ in (f"/missing/{name}", f"/status/503/9/{name}", f"/scheme/{name}"):
        with pytest.raises(DownloadError) as failed:
            fetcher.fetch(with_credentials(origin.url(path_)))
        errors.append(failed.value)
    with pytest.raises(DownloadError) as token:
        fetcher.fetch(with_credentials(origin.url(f"/missing/t{name}"), TOKEN))
    errors.append(token.value)
    with pytest.raises(CacheMissError) as miss:
        fetcher.fetch(with_credentials(origin.url(f"/ok/never-{name}")), offline=True)
    errors.append(miss.value)
    for exc in errors:
        shown = f"{exc} {exc!r} {exc.args} {getattr(exc, 'url', '')} {exc.__reduce__()}"
        assert SECRET not in shown, shown
        assert TOKEN not in shown, shown
        assert "alice:***@" in shown or "://***@" in shown, shown

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "fetched " in logged
    assert SECRET not in logged
    assert files_containing(isolated_cache, SECRET) == []

    ls_text = cli("cache", "ls")
    ls_json = cli("cache", "ls", "--json")
    assert ls_text.returncode == ls_json.returncode == 0, ls_text.stderr + ls_json.stderr
    assert with_credentials(plain, "alice:***") in ls_text.stdout
    rows = json.loads(ls_json.stdout)["test_cache"]["entries"]
    assert [r["url"] for r in rows] == [with_credentials(plain, "alice:***")]
    for out in (ls_text, ls_json):
        assert SECRET not in out.stdout + out.stderr


def test_the_command_line_never_prints_the_secret(origin: Origin, name: str) -> None:
    good = with_credentials(origin.url(f"/ok/{name}"))
    done = cli("fetch", good, "--namespace", "private")
    assert done.returncode == 0, done.stderr
    for args in (
        (good, "--sha256", "0" * 64, "--namespace", "other"),
        (with_credentials(origin.url(f"/missing/{name}")),),
        (with_credentials(origin.url(f"/ok/x{name}")), "--offline"),
    ):
        done = cli("fetch", *args)
        assert done.returncode != 0
        assert "alice:***@" in done.stderr, done.stderr
        assert SECRET not in done.stdout + done.stderr


def test_warm_summaries_never_show_the_secret(origin: Origin, name: str, tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        f'[[asset]]\nurl = "{with_credentials(origin.url(f"/ok/{name}"))}"\n'
        f'sha256 = "{"0" * 64}"\nnamespace = "private"\n'
    )
    for extra in ((), ("--json",), ("--check",)):
        done = cli("warm", str(manifest), *extra)
        assert done.returncode == 1
        assert "alice:***@" in done.stdout, done.stdout
        assert SECRET not in done.stdout + done.stderr


def test_a_record_written_before_redaction_is_a_hit_and_is_scrubbed(
    origin: Origin, name: str, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = with_credentials(origin.url(f"/ok/{name}"))
    path = Fetcher().fetch(url, sha256=sha256(body(name)))
    meta = read_meta(str(path))
    assert meta is not None
    write_meta(str(path), {**meta, "url": url})  # what earlier versions recorded
    assert files_containing(isolated_cache, SECRET) != []
    monkeypatch.setenv("CACHEROOT_OFFLINE", "1")
    # A fresh process (nothing remembered) finds it offline: same entry, no request.
    assert Fetcher().fetch(url, sha256=sha256(body(name))) == path
    assert Fetcher().fetch(url) == path
    assert origin.gets[f"/ok/{name}"] == 1
    assert files_containing(isolated_cache, SECRET) == []
    assert os.environ[CACHEROOT]  # the whole root was searched, not just the test cache
    # `cacheroot cache verify` scrubs such records too, without a fetch.
    write_meta(str(path), {**meta, "url": url})
    done = cli("cache", "verify", "--json")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout
    assert files_containing(isolated_cache, SECRET) == []


def test_headers_are_sent_never_recorded_and_not_to_another_origin(
    origin: Origin, name: str, isolated_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cacheroot.fetch")
    bearer = "Bearer T0k3nValue"
    other = Origin().start()
    try:
        f = Fetcher(headers={"Authorization": bearer}, retries=0)
        f.fetch(origin.url(f"/ok/{name}"))
        f.fetch(origin.url(f"/redirect/r{name}"))  # same origin: still sent
        f.fetch(origin.url(f"/goto/g{name}?to={other.base}"))  # another origin: dropped
        f.close()
        assert origin.auths[f"/ok/{name}"] == [bearer]
        assert origin.auths[f"/ok/r{name}"] == [bearer]
        assert origin.auths[f"/goto/g{name}"] == [bearer]
        assert other.auths[f"/ok/g{name}"] == [None]
    finally:
        other.close()
    assert files_containing(isolated_cache, "T0k3nValue") == []
    assert "T0k3nValue" not in "\n".join(r.getMessage() for r in caplog.records)


def test_netrc_credentials_are_used_and_never_recorded(
    origin: Origin, name: str, isolated_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1\n  login bob\n  password N3trcS3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    path = Fetcher().fetch(origin.url(f"/ok/{name}"))
    assert origin.auths[f"/ok/{name}"] == ["Basic " + base64.b64encode(b"bob:N3trcS3cret").decode()]
    assert (read_meta(str(path)) or {})["url"] == origin.url(f"/ok/{name}")
    assert files_containing(isolated_cache, "N3trcS3cret") == []


def test_a_backslash_redirect_does_not_carry_headers_to_another_origin(
    origin: Origin, name: str
) -> None:
    """``http://127.0.0.1:B\\@127.0.0.1:A`` is origin A to urlsplit, but urllib3 connects to B."""
    bearer = "Bearer T0k3nValue"
    other = Origin().start()
    try:
        a_port = origin.base.rsplit(":", 1)[1]
        tricky = f"{other.base}\\@127.0.0.1:{a_port}"
        f = Fetcher(headers={"Authorization": bearer}, retries=0)
        with contextlib.suppress(FetchError):
            f.fetch(origin.url(f"/goto/b{name}?to={quote(tricky, safe='')}"))
        f.close()
        assert origin.auths[f"/goto/b{name}"] == [bearer]
        assert all(auth is None for auths in other.auths.values() for auth in auths), other.auths
    finally:
        other.close()
