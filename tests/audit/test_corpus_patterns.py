"""Patterns the measured corpus (``tests/upstream/test_audit_corpus.py``) showed the static audit
missing, each in the smallest source that has it. Line numbers matter; verdicts are literals.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from cacheroot.envs._audit import audit

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.envs._audit import Report


def run(tmp_path: Path, source: str) -> Report:
    path = tmp_path / "src" / "m.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return audit([str(tmp_path / "src")], platform="linux")


def rows(report: Report) -> list[tuple[object, ...]]:
    return [
        (i.finding.line, i.finding.variable, i.finding.expression, i.finding.kind, i.covered_by)
        for i in report.items
    ]


#: sentence-transformers' shape: a parameter given its default inside the function.
PARAMETER_DEFAULT = """\
import os


class Model:
    def __init__(self, name, cache_folder=None):
        if cache_folder is None:
            cache_folder = os.getenv("DEMO_MODELS_HOME")
        load(name, cache_folder=cache_folder)


def fetch(url, root=None):
    if not root:
        root = os.path.expanduser("~/.demo-fetch")
    os.makedirs(root, exist_ok=True)
"""


def test_a_parameter_given_its_default_in_the_function_is_followed(tmp_path: Path) -> None:
    """The caller's value is not a place decided here, the default given in the body is."""
    assert rows(run(tmp_path, PARAMETER_DEFAULT)) == [
        (7, "DEMO_MODELS_HOME", "$DEMO_MODELS_HOME", "download", None),
        (13, None, "~/.demo-fetch", "cache", None),
    ]


#: librosa's shape: a variable whose default is pooch's cache directory for a project.
POOCH_CACHE = """\
import os

import pooch

DATA = os.environ.get("DEMO_DATA_DIR", pooch.os_cache("demo"))
SPARE = pooch.os_cache("spare")
"""


def test_pooch_os_cache_is_a_known_location_function(tmp_path: Path) -> None:
    assert rows(run(tmp_path, POOCH_CACHE)) == [
        (
            5,
            "DEMO_DATA_DIR",
            "${DEMO_DATA_DIR:-${XDG_CACHE_HOME:-~/.cache}/demo}",
            "download",
            "XDG_CACHE_HOME",
        ),
        (6, "XDG_CACHE_HOME", "${XDG_CACHE_HOME:-~/.cache}/spare", "download", "XDG_CACHE_HOME"),
    ]


#: Places under the user's cache directory whose own words say no cache.
UNDER_USER_CACHE = """\
import os

TRACES = os.path.expanduser("~/.cache/demo/trace/solutions")
WEIGHTS = os.path.expanduser("~/.cache/demo/hub/checkpoints")
"""


def test_under_the_user_cache_a_place_is_a_cache_or_a_download(tmp_path: Path) -> None:
    """The cache base is no word of the place's own, but its author kept the place there."""
    assert rows(run(tmp_path, UNDER_USER_CACHE)) == [
        (3, None, "~/.cache/demo/trace/solutions", "cache", None),
        (4, None, "~/.cache/demo/hub/checkpoints", "download", None),
    ]
