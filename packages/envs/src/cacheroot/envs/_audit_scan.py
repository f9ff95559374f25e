"""The static audit's readers: installed distributions, wheels, sdists and source trees.

Archives are streamed member by member and nothing is extracted or imported, so an archive
from an untrusted index is as safe to audit as the environment itself. What cannot be read
(compiled modules, native sources) is counted in :class:`Stats`, so the report can say so.
"""

from __future__ import annotations

import ast
import os
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from importlib.metadata import distributions
from typing import TYPE_CHECKING

from ._audit_ast import Finding, Unfollowed, analyse
from ._audit_downloaders import NEEDLES as DOWNLOADER_NEEDLES
from ._audit_package import Package, analyse_package, downloads

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ._audit_downloaders import KnownDownload

#: A file of Python source is parsed only if it holds one of these byte strings: every pattern
#: the visitor recognises needs one of them, and most of an environment's files hold none.
_NEEDLES = (
    b"environ",
    b"getenv",
    b"expanduser",
    b"home(",
    b"gettempdir",
    b"/tmp",
    b"user_cache",
    b"~/",
    b"open(",
    b"mkdir",
    b"makedirs",
    b"_dir=",
    b"_root=",
    b"urlopen",
    b"urlretrieve",
    b"requests.",
    b"get_dir",
    b"save_pretrained",
    b"__file__",
    b"setenv",
    b"putenv",
    b"mkdtemp",
    b"mkstemp",
    b"TemporaryDirectory",
    b"NamedTemporaryFile",
)
#: A file with none of :data:`_NEEDLES` is still read when it may download into a place decided
#: in another module of its package (``download_file(response, get_cache_folder())``); other
#: modules are read only when a value is followed into them (each of a few more words here
#: cost seconds on vLLM's wheel, and found nothing more on the measured corpus).
_LINK_NEEDLES = (b"download",)
#: Files that hold code the audit cannot read (compiled modules, native sources).
COMPILED_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".rs")
#: Directories a scan of a source tree never enters.
_SKIP_DIRS = frozenset(
    {".git", ".hg", ".nox", ".tox", ".venv", "venv", "node_modules", "__pycache__", "build"}
)
#: Parts of a distribution's tree whose code is not run by using it.
_TEST_PARTS = frozenset({"tests", "test", "testing", "benchmarks", "examples"})
#: Endings of a test module's name (``ops_test.py``, the other convention to ``test_ops.py``).
_TEST_SUFFIXES = ("_test.py", "_tests.py")


@dataclass
class Stats:
    """What a scan read, and what it could not read."""

    sources: int = 0
    python_files: int = 0
    parsed: int = 0
    unparsable: list[str] = field(default_factory=list)
    compiled: int = 0
    native: int = 0
    shipped_tests: int = 0
    unreadable: list[str] = field(default_factory=list)
    #: What the analysis could not follow, and the compiled modules, per distribution.
    unfollowed: list[Unfollowed] = field(default_factory=list)
    compiled_by: dict[str, int] = field(default_factory=dict)
    #: The calls of known downloaders in the source trees read (code of one's own).
    downloads: list[KnownDownload] = field(default_factory=list)


def scan_source(data: bytes, *, dist: str, version: str, file: str, stats: Stats) -> list[Finding]:
    """The findings of one Python file on its own (nothing when none of the patterns can
    occur in it)."""
    stats.python_files += 1
    if not any(needle in data for needle in _NEEDLES):
        return []
    try:
        tree = ast.parse(data, filename=file)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        stats.unparsable.append(f"{dist} {file}" if dist else file)
        return []
    stats.parsed += 1
    found, unfollowed = analyse(tree, dist=dist, version=version, file=file)
    stats.unfollowed += unfollowed
    return found


def scan_package(
    sources: dict[str, bytes], *, dist: str, version: str, stats: Stats, own: bool = False
) -> list[Finding]:
    """The findings of one distribution's Python files (``path -> source``), values followed
    across its modules; files where none of the patterns can occur are read only to follow.
    A source tree of one's own (``own``) is read for its known downloaders' calls too."""
    stats.python_files += len(sources)
    needles = (*_NEEDLES, *DOWNLOADER_NEEDLES) if own else _NEEDLES
    chosen = [f for f, data in sources.items() if any(n in data for n in needles)]
    linked = [
        f
        for f, data in sources.items()
        if f not in chosen and any(n in data for n in _LINK_NEEDLES)
    ]
    package = Package(dist, version, sources, own=own)
    found, unfollowed = analyse_package(package, [*chosen, *linked])
    if own:
        stats.downloads += downloads(package, [*chosen, *linked])
    stats.parsed += len(chosen) + len(linked) - len(package.unparsable)
    stats.unparsable += [f"{dist} {f}" if dist else f for f in package.unparsable]
    stats.unfollowed += unfollowed
    return found


def shipped_test(path: str) -> bool:
    """Whether a file of a distribution is test, benchmark or example code (not run by using
    the distribution, so not audited in one; a source tree's own tests are): ``conftest.py``,
    ``test_*.py``, ``*_test.py``, ``*_tests.py``, or a file under ``tests/``, ``test/``,
    ``testing/``, ``benchmarks/`` or ``examples/``."""
    *dirs, name = path.split("/")
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith(_TEST_SUFFIXES)
        or not _TEST_PARTS.isdisjoint(dirs)
    )


def _count_blind(name: str, stats: Stats, dist: str = "") -> None:
    if name.endswith(COMPILED_SUFFIXES) or ".so." in name.rsplit("/", 1)[-1]:
        stats.compiled += 1
        stats.compiled_by[dist] = stats.compiled_by.get(dist, 0) + 1
    elif name.endswith(NATIVE_SUFFIXES):
        stats.native += 1


_WHEEL_NAME = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-.*)?\.whl")
_SDIST_SUFFIXES = (".tar.gz", ".tgz", ".zip")


def _name_version(path: str) -> tuple[str, str]:
    """The distribution's name (PEP 503) and version an archive's file name gives. A wheel's
    name holds no hyphen (PEP 427), so it ends at the first; an sdist's name may hold some
    (``openai-clip-1.0.1.tar.gz``), so it ends at the last hyphen before a part that starts
    with a digit, the version."""
    base = os.path.basename(path)
    match = _WHEEL_NAME.fullmatch(base)
    if match is not None:
        return _normal(match["name"]), match["version"]
    stem = next((base[: -len(s)] for s in _SDIST_SUFFIXES if base.endswith(s)), base)
    parts = stem.split("-")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i][:1].isdigit():
            return _normal("-".join(parts[:i])), "-".join(parts[i:])
    return _normal(stem), ""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def scan_wheel(path: str, stats: Stats) -> Iterator[Finding]:
    """Every finding of a wheel, read member by member (nothing is extracted)."""
    dist, version = _name_version(path)
    stats.sources += 1
    sources: dict[str, bytes] = {}
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            name = info.filename
            if name.endswith(".py") and shipped_test(name):
                stats.shipped_tests += 1
            elif name.endswith(".py"):
                sources[name] = wheel.read(info)
            else:
                _count_blind(name, stats, dist)
    yield from scan_package(sources, dist=dist, version=version, stats=stats)


def scan_sdist(path: str, stats: Stats) -> Iterator[Finding]:
    """Every finding of a source archive, streamed (``name-version/`` is cut off each path)."""
    dist, version = _name_version(path)
    stats.sources += 1
    sources: dict[str, bytes] = {}
    with tarfile.open(path, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            name = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if not name.endswith(".py"):
                _count_blind(name, stats, dist)
                continue
            if shipped_test(name):
                stats.shipped_tests += 1
                continue
            handle = archive.extractfile(member)
            if handle is None:  # pragma: no cover - regular members always have a handle
                continue
            sources[name] = handle.read()
    yield from scan_package(sources, dist=dist, version=version, stats=stats)


def scan_directory(path: str, stats: Stats) -> Iterator[Finding]:
    """Every finding of a source tree (paths relative to it; VCS and build folders skipped)."""
    stats.sources += 1
    label = os.path.basename(os.path.abspath(path))
    sources: dict[str, bytes] = {}
    for current, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            full = os.path.join(current, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            if not name.endswith(".py"):
                _count_blind(name, stats, label)
                continue
            try:
                with open(full, "rb") as f:
                    data = f.read()
            except OSError as exc:
                stats.unreadable.append(f"{rel}: {exc.strerror}")
                continue
            sources[rel] = data
    yield from scan_package(sources, dist=label, version="", stats=stats, own=True)


def scan_installed(stats: Stats, path: list[str] | None = None) -> Iterator[Finding]:
    """Every finding of the distributions installed on ``path`` (default: ``sys.path``)."""
    done: set[str] = set()
    found = distributions() if path is None else distributions(path=path)
    for dist in found:
        name = dist.metadata["Name"] or ""
        key = _normal(name)
        if not key or key in done:
            continue  # a distribution found twice on the path: the first one is imported
        done.add(key)
        stats.sources += 1
        version = dist.version
        sources: dict[str, bytes] = {}
        for file in dist.files or ():
            rel = str(file)
            if not rel.endswith(".py"):
                _count_blind(rel, stats, key)
                continue
            if shipped_test(rel):
                stats.shipped_tests += 1
                continue
            try:
                data = file.read_binary()
            except OSError as exc:
                stats.unreadable.append(f"{key}=={version} {rel}: {exc.strerror}")
                continue
            sources[rel] = data
        yield from scan_package(sources, dist=key, version=version, stats=stats)


def scan(paths: Iterable[str], stats: Stats) -> Iterator[Finding]:
    """The findings of each path (a wheel, an sdist or a directory); of the environment when
    there are none."""
    targets = list(paths)
    if not targets:
        yield from scan_installed(stats)
        return
    missing = [t for t in targets if not os.path.exists(t)]
    if missing:  # before anything is read: a typo should not cost a whole scan
        raise ValueError(
            f"{', '.join(repr(t) for t in missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist: name directories, wheels (.whl) "
            "or sdists (.tar.gz) that exist, or nothing to audit the installed distributions"
        )
    for target in targets:
        if os.path.isdir(target):
            yield from scan_directory(target, stats)
        elif target.endswith((".whl", ".zip")):
            yield from scan_wheel(target, stats)
        elif target.endswith((".tar.gz", ".tgz")):
            yield from scan_sdist(target, stats)
        else:
            raise ValueError(
                f"{target!r} is neither a directory, a wheel (.whl) nor an sdist (.tar.gz): "
                "pass one of those, or nothing to audit the installed distributions"
            )
