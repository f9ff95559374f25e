"""Fallbacks: the fixed places a variable falls back on, tied to its finding. A fixed place in a
function that read a cache variable earlier is that variable's default (:meth:`Fallbacks.tie`);
where a written path comes from one variable and from fixed places put there only when it is
unset, those places are folded into the variable's finding (:meth:`Fallbacks.fold`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .index import UNFOLLOWED
from .names import BASES, ENVIRON, GATING
from .names import dotted as _dotted
from .platforms import runs_on
from .reach import Reach
from .reads import EnvRead
from .values import trivial

if TYPE_CHECKING:
    from .findings import Finding
    from .index import Scope
    from .modules import Module


class Fallbacks(Reach):
    """A module's findings, with the fixed places each variable falls back on."""

    def __init__(self, module: Module, dist: str, version: str, file: str) -> None:
        super().__init__(module, dist, version, file)
        #: Whether a place (by id) falls back on a variable's finding (by id).
        self._fallback_of: dict[tuple[int, int], bool] = {}

    def tie(
        self, reads: list[tuple[EnvRead, Finding, bool]], paths: list[tuple[ast.AST, Finding]]
    ) -> set[int]:
        """Tie fallbacks to the variable read before them; the ids of the reads tied to.

        A fixed location in a function that read a cache variable earlier (or in a function
        whose caller did, before the call) is that variable's default; so is another variable
        read in the ``else`` of an ``if`` that tested the first (tiktoken's legacy name).
        """
        by_scope: dict[Scope, list[Finding]] = {}
        by_node: dict[ast.AST, Finding] = {}
        for read, found, _ in reads:
            by_scope.setdefault(read.scope, []).append(found)
            by_node[read.node] = found
        # Module constants that hold a read (``CACHE_DIR = os.getenv("X_CACHE_DIR")``): a
        # function that uses one has read that variable where it uses it.
        held: dict[str, Finding] = {}
        for name, values in self.m.assigns.get(self.m.tree, {}).items():
            if len(values) == 1:
                inner = next((by_node[n] for n in ast.walk(values[0]) if n in by_node), None)
                if inner is not None:
                    held[name] = inner
        tied: set[int] = set()

        def before(scope: Scope, line: int) -> Finding | None:
            if isinstance(scope, ast.Module):
                return None
            earlier = [f for f in by_scope.get(scope, []) if f.line <= line]
            for name, read in held.items():
                uses = self.m.loads.get(name, [])
                if any(self.m.scope_of.get(u) is scope and u.lineno <= line for u in uses):
                    earlier.append(read)
            return max(earlier, key=lambda f: f.line) if earlier else None

        for top, found in paths:
            scope = self.m.scope_of.get(top, self.m.tree)
            first = before(scope, found.line)
            if first is None and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                for call in self.m.calls.get(scope.name, []):
                    first = before(self.m.scope_of.get(call, self.m.tree), call.lineno)
                    if first is not None:
                        break
            if first is not None and first.variable:
                found.fallback_of = (first.variable, first.line)
                tied.add(id(first))
        for read, found, _ in reads:
            test = self._guarding_test(read.node)
            if test is None:
                continue
            names = [
                r.name
                for n in ast.walk(test)
                if (r := self._presence_or_read(n)) is not None and r.name != read.name
            ]
            if names:
                found.fallback_of = (names[0], test.lineno)
        return tied

    def _presence_or_read(self, node: ast.AST) -> EnvRead | None:
        """A read, or ``"NAME" in os.environ``."""
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and _dotted(node.comparators[0]) in ENVIRON
        ):
            scope = self.m.scope_of.get(node, self.m.tree)
            name = self.m.string(node.left, scope)
            return EnvRead(node, name, None, scope) if name else None
        return self.m.env_read(node)

    def _guarding_test(self, node: ast.AST) -> ast.expr | None:
        """The test of the ``if`` in whose ``else`` branch ``node`` lies, if any."""
        child: ast.AST = node
        parent = self.m.parent.get(node)
        while parent is not None and not isinstance(parent, ast.FunctionDef | ast.Module):
            if isinstance(parent, ast.If) and child in parent.orelse:
                return parent.test
            child, parent = parent, self.m.parent.get(parent)
        return None

    def fold(self) -> set[int]:
        """Fold the fixed places a variable falls back on into its finding (once classified);
        the ids of the findings folded.

        Where a written path comes from one variable and from fixed places besides it, on the
        same platforms, each put there only when the variable is unset or its place is no good
        (``base = os.environ.get("X_HOME", "~/.x")``, then ``base = "/tmp/.x"`` under ``if not
        os.access(base, os.W_OK)``; ``if "X_HOME" in os.environ: ... else: ...``), those places
        are the variable's defaults. Where the variable's place gates, its finding's default
        becomes the chain (``~/.x, else /tmp/.x``), and a fixed place's own (gating) finding is
        dropped when every write it reaches is such a one of the same variable. Places that do
        not gate are listed as they are.
        """
        chains: dict[int, list[tuple[int, int, str]]] = {}
        variables: dict[int, Finding] = {}
        owner: dict[int, Finding | None] = {}  # id of a fixed place's finding -> its variable's
        fixed_findings: dict[int, Finding] = {}
        for where, _, path, leaves in self._writes.values():
            variable, fixed = self._alternatives(leaves)
            if variable is not None and variable.kind not in GATING:
                variable = None
            texts: dict[int, tuple[int, int, str]] = {}
            if variable is not None:
                falling = [
                    (leaf, held)
                    for leaf, held in fixed
                    if all(f.kind in GATING for f in held) and self._falls_back(leaf, variable)
                ]
                texts = self._fallback_texts(variable, where, path, falling)
                variables[id(variable)] = variable
                chains.setdefault(id(variable), []).extend(texts.values())
            for leaf, held in fixed:
                into = variable if id(leaf) in texts else None
                for found in held:
                    fixed_findings[id(found)] = found
                    # Folded only while every write it reaches folds it into the same one.
                    same = into is not None and owner.get(id(found), into) is into
                    owner[id(found)] = into if same else None
        for key, found in variables.items():
            self._chain(found, [text for _, _, text in sorted(set(chains[key]))])
        folded: set[int] = set()
        for key, into in owner.items():
            if into is not None:
                folded.add(key)
                into.style = tuple(sorted({*into.style, *fixed_findings[key].style}))
        return folded

    def _alternatives(
        self, leaves: list[ast.AST]
    ) -> tuple[Finding | None, list[tuple[ast.AST, list[Finding]]]]:
        """Of the origins that reached one write: the one variable's finding (``None`` when
        there is none, or more than one), and each fixed place with its findings (none for a
        base no finding holds), on the variable's platforms."""
        variables: list[Finding] = []
        fixed: list[tuple[ast.AST, list[Finding]]] = []
        for leaf in leaves:
            read = self.m.env_read(leaf)
            if read is not None and read.name not in BASES:
                found = self.by_read.get(id(leaf))
                if found is not None and not any(found is v for v in variables):
                    variables.append(found)
                continue
            if isinstance(leaf, ast.arg) or (isinstance(leaf, ast.Name) and leaf.id == "__file__"):
                continue
            if isinstance(leaf, ast.Call) and not self.m.base_call(leaf):
                continue  # a helper or a location function of the package: not a fixed place
            held = [self.by_source[id(leaf)]] if id(leaf) in self.by_source else []
            held = held or self._held_by(leaf)
            if any(f.variable for f in held):  # a place under another variable (XDG)
                variables += [f for f in held if not any(f is v for v in variables)]
                continue
            fixed.append((leaf, held))
        if len(variables) != 1:
            return None, fixed
        variable = variables[0]
        platforms = runs_on(self.m, self.node_of[id(variable)])
        same = [(leaf, held) for leaf, held in fixed if runs_on(self.m, leaf) == platforms]
        if len(same) != len(fixed):
            return None, fixed  # another platform's place: listed apart
        inside = {id(n) for n in ast.walk(self.node_of[id(variable)])}
        return variable, [(leaf, held) for leaf, held in fixed if id(leaf) not in inside]

    def _falls_back(self, leaf: ast.AST, variable: Finding) -> bool:
        """Whether ``leaf`` is put in place only when ``variable`` is unset or its value is no
        good: it, or a value given to a name that carries it and not the variable (``base =
        FALLBACK``), lies in a branch of an ``if`` whose test reads the variable, asks whether
        it is set, or uses a name its value is given to (``if not os.access(base, os.W_OK)``)."""
        key = (id(leaf), id(variable))
        if key not in self._fallback_of:
            self._fallback_of[key] = self._falls_back_at(leaf, variable)
        return self._fallback_of[key]

    def _falls_back_at(self, leaf: ast.AST, variable: Finding) -> bool:
        read = self.node_of[id(variable)]
        if self._guarded(leaf, variable, read):
            return True
        return any(
            self._guarded(value, variable, read)
            for names in self.m.assigns.values()
            for values in names.values()
            for value in values
            if value is not UNFOLLOWED
            and value is not leaf
            and self.m.leads(value, leaf)
            and not self.m.leads(value, read)
        )

    def _guarded(self, node: ast.AST, variable: Finding, read: ast.AST) -> bool:
        """Whether ``node`` lies in a branch of an ``if`` (in its function) whose test reads
        ``variable``, asks whether it is set, or uses a name its value is given to."""
        child: ast.AST = node
        parent = self.m.parent.get(node)
        while parent is not None and not isinstance(parent, ast.Module):
            if isinstance(parent, ast.If | ast.IfExp) and child is not parent.test:
                for part in ast.walk(parent.test):
                    named = self._presence_or_read(part)
                    if named is not None and named.name == variable.variable:
                        return True
                    if isinstance(part, ast.Name) and self.m.leads(part, read):
                        return True
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                return False
            child, parent = parent, self.m.parent.get(parent)
        return False

    def _fallback_texts(
        self,
        variable: Finding,
        where: Reach,
        path: ast.expr,
        fixed: list[tuple[ast.AST, list[Finding]]],
    ) -> dict[int, tuple[int, int, str]]:
        """Each fixed place as the variable's default: the written path rendered through it,
        less what the write adds to the variable's place (``/models`` of ``join(base,
        "models")``); a place's own finding where the write is in another module. By the id
        of each place whose text is more than a bare base, ``(line, column, text)``, for the
        order they are written in."""
        suffix: str | None = None
        if where is self:
            scope = self.m.scope_of.get(path, self.m.tree)
            through = self.m.render_via(path, scope, self.node_of[id(variable)]).text
            if through.startswith(variable.expression):
                suffix = through[len(variable.expression) :]
        out: dict[int, tuple[int, int, str]] = {}
        for leaf, held in fixed:
            text = ""
            if suffix is not None:
                scope = self.m.scope_of.get(path, self.m.tree)
                through = self.m.render_via(path, scope, leaf).text
                if through.endswith(suffix):
                    text = through[: len(through) - len(suffix)] if suffix else through
            if not text and held:
                text = held[0].expression
            if text and not trivial(text):
                line, column = getattr(leaf, "lineno", 0), getattr(leaf, "col_offset", 0)
                out[id(leaf)] = (line, column, text)
        return out

    def _chain(self, found: Finding, texts: list[str]) -> None:
        """Give a variable's finding the fixed places it falls back on: its default becomes
        the chain (``~/.x, else /tmp/.x``); a bare ``$X`` becomes ``${X:-<first of them>}``."""
        chain = [found.default] if found.default else []
        chain += [t for t in texts if t not in chain and t != found.expression]
        if not chain or chain == [found.default]:
            return
        if found.variable and found.expression == f"${found.variable}":
            found.expression = f"${{{found.variable}:-{chain[0]}}}"
        found.fallbacks = tuple(t for t in chain if t != found.default)
        found.default = ", else ".join(chain)
