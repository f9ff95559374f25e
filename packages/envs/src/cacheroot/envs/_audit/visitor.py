"""The findings of one module: its places and reads (:mod:`.places`), marked with the writes
their values reach (:mod:`.reach`), folded with their fallbacks (:mod:`.fallbacks`), with the
findings read off its syntax directly (:mod:`.direct`), each classified (:mod:`.kinds`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .._readers import VARIABLES
from .direct import env_entries, temporary, uncached
from .fallbacks import Fallbacks
from .findings import Finding
from .kinds import kind_of
from .limits import WRITTEN_PATH_HOPS
from .names import BASES, CACHE, IPC, JOINERS
from .names import DOWNLOAD as DOWNLOAD_KIND
from .names import dotted as _dotted
from .platforms import runs_on
from .summaries import origins
from .writes import sink_paths

if TYPE_CHECKING:
    from .index import Scope
    from .modules import Module


class Visitor(Fallbacks):
    """Collects and classifies the findings of one :class:`.modules.Module`."""

    def findings(self) -> list[Finding]:
        """Every finding of the module on its own, by line (:attr:`unfollowed` holds what was
        not seen): :meth:`collect`, the writes of this module followed, :meth:`finish`."""
        self.collect()
        for call, path, sink, how in self.sinks():
            scope = self.m.scope_of.get(call, self.m.tree)
            for module, leaf in origins(self.m, path, scope):
                if module is self.m:
                    self.reached(leaf, call=call, path=path, sink=(sink, how), where=self)
        return self.finish()

    def sinks(self) -> list[tuple[ast.Call, ast.expr, str, str]]:
        """``(call, path, kind of sink, how)`` of every write and download of the module."""
        out = []
        for node in self.m.candidates:
            if isinstance(node, ast.Call):
                out += [(node, *each) for each in sink_paths(node, _dotted(node.func))]
        return out

    def finish(self) -> list[Finding]:
        """The findings, once every write of the package has been followed, classified."""
        tied = self.tie(self.reads, self.paths)
        # A read whose name alone does not say "cache" counts once a fixed place falls back on
        # it (``TORCH_EXTENSIONS_DIR``, whose default is built in another function), or once its
        # value reaches a write.
        out = [f for _, f, keep in self.reads if keep or id(f) in tied or id(f) in self.promoted]
        out += [f for _, f in self.paths] + self.overrides + self._children()
        out += self.noted(uncached(self.m, self.dist, self.version, self.file))
        out += self.noted(temporary(self.m, self.dist, self.version, self.file))
        meeting = self._ipc_places()
        for each in out:
            self._classify(each, ipc=id(each) in meeting)
        folded = self.fold()
        out = [f for f in out if id(f) not in folded]
        return sorted(out, key=lambda f: (f.line, f.variable or ""))

    def _children(self) -> list[Finding]:
        """A path beside the source file handed to a child through ``env=``; and what
        :meth:`.reach.Reach.reached` made for writes beside it."""

        out = list(self._extra)
        for key, value, _ in env_entries(self.m):
            scope = self.m.scope_of.get(value, self.m.tree)
            if not any(
                isinstance(o, ast.Name) and o.id == "__file__"
                for _, o in origins(self.m, value, scope)
            ):
                continue
            text = self.m.render(value, scope).text
            found = Finding(self.dist, self.version, self.file, value.lineno, key, text, text, ())
            self.note_of[id(found)] = f"beside the source file, handed to a child as {key}"
            self.node_of[id(found)] = value
            out.append(found)
        return out

    def _ipc_places(self) -> set[int]:
        """The findings (by id) whose place is put in an ``ipc://`` address of this module
        (``"ipc://" + self.prefix + name``): a socket processes meet at."""
        out: set[int] = set()
        for part in self.m.ipc_addresses:
            scope = self.m.scope_of.get(part, self.m.tree)
            for module, leaf in origins(self.m, part, scope):
                found = self.by_source.get(id(leaf)) or self.by_read.get(id(leaf))
                if module is self.m and found is not None:
                    out.add(id(found))
        return out

    def _temporary(self, found: Finding, node: ast.AST | None) -> bool:
        """Whether ``found`` is the temporary directory itself: ``node`` reads only its
        variables (``TMPDIR``, ``TEMP``, ``TMP``), and every write that reaches it makes that
        directory, or a temporary name in it (``makedirs(tmpdir)``, ``mkdtemp(dir=tmpdir)``),
        not a path of its own under it (``tmpdir / "x_cache"``: a cache)."""
        if found.expression != BASES["TMPDIR"] or node is None:
            return False
        names = {read.name for each in ast.walk(node) if (read := self.m.env_read(each))}
        if not names or any(BASES.get(n) != BASES["TMPDIR"] for n in names):
            return False
        written = False
        for where, _, path, leaves in self._writes.values():
            for leaf in leaves:
                if (self.by_source.get(id(leaf)) or self.by_read.get(id(leaf))) is not found:
                    continue
                if _adds(where.m, path, where.m.scope_of.get(path, where.m.tree), 0):
                    return False
                written = True
        return written

    def _classify(self, found: Finding, *, ipc: bool = False) -> None:
        """Set the finding's class (unless known already), reason and platforms; ``ipc``: its
        place is put in an ``ipc://`` address."""

        node = self.node_of.get(id(found))
        if node is not None:
            found.runs_on = runs_on(self.m, node)
        note = self.note_of.get(id(found), "")
        if found.kind != CACHE or found.reason:
            return
        reader = VARIABLES.get(found.variable or "")
        if reader is not None:
            found.kind, found.reason = reader.kind, f"read by {reader.source}"
            return
        if ipc:
            found.kind, found.reason = IPC, "put in an ipc:// address: a socket processes meet at"
            return
        sink, how = self.sink_of.get(id(found), ("", ""))
        names = (found.variable or "", *self._targets(node))
        beside = self.note_of.get(id(found), "").startswith("beside the source")
        written = tuple(sorted(self.written_as.get(id(found), ())))
        scratch = self._temporary(found, node)
        found.kind, found.reason = kind_of(
            names,
            found.expression,
            sink,
            beside_source=beside,
            written=written,
            temporary=scratch,
        )
        found.reason += "".join(f"; {t}" for t in (note, how) if t)
        if found.kind == DOWNLOAD_KIND:
            found.fetched = self.fetched_of.get(id(found))


def _adds(m: Module, path: ast.AST, scope: Scope, hops: int) -> bool:
    """Whether a written path adds a part of its own to the place it lies in (a join, ``/``,
    ``+``, an f-string), through the values of the names it uses, :data:`WRITTEN_PATH_HOPS`
    names deep."""
    for part in ast.walk(path):
        if isinstance(part, ast.BinOp | ast.JoinedStr):
            return True
        if isinstance(part, ast.Call):
            name = _dotted(part.func)
            if name in JOINERS or name.endswith("path.join"):
                return True
        if isinstance(part, ast.Name) and hops < WRITTEN_PATH_HOPS:
            for value in m.values_of(part.id, scope) or ():
                if _adds(m, value, m.scope_of.get(value, m.tree), hops + 1):
                    return True
    return False
