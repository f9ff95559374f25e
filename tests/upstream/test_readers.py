"""Every reader the layout table names inside a wheel does read that variable.

For each ``upstream`` entry of the form ``dist==version path`` the wheel of exactly that
``dist==version`` must be pinned in ``wheels.toml``, the file must be inside it, and the row's
name must occur in it as a string literal or an identifier. Python files are tokenized (comments,
and prose in docstrings, do not count); other text is searched word by word, and compiled files
(``.so``) byte by byte. ``doc:`` entries name readers that no wheel ships, and ``unpinned`` ones
in ``wheels.toml`` wheels deliberately left out: both are skipped, with the reason.

Where a reader runs without a GPU, the library itself reads the value back: its module, taken
from the pinned wheel, is loaded in a hooked interpreter and says which path it would use.
"""

from __future__ import annotations

import ast
import importlib.machinery
import io
import json
import os
import re
import subprocess
import sys
import tokenize
import zipfile
from typing import TYPE_CHECKING, NamedTuple

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_OPT_IN, CACHEROOT_TAG, TABLE

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.upstream.conftest import Pins

#: An entry naming a file inside a wheel.
WHEEL_ENTRY = re.compile(r"(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+) (?P<path>\S+)")
#: Where the pinned set is kept (for messages).
PINS = "tests/upstream/wheels.toml"
#: An entry naming a reader that ships in no wheel.
DOC = "doc:"

CASES = [(v.name, entry) for v in TABLE for entry in v.upstream]


def _python(data: bytes, name: str) -> dict[str, list[int]]:
    """Lines where ``name`` is an identifier or a whole string literal of a Python file."""
    found: dict[str, list[int]] = {}
    for tok in tokenize.tokenize(io.BytesIO(data).readline):
        kind = ""
        if tok.type == tokenize.NAME and tok.string == name:
            kind = "identifier"
        elif tok.type == tokenize.STRING:
            try:
                kind = "string literal" if ast.literal_eval(tok.string) == name else ""
            except (ValueError, SyntaxError):  # f-strings and the like
                kind = ""
        if kind:
            found.setdefault(kind, []).append(tok.start[0])
    return found


def _word(name: str) -> re.Pattern[bytes]:
    return re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_])")


def occurrences(data: bytes, path: str, name: str) -> dict[str, list[int]]:
    """Where ``name`` occurs in the file ``path`` of a wheel: kind of match -> lines (offsets)."""
    if path.endswith(".py"):
        try:
            return _python(data, name)
        except (tokenize.TokenError, SyntaxError):
            pass  # syntax this Python cannot tokenize: searched as text below
    if b"\0" in data[:8192]:
        # Compiled: string constants lie packed end to end (Rust's are not NUL-terminated).
        offsets = [m.start() for m in re.finditer(re.escape(name.encode()), data)][:5]
        return {"bytes at offsets": offsets} if offsets else {}
    word = _word(name)
    found: dict[str, list[int]] = {}
    quoted = f'"{name}"'.encode()
    for number, line in enumerate(data.splitlines(), 1):
        if quoted in line or f"'{name}'".encode() in line:
            found.setdefault("string literal", []).append(number)
        elif word.search(line):
            found.setdefault("word", []).append(number)
    return found


def mentions(data: bytes, name: str) -> list[str]:
    """The first lines that contain ``name`` at all: what a failing check shows."""
    lines = [
        f"{number}: {line.decode(errors='replace').strip()[:120]}"
        for number, line in enumerate(data.splitlines(), 1)
        if name.encode() in line
    ]
    return lines[:5]


def test_the_table_names_readers() -> None:
    """The parametrization below is not empty: the table still lists where variables are read."""
    assert len(CASES) >= len(TABLE)


def test_every_pinned_wheel_is_needed(pins: Pins) -> None:
    """No wheel is downloaded for nothing: the table names it, the tests import it, or the
    audit's measured corpus reads it (``test_audit_corpus.py`` checks that one names them all)."""
    needed = {
        pins.find(m["dist"], m["version"]) for _, e in CASES if (m := WHEEL_ENTRY.fullmatch(e))
    }
    unused = [
        pin.spec
        for pin in pins.wheels
        if not pin.install and not pin.corpus and not pin.holdout and pin not in needed
    ]
    assert unused == [], f"no table entry names {unused}: remove them from {PINS}"


@pytest.mark.parametrize(
    ("name", "entry"), CASES, ids=[f"{name}-{i}" for i, (name, _) in enumerate(CASES)]
)
def test_reader_reads_the_variable(
    name: str, entry: str, pins: Pins, report: Callable[[str], None]
) -> None:
    if entry.startswith(DOC):
        report(f"{name}: not checked, {entry}")
        pytest.skip(f"{name}: {entry}")
    match = WHEEL_ENTRY.fullmatch(entry)
    if match is None:
        pytest.fail(
            f"{name}: upstream entry {entry!r} is neither 'dist==version path/in/the/wheel' "
            "nor 'doc: ...': fix it in packages/envs/src/_cacheroot_layout.py"
        )
    dist, version, path = match["dist"], match["version"], match["path"]
    unpinned = pins.unpinned(dist, version)
    if unpinned is not None:
        report(f"{name}: not checked, {dist}=={version} {path} ({unpinned})")
        pytest.skip(f"{name}: {dist}=={version} is not downloaded: {unpinned}")
    pin = pins.find(dist, version)
    if pin is None:
        pytest.fail(
            f"{name} names {dist}=={version}, which is not pinned: add {dist}=={version} to "
            f"{PINS} (filename, sha256 and size from the pip download line at its top)"
        )

    with zipfile.ZipFile(pins.path(pin)) as wheel:
        names = wheel.namelist()
        if path not in names:
            alike = [n for n in names if n.rsplit("/", 1)[-1] == path.rsplit("/", 1)[-1]]
            pytest.fail(f"{pin.filename} has no {path}; files of that name: {alike or 'none'}")
        data = wheel.read(path)

    found = occurrences(data, path, name)
    assert found, f"{name} is no identifier or string literal of {path}; it appears in: " + (
        "; ".join(mentions(data, name)) or "nothing"
    )
    where = "; ".join(
        f"{kind} {', '.join(map(str, sorted(set(at))))}" for kind, at in found.items()
    )
    report(f"{name}: {pin.spec} {path}: {where}")


#: Each row's upstream entries, by name.
BY_ROW = {v.name: v.upstream for v in TABLE}


class Readback(NamedTuple):
    """A row whose reader runs on CPU: its module (an upstream entry of the row) and what it
    is asked."""

    name: str
    path: str
    #: An expression over ``module`` that gives the path the library would use.
    ask: str
    tag: str
    opt_in: str
    #: Where the library's path should lie, relative to the root.
    expected: str
    #: A module it imports that the session keeps in the JIT directory only (``""``: none).
    needs: str = ""


READBACKS = [
    Readback(
        "FLASHINFER_MOE_EP_KNOB_CACHE",
        "flashinfer/moe_ep/kernel_src/sm100/cutedsl_megamoe/shim/knob_cache.py",
        "module.knob_cache_path()",
        tag="cuda",
        opt_in="",
        expected="flashinfer/.cache/flashinfer/moe_ep_knob_cache.json",
    ),
    Readback(
        "AITER_ROOT_DIR",
        "aiter_meta/csrc/cpp_itfs/utils.py",
        "module.BUILD_DIR",
        tag="rocm",
        opt_in="AITER_ROOT_DIR",
        expected="aiter/build",
        needs="jinja2",
    ),
]

#: Loads one module file by path (no package around it) and prints what it is asked.
LOAD = """
import importlib.util, json, sys
path, ask = sys.argv[1:3]
spec = importlib.util.spec_from_file_location("reader_under_test", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps(str(eval(ask))))
"""


@pytest.mark.parametrize("case", READBACKS, ids=[r.name for r in READBACKS])
def test_the_library_reads_the_derived_value(  # noqa: PLR0917 - fixtures
    case: Readback,
    pins: Pins,
    clean_env: dict[str, str],
    jit_site: Path | None,
    tmp_path: Path,
    report: Callable[[str], None],
) -> None:
    entries = [WHEEL_ENTRY.fullmatch(e) for e in BY_ROW[case.name]]
    (entry,) = [m for m in entries if m is not None and m["path"] == case.path]
    pin = pins.find(entry["dist"], entry["version"])
    assert pin is not None, f"{entry['dist']}=={entry['version']} is not pinned in {PINS}"
    with zipfile.ZipFile(pins.path(pin)) as wheel:
        source = tmp_path / "src" / case.path.rsplit("/", 1)[-1]
        source.parent.mkdir()
        source.write_bytes(wheel.read(case.path))
    env = {**clean_env, CACHEROOT: str(tmp_path / "root"), CACHEROOT_TAG: case.tag}
    if case.opt_in:
        env[CACHEROOT_OPT_IN] = case.opt_in
    if case.needs:
        where = [str(jit_site)] if jit_site is not None else sys.path
        if importlib.machinery.PathFinder.find_spec(case.needs, where) is None:
            pytest.skip(f"{pin.name} imports {case.needs}: run `nox -s upstream` (--jit-site)")
        if jit_site is not None:
            env["PYTHONPATH"] = str(jit_site)

    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(source), case.ask],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen == os.path.join(tmp_path, "root", *case.expected.split("/"))
    report(f"{case.name}: {pin.spec} {case.path}: {case.ask} -> $CACHEROOT/{case.expected}")
