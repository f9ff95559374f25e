"""The findings of one module: its places and reads (:mod:`.places`), marked with the writes
their values reach (:mod:`.reach`), folded with their fallbacks (:mod:`.fallbacks`), with the
findings read off its syntax directly (:mod:`.direct`), each classified (:mod:`.kinds`)."""

from __future__ import annotations

import ast

from .._readers import VARIABLES
from .direct import env_entries, temporary, uncached
from .fallbacks import Fallbacks
from .findings import Finding
from .kinds import kind_of
from .names import CACHE
from .names import DOWNLOAD as DOWNLOAD_KIND
from .names import dotted as _dotted
from .platforms import runs_on
from .summaries import origins
from .writes import sink_paths


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
        for each in out:
            self._classify(each)
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

    def _classify(self, found: Finding) -> None:
        """Set the finding's class (unless known already), reason and platforms."""

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
        sink, how = self.sink_of.get(id(found), ("", ""))
        names = (found.variable or "", *self._targets(node))
        beside = self.note_of.get(id(found), "").startswith("beside the source")
        written = tuple(sorted(self.written_as.get(id(found), ())))
        found.kind, found.reason = kind_of(
            names, found.expression, sink, beside_source=beside, written=written
        )
        found.reason += "".join(f"; {t}" for t in (note, how) if t)
        if found.kind == DOWNLOAD_KIND:
            found.fetched = self.fetched_of.get(id(found))
