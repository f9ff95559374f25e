"""``ci/isolated-run.sh``: runs that share the cache volume and nothing else.

This is what a CI container gives each job, proven without a container engine: a file written to
the volume by one run is there for the next, while its HOME, /tmp and network are its own.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT, CACHEROOT_TAG, resolve

if TYPE_CHECKING:
    from collections.abc import Callable

    Run = Callable[..., subprocess.CompletedProcess[str]]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "isolated-run.sh"
SKIPPED = 77

#: Run inside: connect to TEST-NET-1 (RFC 5737, never routed) and to a loopback listener.
NETWORK_PROBE = """
import errno, json, socket
outside = socket.socket()
outside.settimeout(5)
try:
    outside.connect(("192.0.2.1", 9))
    routed = "connected"
except OSError as exc:
    routed = errno.errorcode.get(exc.errno or 0, repr(exc))
server = socket.create_server(("127.0.0.1", 0))
with socket.create_connection(server.getsockname(), timeout=5):
    conn, _ = server.accept()
    conn.close()
with open("/proc/net/dev") as dev:
    interfaces = sorted(line.split(":")[0].strip() for line in dev.readlines()[2:])
print(json.dumps({"routed": routed, "interfaces": interfaces, "loopback": "ok"}))
"""


def this_venv() -> Path | None:
    """The virtual environment running the tests, or ``None``."""
    prefix = Path(sys.prefix)
    return prefix if (prefix / "pyvenv.cfg").is_file() else None


@pytest.fixture(scope="session")
def isolation(bash: str) -> list[str]:
    """The runner's argv prefix, after its own probe; skips where isolation is not possible."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    check = subprocess.run(
        [bash, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    if check.returncode == SKIPPED:
        pytest.skip(check.stderr.strip())
    assert check.returncode == 0, check.stderr
    return [bash, str(SCRIPT)]


@pytest.fixture
def isolated(
    isolation: list[str], script_env: dict[str, str], isolated_cache: Path, cli_dir: Path
) -> Run:
    """Run a command isolated, with this test's cache root as the volume, this venv inside."""
    venv = this_venv()
    if venv is None:
        pytest.skip(f"{sys.executable} is not in a virtual environment: nothing to bind inside")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **script_env,
            "ISOLATED_VENV": str(venv),
            "CACHEROOT_CLI": str(cli_dir / "cacheroot"),
        }
        return subprocess.run(
            [*isolation, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    return run


@pytest.mark.e2e
def test_runs_share_the_volume_and_nothing_else(
    isolated: Run, isolated_cache: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    first = isolated(
        "--bind",
        str(out_dir),
        "/reports",
        "--",
        "bash",
        "-c",
        'set -e; for d in "$CACHEROOT" /tmp "$HOME"; do echo first > "$d/marker"; done; '
        'cat /tmp/marker "$HOME/marker"; echo "$HOME" > /reports/home',
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == "first\nfirst\n"  # /tmp and HOME were writable in the first run
    assert (isolated_cache / "marker").read_text() == "first\n"  # the volume is the host's root
    assert (out_dir / "home").read_text().strip() != str(Path.home())

    # A host file outside everything the runner shares on purpose (under nox, tmp_path lies in the
    # session's venv, which is bind-mounted read-only so the interpreter can run).
    host_dir = Path(tempfile.mkdtemp(prefix="cacheroot-host-only-", dir="/var/tmp"))
    host_tmp = host_dir / "host-only"
    host_tmp.write_text("host")
    second = isolated(
        "--",
        "bash",
        "-c",
        'cat "$CACHEROOT/marker"; for p in /tmp/marker "$HOME/marker" "$1"; do '
        '[ -e "$p" ] && echo "leaked: $p"; done; true',
        "probe",
        str(host_tmp),
    )
    shutil.rmtree(host_dir)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "first\n"


@pytest.mark.e2e
def test_the_layout_is_the_containers_and_the_host_environment_stays_out(
    isolated: Run, script_env: dict[str, str]
) -> None:
    script_env.update({"HF_TOKEN": "host-only"})
    out = isolated(
        "--tag",
        "rocm",
        "--",
        "python",
        "-c",
        "import json, os; print(json.dumps(dict(os.environ)))",
    )
    assert out.returncode == 0, out.stderr
    inside = json.loads(out.stdout)
    expected = resolve({CACHEROOT: "/cacheroot"}, "rocm").applied()
    assert expected
    assert {k: inside.get(k) for k in expected} == expected
    assert inside[CACHEROOT] == "/cacheroot"
    assert inside[CACHEROOT_TAG] == "rocm"
    assert "HF_TOKEN" not in inside
    assert inside["TMPDIR"] == "/tmp"


@pytest.mark.e2e
def test_only_loopback_networking(isolated: Run) -> None:
    out = isolated("--", "python", "-c", NETWORK_PROBE)
    assert out.returncode == 0, out.stderr
    probe = json.loads(out.stdout)
    assert probe == {"routed": "ENETUNREACH", "interfaces": ["lo"], "loopback": "ok"}


@pytest.mark.e2e
def test_the_repository_and_venv_are_read_only(isolated: Run) -> None:
    venv = this_venv()
    assert venv is not None
    out = isolated(
        "--",
        "python",
        "-c",
        "import os, sys, cacheroot.envs; print(sys.prefix, os.getcwd())",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(venv.resolve()), str(REPO)]
    for target in (REPO / "isolation-probe", venv / "isolation-probe"):
        touch = isolated("--", "touch", str(target))
        assert touch.returncode != 0
        assert "Read-only file system" in touch.stderr
        assert not target.exists()


@pytest.mark.e2e
def test_the_exit_status_is_the_commands(isolated: Run) -> None:
    assert isolated("--", "bash", "-c", "exit 7").returncode == 7


def test_dry_run_prints_the_sandbox(run_script: Run, isolated_cache: Path) -> None:
    venv = this_venv()
    if venv is None:
        pytest.skip(f"{sys.executable} is not in a virtual environment: nothing to bind inside")
    out = run_script(
        "isolated-run.sh",
        "--tag",
        "cuda",
        "--",
        "pytest",
        "-x",
        DRY_RUN="1",
        ISOLATED_VENV=str(venv),
    )
    assert out.returncode == 0, out.stderr
    words = shlex.split(out.stdout)
    assert words[0] == "bwrap"
    assert "--unshare-net" in words
    assert "--clearenv" in words
    bind = words.index("--bind")
    assert words[bind + 1 : bind + 3] == [str(isolated_cache), "/cacheroot"]
    assert words[-3:] == ["--", "pytest", "-x"]
    setenv = {words[i + 1]: words[i + 2] for i, w in enumerate(words) if w == "--setenv"}
    assert setenv[CACHEROOT_TAG] == "cuda"
    assert setenv["HOME"] != str(Path.home())


def test_usage_errors(run_script: Run) -> None:
    out = run_script("isolated-run.sh", DRY_RUN="1")
    assert out.returncode == 2
    assert "no command" in out.stderr
    out = run_script("isolated-run.sh", "--bogus", "true", DRY_RUN="1")
    assert out.returncode == 2
    assert "--bogus" in out.stderr


def test_check_reports_a_missing_bubblewrap_as_skipped(run_script: Run, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    dirname = shutil.which("dirname")
    assert dirname is not None
    (tools / "dirname").symlink_to(dirname)  # all the script needs before its probe
    out = run_script("isolated-run.sh", "--check", PATH=str(tools))
    assert out.returncode == SKIPPED
    assert "apt-get install -y bubblewrap" in out.stderr
