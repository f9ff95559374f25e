"""Values followed into writes: each origin of a written or downloaded path (an environment
read, a fixed base, ``__file__``, a location function given a fixed name) marks the finding of
its place with the sink it reaches, or makes one for a place no name made a finding."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .downloaders import fetched
from .findings import HELPER, Finding
from .names import BASES, JOINERS, SHM, TMP_DIRS, TMP_PREFIXES, WRAPPERS
from .names import dotted as _dotted
from .places import Places, place_key
from .platforms import runs_on
from .values import style_of
from .variables import written_file
from .writes import DOWNLOAD, FETCHED, SINK_RANK

if TYPE_CHECKING:
    from .downloaders import Fetched
    from .modules import Module


class Reach(Places):
    """A module's places, marked with the writes their values reach (:meth:`reached`)."""

    def __init__(self, module: Module, dist: str, version: str, file: str) -> None:
        super().__init__(module, dist, version, file)
        #: Findings made only because a write reached them (beside the source file).
        self._extra: list[Finding] = []
        #: The sink each finding's value reaches, and a note on where it lies.
        self.sink_of: dict[int, tuple[str, str]] = {}
        self.note_of: dict[int, str] = {}
        #: The download each finding's chosen sink is, where the code is one's own.
        self.fetched_of: dict[int, Fetched] = {}
        self._beside: set[tuple[int, int]] = set()
        #: The names of the written paths a leaf reached, and those of a finding.
        self._written: dict[int, set[str]] = {}
        self.written_as: dict[int, set[str]] = {}
        #: Per write reached (by the ids of its call and path): the module it is in, the call,
        #: the path, and the origins of this module that reached it.
        self._writes: dict[tuple[int, int], tuple[Reach, ast.Call, ast.expr, list[ast.AST]]]
        self._writes = {}

    def _mark(
        self,
        found: Finding,
        sink: tuple[str, str],
        leaf: ast.AST | None = None,
        got: Fetched | None = None,
    ) -> None:
        """Note the sink a finding's value reaches (a download says more than a write), with
        the download it is (``got``), and the names of the paths written (``lock_dir``)."""
        if leaf is not None:
            self.written_as.setdefault(id(found), set()).update(self._written.get(id(leaf), ()))
        known = self.sink_of.get(id(found))
        if known is None or SINK_RANK.get(known[0], 0) < SINK_RANK.get(sink[0], 0):
            self.sink_of[id(found)] = sink
            if got is not None:
                self.fetched_of[id(found)] = got
            else:
                self.fetched_of.pop(id(found), None)

    def reached(
        self,
        leaf: ast.AST,
        *,
        call: ast.Call,
        path: ast.expr,
        sink: tuple[str, str],
        where: Reach,
    ) -> None:
        """Note that ``leaf`` (of this module) reached the write ``call`` (of ``where``'s
        module): mark its finding, make one for a read no name made a place, for a bare base,
        for a path beside the source file, for a location function given a fixed name; count a
        helper."""
        line = f"line {call.lineno}" if where is self else f"{where.file}:{call.lineno}"
        how = (sink[0], f"{sink[1]} ({line})")
        self._note_write(where, call, path, leaf)
        got = where.download(call, path, sink[0], line)
        self._written.setdefault(id(leaf), set()).update(_identifiers(path))
        read = self.m.env_read(leaf)
        if read is not None and read.name not in BASES:
            found = self.by_read.get(id(leaf))
            if found is None:
                made = self._read_finding(read, force=True)
                if made is None:
                    return
                found = made[0]
                self.reads.append((read, found, True))
                self.by_read[id(leaf)] = found
            self.promoted.add(id(found))
            self._mark(found, how, leaf, got)
        elif isinstance(leaf, ast.Name) and leaf.id == "__file__" and where is self:
            top = self._beside_top(leaf)
            inside = any(n is top for n in ast.walk(call))
            named = top is not leaf and not self._bare_source_dir(top)
            if not inside and named:
                # ``DATA = Path(__file__).parent / "data"``: the place is where it is named.
                found = self._place_at(top, how, got)
                if found is not None:
                    self.note_of.setdefault(id(found), f"beside the source file: {sink[1]}")
                return
            if (id(call), id(path)) in self._beside:
                return
            self._beside.add((id(call), id(path)))
            scope = self.m.scope_of.get(call, self.m.tree)
            text = self.m.render(path, scope).text
            found = Finding(self.dist, self.version, self.file, call.lineno, None, text, text, ())
            self.note_of[id(found)] = f"beside the source file: {sink[1]} ({line})"
            self.node_of[id(found)] = call
            self._mark(found, (sink[0], ""), got=got)
            self.by_source[id(call)] = found
            self._extra.append(found)
        elif isinstance(leaf, ast.Name) and leaf.id == "__file__":
            # Written from another module: the place is the path built beside the source here.
            found = self._place_at(self._beside_top(leaf), how, got)
            if found is not None:
                self.note_of.setdefault(id(found), "beside the source file")
        elif id(leaf) in self.by_source:
            self._mark(self.by_source[id(leaf)], how, leaf, got)
        elif (
            self._bare(leaf)
            or (isinstance(leaf, ast.expr) and runs_on(self.m, leaf))
            or (sink[0] in (DOWNLOAD, FETCHED) and _relative(leaf))
        ):
            # (the value given on one platform's branch, :func:`.summaries.origins` says; a
            # relative default a download lands in, ``save_path="./checkpoints"``)
            self._place_at(leaf, how, got)
        elif isinstance(leaf, ast.Call) and self.m.helper(leaf):
            self._unfollowed(leaf, HELPER)

    def _note_write(self, where: Reach, call: ast.Call, path: ast.expr, leaf: ast.AST) -> None:
        """Note that ``leaf`` reached the write ``call`` (of ``where``'s module) of ``path``."""
        reaching = self._writes.setdefault((id(call), id(path)), (where, call, path, []))[3]
        if not any(leaf is known for known in reaching):
            reaching.append(leaf)

    def download(self, call: ast.Call, path: ast.expr, sink: str, at: str) -> Fetched | None:
        """The download a write or download of this module (``at``) is, in a source tree of
        one's own (the audit tells what to call instead only there)."""
        if sink not in (DOWNLOAD, FETCHED) or self.m.package is None or not self.m.package.own:
            return None
        return fetched(self.m, call, path, fetching=sink == FETCHED, at=at)

    def _beside_top(self, leaf: ast.AST) -> ast.AST:
        """The path built from ``__file__`` around ``leaf``: through ``dirname``, ``Path``,
        ``.parent`` and joins; the source file's own directory when nothing is added to it."""
        top: ast.AST = leaf
        bare: ast.AST = leaf
        while True:
            up = self.m.parent.get(top)
            if isinstance(up, ast.Call) and top in up.args:
                name = _dotted(up.func)
                if not (name in JOINERS or name in WRAPPERS or name == "os.path.dirname"):
                    break
                if len(up.args) == 1:
                    bare = up
            elif isinstance(up, ast.Attribute) and up.attr in ("parent", "parents"):
                bare = up
            elif not (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div) and top is up.left):
                break
            top = up
        return bare if top is bare else top

    def _bare_source_dir(self, top: ast.AST) -> bool:
        """Whether a path built from ``__file__`` adds no fixed name (``Path(__file__).parent``)."""
        return not any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(top)
        )

    def _held_by(self, leaf: ast.AST) -> list[Finding]:
        """The findings made where a name given ``leaf`` as its one value is used."""
        parent = self.m.parent.get(leaf)
        if not isinstance(parent, ast.Assign | ast.AnnAssign) or parent.value is not leaf:
            return []
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        return [
            self.by_source[id(load)]
            for name in names
            for load in self.m.loads.get(name, [])
            if id(load) in self.by_source
        ]

    def _bare(self, leaf: ast.AST) -> bool:
        """A base no finding holds yet (``expanduser("~")``, ``"/var/tmp"``, a location
        function of the package given a fixed name, a file under the home directory left out
        for its configuration file's ending): a place once a write reaches it."""
        if isinstance(leaf, ast.Constant):
            if not isinstance(leaf.value, str):
                return False
            if leaf.value.startswith("~/") and self._is_source(leaf):
                # A configuration file's ending under home, written: a place all the same.
                return written_file(self.m.render_from(leaf, self._outermost(leaf)[0]).text)
            return leaf.value in (*TMP_DIRS, SHM) or leaf.value.startswith(TMP_PREFIXES)
        if isinstance(leaf, ast.Call):
            return (
                self.m.base_call(leaf)
                or self.m.function_at(leaf, self.m.scope_of.get(leaf, self.m.tree)) is not None
            )
        return False

    def _place_at(
        self, leaf: ast.AST, how: tuple[str, str], got: Fetched | None = None
    ) -> Finding | None:
        """The finding of the place built from ``leaf``, made if there is none, marked."""
        held = self._held_by(leaf)
        if held:  # ``home = os.getenv("HOME")``: the places are where ``home`` is used
            for found in held:
                self._mark(found, how, leaf, got)
            return held[0]
        top, nested = self._outermost(leaf)
        outer = self._first_outer_read(leaf) if nested else None
        if outer is not None:  # in a variable's default: that read's place
            if id(outer) in self.by_read:
                self._mark(self.by_read[id(outer)], how, leaf, got)
                return self.by_read[id(outer)]
            return None
        key = place_key(self.m, leaf, top)
        known = self.by_top.get(key)
        if known is None and len(key) == 1:
            known = self.by_source.get(id(top))
        if known is not None:
            self._mark(known, how, leaf, got)
            return known
        rendered = self.m.render_from(leaf, top)
        variable = rendered.first_variable if rendered.root in ("xdg", "var") else None
        text = rendered.text
        found = Finding(
            self.dist, self.version, self.file, getattr(top, "lineno", 0), variable, text, text,
            style_of(rendered),
        )  # fmt: skip
        self.node_of[id(found)] = top
        self.by_source[id(leaf)] = self.by_top[key] = found
        if len(key) == 1:  # (a place in one arm of a conditional is not the whole of it)
            self.by_source[id(top)] = found
        self.paths.append((top, found))
        self._mark(found, how, leaf, got)
        return found


def _relative(leaf: ast.AST) -> bool:
    """Whether ``leaf`` is a literal path relative to the working directory (``"./x"``)."""
    return (
        isinstance(leaf, ast.Constant)
        and isinstance(leaf.value, str)
        and leaf.value.startswith("./")
        and len(leaf.value) > len("./")
    )


def _identifiers(node: ast.AST) -> set[str]:
    """The names and attributes a path expression is written with (``lock_dir``)."""
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }
