"""The ``console`` blocks of the README and the docs: collected, run in a sandbox, compared.

A block is a transcript: ``$ COMMAND`` lines (a line ending in ``\\`` continues on the next),
each followed by the output it shows (standard output and standard error together, as a
terminal shows them). A last output line ``[exit N]`` says the command's exit status. The line
before the block's fence may hold a marker:

- ``<!-- console: not run: REASON -->``: the block is not run, and the reason says why (it needs
  a GPU, a container runtime, a fleet, the real Hub, ...);
- ``<!-- console: origin -->``: a local HTTP origin serves the files of :data:`ORIGIN_FILES`,
  standing in for a remote host; ``127.0.0.1:8000`` in the commands is its real address;
- ``<!-- console: checkout -->``: the commands run in the repository's root, not in an empty
  working directory;
- ``<!-- console: example=NAME -->``: the tree ``docs/examples/NAME`` is copied into the working
  directory first, as ``NAME``;
- ``<!-- console: hub -->``, ``hub=FAULT[:N]``: a local test hub stands in for the Hugging Face
  Hub (``hubblocks.py`` says how, and which faults it can show);
- ``<!-- console: root -->``: the block runs as root in a private mount namespace of its own
  (``unshare``), so its mounts (an overlay, a read-only bind mount) vanish with it and no other
  process sees them; where that is not permitted, the test is skipped and says why;
- ``<!-- console: s3 -->``: a local S3 server (moto's) holds the bucket ``fleet-cache``, and the
  ``AWS_*`` variables that name it are set for the block;
- ``<!-- console: root, service=N -->``: each command is a service that runs until it is
  stopped: the runner stops it with SIGTERM after ``N`` seconds (``timeout``), and it runs in a
  network namespace of its own, so the port it listens on is free whatever else runs here.

Several options are separated by commas.

Every block runs in one fresh ``bash`` with a fresh ``HOME`` and temporary directory, no
cacheroot variable set, and its own pin file; its working directory is shown as
:data:`WORKDIR`. The paths the docs use by convention
(:data:`DOC_PATHS`) lie inside a sandbox directory: the commands' ``/var/cache/cacheroot`` is
``SANDBOX/var/cache/cacheroot``, and the sandbox prefix is taken out of the output again; the
checkout is shown as ``/srv/cacheroot``. Output is compared line by line after placeholders
replace what changes from run to run (durations, sizes, ports, dates; a run of white space is
one space); ``...`` in an expected line (three dots, not a part of a longer run such as pytest's
progress dots) matches any text, and a line that is only ``...``
matches any number of lines.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The demo trees and projects the blocks use (``example=NAME``).
EXAMPLES = REPO / "docs" / "examples"
#: A private mount namespace (``root``): mounts made in it do not propagate back.
UNSHARE = ["unshare", "--mount", "--propagation", "private"]

#: Absolute paths the docs use by convention; each lies inside the sandbox when a block runs.
DOC_PATHS = (
    "/var/cache/cacheroot",
    "/var/tmp/ci",
    "/mnt/fleet-cache",
    "/home/user",
    "/opt/ci-venv",
)
#: Where the docs say a checkout of this repository is.
CHECKOUT = "/srv/cacheroot"
#: Where a block runs (unless it runs in the checkout), as its output shows it.
WORKDIR = "/srv/project"
#: The address the docs give the local origin; replaced by the real one.
ORIGIN_ADDRESS = "127.0.0.1:8000"
#: What the local origin serves: path -> body (deterministic, so digests in the docs hold).
ORIGIN_FILES = {
    "/gsm8k/test.jsonl": b"".join(
        b'{"question": "What is %d + %d?", "answer": "%d"}\n' % (i, i, 2 * i) for i in range(48_000)
    ),
    "/tok/tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n',
}

MARKER = re.compile(r"^<!--\s*console:\s*(?P<options>.*?)\s*-->$")
EXIT = re.compile(r"^\[exit (?P<status>\d+)\]$")


@dataclass
class Command:
    """One ``$`` line (joined with its continuations) and the output shown for it."""

    text: str
    expected: list[str] = field(default_factory=list)
    status: int | None = None


@dataclass
class Block:
    """A ``console`` block: where it is, its marker's options, its commands."""

    page: Path
    line: int
    options: str
    commands: list[Command]

    @property
    def where(self) -> str:
        """``docs/x.md:12``: the page (from the repository root) and the fence's line."""
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """The reason the block is not run, or ``None`` when it runs."""
        if self.options.startswith("not run"):
            return self.options.partition(":")[2].strip()
        return None

    @property
    def words(self) -> set[str]:
        """The marker's options (``origin``, ``checkout``, ``example``, ``root``), less values."""
        return set(self.settings)

    @property
    def settings(self) -> dict[str, str]:
        """The marker's options, each with its value (``example=demo``; ``""`` for none)."""
        found: dict[str, str] = {}
        for word in self.options.split(","):
            name, _, value = word.partition("=")
            if name.strip():
                found[name.strip()] = value.strip()
        return found


def pages() -> list[Path]:
    """The README and every page under docs/, in a stable order."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def parse(page: Path) -> list[Block]:
    """Every ``console`` block of ``page`` (one without a ``$`` line has no commands)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        before = next((s.strip() for s in reversed(lines[:i]) if s.strip()), "")
        found = MARKER.match(before)
        start = i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        blocks.append(Block(page, start, found["options"] if found else "", _commands(body)))
    return blocks


def _commands(body: list[str]) -> list[Command]:
    """The commands of a block's body, each with its expected output and exit status."""
    commands: list[Command] = []
    continued = False
    for line in body:
        if continued:
            commands[-1].text += "\n" + line
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append(Command(line[2:]))
            continued = line.endswith("\\")
        elif commands:
            commands[-1].expected.append(line)
    for command in commands:
        while command.expected and not command.expected[-1].strip():
            command.expected.pop()
        if command.expected and (found := EXIT.match(command.expected[-1].strip())):
            command.status = int(found["status"])
            command.expected.pop()
            while command.expected and not command.expected[-1].strip():
                command.expected.pop()
    return commands


def collect() -> list[Block]:
    """Every console block of the README and the docs."""
    return [block for page in pages() for block in parse(page)]


# -- running --------------------------------------------------------------------------------

_PATH_CHARS = r"[\w./-]"


def to_sandbox(text: str, sandbox: Path, origin: str | None) -> str:
    """A command with the docs' paths (in ``file://`` URLs too) moved into the sandbox, and the
    origin's address."""
    for path in DOC_PATHS:
        text = re.sub(rf"(?<!{_PATH_CHARS}){re.escape(path)}", str(sandbox) + path, text)
        text = text.replace(f"file://{path}", f"file://{sandbox}{path}")
    text = re.sub(rf"(?<!{_PATH_CHARS}){re.escape(CHECKOUT)}", str(REPO), text)
    if origin is not None:
        text = text.replace(ORIGIN_ADDRESS, origin)
    return text


def from_sandbox(text: str, sandbox: Path) -> str:
    """Output with the sandbox's prefix taken out and the checkout shown as the docs show it."""
    return text.replace(str(sandbox), "").replace(str(REPO), CHECKOUT)


_PLACEHOLDERS = (
    (re.compile(r"\s+"), " "),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?\b"), "DATE"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:B|KiB|MiB|GiB|TiB)\b"), "SIZE"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|µs|us)\b"), "TIME"),
    (re.compile(r"\b\d+\.\d+s\b"), "TIME"),
)


def normal(line: str) -> str:
    """``line`` with what changes from run to run replaced by placeholders."""
    line = line.rstrip()
    for pattern, placeholder in _PLACEHOLDERS:
        line = pattern.sub(placeholder, line)
    return line


#: ``...`` as a wildcard: exactly three dots, not a part of a longer run (pytest's progress dots).
_ELLIPSIS = re.compile(r"(?<!\.)\.\.\.(?!\.)")


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` fits ``expected`` (normalised; ``...`` as described above)."""
    want = [normal(x) for x in expected]
    got = [normal(x) for x in actual]
    patterns = [
        None if w.strip() == "..." else re.compile(".*".join(map(re.escape, _ELLIPSIS.split(w))))
        for w in want
    ]
    memo: dict[tuple[int, int], bool] = {}

    def fit(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[i, j]
        if i == len(patterns):
            ok = j == len(got)
        elif patterns[i] is None:
            ok = fit(i + 1, j) or (j < len(got) and fit(i, j + 1))
        else:
            pattern = patterns[i]
            ok = (
                j < len(got)
                and pattern is not None
                and pattern.fullmatch(got[j]) is not None
                and fit(i + 1, j + 1)
            )
        memo[i, j] = ok
        return ok

    return fit(0, 0)


def namespace_missing() -> str:
    """Why a ``root`` block cannot run here (``""`` when it can)."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    if os.geteuid() != 0:
        return "the block mounts file systems: it runs only as root"
    if subprocess.run([*UNSHARE, "true"], capture_output=True, check=False).returncode != 0:
        return "a private mount namespace is not permitted here"
    return ""


_SEPARATOR = "@@console-block@@"


def run(
    block: Block,
    sandbox: Path,
    origin: str | None,
    *,
    env: dict[str, str] | None = None,
    before: dict[int, str] | None = None,
) -> list[tuple[list[str], int]]:
    """Run the block's commands in one fresh bash; each command's output lines and status.

    ``env`` is added to the fresh environment (a local hub's endpoint); ``before`` holds lines
    of set-up to run, unseen, before a command (by its index).
    """
    for path in DOC_PATHS:
        (sandbox / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    home = sandbox / "home" / "user"
    work = sandbox / WORKDIR.lstrip("/")
    tmp = sandbox / "tmp"
    for directory in (home, work, tmp):
        directory.mkdir(parents=True, exist_ok=True)
    example = block.settings.get("example")
    if example:
        shutil.copytree(
            EXAMPLES / example, work / example, ignore=shutil.ignore_patterns("__pycache__")
        )
    lines = ["exec 2>&1", f"cd {REPO if 'checkout' in block.words else work}"]
    for n, command in enumerate(block.commands):
        if before and n in before:
            lines.append(before[n])
        lines.append(f"printf '%s\\n' '{_SEPARATOR} {n}'")
        line = to_sandbox(command.text, sandbox, origin)
        if "service" in block.words:
            line = f"timeout -s TERM {int(block.settings['service'])} {line}"
        lines.append(line)
        lines.append(f"printf '\\n{_SEPARATOR} exit %d\\n' \"$?\"")
    script = sandbox / "block.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bindir = Path(sys.executable).parent
    fresh = {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "USER": "user",  # what getpass.getuser() says (pytest's `pytest-of-user`), as HOME's name
        "LOGNAME": "user",
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "COLUMNS": "100",
        "TERM": "dumb",
        "CACHEROOT_PIN_FILE": str(sandbox / "opt" / "ci-venv" / "etc" / "cacheroot" / "pin"),
        **(env or {}),
    }
    shell = ["bash", str(script)]
    if "root" in block.words:
        shell = [*UNSHARE, *(["--net"] if "service" in block.words else []), *shell]
    ran = subprocess.run(
        shell,
        env=fresh,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = from_sandbox(ran.stdout, sandbox)
    results: list[tuple[list[str], int]] = []
    for chunk in out.split(f"{_SEPARATOR} ")[1:]:
        head, _, rest = chunk.partition("\n")
        if head.startswith("exit "):
            output = results[-1][0]
            while output and not output[-1].strip():
                output.pop()
            results[-1] = (output, int(head.split()[1]))
        else:
            results.append((rest.splitlines(), -1))
    return results
