"""More shapes of places in packages' sources, each in the smallest source that has it: places
missed (a token file named in an f-string, a home base wrapped before it is joined, a relative
default a download lands in) and places reported wrongly (a file only read, the temporary
directory itself, a socket's prefix, one place found twice). Line numbers matter; verdicts are
literals."""

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


#: Access tokens saved under the home directory, their names built in an f-string, with the lock
#: processes take to write them.
WRITTEN_UNDER_HOME = """\
import json
import os


class Tokens:
    def __init__(self, name):
        self.lock_file = os.path.expanduser(f"~/.demo/{name}_tokens.lock")
        self.token_file = os.path.expanduser(f"~/.demo/{name}_tokens.json")

    def save(self, tokens):
        os.makedirs(os.path.dirname(self.lock_file), exist_ok=True)
        with open(self.token_file + ".tmp", "w") as f:
            json.dump(tokens, f)
        os.replace(self.token_file + ".tmp", self.token_file)
"""


def test_a_file_the_package_writes_under_home_is_a_place_whatever_its_suffix(
    tmp_path: Path,
) -> None:
    """A ``.json`` under the home directory is configuration while only read; written by the
    package, it is kept from one run to the next."""
    assert rows(run(tmp_path, WRITTEN_UNDER_HOME)) == [
        (7, None, "~/.demo/{name}_tokens.lock", "ipc", None),
        (8, None, "~/.demo/{name}_tokens.json", "cache", None),
    ]


#: Another tool's token file, read and never written.
READ_ONLY_FILE = """\
import json
import os


def refresh_token():
    path = os.path.expanduser("~/.othertool/msal_token_cache.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None
"""


def test_a_file_only_read_is_configuration_even_named_cache(tmp_path: Path) -> None:
    assert rows(run(tmp_path, READ_ONLY_FILE)) == [
        (6, None, "~/.othertool/msal_token_cache.json", "config", None),
    ]


#: A download's destination defaulting to a directory relative to the working directory.
RELATIVE_DEFAULT = """\
from demo.fetching import fetch


def from_hub(source, save_path="./model_checkpoints"):
    target = save_path + "/demo--" + source + "/"
    return fetch("model.bin", source, savedir=target)
"""


def test_a_relative_default_a_download_lands_in_is_a_place(tmp_path: Path) -> None:
    assert rows(run(tmp_path, RELATIVE_DEFAULT)) == [
        (4, None, "./model_checkpoints", "download", None),
    ]


#: The temporary directory taken from whichever of its variables is set, made if missing.
TEMP_VARIABLES = """\
import os
import tempfile


class TempDir:
    def __init__(self):
        tmpdir = os.environ.get("TMPDIR") or os.environ.get("TEMP") or os.environ.get("TMP")
        if tmpdir:
            tmpdir = os.path.normpath(tmpdir)
            if not os.path.exists(tmpdir):
                os.makedirs(tmpdir, exist_ok=True)
        self.name = tempfile.mkdtemp(prefix="demo-", dir=tmpdir)
"""


def test_the_temporary_directory_from_its_variables_is_throwaway(tmp_path: Path) -> None:
    assert rows(run(tmp_path, TEMP_VARIABLES)) == [
        (7, None, "$TMPDIR", "throwaway", None),
    ]


#: A ``/tmp`` prefix a ZMQ ``ipc://`` socket is bound under.
SOCKET_PREFIX = """\
import uuid

import zmq


class Loader:
    def __init__(self, workers=4, prefix="/tmp/_demo-"):
        self.prefix = prefix
        self.ctx = zmq.Context.instance()

    def start(self):
        self.sockname = "ipc://" + self.prefix + str(uuid.uuid4())
        self.socket = self.ctx.socket(zmq.PULL)
        self.socket.bind(self.sockname)
"""


def test_a_place_put_in_an_ipc_address_is_ipc(tmp_path: Path) -> None:
    assert rows(run(tmp_path, SOCKET_PREFIX)) == [
        (7, None, "/tmp/_demo-", "ipc", None),
    ]


#: A constant home directory expanded where it is used, then downloaded into.
EXPANDED_CONSTANT = """\
import os

import requests

DEMO_DIR = "~/.demo/weights"


def load():
    path = os.path.expanduser(os.path.join(DEMO_DIR, "model.tar"))
    if not os.path.exists(path):
        _download()
    return path


def _download():
    target = os.path.expanduser(DEMO_DIR)
    os.makedirs(target, exist_ok=True)
    saveto = os.path.join(target, "model.tar")
    answer = requests.get("https://example.com/model.tar")
    with open(saveto, "wb") as f:
        f.write(answer.content)
"""


def test_a_constant_expanded_where_it_is_used_is_one_place(tmp_path: Path) -> None:
    assert rows(run(tmp_path, EXPANDED_CONSTANT)) == [
        (5, None, "~/.demo/weights", "download", None),
    ]


#: A cache directory under the home directory when no variable is set, the home directory
#: normalised before it is joined.
WRAPPED_HOME = """\
import os
import tempfile

from diskcache import Cache


def get_cache():
    demo_cache_dir = os.environ.get("DEMO_CACHE_DIR")
    xdg_cache_home = os.environ.get("XDG_CACHE_HOME")
    home_dir = os.path.normpath(os.path.expanduser("~"))
    if demo_cache_dir:
        cache_dir = demo_cache_dir
    elif xdg_cache_home:
        cache_dir = os.path.join(xdg_cache_home, "demo")
    elif home_dir != "/":
        cache_dir = os.path.join(home_dir, ".cache", "demo")
    else:
        tempdir = tempfile.gettempdir()
        cache_dir = os.path.join(tempdir, ".cache", "demo")
    return Cache(cache_dir)
"""


def test_a_wrapped_home_base_joined_later_is_a_place(tmp_path: Path) -> None:
    assert rows(run(tmp_path, WRAPPED_HOME)) == [
        (8, "DEMO_CACHE_DIR", "$DEMO_CACHE_DIR", "cache", None),
        (9, "XDG_CACHE_HOME", "$XDG_CACHE_HOME", "cache", "XDG_CACHE_HOME"),
        (16, None, "~/.cache/demo", "cache", "XDG_CACHE_HOME"),
        (19, None, "$TMPDIR/.cache/demo", "cache", "XDG_CACHE_HOME"),
    ]


#: The home directory compared with, a separator added: no place.
SEPARATOR_ONLY = """\
import os


def shared(download_dir):
    home = os.path.realpath(os.path.expanduser("~"))
    target = os.path.realpath(download_dir)
    return not (target == home or target.startswith(home + os.sep))
"""


def test_a_base_given_only_a_separator_is_no_place(tmp_path: Path) -> None:
    assert rows(run(tmp_path, SEPARATOR_ONLY)) == []


#: A directory of its own made under the temporary directory's variable: kept, not throwaway.
UNDER_TEMP_VARIABLE = """\
import os
import tempfile
from pathlib import Path

if not (cache_path := os.getenv("DEMO_CACHE_DIR", None)):
    tmp_dir = Path(os.environ.get("TMPDIR", tempfile.gettempdir()))

    def reusable(name):
        path = tmp_dir / f"{os.getuid()}/{name}"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    cache_path = reusable("demo_cache")
"""


def test_a_path_of_its_own_under_the_temporary_directory_is_kept(tmp_path: Path) -> None:
    """Only a temporary directory made as it is (or a fresh name in it) is throwaway."""
    assert rows(run(tmp_path, UNDER_TEMP_VARIABLE)) == [
        (5, "DEMO_CACHE_DIR", "$DEMO_CACHE_DIR", "cache", None),
        (6, None, "$TMPDIR", "cache", None),
    ]
