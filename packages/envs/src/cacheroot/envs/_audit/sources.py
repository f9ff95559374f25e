"""The first stage that touches files: installed distributions, wheels, sdists and source trees,
read into one :class:`Source` each.

Archives are streamed member by member and nothing is extracted or imported, so an archive from
an untrusted index is as safe to audit as the environment itself. What cannot be read (compiled
modules, native sources, shipped tests) is counted on the source, so the report can say so."""

from __future__ import annotations

import os
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from importlib.metadata import distributions
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator


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
class Source:
    """The Python files of one distribution or source tree, and what of it was not read."""

    dist: str
    version: str
    #: Path inside the distribution -> source, for every Python file that is no shipped test.
    files: dict[str, bytes] = field(default_factory=dict)
    #: A source tree given to the audit: code of one's own, whose downloads the report tells how
    #: to rewrite (an installed library's cannot be).
    own: bool = False
    shipped_tests: int = 0
    compiled: int = 0
    native: int = 0
    unreadable: list[str] = field(default_factory=list)

    def count_blind(self, name: str) -> None:
        """Count a file the audit cannot read: a compiled module, a native source."""
        if name.endswith(COMPILED_SUFFIXES) or ".so." in name.rsplit("/", 1)[-1]:
            self.compiled += 1
        elif name.endswith(NATIVE_SUFFIXES):
            self.native += 1


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


def read_wheel(path: str) -> Source:
    """A wheel's Python files, read member by member (nothing is extracted)."""
    dist, version = _name_version(path)
    source = Source(dist, version)
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            name = info.filename
            if name.endswith(".py") and shipped_test(name):
                source.shipped_tests += 1
            elif name.endswith(".py"):
                source.files[name] = wheel.read(info)
            else:
                source.count_blind(name)
    return source


def read_sdist(path: str) -> Source:
    """A source archive's Python files, streamed (``name-version/`` is cut off each path)."""
    dist, version = _name_version(path)
    source = Source(dist, version)
    with tarfile.open(path, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            name = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if not name.endswith(".py"):
                source.count_blind(name)
                continue
            if shipped_test(name):
                source.shipped_tests += 1
                continue
            handle = archive.extractfile(member)
            if handle is None:  # pragma: no cover - regular members always have a handle
                continue
            source.files[name] = handle.read()
    return source


def read_directory(path: str) -> Source:
    """A source tree's Python files (paths relative to it; VCS and build folders skipped): code
    of one's own."""
    source = Source(os.path.basename(os.path.abspath(path)), "", own=True)
    for current, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            full = os.path.join(current, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            if not name.endswith(".py"):
                source.count_blind(name)
                continue
            try:
                with open(full, "rb") as f:
                    data = f.read()
            except OSError as exc:
                source.unreadable.append(f"{rel}: {exc.strerror}")
                continue
            source.files[rel] = data
    return source


def read_installed(path: list[str] | None = None) -> Iterator[Source]:
    """The distributions installed on ``path`` (default: ``sys.path``), each once."""
    done: set[str] = set()
    found = distributions() if path is None else distributions(path=path)
    for dist in found:
        name = dist.metadata["Name"] or ""
        key = _normal(name)
        if not key or key in done:
            continue  # a distribution found twice on the path: the first one is imported
        done.add(key)
        version = dist.version
        source = Source(key, version)
        for file in dist.files or ():
            rel = str(file)
            if not rel.endswith(".py"):
                source.count_blind(rel)
                continue
            if shipped_test(rel):
                source.shipped_tests += 1
                continue
            try:
                data = file.read_binary()
            except OSError as exc:
                source.unreadable.append(f"{key}=={version} {rel}: {exc.strerror}")
                continue
            source.files[rel] = data
        yield source


def read(paths: Iterable[str]) -> Iterator[Source]:
    """Each path read (a wheel, an sdist or a directory); the environment when there are none.
    Every path is checked before anything is read: a typo should not cost a whole scan."""
    targets = list(paths)
    if not targets:
        yield from read_installed()
        return
    missing = [t for t in targets if not os.path.exists(t)]
    if missing:
        raise ValueError(
            f"{', '.join(repr(t) for t in missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist: name directories, wheels (.whl) "
            "or sdists (.tar.gz) that exist, or nothing to audit the installed distributions"
        )
    for target in targets:
        if os.path.isdir(target):
            yield read_directory(target)
        elif target.endswith((".whl", ".zip")):
            yield read_wheel(target)
        elif target.endswith((".tar.gz", ".tgz")):
            yield read_sdist(target)
        else:
            raise ValueError(
                f"{target!r} is neither a directory, a wheel (.whl) nor an sdist (.tar.gz): "
                "pass one of those, or nothing to audit the installed distributions"
            )
