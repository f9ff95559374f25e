"""The warm manifest: a TOML file listing what a test suite needs in its caches.

Two kinds of entries, as arrays of tables, and one setting at the top::

    hub_cache = true              # optional: the suite runs through the hub cache (pytest
                                  # --cacheroot-hub); warm also leaves, in the volume's hub
                                  # store, the answers its metadata calls need (hubanswers.py)

    [[asset]]                     # a file fetched by URL into $_VLLM_TEST_CACHE/<namespace>/
    url = "https://example.org/data/gsm8k-test.jsonl"
    sha256 = "0f3c...64 hex digits"
    namespace = "gsm8k"           # or nested, as vLLM's tests name theirs: "gpt_oss/tiktoken"
    filename = "test.jsonl"       # optional: the entry's name (default: derived from the URL)
    extract = false               # optional: unpack a zip/tar next to it
    max_unpacked = "40G"          # optional, with extract: the unpacked size bound (16G)
    urls = ["https://mirror.example.org/gsm8k-test.jsonl"]   # optional: fallback URLs of the
                                  # same bytes, tried in order when url fails; the entry stays
                                  # url's (its name, its record, the CI cache key)

    [[model]]                     # a hub snapshot, downloaded by the hub's own client
    hub = "hf"                    # or "modelscope"
    repo_id = "org/tiny-model"
    revision = "4f1c...40 hex"    # a commit hash; a branch name works but is not reproducible
    branch = "main"               # optional (hf, with a commit): the branch the commit came
                                  # from; warm writes refs/main -> the commit, so a test asking
                                  # for revision="main" resolves it offline
    allow_patterns = ["*.json", "*.safetensors"]   # optional (a string or a list)
    ignore_patterns = ["*.bin"]                    # optional
    repo_type = "model"                            # optional: "model" (default) or "dataset"

Validation is strict, because a typo (``sha265``) must not silently turn a check off: unknown
keys are errors, and every error names the file, the entry, the field, what was expected and
what was found.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from cacheroot.envs.units import parse_size

from .._errors import FetchError
from .._models.model import FIELDS as _MODEL_FIELDS
from .._models.model import HUBS, REPO_TYPES, Model
from .._naming import check_filename, check_namespace, entry_name
from .._redact import redact_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_SCHEMES = ("http://", "https://", "file://")


class ManifestError(FetchError, ValueError):
    """The manifest cannot be read or an entry is invalid; nothing was fetched."""

    def __init__(self, path: str, where: str, problem: str) -> None:
        where, problem = redact_url(where), redact_url(problem)  # a URL's credentials
        at = f" {where}:" if where else ""
        super().__init__(f"{path}:{at} {problem}")
        self._path, self._where, self._problem = path, where, problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._path, self._where, self._problem))

    @property
    def path(self) -> str:
        """The manifest file."""
        return self._path

    @property
    def where(self) -> str:
        """The entry and field at fault (``[[asset]] #3, field 'sha256'``), or empty."""
        return self._where


class Asset:
    """One ``[[asset]]`` entry: a URL fetched into ``$_VLLM_TEST_CACHE/<namespace>/``."""

    __slots__ = (
        "extract",
        "filename",
        "index",
        "max_unpacked",
        "namespace",
        "sha256",
        "url",
        "urls",
    )

    def __init__(
        self,
        *,
        url: str,
        sha256: str,
        namespace: str,
        filename: str | None = None,
        extract: bool = False,
        max_unpacked: int | None = None,
        index: int = 0,
        urls: tuple[str, ...] = (),
    ) -> None:
        self.url = url
        #: Fallback URLs of the same bytes, tried in order after ``url`` (and its mirrors).
        self.urls = tuple(urls)
        self.sha256 = sha256
        self.namespace = namespace
        self.filename = filename
        self.extract = extract
        self.max_unpacked = max_unpacked
        self.index = index

    def __repr__(self) -> str:
        return f"Asset({redact_url(self.url)!r}, namespace={self.namespace!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Asset):
            return NotImplemented
        return (self.as_dict(), self.urls) == (other.as_dict(), other.urls)

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    @property
    def label(self) -> str:
        """How summaries name the entry (a URL's credentials redacted)."""
        return f"[[asset]] #{self.index} {redact_url(self.url)}"

    def as_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready fields: what names and checks it (not its fallback URLs,
        which change where the bytes may come from, not which bytes are cached)."""
        return {
            "url": self.url,
            "sha256": self.sha256,
            "namespace": self.namespace,
            "filename": self.filename,
            "extract": self.extract,
            "max_unpacked": self.max_unpacked,
        }


class Manifest:
    """A parsed manifest: its ``path``, ``assets`` and ``models`` in file order, and whether
    warming it keeps the hub cache's answers too (``hub_cache``)."""

    __slots__ = ("assets", "hub_cache", "models", "path")

    def __init__(
        self, path: str, assets: list[Asset], models: list[Model], *, hub_cache: bool = False
    ) -> None:
        self.path = path
        self.assets = assets
        self.models = models
        self.hub_cache = hub_cache

    def __repr__(self) -> str:
        return f"Manifest({self.path!r}, assets={len(self.assets)}, models={len(self.models)})"


def _name_problem(value: str) -> str:
    """Why ``value`` cannot be one path component of the cache, or ``""``."""
    if not value.strip():
        return "is blank"
    if "/" in value or "\\" in value or "\x00" in value:
        return "contains a path separator or NUL"
    if value in (".", "..") or value.startswith("."):
        return "starts with a dot (reserved for the cache's own files)"
    if len(value.encode("utf-8", "surrogateescape")) > 200:
        return "is longer than 200 bytes"
    return ""


class _Entry:
    """Reads the fields of one table, recording which were used, with precise errors."""

    def __init__(self, path: str, kind: str, index: int, table: object) -> None:
        self.path = path
        self.where = f"[[{kind}]] #{index}"
        if not isinstance(table, dict):
            raise ManifestError(path, self.where, f"expected a table, found {_kind(table)}")
        self.table: dict[str, Any] = table

    def fail(self, field: str, expected: str, found: object) -> ManifestError:
        shown = found if isinstance(found, str) and found.startswith("(") else repr(found)
        return ManifestError(
            self.path, f"{self.where}, field {field!r}", f"expected {expected}, found {shown}"
        )

    def text(self, field: str, *, required: bool = True) -> str | None:
        if field not in self.table:
            if required:
                raise self.fail(field, "a string", "(missing)")
            return None
        value = self.table[field]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field, "a non-blank string", value)
        return value

    def patterns(self, field: str) -> tuple[str, ...] | None:
        value = self.table.get(field)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(field, "a glob string or a list of glob strings", value)
        return tuple(value)

    def only(self, allowed: tuple[str, ...]) -> None:
        extra = sorted(set(self.table) - set(allowed))
        if extra == ["hub_cache"]:
            raise ManifestError(
                self.path,
                f"{self.where}, field 'hub_cache'",
                "hub_cache is a setting of the whole manifest: put it at the top, above the "
                "first [[asset]] or [[model]]",
            )
        if extra:
            raise ManifestError(
                self.path,
                f"{self.where}, field {extra[0]!r}",
                f"unknown field (a typo?); expected one of {', '.join(allowed)}",
            )


def _kind(value: object) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


_ASSET_FIELDS = ("url", "sha256", "namespace", "filename", "extract", "max_unpacked", "urls")


def _asset(path: str, index: int, table: object) -> Asset:
    e = _Entry(path, "asset", index, table)
    e.only(_ASSET_FIELDS)
    url = e.text("url")
    assert url is not None  # noqa: S101 - required
    if not url.startswith(_SCHEMES):
        raise e.fail("url", "an http://, https:// or file:// URL", url)
    sha = e.text("sha256")
    assert sha is not None  # noqa: S101 - required
    if not _HEX64.match(sha):
        raise e.fail("sha256", "64 hexadecimal digits (sha256sum FILE)", sha)
    namespace = e.text("namespace")
    assert namespace is not None  # noqa: S101 - required
    try:
        check_namespace(namespace)
    except ValueError as exc:
        raise ManifestError(path, f"{e.where}, field 'namespace'", str(exc)) from None
    filename = e.text("filename", required=False)
    if filename is not None:
        try:
            check_filename(filename)
        except ValueError as exc:
            raise ManifestError(path, f"{e.where}, field 'filename'", str(exc)) from None
    extract = e.table.get("extract", False)
    if not isinstance(extract, bool):
        raise e.fail("extract", "true or false", extract)
    max_unpacked = _size(e, "max_unpacked")
    if max_unpacked is not None and not extract:
        raise ManifestError(
            path,
            f"{e.where}, field 'max_unpacked'",
            "applies only with extract = true (it bounds what the archive unpacks to): add "
            "extract = true, or remove it",
        )
    return Asset(
        url=url,
        sha256=sha.lower(),
        namespace=namespace,
        filename=filename,
        extract=extract,
        max_unpacked=max_unpacked,
        index=index,
        urls=_fallbacks(e, url),
    )


def _fallbacks(e: _Entry, url: str) -> tuple[str, ...]:
    """The ``urls`` field: fallback URLs of ``url``'s bytes, each once and none ``url`` itself."""
    value = e.table.get("urls", [])
    expected = "a list of http://, https:// or file:// URLs (fallbacks of url)"
    if not isinstance(value, list):
        raise e.fail("urls", expected, value)
    for n, item in enumerate(value, 1):
        if not isinstance(item, str) or not item.startswith(_SCHEMES):
            raise e.fail(f"urls[{n}]", expected, item)
        if item == url or value.index(item) != n - 1:
            raise e.fail(f"urls[{n}]", "a URL other than url and the earlier urls", item)
    return tuple(value)


def _size(e: _Entry, field: str) -> int | None:
    """A size field: bytes as an integer, or a string such as ``"40G"`` (the units of every
    cacheroot command, :mod:`cacheroot.envs.units`)."""
    value = e.table.get(field)
    if value is None:
        return None
    expected = 'a size: bytes (an integer) or a string such as "40G" or "500M"'
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise e.fail(field, expected, value)
    if isinstance(value, int):
        if value < 0:
            raise e.fail(field, expected, value)
        return value
    try:
        return parse_size(value)
    except ValueError:
        raise e.fail(field, expected, value) from None


def _model(path: str, index: int, table: object) -> Model:
    e = _Entry(path, "model", index, table)
    e.only(_MODEL_FIELDS)
    hub = e.text("hub")
    if hub not in HUBS:
        raise e.fail("hub", " or ".join(repr(h) for h in HUBS), hub)
    repo_id = e.text("repo_id")
    assert repo_id is not None  # noqa: S101 - required
    parts = repo_id.split("/")
    shape = (2,) if hub == "modelscope" else (1, 2)
    if (
        len(parts) not in shape
        or any(_name_problem(p) for p in parts)
        or repo_id != repo_id.strip()
    ):
        raise e.fail(
            "repo_id",
            "'owner/name'" + ("" if hub == "modelscope" else " (or a bare name)"),
            repo_id,
        )
    revision = e.text("revision")
    assert revision is not None  # noqa: S101 - required
    repo_type = e.text("repo_type", required=False) or "model"
    if repo_type not in REPO_TYPES:
        raise e.fail("repo_type", " or ".join(repr(t) for t in REPO_TYPES), repo_type)
    branch = e.text("branch", required=False)
    allow, ignore = e.patterns("allow_patterns"), e.patterns("ignore_patterns")
    try:
        return Model(
            hub=hub,
            repo_id=repo_id,
            revision=revision,
            allow_patterns=allow,
            ignore_patterns=ignore,
            repo_type=repo_type,
            branch=branch,
            index=index,
        )
    except ValueError as exc:  # only branch is left unchecked here: its rules live on Model
        raise ManifestError(path, f"{e.where}, field 'branch'", str(exc)) from None


def parse_manifest(text: str, *, path: str = "<manifest>") -> Manifest:
    """Parse and validate manifest ``text``; ``path`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(path, "", f"is not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"asset", "model", "hub_cache"})
    if extra:
        raise ManifestError(
            path,
            f"key {extra[0]!r}",
            "unknown top-level key; expected only hub_cache and [[asset]] and [[model]] entries",
        )
    hub_cache = data.get("hub_cache", False)
    if not isinstance(hub_cache, bool):
        raise ManifestError(path, "key 'hub_cache'", f"expected true or false, found {hub_cache!r}")
    tables: dict[str, list[Any]] = {}
    for kind in ("asset", "model"):
        value = data.get(kind, [])
        if not isinstance(value, list):
            raise ManifestError(
                path,
                f"key {kind!r}",
                f"expected an array of tables [[{kind}]], found {_kind(value)}",
            )
        tables[kind] = value
    assets = [_asset(path, i, t) for i, t in enumerate(tables["asset"], 1)]
    models = [_model(path, i, t) for i, t in enumerate(tables["model"], 1)]
    _no_duplicates(path, assets, models)
    return Manifest(path, assets, models, hub_cache=hub_cache)


def _no_namespace_through_an_entry(path: str, assets: list[Asset]) -> None:
    """Refuse a namespace nested in another asset's entry (``a/x`` where ``a/x`` is a file of
    namespace ``a``): the fetch of one or the other would fail, or write into the other."""
    entries = {f"{a.namespace}/{a.filename or entry_name(a.url)}": a for a in assets}
    for a in assets:
        parts = a.namespace.split("/")
        for depth in range(2, len(parts) + 1):
            other = entries.get("/".join(parts[:depth]))
            if other is not None:
                raise ManifestError(
                    path,
                    f"[[asset]] #{a.index}, field 'namespace'",
                    f"{a.namespace!r} runs through the entry {'/'.join(parts[:depth])!r} of "
                    f"[[asset]] #{other.index}; a namespace cannot be inside an entry: rename "
                    "one of them",
                )


def _no_duplicates(path: str, assets: list[Asset], models: list[Model]) -> None:
    _no_namespace_through_an_entry(path, assets)
    seen: dict[tuple[str, ...], Asset] = {}
    for a in assets:
        key = (a.namespace, a.filename or "", "" if a.filename else a.url)
        first = seen.setdefault(key, a)
        if first is not a:
            raise ManifestError(
                path,
                f"[[asset]] #{a.index}",
                f"names the same cache entry as [[asset]] #{first.index} "
                f"(namespace {a.namespace!r}, {a.filename or a.url}); keep one of them",
            )
    seen_models: dict[tuple[str, ...], Model] = {}
    for m in models:
        mkey = (m.hub, m.repo_type, m.repo_id, m.revision)
        first_m = seen_models.setdefault(mkey, m)
        if first_m is not m and first_m.as_dict() != m.as_dict():
            raise ManifestError(
                path,
                f"[[model]] #{m.index}",
                f"repeats [[model]] #{first_m.index} ({m.repo_id}@{m.revision}) with other "
                "patterns or another branch; merge them into one entry",
            )


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read, parse and validate the manifest at ``path``."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ManifestError(p, "", f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(p, "", f"is not UTF-8 text ({exc})") from None
    return parse_manifest(text, path=p)
