"""One distribution's files analysed: a :class:`.visitor.Visitor` per module, and
every write and download of the package followed back to the places its path comes from, in
whichever module that lies.

Writes are found three ways: a call that writes or downloads into a path
(:func:`.writes.sink_paths`, :func:`.writes.download_paths`); a call of a function of the package
whose parameter reaches such a write inside it (:func:`.summaries.summarise`); and a write inside
a function that fetches from the network, which makes it a download."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .downloaders import known_downloads
from .modules import module_name
from .summaries import origins, sinks_of, summarise
from .visitor import Visitor

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .downloaders import KnownDownload
    from .findings import Finding, Unfollowed
    from .modules import Package
    from .summaries import Sink


def analyse_package(
    package: Package, files: Iterable[str]
) -> tuple[list[Finding], list[Unfollowed]]:
    """Every finding of ``files`` (modules of ``package``), by file and line, with every write
    of the package followed, and what could not be followed."""
    visitors: dict[int, Visitor] = {}
    for file in files:
        module = package.module(module_name(file))
        if module is not None:
            visitor = Visitor(module, package.dist, package.version, file)
            visitors[id(module)] = visitor
            visitor.collect()
    known: dict[int, list[Sink]] = {}
    names: set[str] = set()
    summaries = summarise([v.m for v in visitors.values()], known, names)
    for visitor in list(visitors.values()):
        for call, path, sink, how in sinks_of(visitor.m, summaries, known, names):
            scope = visitor.m.scope_of.get(call, visitor.m.tree)
            for module, leaf in origins(visitor.m, path, scope):
                owner = visitors.get(id(module))
                if owner is None:  # a module parsed only to follow a value through it
                    owner = Visitor(module, package.dist, package.version, module.file)
                    owner.collect()
                    visitors[id(module)] = owner
                owner.reached(leaf, call=call, path=path, sink=(sink, how), where=visitor)
    found: list[Finding] = []
    unfollowed: list[Unfollowed] = []
    for visitor in visitors.values():
        found += visitor.finish()
        unfollowed += visitor.unfollowed
    found.sort(key=lambda f: (f.file, f.line, f.variable or ""))
    unfollowed.sort(key=lambda u: (u.file, u.line, u.what))
    return found, unfollowed


def downloads(package: Package, files: Iterable[str]) -> list[KnownDownload]:
    """Every call of a known downloader in ``files`` (modules of ``package``), by file and
    line."""
    found: list[KnownDownload] = []
    for file in files:
        module = package.module(module_name(file))
        if module is not None:
            found += known_downloads(module, package.dist, package.version, file)
    return sorted(found, key=lambda d: (d.file, d.line))
