"""Property: the static audit's findings do not depend on the order of the code (issue 32).

Small packages are drawn from a fixed set of shapes (two reads each written, in both arms of a
conditional expression, in both branches of an ``if``, one with a default, fixed places in both
arms), each read given to the path as it is, through a helper, or through a helper that calls
a helper, each unit in a function of its own. The same package is then written a second way:
the functions in another order, the arms and branches swapped, the helpers defined after their
use or moved to a module of their own. Both must give the same findings, and every variable
drawn must be among them.
"""

from __future__ import annotations

import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cacheroot.envs._audit import audit

#: The helpers the shapes call: a join, and a helper that calls it (a helper reached from
#: several call sites, and from inside another helper).
HELPERS = """\
def under(v):
    return os.path.join(v, "x")


def nested(v, w=None):
    return under(w) if w else under(v)
"""
#: How a read reaches the path: as it is, through one helper, through two (the same helpers
#: for every read: one call of a helper must not hide another).
WRAPS = ("{}", "under({})", "nested({})")
#: The shapes of a unit: ``{a}``/``{b}`` are two reads (wrapped; in ``default`` the first has a
#: fixed default), ``{p}``/``{q}`` two fixed places, ``{x}`` the unit's own path name.
SHAPES = {
    "two-writes": """\
    {x} = {a}
    open({x}, "w")
    other = {b}
    os.makedirs(other)
""",
    "ternary": """\
    {x} = {a} if flag else {b}
    open({x}, "w")
""",
    "if-else": """\
    if flag:
        {x} = {a}
    else:
        {x} = {b}
    os.makedirs({x})
""",
    "at-the-write": """\
    first = {a}
    second = {b}
    open(first if flag else second, "w")
""",
    "places": """\
    {x} = {p} if flag else {q}
    os.makedirs({x}, exist_ok=True)
""",
    "default": """\
    {x} = {a} if flag else {b}
    os.makedirs({x})
""",
}
#: Two fixed places of each unit's own (``{n}``: the unit).
PLACES = ('os.path.expanduser("~/.demo{n}a")', 'os.path.join(tempfile.gettempdir(), "demo{n}b")')


@dataclass(frozen=True)
class Unit:
    shape: str
    wrap_a: str
    wrap_b: str


@dataclass(frozen=True)
class Layout:
    """One way of writing the units: their order, arms swapped, where the helpers are."""

    order: tuple[int, ...]
    swapped: tuple[bool, ...]
    helpers: str  # "before", "after" or "module"


def variables(n: int) -> tuple[str, str]:
    return f"DEMO{n}_ALPHA_DIR", f"DEMO{n}_BETA_DIR"


def unit_source(n: int, unit: Unit, *, swapped: bool) -> str:
    alpha, beta = variables(n)
    if unit.shape == "default":  # a read with a fixed default in one arm
        a = unit.wrap_a.format(f'os.environ.get("{alpha}", {PLACES[0].format(n=n)})')
    else:
        a = unit.wrap_a.format(f'os.environ["{alpha}"]')
    b = unit.wrap_b.format(f'os.environ["{beta}"]')
    p, q = (place.format(n=n) for place in PLACES)
    if swapped:  # the other arm (branch, value) first
        a, b, p, q = b, a, q, p
    body = SHAPES[unit.shape].format(a=a, b=b, p=p, q=q, x=f"path{n}")
    return f"def unit{n}(flag):\n{body}"


def expected(n: int, unit: Unit) -> set[str | None]:
    """The variables (``None``: a fixed place) a unit must be found to read."""
    alpha, beta = variables(n)
    if unit.shape == "places":
        return {None}
    return {alpha, beta}


def package(units: list[Unit], layout: Layout) -> dict[str, str]:
    header = "import os\nimport tempfile\n"
    parts = [unit_source(n, units[n], swapped=layout.swapped[n]) for n in layout.order]
    files = {"demo/__init__.py": ""}
    if layout.helpers == "module":
        files["demo/helpers.py"] = f"import os\n\n\n{HELPERS}"
        header += "\nfrom .helpers import nested, under\n"
    elif layout.helpers == "before":
        parts.insert(0, HELPERS)
    else:
        parts.append(HELPERS)
    files["demo/main.py"] = header + "\n\n" + "\n\n".join(parts)
    return files


def findings(files: dict[str, str]) -> set[tuple[str | None, str, str]]:
    """The stable identity of each finding: its variable, expression and class (not its line,
    which moves with the code)."""
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "src"
        for name, source in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        report = audit([str(root)], platform="linux")
    return {(i.finding.variable, i.finding.expression, i.finding.kind) for i in report.items}


units = st.builds(
    Unit, st.sampled_from(sorted(SHAPES)), st.sampled_from(WRAPS), st.sampled_from(WRAPS)
)


@st.composite
def layouts(draw: st.DrawFn, count: int) -> Layout:
    return Layout(
        tuple(draw(st.permutations(range(count)))),
        tuple(draw(st.lists(st.booleans(), min_size=count, max_size=count))),
        draw(st.sampled_from(["before", "after", "module"])),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Unit], Layout, Layout]:
    drawn = draw(st.lists(units, min_size=1, max_size=4))
    return drawn, draw(layouts(len(drawn))), draw(layouts(len(drawn)))


def test_the_findings_do_not_depend_on_the_order_of_the_code() -> None:
    counter = [0, 0]

    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,  # the same examples on every run: the default suite never flakes
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(cases())
    def check(case: tuple[list[Unit], Layout, Layout]) -> None:
        drawn, one, other = case
        counter[0] += 1
        first = findings(package(drawn, one))
        second = findings(package(drawn, other))
        want = set().union(*(expected(n, u) for n, u in enumerate(drawn)))
        assert first, "no finding: the example says nothing"
        assert want <= {variable for variable, _, _ in first}, package(drawn, one)
        assert first == second, (package(drawn, one), package(drawn, other))
        counter[1] += 1

    check()
    run, reached = counter
    assert run >= 50, f"only {run} examples ran"
    assert reached == run, f"{reached} of {run} examples reached the assertions"
