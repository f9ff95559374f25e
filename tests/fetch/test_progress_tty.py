"""The progress bar of ``cacheroot fetch`` and ``cacheroot warm``: drawn on a terminal, never in a
log.

A bar is what tells someone at a terminal that a long download is moving; in a log (a pipe, a CI
job, a dumb terminal) each redraw would be one more line of noise. So: a bar when standard error
is a terminal, also one whose size was never set (a pseudo-terminal a program opens for a child,
as these tests and some job runners do, reports 0 rows of 0 columns, and tqdm, left to measure
it, drew nothing there); none when standard error is a pipe, when ``CI`` is set, with
``TERM=dumb``, with ``warm -q``, or when tqdm cannot be imported (and then no error either).
Standard output carries the path (the summary for ``warm``) and nothing else: scripts read it.

Each run is the installed ``cacheroot`` command against a local origin that paces its bytes, with
standard error on a real pseudo-terminal; the tests read what the terminal received.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CI
from cacheroot.fetch import Fetcher

from .origin import body, sha256

if TYPE_CHECKING:
    from .origin import Origin

#: The console script of this environment (what a user runs).
CACHEROOT = str(Path(sys.executable).parent / "cacheroot")
#: A download of 2 MiB at 2 MiB/s: about a second, long enough for several redraws of a bar.
SIZE, RATE = 2 << 20, 2 << 20
#: A duration, a rate and the origin's address as the lines print them.
SECONDS = r"\d+\.\d\d s"
SPEED = r"\d+(?:\.\d)? (?:B|KiB|MiB|GiB)/s"
HOSTPORT = r"127\.0\.0\.1:\d+"
#: Longest a run may take (the download itself takes about a second).
LIMIT = 60.0


def _environ(
    extra: dict[str, str] | None = None, *, hide_tqdm: Path | None = None
) -> dict[str, str]:
    """This test's environment as a terminal user's shell has it: no ``CI`` (the suite may run
    in CI), a capable ``TERM``, no ``COLUMNS``/``LINES`` (the size comes from the terminal);
    then ``extra``. With ``hide_tqdm``, a folder first on the path whose ``tqdm`` cannot be
    imported, as where tqdm is not installed."""
    env = {k: v for k, v in os.environ.items() if k not in (CI, "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    if hide_tqdm is not None:
        package = hide_tqdm / "tqdm"
        package.mkdir()
        (package / "__init__.py").write_text(
            "raise ModuleNotFoundError(\"No module named 'tqdm'\", name='tqdm')\n"
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hide_tqdm), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def on_terminal(
    *args: str, env: dict[str, str], size: tuple[int, int] | None = None
) -> tuple[int, str, str]:
    """Run ``cacheroot ARGS`` with standard error on a new pseudo-terminal and standard output
    on a pipe; ``(exit status, standard output, what the terminal received)``.

    ``size`` is ``(rows, columns)``; without it the terminal keeps the size a new one has,
    0 by 0. The terminal is read while the command runs, so that a bar's redraws never fill
    its buffer and stall the command.
    """
    primary, secondary = os.openpty()
    if size is not None:
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    seen = bytearray()
    try:
        proc = subprocess.Popen(
            [CACHEROOT, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
            env=env,
        )
        os.close(secondary)
        until = time.monotonic() + LIMIT
        while time.monotonic() < until:
            if not select.select([primary], [], [], 0.1)[0]:
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: every writer of the terminal is gone, all was read
                break
            if not chunk:
                break
            seen += chunk
        else:
            proc.kill()
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        proc.stdout.close()
        status = proc.wait(timeout=LIMIT)
    finally:
        os.close(primary)
    return status, out, seen.decode()


def _slow(origin: Origin, name: str) -> str:
    return origin.url(f"/slow/{name}?size={SIZE}&rate={RATE}")


def _miss_line(command: str, url: str) -> str:
    """The line a finished miss of the 2 MiB file leaves, as a pattern."""
    return (
        rf"cacheroot {command}: miss {re.escape(url)} \(2\.0 MiB\) in {SECONDS}, {SPEED} "
        rf"from {HOSTPORT}"
    )


def _assert_bar(text: str, name: str) -> None:
    """``text`` holds tqdm's bar for ``name``: drawn at 0 %, redrawn part of the way, in bytes
    of the 2 MiB (``2.00M`` at tqdm's base of 1024)."""
    assert f"\r{name}:   0%|" in text, f"no bar was drawn: {text!r}"
    assert re.search(rf"\r{re.escape(name)}: +[1-9]\d?%\|", text), f"no bar moved: {text!r}"
    assert "/2.00M [" in text, text


@pytest.mark.parametrize("ci", [None, "false"], ids=["no-CI", "CI=false"])
def test_a_slow_fetch_draws_a_bar_on_a_terminal_of_no_size(
    origin: Origin, name: str, ci: str | None
) -> None:
    url = _slow(origin, name)
    env = _environ(None if ci is None else {CI: ci})
    status, out, text = on_terminal("fetch", url, env=env)
    assert status == 0, text
    assert out == f"{Fetcher().path(url)}\n"
    assert Path(out.strip()).read_bytes() == body(name, SIZE)  # the path printed holds the file
    _assert_bar(text, name)
    # The bar is cleared; what the screen keeps last is the summary line.
    last = re.split(r"[\r\n]+", text.strip())[-1]
    assert re.fullmatch(_miss_line("fetch", url), last), text


def test_no_bar_when_stderr_is_a_pipe(origin: Origin, name: str) -> None:
    url = _slow(origin, name)
    done = subprocess.run(
        [CACHEROOT, "fetch", url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=LIMIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{Fetcher().path(url)}\n"
    assert Path(done.stdout.strip()).read_bytes() == body(name, SIZE)
    assert re.fullmatch(_miss_line("fetch", url) + "\n", done.stderr), done.stderr


@pytest.mark.parametrize(
    "extra",
    [{CI: "true"}, {CI: "1"}, {"TERM": "dumb"}],
    ids=["CI=true", "CI=1", "TERM=dumb"],
)
def test_no_bar_in_ci_or_on_a_dumb_terminal(
    origin: Origin, name: str, extra: dict[str, str]
) -> None:
    url = _slow(origin, name)
    # A terminal of 24 rows of 120 columns: one where a bar would be drawn but for ``extra``.
    status, out, text = on_terminal("fetch", url, env=_environ(extra), size=(24, 120))
    assert status == 0, text
    assert out == f"{Fetcher().path(url)}\n"
    assert Path(out.strip()).read_bytes() == body(name, SIZE)  # the path printed holds the file
    # One line, as in a log (the terminal turns its line feed into CR LF).
    assert re.fullmatch(_miss_line("fetch", url) + "\r\n", text), text


def test_without_tqdm_no_bar_and_no_error(origin: Origin, name: str, tmp_path: Path) -> None:
    url = _slow(origin, name)
    env = _environ(hide_tqdm=tmp_path)
    status, out, text = on_terminal("fetch", url, env=env, size=(24, 120))
    assert status == 0, text
    assert out == f"{Fetcher().path(url)}\n"
    assert Path(out.strip()).read_bytes() == body(name, SIZE)  # the path printed holds the file
    assert re.fullmatch(_miss_line("fetch", url) + "\r\n", text), text


def _manifest(tmp_path: Path, url: str, name: str) -> Path:
    manifest = tmp_path / "manifest.toml"
    entry = {"url": url, "sha256": sha256(body(name, SIZE)), "namespace": "suite"}
    manifest.write_text(
        "[[asset]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in entry.items())
    )
    return manifest


def _warm_summary(manifest: Path) -> str:
    """The totals ``cacheroot warm`` prints for the one 2 MiB miss, as a pattern."""
    return (
        rf"warm {re.escape(str(manifest))}: 1 entry: 0 hits, 1 miss \(2\.0 MiB downloaded\), "
        r"0 failures in \d+\.\d s\n"
    )


def test_warm_draws_a_bar_on_a_terminal(origin: Origin, name: str, tmp_path: Path) -> None:
    url = _slow(origin, name)
    manifest = _manifest(tmp_path, url, name)
    status, out, text = on_terminal("warm", str(manifest), env=_environ())
    assert status == 0, text
    assert re.fullmatch(_warm_summary(manifest), out), out
    _assert_bar(text, name)
    last = re.split(r"[\r\n]+", text.strip())[-1]
    assert re.fullmatch(_miss_line("warm", url), last), text
    assert Fetcher().path(url, namespace="suite").read_bytes() == body(name, SIZE)


def test_warm_quiet_draws_no_bar(origin: Origin, name: str, tmp_path: Path) -> None:
    url = _slow(origin, name)
    manifest = _manifest(tmp_path, url, name)
    status, out, text = on_terminal("warm", "-q", str(manifest), env=_environ(), size=(24, 120))
    assert status == 0, text
    assert re.fullmatch(_warm_summary(manifest), out), out
    assert text == ""
