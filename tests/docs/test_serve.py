"""``tests/docs/serve.py`` (``nox -s examples``) serves what the docs' commands fetch.

The script runs as a reader runs it, a process of its own started from the repository root; the
files are fetched over real HTTP, and the hub's through the real huggingface_hub in a process
that has only the ``export`` lines the script printed, so the lines are tested with the servers.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests/docs/serve.py"
#: The tokenizer file of the local copy of example.org, as the docs' manifest pins it.
TOKENIZER = b'{"version": "1.0", "model": {"type": "BPE"}}\n'
#: The docs' test hub repository's commit (docs/examples name it as a literal too).
COMMIT = "e7cd968092652f4305c64836d7a85c2a3d27f566"
EXAMPLE = "https://example.org"
READY = "serving until Ctrl-C (SIGINT) or SIGTERM"


def start(*args: str) -> subprocess.Popen[str]:
    """The script, started from the repository root as ``nox -s examples`` starts it."""
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until_ready(proc: subprocess.Popen[str], timeout: float = 60.0) -> list[str]:
    """The lines printed up to and including the ready line (a thread reads, so a script that
    hangs fails the test instead of hanging it)."""
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout: IO[str] = proc.stdout

    def pump() -> None:
        for line in iter(stdout.readline, ""):
            lines.put(line.rstrip("\n"))
            if line.rstrip("\n") == READY:
                return
        lines.put("")  # end of output before the ready line

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while not seen or seen[-1] != READY:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"serve.py printed no ready line in {timeout} s: {seen}")
        if line == "" and proc.poll() is not None:
            assert proc.stderr is not None
            pytest.fail(f"serve.py exited {proc.returncode}: {seen}\n{proc.stderr.read()}")
        seen.append(line)
    return seen


def stop(proc: subprocess.Popen[str], number: signal.Signals) -> tuple[int, str, str]:
    """Send ``number``; the exit status and what was printed after the ready line."""
    proc.send_signal(number)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:
        body: bytes = answer.read()
        return body


def test_it_serves_the_docs_origin_and_hub_and_prints_the_exports_that_reach_them() -> None:
    proc = start("--origin-port", "0", "--hub-port", "0")
    try:
        lines = read_until_ready(proc)
        found = re.fullmatch(r"example origin: http://127\.0\.0\.1:(\d+) .*", lines[0])
        assert found is not None, lines
        origin = int(found[1])
        found = re.fullmatch(r"test hub: http://127\.0\.0\.1:(\d+) .*", lines[3])
        assert found is not None, lines
        hub = int(found[1])
        assert origin not in (0, 8000)
        assert hub not in (0, 8780, origin)
        assert lines == [
            f"example origin: http://127.0.0.1:{origin} (a local copy of https://example.org)",
            "  https://example.org/gsm8k/test.jsonl (2756225 bytes)",
            "  https://example.org/tok/tokenizer.json (45 bytes)",
            f"test hub: http://127.0.0.1:{hub} (the Hugging Face and ModelScope APIs)",
            f"  acme/tiny-model at {COMMIT}: config.json, model.safetensors, tokenizer.json",
            "in the shell that runs the docs' commands:",
            f'export CACHEROOT_MIRRORS="https://example.org/=http://127.0.0.1:{origin}/"',
            f"export HF_ENDPOINT=http://127.0.0.1:{hub}",
            f"export MODELSCOPE_ENDPOINT=http://127.0.0.1:{hub}",
            "export HF_HUB_DISABLE_PROGRESS_BARS=1",
            "export HF_HUB_DISABLE_TELEMETRY=1",
            READY,
        ]

        # The origin: exactly the docs' files, byte for byte (the digest is the manifest's).
        assert get(f"http://127.0.0.1:{origin}/tok/tokenizer.json") == TOKENIZER
        gsm8k = get(f"http://127.0.0.1:{origin}/gsm8k/test.jsonl")
        assert len(gsm8k) == 2756225
        assert gsm8k.startswith(b'{"question": "What is 0 + 0?", "answer": "0"}\n')
        assert gsm8k.endswith(b'{"question": "What is 47999 + 47999?", "answer": "95998"}\n')
        assert (
            hashlib.sha256(gsm8k).hexdigest()
            == "c92faa732bba19b5f99970a10a72ea5fcce22979fbad35aa3ec011772bead4cf"
        )
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(f"http://127.0.0.1:{origin}/other.txt")
        missing.value.close()  # it holds the answer's connection
        assert missing.value.code == 404

        # The export lines, and nothing else, take a reader's commands to both servers.
        env = dict(os.environ)
        for line in lines:
            if line.startswith("export "):
                name, _, value = shlex.split(line)[1].partition("=")
                env[name] = value
        # Were the mirror ever skipped, the fetch would go on to the real example.org: a proxy
        # on a closed loopback port ends any such request here, and the mirror is no proxy's.
        env.update(HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="127.0.0.1")
        fetched = subprocess.run(
            [
                sys.executable,
                "-m",
                "cacheroot.envs._cli",
                "fetch",
                "-q",
                f"{EXAMPLE}/tok/tokenizer.json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert fetched.returncode == 0, fetched.stderr
        assert Path(fetched.stdout.strip().splitlines()[-1]).read_bytes() == TOKENIZER
        client = (
            "import huggingface_hub as hh\n"
            "info = hh.model_info('acme/tiny-model')\n"
            "print(info.sha, *sorted(s.rfilename for s in info.siblings or []))\n"
            "path = hh.hf_hub_download('acme/tiny-model', 'config.json')\n"
            "print(open(path, encoding='utf-8').read())\n"
        )
        hf = subprocess.run(
            [sys.executable, "-c", client],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert hf.returncode == 0, hf.stderr
        assert hf.stdout == (
            f"{COMMIT} config.json model.safetensors tokenizer.json\n"
            '{"model_type": "llama", "hidden_size": 16}\n'
        )
    finally:
        status, out, err = stop(proc, signal.SIGTERM)
    assert (status, out, err) == (0, "stopped (SIGTERM)\n", "")


def test_ctrl_c_stops_it_cleanly() -> None:
    proc = start("--origin-port", "0", "--hub-port", "0")
    try:
        read_until_ready(proc)
    finally:
        status, out, err = stop(proc, signal.SIGINT)
    assert (status, out, err) == (0, "stopped (SIGINT)\n", "")


@pytest.mark.parametrize(
    ("option", "what"), [("--origin-port", "example origin"), ("--hub-port", "test hub")]
)
def test_a_port_in_use_is_one_line_naming_the_option_that_changes_it(
    option: str, what: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--hub-port" if option == "--origin-port" else "--origin-port"
        ran = subprocess.run(
            [sys.executable, SCRIPT, option, str(port), other, "0"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (ran.returncode, ran.stdout) == (2, "")
    assert ran.stderr == (
        f"serve.py: port {port} for the {what} is in use: stop what listens there, "
        f"or choose another with {option} PORT (0: any free port)\n"
    )
