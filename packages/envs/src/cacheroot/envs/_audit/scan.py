"""Sources analysed: each :class:`.sources.Source` read by :mod:`.sources`, its files worth
parsing chosen by the words they hold, analysed as one package (:mod:`.analysis`); what was read
and what could not be, counted in :class:`Stats`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .analysis import analyse_package, downloads
from .downloaders import NEEDLES as DOWNLOADER_NEEDLES
from .modules import Package
from .sources import read, read_installed

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from .downloaders import KnownDownload
    from .findings import Finding, Unfollowed
    from .sources import Source


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
    b'="./',  # a default relative to the working directory (``save_path="./checkpoints"``)
    b"='./",
)
#: A file with none of :data:`_NEEDLES` is still read when it may download into a place decided
#: in another module of its package (``download_file(response, get_cache_folder())``); other
#: modules are read only when a value is followed into them (each of a few more words here
#: cost seconds on vLLM's wheel, and found nothing more on the measured corpus).
_LINK_NEEDLES = (b"download",)


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


def _scan_source(source: Source, stats: Stats) -> list[Finding]:
    """The findings of one source, counted in ``stats`` with what of it was not read."""
    stats.sources += 1
    stats.shipped_tests += source.shipped_tests
    stats.compiled += source.compiled
    if source.compiled:
        stats.compiled_by[source.dist] = stats.compiled_by.get(source.dist, 0) + source.compiled
    stats.native += source.native
    stats.unreadable += source.unreadable
    return scan_package(
        source.files, dist=source.dist, version=source.version, stats=stats, own=source.own
    )


def scan_installed(stats: Stats, path: list[str] | None = None) -> Iterator[Finding]:
    """Every finding of the distributions installed on ``path`` (default: ``sys.path``)."""
    for source in read_installed(path):
        yield from _scan_source(source, stats)


def scan(paths: Iterable[str], stats: Stats) -> Iterator[Finding]:
    """The findings of each path (a wheel, an sdist or a directory); of the environment when
    there are none."""
    for source in read(paths):
        yield from _scan_source(source, stats)
