"""What ``cacheroot fetch`` and ``cacheroot warm`` say while they work, and what the library does
not: a line per finished fetch and per retry on stderr, a JSON summary with ``--json``, nothing
with ``-q``, a bar on a terminal whose summary line stays; the Python API prints nothing.

Every run is the real command in a fresh interpreter against a real local origin. The lines are
written out literally; only the timing numbers are patterns.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import termios
from pathlib import Path

from cacheroot.envs import CI
from cacheroot.fetch import Fetcher

from .origin import Origin, body, sha256

#: A duration, a size and a rate as the lines print them.
SECONDS = r"\d+\.\d\d s"
RATE = r"\d+(?:\.\d)? (?:B|KiB|MiB|GiB)/s"
HOSTPORT = r"127\.0\.0\.1:\d+"


def cacheroot(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_a_miss_then_a_hit_each_say_one_line(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = Fetcher().path(url)
    cold = cacheroot("fetch", url, "--sha256", sha256(body(name)))
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout == f"{path}\n"
    assert re.fullmatch(
        rf"cacheroot fetch: miss {re.escape(url)} \(64\.0 KiB\) in {SECONDS}, {RATE} "
        rf"from {HOSTPORT}\n",
        cold.stderr,
    ), cold.stderr
    warm = cacheroot("fetch", url)
    assert warm.stdout == f"{path}\n"
    assert re.fullmatch(
        rf"cacheroot fetch: hit  {re.escape(url)} \(64\.0 KiB\) in {SECONDS}\n", warm.stderr
    ), warm.stderr
    assert origin.gets[f"/ok/{name}"] == 1


def test_json_summary_on_stdout_and_quiet(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    path = str(Fetcher().path(url))
    cold = cacheroot("fetch", url, "--json", "-q")
    assert cold.returncode == 0
    assert cold.stderr == ""
    summary = json.loads(cold.stdout)
    assert isinstance(summary.pop("seconds"), float)
    assert summary == {
        "status": "miss",
        "url": url,
        "path": path,
        "bytes": 65536,
        "source": f"127.0.0.1:{origin.port}",
        "from": None,
    }
    warm = cacheroot("fetch", url, "--json")
    assert json.loads(warm.stdout)["status"] == "hit"
    assert warm.stderr.startswith("cacheroot fetch: hit  ")
    quiet = cacheroot("fetch", url, "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, f"{path}\n", "")
    failed = cacheroot("fetch", origin.url(f"/missing/{name}"), "--json")
    assert failed.returncode == 1
    assert json.loads(failed.stdout) == {
        "status": "failed",
        "url": origin.url(f"/missing/{name}"),
        "path": None,
        "exit": 1,
        "reason": f"HTTP 404 Not Found from {origin.url(f'/missing/{name}')}: expected 200 (or "
        "206 on resume); check the URL",
    }


def test_each_retry_says_its_reason_and_wait(origin: Origin, name: str) -> None:
    url = origin.url(f"/status/503/2/{name}")
    done = cacheroot("fetch", url)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 3, lines
    for n, text in enumerate(lines[:2], 1):
        assert re.fullmatch(
            rf"cacheroot fetch: retry {n}/5 {re.escape(url)} in \d+\.\d s: HTTP 503", text
        ), text
    assert lines[2].startswith(f"cacheroot fetch: miss {url} (64.0 KiB) in ")


def _dead_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_dead_origin_is_reported_at_its_first_failure(name: str) -> None:
    url = f"http://127.0.0.1:{_dead_port()}/{name}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        # Five retries with backoff still lie ahead (seconds of waiting): it has not given up.
        assert proc.poll() is None, "the first failure was reported only at the end"
        assert re.fullmatch(
            rf"cacheroot fetch: retry 1/5 {re.escape(url)} in \d+\.\d s: "
            r"ConnectionError: Connection refused\n",
            first,
        ), first
    finally:
        proc.kill()
        proc.communicate()


def test_the_library_prints_nothing(origin: Origin, name: str) -> None:
    url = origin.url(f"/status/503/1/{name}")
    code = (
        "import sys; from cacheroot.fetch import Fetcher; "
        "print(Fetcher(backoff=0.01).fetch(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert origin.gets[f"/status/503/1/{name}"] == 2


def test_on_a_terminal_the_bar_is_replaced_by_a_line_that_stays(origin: Origin, name: str) -> None:
    url = origin.url(f"/ok/{name}")
    primary, secondary = os.openpty()
    # A terminal of 24 rows of 120 columns (a new pty has none, and tqdm draws nothing in 0).
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    try:
        # A terminal user's shell: no CI (bars are left out of CI logs; the suite may run in CI).
        env = {k: v for k, v in os.environ.items() if k != CI}
        proc = subprocess.Popen(
            [sys.executable, "-m", "cacheroot.envs._cli", "fetch", url],
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            env=env,
        )
        os.close(secondary)
        out, _ = proc.communicate(timeout=120)
        seen = b""
        while select.select([primary], [], [], 0)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the child's side is closed: all was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(primary)
    assert proc.returncode == 0
    assert out == f"{Fetcher().path(url)}\n"
    text = seen.decode()
    assert "|" in text, f"no progress bar was drawn: {text!r}"
    # The bar's line is cleared; what is left on the screen last is the summary line.
    last = re.split(r"[\r\n]+", text.strip())[-1]
    assert re.fullmatch(
        rf"cacheroot fetch: miss {re.escape(url)} \(64\.0 KiB\) in {SECONDS}, {RATE} "
        rf"from {HOSTPORT}",
        last,
    ), text


def _asset(url: str, data: bytes, **extra: object) -> str:
    lines = ["[[asset]]", f'url = "{url}"', f'sha256 = "{sha256(data)}"', 'namespace = "suite"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n\n"


def test_warm_logs_each_entry_and_ends_with_totals(
    origin: Origin, name: str, tmp_path: Path
) -> None:
    ok, bad = origin.url(f"/ok/{name}"), origin.url(f"/missing/{name}")
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(_asset(ok, body(name)))
    cold = cacheroot("warm", str(manifest))
    assert cold.returncode == 0, cold.stderr
    assert re.fullmatch(
        rf"cacheroot warm: miss {re.escape(ok)} \(64\.0 KiB\) in {SECONDS}, {RATE} "
        rf"from {HOSTPORT}\n",
        cold.stderr,
    ), cold.stderr
    assert re.fullmatch(
        rf"warm {re.escape(str(manifest))}: 1 entry: 0 hits, 1 miss \(64\.0 KiB "
        r"downloaded\), 0 failures in \d+\.\d s\n",
        cold.stdout,
    ), cold.stdout
    manifest.write_text(_asset(ok, body(name)) + _asset(bad, b"never"))
    again = cacheroot("warm", str(manifest))
    assert again.returncode == 1
    lines = sorted(again.stderr.splitlines())  # the entries run in parallel
    assert len(lines) == 2, lines
    assert lines[0].startswith(
        f"cacheroot warm: failed [[asset]] #2 {bad}: DownloadError: HTTP 404"
    )
    hit = rf"cacheroot warm: hit  {re.escape(ok)} \(64\.0 KiB\) in {SECONDS}"
    assert re.fullmatch(hit, lines[1]), lines[1]
    assert re.fullmatch(
        rf"warm {re.escape(str(manifest))}: 2 entries: 1 hit, 0 misses \(0 B downloaded\), "
        r"1 failure in \d+\.\d s",
        again.stdout.splitlines()[-1],
    ), again.stdout
    quiet = cacheroot("warm", "-q", str(manifest))
    assert quiet.stderr == ""
    assert origin.gets[f"/ok/{name}"] == 1


def test_a_miss_the_shared_tier_serves_says_so(origin: Origin, name: str, tmp_path: Path) -> None:
    from cacheroot.envs import CACHEROOT, CACHEROOT_APPLIED, CACHEROOT_SHARED, TABLE

    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {CACHEROOT_APPLIED, *(v.name for v in TABLE)}
    }
    url = origin.url(f"/ok/{name}")
    lines = []
    (tmp_path / "l2").mkdir()  # the shared tier is mounted, never made by cacheroot
    for host in ("a", "b"):  # two hosts, each its own root, one shared tier
        env = {**base, CACHEROOT: str(tmp_path / host), CACHEROOT_SHARED: str(tmp_path / "l2")}
        done = subprocess.run(
            [sys.executable, "-m", "cacheroot.envs._cli", "fetch", url],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines.append(done.stderr)
    assert re.fullmatch(rf"cacheroot fetch: miss .* from {HOSTPORT}\n", lines[0]), lines[0]
    assert re.fullmatch(
        rf"cacheroot fetch: miss {re.escape(url)} \(64\.0 KiB\) in {SECONDS}, {RATE} "
        r"from shared tier\n",
        lines[1],
    ), lines[1]
    assert origin.gets[f"/ok/{name}"] == 1
