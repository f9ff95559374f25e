"""The generated parts of the start-up hook: ``_cacheroot_start``'s templates and
``_cacheroot_compact``'s table.

:mod:`_cacheroot_layout` is the source of truth. :mod:`_cacheroot_start` holds, per tag, the
record the layout derives for a plain environment with the root left out, and the names whose
presence makes an environment not plain. :mod:`_cacheroot_compact` holds a copy of what applying
the layout needs (the names the hook reads, the limits, one tuple per row it may set, and the
layout's own helpers that read, expand and normalise a value). Each sits between two marker
lines. ``nox -s start_table`` (or ``python tests/envs/start_table.py``) writes both;
``test_start.py`` fails when either is stale. The output is formatted as ``ruff format`` leaves
it, and does not depend on the Python version.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import _cacheroot_layout as layout

REPO = Path(__file__).resolve().parents[2]
START = REPO / "sitecustomize" / "src" / "_cacheroot_start.py"
COMPACT = REPO / "packages" / "envs" / "src" / "_cacheroot_compact.py"
BEGIN = "# generated: start (python tests/envs/start_table.py writes it from _cacheroot_layout)"
BEGIN_TEMPLATES = (
    "# generated: templates (python tests/envs/start_table.py writes them from _cacheroot_layout)"
)
END = "# generated part ends"
#: The layout's names that ``_cacheroot_start`` reads, copied as the bytes ``os.environ`` keeps.
START_NAMES = (
    "CACHEROOT",
    "CACHEROOT_APPLIED",
    "CACHEROOT_AUDIT",
    "CACHEROOT_DISABLE",
    "CACHEROOT_PIN_FILE",
    "CACHEROOT_TAG",
)
#: The root the templates are derived under, cut out of each value afterwards.
MARK = "/@"
LINE_LENGTH = 100

#: The layout's names that the fast path reads, copied as they are.
NAMES = (
    "CACHEROOT",
    "CACHEROOT_APPLIED",
    "CACHEROOT_AUDIT",
    "CACHEROOT_DISABLE",
    "CACHEROOT_MEDIA_CACHE",
    "CACHEROOT_OPT_IN",
    "CACHEROOT_PIN_FILE",
    "CACHEROOT_TAG",
    "PIN_FILE",
    "TAGS",
    "VLLM_MEDIA_CACHE",
    "XDG_CACHE_HOME",
    "_NAME_MAX",
    "_PATH_MAX",
)

#: The layout's helpers that the fast path calls, copied as they are (source text): one
#: definition of how a value is read, expanded and normalised, in both modules.
FUNCTIONS = ("_blank", "_expand", "_get", "_inherited", "_inside", "_norm", "truthy")

#: One row: name, path, parent, tags (empty: every tag), opt-in, blank kept, legacy, off.
Row = tuple[str, str, str, tuple[str, ...], bool, bool, tuple[str, ...], tuple[str, ...]]


def rows() -> tuple[Row, ...]:
    """The rows :func:`_cacheroot_layout.resolve` may set, in the table's order (parents first).

    A row the layout never sets is left out: the resolver skips it too, so a child of one is
    unusable either way.
    """
    return tuple(
        (
            v.name,
            v.path,
            v.parent,
            () if v.tags == layout.TAGS else v.tags,
            v.mode == layout.OPT_IN,
            bool(v.blank),
            v.legacy,
            v.off,
        )
        for v in layout.TABLE
        if v.mode in (layout.DEFAULT, layout.OPT_IN)
    )


def _literal(value: object) -> str:
    """``repr`` with double quotes, as ``ruff format`` writes strings (no quote inside)."""
    if isinstance(value, str):
        if '"' in value or "\\" in value:
            raise ValueError(f"{value!r}: expected no quote or backslash in a table value")
        return f'"{value}"'
    if isinstance(value, tuple):
        items = [_literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, frozenset):
        return _literal(tuple(sorted(value)))
    return repr(value)


def _row(row: Row) -> list[str]:
    one = f"    {_literal(row)},"
    if len(one) <= LINE_LENGTH:
        return [one]
    return ["    (", *(f"        {_literal(field)}," for field in row), "    ),"]


def block() -> str:
    """The generated part, marker lines included."""
    lines = [BEGIN]
    lines += [f"{name} = {_literal(getattr(layout, name))}" for name in NAMES]
    lines.append(f"_TRUE = {_literal(layout._TRUE)}")
    lines.append("ROWS = (")
    for row in rows():
        lines += _row(row)
    lines.append(")")
    for name in FUNCTIONS:
        lines += ["", "", inspect.getsource(getattr(layout, name)).rstrip("\n")]
    lines += ["", "", END]
    return "\n".join(lines) + "\n"


def templates() -> dict[str, str]:
    """Per tag (``""`` for none), the record the layout derives for a plain environment, with
    the root cut out of each value: ``NAME=`` and the row's path below the root, a line a row.
    """
    found = {}
    for tag in ("", *layout.TAGS):
        env = {layout.CACHEROOT: MARK, layout.CACHEROOT_TAG: tag}
        layout.hook(env)
        lines = env[layout.CACHEROOT_APPLIED].split("\n")
        for line in lines:
            _, sep, value = line.partition("=")
            if not sep or not value.startswith(MARK) or "=" in value:
                raise ValueError(f"{line!r}: expected NAME={MARK}[/path] from the layout")
        found[tag] = "\n".join(line.replace(f"={MARK}", "=", 1) for line in lines)
    return found


def others() -> tuple[str, ...]:
    """The names whose presence makes an environment not plain: the opt-in switch, the legacy
    names, and the opt-in rows (sorted)."""
    names = {layout.CACHEROOT_OPT_IN}
    for v in layout.TABLE:
        if v.mode in (layout.DEFAULT, layout.OPT_IN):
            names.update(v.legacy)
        if v.mode == layout.OPT_IN:
            names.add(v.name)
    return tuple(sorted(names))


def templates_block() -> str:
    """``_cacheroot_start``'s generated part, marker lines included: the templates, the names
    whose presence hands an environment on, the switch's "on" values, the names it reads and
    where the pin file is by default."""
    lines = [BEGIN_TEMPLATES, "TEMPLATES = {"]
    for tag, record in templates().items():
        rows = record.split("\n")
        lines.append(f'    b"{tag}": (')
        lines += [f'        b"{row}\\n"' for row in rows[:-1]]
        lines += [f'        b"{rows[-1]}"', "    ),"]
    lines.append("}")
    lines.append("OTHERS = (")
    lines += [f'    b"{name}",' for name in others()]
    lines.append(")")
    true = ", ".join(f'b"{value}"' for value in sorted(layout._TRUE))
    lines.append(f"TRUE = ({true})")
    lines += [f'{name} = b"{getattr(layout, name)}"' for name in START_NAMES]
    lines.append(f"PIN_FILE = {_literal(layout.PIN_FILE)}")
    lines.append(END)
    return "\n".join(lines) + "\n"


def current(text: str, begin: str = BEGIN) -> str:
    """The generated part of ``text`` (the module's source), marker lines included."""
    start = text.index(begin)
    end = text.index(END, start) + len(END) + 1
    return text[start:end]


def regenerate() -> list[Path]:
    """Write the generated parts into both modules; those that changed."""
    changed = []
    for path, begin, fresh in (
        (START, BEGIN_TEMPLATES, templates_block()),
        (COMPACT, BEGIN, block()),
    ):
        text = path.read_text(encoding="utf-8")
        new = text.replace(current(text, begin), fresh)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main() -> int:
    """Regenerate; say what changed."""
    changed = regenerate()
    for path in (START, COMPACT):
        what = "regenerated" if path in changed else "unchanged"
        sys.stdout.write(f"{what}: {path.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
