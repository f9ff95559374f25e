"""The generated parts of the documentation: the variable table, the commands, the Python API.

Each lives in a page of ``docs/reference/`` between two markers (``<!-- NAME:start -->`` and
``<!-- NAME:end -->``). ``nox -s readme`` (or ``python tests/docs/reference.py``) writes them;
``test_reference.py`` fails when a page is stale. Everything is read from the code itself: the
layout table, the ``cacheroot`` command's argparse parsers, and each public module's
``__all__`` and docstrings. The output does not depend on the Python version or the terminal.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

#: The public modules, in the order the API page shows them.
PUBLIC = (
    "cacheroot.envs",
    "cacheroot.envs.units",
    "cacheroot.fetch",
    "cacheroot.fetch.store",
    "cacheroot.fetch.vllm_compat",
    "cacheroot.mediacache",
)


def variables_markdown() -> str:
    """The layout table as markdown (what ``cacheroot env --table`` prints)."""
    from cacheroot.envs._export import table_markdown

    return table_markdown()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser``, by name, in the order they were added."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _one_line(text: str) -> str:
    """``text`` on one line, ready for a table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    """The action's help as argparse prints it (``%(default)s`` expanded)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        text = action.help % {**vars(action), "prog": prog}
    except (KeyError, TypeError, ValueError):
        text = action.help
    return _one_line(text)


def _argument(action: argparse.Action) -> str:
    """How the action is written on a command line: ``--sha256 HEX``, ``URL``, ``--json``."""
    if not action.option_strings:
        name = action.metavar or action.dest
        text = str(name)
        if action.nargs in ("*", "+"):
            text += " ..."
        return f"`{text}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.dest.upper()
    return f"`{flags} {value}`"


def _default(action: argparse.Action) -> str:
    """The action's default, where it has one worth showing."""
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, False, [], ()):
        return ""
    return f"`{action.default}`"


def _command(name: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    """One command's section: its description, its arguments, then its subcommands."""
    out = [f"{'#' * level} `{name}`", ""]
    description = parser.description or ""
    if description:
        out += [_one_line(description), ""]
    rows = [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and action.help != argparse.SUPPRESS
    ]
    if rows:
        out += ["| argument | default | what it does |", "| --- | --- | --- |"]
        out += [f"| {_argument(a)} | {_default(a)} | {_help(a, parser.prog)} |" for a in rows]
        out.append("")
    for sub_name, sub in _subparsers(parser).items():
        out += _command(f"{name} {sub_name}", sub, min(level + 1, 4))
    return out


def cli_markdown() -> str:
    """Every ``cacheroot`` command with its arguments, from the installed parsers."""
    from cacheroot.envs._cli import parser

    top = parser()
    out: list[str] = []
    for name, sub in sorted(_subparsers(top).items()):
        summary = ""
        for action in top._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if choice.dest == name:
                        summary = _one_line(choice.help or "")
        out += [f"## `cacheroot {name}`", ""]
        if summary:
            out += [f"*{summary}*", ""]
        body = _command(f"cacheroot {name}", sub, 2)
        out += body[2:]  # the section's own heading is the one above
    return "\n".join(out).rstrip("\n") + "\n"


def _first_paragraph(obj: object) -> str:
    """The first paragraph of ``obj``'s own docstring, on one line, without reST roles."""
    doc = inspect.getdoc(obj) or ""
    paragraph = doc.split("\n\n", 1)[0]
    paragraph = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", paragraph)
    return " ".join(paragraph.replace("``", "`").split())


def _signature(obj: object) -> str:
    """``(url, *, sha256=None)``, or nothing where Python cannot tell.

    Annotations are left out: Python versions print them differently, and the page must not
    depend on the version that generated it.
    """
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    return re.sub(r" at 0x[0-9a-f]+", "", str(bare))


def _entry(module: str, name: str, obj: object) -> list[str]:
    """One public name: its kind, its signature and the first paragraph of its docstring."""
    if inspect.isclass(obj):
        kind = "exception" if issubclass(obj, BaseException) else "class"
        head = f"`{name}{_signature(obj)}`" if kind == "class" else f"`{name}`"
        bases = ", ".join(f"`{b.__name__}`" for b in obj.__bases__ if b is not object)
        doc = _first_paragraph(obj)
        extra = f" ({kind}; from {bases})" if bases else f" ({kind})"
        return [f"- {head}{extra}: {doc}" if doc else f"- {head}{extra}"]
    if callable(obj):
        doc = _first_paragraph(obj)
        head = f"`{name}{_signature(obj)}`"
        return [f"- {head}: {doc}" if doc else f"- {head}"]
    if isinstance(obj, (str, int, float)):
        return [f"- `{name} = {obj!r}`"]
    return [f"- `{name}` ({type(obj).__name__} from `{module}`)"]


def api_markdown() -> str:
    """Each public module's ``__all__``: signatures and the first paragraph of each docstring."""
    out: list[str] = []
    for module_name in PUBLIC:
        module = importlib.import_module(module_name)
        out += [f"## `{module_name}`", ""]
        doc = _first_paragraph(module)
        if doc:
            out += [doc, ""]
        names: list[str] = list(getattr(module, "__all__", ()))
        for name in names:
            out += _entry(module_name, name, getattr(module, name))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


#: Marker name, page, generator.
GENERATED = (
    ("variables", DOCS / "reference" / "variables.md", variables_markdown),
    ("cli", DOCS / "reference" / "cli.md", cli_markdown),
    ("api", DOCS / "reference" / "python-api.md", api_markdown),
)


def block(text: str, name: str) -> str:
    """The text between the markers of ``name`` in ``text``; ValueError without them."""
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"expected the markers {start.strip()} and {end} in the page")
    return text.split(start, 1)[1].split(end, 1)[0]


def regenerate() -> list[Path]:
    """Write every generated block into its page; return the pages that changed."""
    changed: list[Path] = []
    for name, page, generate in GENERATED:
        text = page.read_text(encoding="utf-8")
        old = block(text, name)
        new = generate()
        if old != new:
            start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
            head, rest = text.split(start, 1)
            tail = rest.split(end, 1)[1]
            page.write_text(head + start + new + end + tail, encoding="utf-8")
            changed.append(page)
    return changed


def main() -> int:
    """Regenerate the pages; print which changed."""
    for page in regenerate():
        sys.stdout.write(f"regenerated {page.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
