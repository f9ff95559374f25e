"""Where the pinned sdists come from: the package index this machine's pip is configured with.

pip cannot download an sdist without preparing its metadata, and for vLLM that means building it
(torch and all). So the ``upstream`` session asks pip only *which* index it uses
(:func:`configured_index`), finds the file on that index's simple API (:func:`sdist_url`: PEP 691
JSON, else the PEP 503 HTML page) and downloads it itself (:func:`download`), checked against the
sha256 pinned in ``wheels.toml``. Whatever mirror pip is pointed at serves it, so no host is
written here, and a mirror that serves other bytes is caught by the checksum, not trusted.

An index URL may carry credentials (``https://user:token@mirror/simple``), as pip allows. urllib
cannot send them from the URL, so they go as HTTP Basic authorization to that host only (a
redirect elsewhere, say to a storage bucket, does not get them), and every message shows the URL
with them replaced by ``***``.

Standard library only: ``noxfile.py`` imports it in the Python that runs nox, before any session
has a venv.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urldefrag, urljoin, urlsplit, urlunsplit
from urllib.request import (
    BaseHandler,
    HTTPBasicAuthHandler,
    HTTPPasswordMgrWithPriorAuth,
    Request,
    build_opener,
)

if TYPE_CHECKING:
    from http.client import HTTPResponse
    from pathlib import Path

#: What the simple API page is asked as: PEP 691 JSON, with PEP 503 HTML as the fallback that
#: every index serves.
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
#: The index ``pip download --help`` shows: "(default URL)". pip's help shows each option's value
#: after its configuration is applied, which for ``--index-url`` is the index ``pip download`` uses.
_HELP_DEFAULT = re.compile(r"--index-url\s+<url>\s[^(]*\(default\s+(\S+?)\)")
#: A terminal colour code, should one get through.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: One line of ``pip config list``: ``section.key='value'``.
_CONFIG_LINE = re.compile(r"^(?P<key>[^=\s]+)=(?P<value>'.*'|\".*\")$")
#: Run by the given Python: nothing when pip is importable there, else the path of the pip wheel
#: its ``ensurepip`` installs (importable from a path entry, as pip supports): bundled with
#: CPython, or in the distribution's ``WHEEL_PKG_DIR`` (Debian's and Ubuntu's Pythons bundle
#: none); fails without both.
_FIND_PIP = """\
import importlib.util, pathlib, sys, sysconfig
if importlib.util.find_spec("pip") is None:
    import ensurepip
    places = [pathlib.Path(ensurepip.__file__).parent / "_bundled"]
    places += [pathlib.Path(p) for p in [sysconfig.get_config_var("WHEEL_PKG_DIR")] if p]
    sys.stdout.write(str(max(w for place in places for w in place.glob("pip-*.whl"))))
"""
#: How long pip may take to read its configuration or print its help.
PIP_TIMEOUT = 120.0


class NoIndexError(LookupError):
    """No index URL came from ``PIP_INDEX_URL``, pip's configuration, or pip itself."""


class NotOnIndexError(LookupError):
    """The index has no page for the project, or its page does not list the file."""


class FetchError(OSError):
    """A page or file could not be read: an HTTP error, an unreachable host, a timeout."""


class ChecksumError(ValueError):
    """The bytes downloaded are not the pinned ones; nothing was left at the target path."""


def redact(url: str) -> str:
    """``url`` with its credentials, if any, replaced by ``***``: safe to print or log."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def normalize(name: str) -> str:
    """The PEP 503 form of a project name, which the simple API's page is named by."""
    return re.sub(r"[-_.]+", "-", name).lower()


def configured_index(python: str) -> str:
    """The index URL ``python``'s pip downloads from: what the ``upstream`` session must use.

    ``PIP_INDEX_URL`` when set and not blank; else what ``python -m pip download --help`` shows
    as the default of ``--index-url``. pip's help shows an option's value after its configuration
    is applied, with pip's own precedence (``PIP_INDEX_URL`` over a ``[download]`` section over
    ``[global]``; ``PIP_CONFIG_FILE`` over the site, user and global files; ``[install]`` not
    read), and pip's built-in default when nothing is configured, so no host is written here.
    ``pip config get`` would not do: it reads the user's file (or the venv's) alone.

    The help shows a password as ``****``: the configured URL is then taken from ``pip config
    list``. A Python without pip (a venv made by uv) is answered by the pip wheel its ``ensurepip``
    bundles, which reads the same files.
    """
    from_env = os.environ.get("PIP_INDEX_URL", "").strip()
    if from_env:
        return from_env
    env = _pip_environ(python)
    env.pop("PIP_INDEX_URL", None)  # blank: pip would take "" for the index
    env.pop("FORCE_COLOR", None)
    # Plain text, one line per option: no colour codes, no wrapping inside a URL.
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1", COLUMNS="1000")
    done = _pip(python, env, "download", "--help")
    found = _HELP_DEFAULT.search(_ANSI.sub("", done.stdout))
    if done.returncode != 0 or found is None:
        raise NoIndexError(
            f"PIP_INDEX_URL is not set and `{python} -m pip download --help` shows no index URL "
            f"({_last_line(done.stderr or done.stdout)}); set PIP_INDEX_URL"
        )
    shown = found[1]
    if "****" not in urlsplit(shown).netloc.rpartition("@")[0]:
        return shown
    listed = _pip(python, env, "config", "list")
    configured = {
        value
        for key, value in _config_values(listed.stdout)
        if key.endswith(".index-url") and _masked(value) == shown
    }
    if len(configured) != 1:
        raise NoIndexError(
            f"pip's index {shown} has credentials that its help hides and `{python} -m pip "
            "config list` does not tell apart; set PIP_INDEX_URL"
        )
    return configured.pop()


def sdist_url(index: str, name: str, filename: str, *, timeout: float = 60) -> str:
    """The absolute URL of ``filename`` on the simple API page of ``name`` on ``index``.

    The page is asked for as PEP 691 JSON, and read as the PEP 503 HTML page when the index
    answers that instead. Relative links are resolved against the page's URL (after redirects),
    the ``#sha256=`` fragment is dropped (the pinned sha256 is checked after the download), and
    a link to the index's own host gets the index's credentials, as pip gives it.
    """
    page = f"{index.rstrip('/')}/{normalize(name)}/"
    _require_http(page)
    try:
        with _open(page, timeout, {"Accept": ACCEPT}) as resp:
            final = resp.url
            kind = resp.headers.get_content_type()
            text = resp.read().decode(resp.headers.get_content_charset() or "utf-8")
    except HTTPError as exc:
        exc.close()  # its body (the error page) is not read
        if exc.code == 404:
            raise NotOnIndexError(
                f"{filename}: the index {redact(index)} has no page for {name!r} "
                f"({redact(page)} answered 404)"
            ) from exc
        raise FetchError(f"{redact(page)}: HTTP {exc.code} {exc.reason}") from exc
    except OSError as exc:
        raise FetchError(f"{redact(page)}: {_reason(exc)}") from exc
    if kind == "application/json" or kind.endswith("+json"):
        links = _json_links(text, filename, page)
    else:
        links = _html_links(text, filename, final)
    if not links:
        raise NotOnIndexError(
            f"{filename}: not listed on {redact(page)}, the page of {name!r} on the index "
            f"{redact(index)}"
        )
    return _with_credentials(urldefrag(urljoin(final, links[0])).url, index)


def download(url: str, path: Path, sha256: str, *, timeout: float = 60) -> None:
    """Fetch ``url`` to ``path`` if its bytes have sha256 ``sha256``; else leave nothing there.

    The bytes go to ``<path>.part``, hashed as they arrive, and replace ``path`` only once the
    digest matches: an interrupted or wrong download never looks like the pinned file.
    """
    _require_http(url)
    part = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        try:
            with _open(url, timeout, {}) as resp, part.open("wb") as out:
                for block in iter(lambda: resp.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
        except HTTPError as exc:
            exc.close()
            raise FetchError(f"{redact(url)}: HTTP {exc.code} {exc.reason}") from exc
        except OSError as exc:
            raise FetchError(f"{redact(url)}: {_reason(exc)}") from exc
    except BaseException:
        part.unlink(missing_ok=True)  # interrupted too: no partial file is left behind
        raise
    if digest.hexdigest() != sha256:
        part.unlink()
        raise ChecksumError(f"{redact(url)}: sha256 {digest.hexdigest()}, expected {sha256}")
    part.replace(path)


# -- pip ------------------------------------------------------------------------------------------
def _pip_environ(python: str) -> dict[str, str]:
    """The environment to run ``python -m pip`` in: this one, plus ensurepip's pip if needed."""
    try:
        found = subprocess.run(
            [python, "-c", _FIND_PIP],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoIndexError(
            f"PIP_INDEX_URL is not set and {python} cannot be run to ask its pip ({exc}); "
            "set PIP_INDEX_URL"
        ) from exc
    if found.returncode != 0:
        raise NoIndexError(
            f"PIP_INDEX_URL is not set and {python} has no pip to ask (nor a pip bundled with "
            f"ensurepip: {_last_line(found.stderr)}); install pip there or set PIP_INDEX_URL"
        )
    env = dict(os.environ)
    if found.stdout:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [found.stdout, env.get("PYTHONPATH")]))
    return env


def _pip(python: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pip ARGS`` in ``env``, its output captured; a failure to run is an error."""
    try:
        return subprocess.run(
            [python, "-m", "pip", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=PIP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoIndexError(f"`{python} -m pip {' '.join(args)}` did not run: {exc}") from exc


def _config_values(listing: str) -> list[tuple[str, str]]:
    """The ``(section.key, value)`` pairs of ``pip config list``'s output."""
    pairs = []
    for line in listing.splitlines():
        found = _CONFIG_LINE.match(line.strip())
        if found is not None:
            value = ast.literal_eval(found["value"])
            if isinstance(value, str):
                pairs.append((found["key"], value))
    return pairs


def _masked(url: str) -> str:
    """``url`` as pip prints it: the password as ``****``, a lone user name (a token) too."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    shown = f"{quote(unquote(user))}:****" if colon else "****"
    return urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))


def _last_line(text: str) -> str:
    """The last non-blank line of ``text`` (where a traceback or pip says what went wrong)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


# -- HTTP -----------------------------------------------------------------------------------------
def _require_http(url: str) -> None:
    """Only http(s) is read: a file:// index is not something the session is pointed at."""
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{redact(url)}: only http:// and https:// URLs are read here")


def _open(url: str, timeout: float, headers: dict[str, str]) -> HTTPResponse:
    """GET ``url``, with its credentials (if any) sent as Basic authorization to its host only.

    The password manager is told the credentials are good up front, so they go with the first
    request, and only to requests under ``scheme://host:port/``: a redirect to another host
    (a storage bucket) does not carry them, one on the same host does.
    """
    parts = urlsplit(url)
    handlers: list[BaseHandler] = []
    if "@" in parts.netloc:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        parts = parts._replace(netloc=hostport)
        passwords = HTTPPasswordMgrWithPriorAuth()
        origin = f"{parts.scheme}://{hostport}/"
        passwords.add_password(None, origin, unquote(user), unquote(password), True)
        handlers.append(HTTPBasicAuthHandler(passwords))
    request = Request(urlunsplit(parts), headers=headers)
    resp: HTTPResponse = build_opener(*handlers).open(request, timeout=timeout)
    return resp


def _reason(exc: OSError) -> str:
    """What went wrong, without the traceback: a URLError's reason, else the error itself."""
    return str(exc.reason) if isinstance(exc, URLError) else str(exc)


def _with_credentials(url: str, index: str) -> str:
    """``url`` with ``index``'s credentials when it is on the index's host and has none."""
    target, source = urlsplit(url), urlsplit(index)
    if "@" not in source.netloc or "@" in target.netloc:
        return url
    userinfo, _, hostport = source.netloc.rpartition("@")
    if (target.scheme, target.netloc) != (source.scheme, hostport):
        return url
    return urlunsplit(target._replace(netloc=f"{userinfo}@{target.netloc}"))


# -- the simple API -------------------------------------------------------------------------------
def _json_links(text: str, filename: str, page: str) -> list[str]:
    """The ``url`` of each PEP 691 ``files`` entry named ``filename``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise FetchError(f"{redact(page)}: not JSON, though it said so ({exc})") from exc
    files = data.get("files") if isinstance(data, dict) else None
    return [
        str(entry["url"])
        for entry in (files if isinstance(files, list) else [])
        if isinstance(entry, dict) and entry.get("filename") == filename and "url" in entry
    ]


def _html_links(text: str, filename: str, final: str) -> list[str]:
    """The hrefs of the PEP 503 anchors for ``filename``, made absolute against the page.

    An anchor matches by its text (PEP 503: the filename) or by the last segment of its href's
    path, as pip matches it; a ``<base href>`` changes what relative links are resolved against.
    """
    anchors = _Anchors()
    anchors.feed(text)
    anchors.close()
    base = urljoin(final, anchors.base) if anchors.base else final
    return [
        urljoin(base, href)
        for href, label in anchors.links
        if label.strip() == filename or unquote(urlsplit(href).path.rpartition("/")[2]) == filename
    ]


class _Anchors(HTMLParser):
    """Every ``<a href>`` of a page with its text, and the page's ``<base href>`` if any."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.base = ""
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "base" and href and not self.base:
            self.base = href
        elif tag == "a" and href is not None:
            self.handle_endtag("a")  # an anchor left open ends where the next one starts
            self._href, self._text = href, []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text)))
            self._href = None
