"""Checks against real upstream wheels: the pinned set, where it lies, and what the checks saw.

``wheels.toml`` beside this file pins every wheel (name, version, filename, sha256, size and why
it is there). ``nox -s upstream`` downloads the set into the directory that file names, checks
each sha256, installs the wheels marked ``install = true`` (vLLM, what its media connector
imports) into its Python 3.12 venv with ``--no-deps``, those marked ``install = "jit"`` (torch and
what ``import torch`` and ``torch.compile`` on CPU need) into a directory of their own, which it
names with ``--jit-site`` (only the JIT test's child process has it on its path), and runs
``pytest tests/upstream``. What the checks looked at is printed at the end of the run, in the
"upstream checks" section.

Nothing here is collected anywhere else: the other sessions pass ``--ignore=tests/upstream``,
and where vLLM is not installed (the development venv) ``collect_ignore_glob`` below leaves the
directory out, so a plain ``pytest`` does not fail on a wheel it was never meant to have.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_APPLIED, TABLE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: The pinned set, and the directory the ``upstream`` session downloads it into.
PINS_FILE = HERE / "wheels.toml"

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]

#: What the checks looked at, printed in the terminal summary.
_LINES = pytest.StashKey[list[str]]()


def normalize(name: str) -> str:
    """A distribution name as the package index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One wheel of the pinned set."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int
    #: Installed by the session: into its venv, or into the JIT test's directory.
    install: bool
    why: str
    #: Part of the audit's measured corpus (``test_audit_corpus.py``): downloaded, not installed.
    corpus: bool = False
    #: Part of the audit's held-out corpus (``holdout_truth.py``): downloaded, not installed;
    #: its truth was written before the audit ever read it.
    holdout: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


class Pins:
    """The pinned set of ``wheels.toml`` and the directory the session downloaded it into."""

    def __init__(self, path: Path = PINS_FILE) -> None:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        self.dir = ROOT / str(data["download"]["dir"])
        self.wheels = tuple(
            Pin(
                name=w["name"],
                version=w["version"],
                filename=w["filename"],
                sha256=w["sha256"],
                size=w["size"],
                install=w.get("install", False) is not False,
                why=w["why"],
                corpus=w.get("corpus", False) is True,
                holdout=w.get("holdout", False) is True,
            )
            for w in data["wheel"]
        )
        self._unpinned = {
            (normalize(u["name"]), u["version"]): u["why"] for u in data.get("unpinned", [])
        }

    def unpinned(self, dist: str, version: str) -> str | None:
        """Why ``dist==version`` is deliberately not downloaded, or ``None`` when it should be."""
        return self._unpinned.get((normalize(dist), version))

    def find(self, dist: str, version: str) -> Pin | None:
        """The pin of exactly ``dist==version``, or ``None``."""
        for pin in self.wheels:
            if normalize(pin.name) == normalize(dist) and pin.version == version:
                return pin
        return None

    def path(self, pin: Pin) -> Path:
        """The downloaded wheel of ``pin``; fails the test when the session has not fetched it."""
        path = self.dir / pin.filename
        if not path.is_file() or path.stat().st_size != pin.size:
            pytest.fail(f"{path} is missing or not {pin.size} bytes: run `nox -s upstream`")
        return path


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--jit-site",
        metavar="DIR",
        default=None,
        help='where torch and what it imports are installed (install = "jit" in wheels.toml); '
        "put on the path of the JIT test's child process only",
    )


@pytest.fixture(scope="session")
def jit_site(request: pytest.FixtureRequest) -> Path | None:
    """The directory ``--jit-site`` names, made absolute (the child runs in another working
    directory), or ``None`` (torch is then looked for in this venv).

    Read with a default: a run that loads this conftest only while collecting (started from
    the repository root, say) never parsed the option.
    """
    value = request.config.getoption("jit_site", default=None)
    return Path(value).resolve() if value else None


@pytest.fixture(scope="session")
def pins() -> Pins:
    """The pinned upstream wheels."""
    return Pins()


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Add a line to the "upstream checks" section printed at the end of the run."""
    return request.config.stash.setdefault(_LINES, []).append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_LINES, [])
    if lines:
        terminalreporter.section("upstream checks")
        for line in lines:
            terminalreporter.line(line)


def _drop(name: str) -> bool:
    """Whether ``name`` could carry a layout, or a vLLM setting, in from the outer shell."""
    upper = name.upper()
    return (
        name in _LAYOUT_NAMES
        or upper.startswith(("CACHEROOT", "PYTEST_"))
        or "VLLM_" in upper
        or upper in {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "PYTHONPATH"}
    )


_LAYOUT_NAMES = frozenset(
    {CACHEROOT_APPLIED, *(v.name for v in TABLE), *(n for v in TABLE for n in v.legacy)}
)


@pytest.fixture
def clean_env(isolated_cache: Path) -> dict[str, str]:
    """This environment without layout variables, cacheroot switches, ``VLLM_*``, proxies.

    ``HOME`` stays the per-test home of the shared fixture, so nothing falls back to a real home;
    every ``VLLM_*`` name a child started with it reports was set by the hook.
    """
    del isolated_cache  # requested for ordering: HOME must already point at the tmp home
    return {k: v for k, v in os.environ.items() if not _drop(k)}
