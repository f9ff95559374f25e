"""What the ``cacheroot fetch``, ``cache`` and ``warm`` commands say: help, usage errors, empty
results. Run in this process through the real entry point (argparse exits with status 2)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs._cli import main, parser
from cacheroot.fetch import Fetcher

if TYPE_CHECKING:
    from collections.abc import Iterator


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cacheroot ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors and --help
        status = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return status, out.out, out.err


def _options(p: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_says_what_it_takes_with_an_example() -> None:
    top = parser()
    commands = {"fetch", "cache", "warm", "hub"}
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    seen = []
    for command in sorted(commands):
        for path, action in _options(sub.choices[command], command):
            name = action.option_strings[0] if action.option_strings else action.metavar
            seen.append(f"{path} {name}")
            assert action.help, f"cacheroot {path} {name} has no help text"
            takes_value = action.nargs != 0 and not isinstance(action, argparse._StoreConstAction)
            if takes_value and name != "OPERATION":
                assert "e.g. " in action.help, f"cacheroot {path} {name}: no example"
    assert "cache prune --max-size" in seen
    assert "fetch --deadline" in seen
    assert "warm --jobs" in seen
    assert "hub serve --ttl" in seen


@pytest.mark.parametrize(
    ("argv", "flag", "expected"),
    [
        (["cache", "prune", "--max-size", "abc"], "--max-size", "e.g. 123, 500M, 1.5G, 10GiB"),
        (["cache", "prune", "--older-than", "soon"], "--older-than", "e.g. 90, 90s, 45m, 1h30m"),
        (["cache", "prune", "--max-size", "1G", "--grace", "1h1h"], "--grace", "largest first"),
        (
            ["warm", "m.toml", "--jobs", "abc"],
            "--jobs/-j",
            "1 to 256 parallel downloads, found 'abc'",
        ),
        (["warm", "m.toml", "-j", "0"], "--jobs/-j", "found 0; e.g. --jobs 8"),
        (["fetch", "http://127.0.0.1:9/x", "--timeout", "abc"], "--timeout", "above 0 (e.g. 30"),
        (["fetch", "http://127.0.0.1:9/x", "--timeout", "0"], "--timeout", "above 0 (e.g. 30"),
        (["fetch", "http://127.0.0.1:9/x", "--deadline", "-1"], "--deadline", "0 or more (e.g."),
        (["fetch", "http://127.0.0.1:9/x", "--lock-timeout", "nan"], "--lock-timeout", "0 or"),
        (["fetch", "http://127.0.0.1:9/x", "--sha256", "xyz"], "--sha256", "64 hexadecimal"),
        (["fetch", "http://127.0.0.1:9/x", "--namespace", "../x"], "--namespace", "'../x'"),
        (["fetch", "http://127.0.0.1:9/x", "--filename", ".hidden"], "--filename", "'.hidden'"),
    ],
)
def test_a_bad_value_names_the_flag_and_the_accepted_form(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, expected: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert f"argument {flag}: " in err
    assert expected in err
    assert "invalid" not in err
    assert out == ""


def test_ls_of_an_empty_cache_prints_its_header(
    capsys: pytest.CaptureFixture[str], isolated_cache: Path
) -> None:
    cache = f"{isolated_cache}/vllm/test_cache"
    assert run(capsys, "cache", "ls") == (
        0,
        f"test cache (_VLLM_TEST_CACHE): {cache}\nENTRY\tSIZE\tLAST USED (UTC)\tSOURCE\n(empty)\n",
        "",
    )
    status, out, err = run(capsys, "cache", "ls", "--json")
    assert (status, err) == (0, "")
    listed = json.loads(out)
    assert listed["test_cache"] == {
        "variable": "_VLLM_TEST_CACHE",
        "path": cache,
        "exists": False,
        "entries": [],
    }
    assert [listed[k]["exists"] for k in ("huggingface", "modelscope", "hub_store")] == [
        False,
        False,
        False,
    ]


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--grace", "2h"]])
def test_prune_without_a_criterion_says_which_exist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str]
) -> None:
    source = tmp_path / "a.bin"
    source.write_bytes(b"kept")
    entry = Fetcher(allow_file=True).fetch(source.as_uri(), namespace="ns")
    status, out, err = run(capsys, "cache", "prune", *extra)
    assert status == 2
    assert out == ""
    for criterion in ("--max-size SIZE (e.g. 20G)", "--older-than AGE (e.g. 14d)", "--strays"):
        assert criterion in err
    assert "nothing was removed" in err
    assert entry.read_bytes() == b"kept"
    # --strays alone is a criterion: only what no entry needs goes, the entry stays.
    orphan = entry.parent / ".gone.bin.meta.json"
    orphan.write_text("{}")
    old = 1_000_000_000
    os.utime(orphan, (old, old))
    status, out, err = run(capsys, "cache", "prune", "--strays")
    assert (status, err) == (0, "")
    assert f"removed {orphan}: record of a missing entry" in out
    assert not orphan.exists()
    assert entry.read_bytes() == b"kept"


def test_refused_schemes_name_the_flag_not_the_python_api(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "fetch", "ftp://127.0.0.1/x")
    assert (status, out) == (2, "")  # a usage error, as --help lists it
    assert err == (
        "cacheroot fetch: ftp://127.0.0.1/x: scheme 'ftp' is not supported: give an http:// or "
        "https:// URL, or a file:// URL with --allow-file\n"
    )
    source = tmp_path / "mirror.bin"
    source.write_bytes(b"mirrored")
    url = source.as_uri()
    status, out, err = run(capsys, "fetch", url)
    assert (status, out) == (2, "")
    assert err == (
        f"cacheroot fetch: {url}: file:// URLs are read only with --allow-file (they are meant "
        "for local mirrors)\n"
    )
    status, out, err = run(capsys, "fetch", url, "--allow-file")
    assert status == 0
    assert err.startswith(f"cacheroot fetch: miss {url} (8 B) in "), err
    path = Path(out.splitlines()[-1])
    assert path.read_bytes() == b"mirrored"
    # Once cached, the entry is served without the flag, as before: nothing is read from file://.
    source.unlink()
    status, out, err = run(capsys, "fetch", url)
    assert (status, out) == (0, f"{path}\n")
    assert err.startswith("cacheroot fetch: hit "), err


def test_a_url_that_is_not_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    expected = (
        "cacheroot fetch: notaurl: scheme '' is not supported: give an http:// or https:// URL, "
        "or a file:// URL with --allow-file\n"
    )
    assert run(capsys, "fetch", "notaurl") == (2, "", expected)


def test_an_origin_that_never_answers_names_the_deadline_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: the connection is refused
        url = f"http://127.0.0.1:{s.getsockname()[1]}/x.bin"
        # The first wait of the default backoff (0.25 s at least) is past a 0.2 s deadline.
        status, out, err = run(capsys, "fetch", url, "--deadline", "0.2", "-q")
    assert (status, out) == (1, "")
    assert err == (
        f"cacheroot fetch: gave up on {url} after 1 attempt, which got no answer from the origin "
        "(the last: ConnectionError: Connection refused); another would come after the deadline "
        "of 0.2 s. Check that the origin is up and that the URL's host and port are right, or "
        "fetch it from elsewhere; to wait longer for it to come up, raise the deadline "
        "(--deadline SECONDS, 0 for none)\n"
    )
