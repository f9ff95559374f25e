"""``ci/bootstrap.sh``: nox and uv where the XDG rules (or ``--prefix``) say, announced first;
the system tools of the non-default sessions from apt only when asked, never at a pinned version.

The script runs for real under bash. Who runs it is read from ``id -u``: the tests of a normal
user's install put an ``id`` first on PATH that answers 1000 for ``-u`` (the suite runs as root
in CI), and the root tests run as the real root in a private mount namespace whose ``/opt`` and
``/usr/local/bin`` are empty tmpfs mounts, so nothing they install reaches this machine. apt is
the one program stood in for (a fresh archive cannot be had offline): an ``apt-get`` that logs
its calls and prints a plan as ``apt-get -s`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.ci import wheelhouse
else:
    # pytest puts tests/ci on sys.path (no package there); mypy names it tests.ci.
    import wheelhouse

CI = Path(__file__).resolve().parents[2] / "ci"
#: The system directories the bootstrap tests put on PATH after their own.
SYSTEM_PATH = ("/usr/bin", "/bin")
#: What the script runs besides bash's builtins: linked into a directory of their own when a
#: test must hide a system tool (bwrap, sshfs) that /usr/bin may hold.
COMMANDS = ("cat", "grep", "head", "id", "ln", "mkdir", "paste", "readlink", "sed", "sh")
#: An ``id`` that says a normal user runs the script.
AS_USER = '#!/bin/sh\nif [ "$1" = -u ]; then echo 1000; else exec /usr/bin/id "$@"; fi\n'


@pytest.fixture
def bootstrap_env(tmp_path: Path, fake_bin: Path) -> dict[str, str]:
    """A normal user's environment: HOME in ``tmp_path``, PATH ``fake_bin`` (with an ``id`` that
    answers 1000) and the system's directories, no nox nor uv."""
    for tool in ("nox", "uv"):
        if shutil.which(tool, path=os.pathsep.join(SYSTEM_PATH)):
            pytest.skip(f"{tool} is installed system-wide: the bootstrap would keep that one")
    executable(fake_bin / "id", AS_USER)
    knobs = ("PYTHON", "TOOLS_DIR", "BIN_DIR", "XDG_DATA_HOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in knobs}
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = os.pathsep.join([str(fake_bin), *SYSTEM_PATH])
    return env


def executable(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as an executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def bootstrap(
    bash: str, env: dict[str, str], *args: str, wrap: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``ci/bootstrap.sh ARGS`` with ``env`` (under ``wrap``, a namespace, when given)."""
    return subprocess.run(
        [*wrap, bash, str(CI / "bootstrap.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def fake_tool(path: Path, version: str) -> None:
    """An executable that prints ``version`` as ``--version`` would (on stderr, as nox does)."""
    executable(path, f"#!/bin/sh\necho '{version}' >&2\n")


def seed(tools: Path) -> None:
    """A tool environment that holds nox and uv already."""
    fake_tool(tools / "bin" / "nox", "2024.10.9")
    fake_tool(tools / "bin" / "uv", "uv 0.9.0")


def test_a_user_s_tools_go_under_home_and_a_rerun_changes_nothing(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    tools = home / ".local/share/cacheroot/tools"  # XDG_DATA_HOME that is not absolute: ignored
    seed(tools)
    env = {**bootstrap_env, "XDG_DATA_HOME": "relative/data"}
    first = bootstrap(bash, env)
    assert first.returncode == 0, first.stderr
    bin_dir = home / ".local" / "bin"
    assert first.stdout.splitlines() == [
        f"bootstrap: nox: already installed in {tools} (2024.10.9), linked as {bin_dir}/nox",
        f"bootstrap: uv: already installed in {tools} (uv 0.9.0), linked as {bin_dir}/uv",
        (
            f"bootstrap: {bin_dir} is not on PATH: add it "
            f'(export PATH="{bin_dir}:$PATH") to run the linked commands'
        ),
    ]
    links = {tool: os.lstat(bin_dir / tool) for tool in ("nox", "uv")}
    for tool in links:
        assert os.readlink(bin_dir / tool) == str(tools / "bin" / tool)
    again = bootstrap(bash, {**env, "PATH": f"{bin_dir}:{env['PATH']}"})
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == first.stdout.splitlines()[:2]
    for tool, before in links.items():
        after = os.lstat(bin_dir / tool)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_user_s_links_go_to_home_bin_when_only_it_is_on_path(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    """Without ~/.local/bin on PATH, ~/bin on PATH takes the links: the README's
    ``bash ci/bootstrap.sh && nox ...`` then finds nox in the same shell line."""
    home = tmp_path / "home"
    tools = home / ".local/share/cacheroot/tools"
    seed(tools)
    (home / "bin").mkdir(parents=True)
    env = {**bootstrap_env, "PATH": f"{home / 'bin'}:{bootstrap_env['PATH']}"}
    out = bootstrap(bash, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"bootstrap: nox: already installed in {tools} (2024.10.9), linked as {home}/bin/nox",
        f"bootstrap: uv: already installed in {tools} (uv 0.9.0), linked as {home}/bin/uv",
    ]
    assert not (home / ".local" / "bin").exists()
    found = subprocess.run(
        [bash, "-c", "command -v nox"], env=env, capture_output=True, text=True, check=False
    )
    assert found.stdout.strip() == f"{home}/bin/nox"


def test_a_user_s_tools_follow_xdg_data_home_prefix_and_the_knobs(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    seed(data / "cacheroot/tools")
    out = bootstrap(bash, {**bootstrap_env, "XDG_DATA_HOME": str(data)})
    assert out.returncode == 0, out.stderr
    assert os.readlink(tmp_path / "home/.local/bin/uv") == str(data / "cacheroot/tools/bin/uv")
    elsewhere = {"TOOLS_DIR": str(data / "cacheroot/tools"), "BIN_DIR": str(tmp_path / "b")}
    out = bootstrap(bash, {**bootstrap_env, **elsewhere})
    assert out.returncode == 0, out.stderr
    assert os.readlink(tmp_path / "b" / "nox") == str(data / "cacheroot/tools/bin/nox")
    prefix = tmp_path / "prefix"
    seed(prefix / "share/cacheroot/tools")
    out = bootstrap(bash, bootstrap_env, "--prefix", f"{prefix}/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        f"bootstrap: nox: already installed in {prefix}/share/cacheroot/tools (2024.10.9), "
        f"linked as {prefix}/bin/nox"
    )
    assert os.readlink(prefix / "bin/uv") == f"{prefix}/share/cacheroot/tools/bin/uv"


def test_the_bootstrap_never_replaces_a_file_that_is_not_its_link(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    fake_tool(home / ".local/share/cacheroot/tools/bin/nox", "2024.10.9")
    mine = home / ".local/bin/nox"
    mine.parent.mkdir(parents=True)
    mine.write_text("a user's own script\n")
    out = bootstrap(bash, bootstrap_env)
    assert out.returncode == 1
    assert f"{mine} exists and is not a link; move it, or set BIN_DIR" in out.stderr
    assert mine.read_text() == "a user's own script\n"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--frobnicate"], {}, "unknown argument --frobnicate (see --help)"),
        (["--prefix"], {}, "--prefix needs a directory (see --help)"),
        (["--prefix", "local"], {}, "--prefix local is not an absolute path"),
        ([], {"TOOLS_DIR": "tools"}, "TOOLS_DIR=tools is not an absolute path"),
        ([], {"BIN_DIR": "bin"}, "BIN_DIR=bin is not an absolute path"),
    ],
)
def test_bootstrap_usage_errors(
    bash: str,
    bootstrap_env: dict[str, str],
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    out = bootstrap(bash, {**bootstrap_env, **env}, *args)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"bootstrap: {message}\n")


@pytest.fixture(scope="session")
def nox_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nox and what it requires, as wheels packed in this session from this environment."""
    try:
        return wheelhouse.build(tmp_path_factory.mktemp("nox-wheels"), ["nox"])
    except wheelhouse.MissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def uv_on_path(fake_bin: Path) -> str:
    """The uv the test environment has, linked into ``fake_bin``."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).is_file():
        pytest.skip("uv is not on PATH: the bootstrap installs nox with the uv it finds")
    # A copy, not a link: uv may be one the bootstrap installed (/usr/local/bin linking into
    # /opt), which the root tests hide behind empty mounts.
    shutil.copy2(os.path.realpath(uv), fake_bin / "uv")
    return str(fake_bin / "uv")


def version(tool: str) -> str:
    """The first line of ``TOOL --version``."""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).splitlines()[0]


def test_a_user_s_install_says_where_before_it_writes_and_needs_no_root(
    *,
    bash: str,
    bootstrap_env: dict[str, str],
    fake_bin: Path,
    tmp_path: Path,
    nox_wheels: Path,
    uv_on_path: str,
) -> None:
    # Offline: nox from the session's wheelhouse, uv with a fresh cache of its own.
    env = wheelhouse.offline(bootstrap_env, nox_wheels, tmp_path / "uv-cache")
    env["PYTHON"] = sys.executable
    out = bootstrap(bash, env)
    assert out.returncode == 0, out.stderr
    tools = tmp_path / "home/.local/share/cacheroot/tools"
    bin_dir = tmp_path / "home/.local/bin"
    lines = out.stdout.splitlines()
    assert lines[:2] == [
        f"bootstrap: uv: found at {fake_bin}/uv ({version(uv_on_path)}), left as it is",
        (
            f"bootstrap: installing nox for this user: the environment {tools}, commands linked "
            f"in {bin_dir}"
        ),
    ]
    assert lines[2].startswith("bootstrap: nox: installed 20")
    assert lines[2].endswith(f" in {tools}, linked as {bin_dir}/nox")
    assert (tools / "pyvenv.cfg").is_file()  # a virtual environment: no system Python touched
    assert not (bin_dir / "uv").exists()
    nox = subprocess.run(
        [str(bin_dir / "nox"), "--version"], capture_output=True, text=True, check=True
    )
    assert nox.stderr.strip() in lines[2]
    again = bootstrap(bash, env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1].startswith(f"bootstrap: nox: already installed in {tools}")


@pytest.mark.slow
def test_bootstrap_without_uv_installs_nox_and_uv_from_pypi(
    bash: str, bootstrap_env: dict[str, str], tmp_path: Path
) -> None:
    # Needs PyPI (or the pip configuration's mirror): about 40 s on a loaded 2-core machine.
    out = bootstrap(bash, {**bootstrap_env, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr
    bin_dir = tmp_path / "home/.local/bin"
    for tool in ("nox", "uv"):
        assert os.readlink(bin_dir / tool).endswith(f"cacheroot/tools/bin/{tool}")
        subprocess.run([str(bin_dir / tool), "--version"], capture_output=True, check=True)
    again = bootstrap(bash, bootstrap_env)
    assert [line.split(" (")[0] for line in again.stdout.splitlines()[:2]] == [
        f"bootstrap: nox: already installed in {tmp_path}/home/.local/share/cacheroot/tools",
        f"bootstrap: uv: already installed in {tmp_path}/home/.local/share/cacheroot/tools",
    ]


def as_root(*hide: str) -> tuple[str, ...]:
    """A private mount namespace that sees this machine, with each of ``hide`` an empty tmpfs:
    the bootstrap finds those directories as a fresh machine has them, and what it writes there
    never reaches this machine (``unshare`` is util-linux's, on every Debian and Ubuntu)."""
    if os.geteuid() != 0:
        pytest.skip("the bootstrap installs for every user as root only: run as root to test it")
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed: cannot hide system directories")
    mounts = " && ".join(f"mount -t tmpfs tmpfs {path}" for path in hide)
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && "$@"', "-")


def test_root_says_it_installs_for_every_user_before_it_writes(
    *,
    bash: str,
    bootstrap_env: dict[str, str],
    fake_bin: Path,
    tmp_path: Path,
    nox_wheels: Path,
    uv_on_path: str,
) -> None:
    (fake_bin / "id").unlink()  # the real root
    had_nox = Path("/opt/cacheroot/tools/bin/nox").exists()
    env = wheelhouse.offline(bootstrap_env, nox_wheels, tmp_path / "uv-cache")
    env.update(PYTHON=sys.executable, PATH=f"/usr/local/bin:{env['PATH']}")
    wrap = as_root("/usr/local/bin", "/opt")
    script = (
        f'"$0" {CI}/bootstrap.sh && readlink /usr/local/bin/nox && /usr/local/bin/nox --version'
    )
    out = subprocess.run(
        [*wrap, bash, "-c", script, bash],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == (
        "bootstrap: installing nox for every user of this machine (running as root; --prefix DIR "
        "installs elsewhere): the environment /opt/cacheroot/tools, commands linked in "
        "/usr/local/bin"
    )
    assert lines[2].endswith(" in /opt/cacheroot/tools, linked as /usr/local/bin/nox")
    assert lines[3] == "/opt/cacheroot/tools/bin/nox"
    assert Path("/opt/cacheroot/tools/bin/nox").exists() == had_nox  # the namespace's own /opt

    # --prefix: the same install for any user, where it says.
    prefix = tmp_path / "prefix"
    out = bootstrap(bash, env, "--prefix", str(prefix), wrap=wrap)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == (
        f"bootstrap: installing nox under --prefix {prefix}: the environment "
        f"{prefix}/share/cacheroot/tools, commands linked in {prefix}/bin"
    )
    assert (prefix / "share/cacheroot/tools/pyvenv.cfg").is_file()


def test_root_never_links_into_usr_local_bin_from_a_home(
    bash: str, bootstrap_env: dict[str, str], fake_bin: Path, tmp_path: Path
) -> None:
    """As root, tools in HOME (XDG_DATA_HOME given) keep their links in HOME too; asked for
    /usr/local/bin explicitly, the mix is refused: another user's ``nox`` would run them."""
    (fake_bin / "id").unlink()
    home = tmp_path / "home"
    path = f"/usr/local/bin:{bootstrap_env['PATH']}"
    wrap = as_root("/usr/local/bin", "/opt")
    data = home / "data"
    seed(data / "cacheroot" / "tools")
    env = {**bootstrap_env, "PATH": path, "XDG_DATA_HOME": str(data)}
    out = bootstrap(bash, env, wrap=wrap)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        f"bootstrap: nox: already installed in {data}/cacheroot/tools (2024.10.9), linked as "
        f"{home}/.local/bin/nox"
    )
    out = bootstrap(bash, {**env, "BIN_DIR": "/usr/local/bin"}, wrap=wrap)
    assert out.returncode == 2
    assert out.stderr == (
        f"bootstrap: BIN_DIR=/usr/local/bin is outside HOME but TOOLS_DIR={data}/cacheroot/tools "
        "is inside it: every user of /usr/local/bin would run files of this user's HOME; set "
        "TOOLS_DIR outside HOME (such as /opt/cacheroot/tools), or BIN_DIR inside it\n"
    )


#: An ``apt-get`` that logs each call and, for ``-s``, prints apt's plan as a Debian 12 machine
#: whose archive moved on prints it: openssh-server pulls the newer openssh-client (an upgrade).
#: ``FAKE_APT_ERROR`` makes the plan fail with that error, as an unknown package does.
FAKE_APT = r"""#!/bin/sh
echo "$*" >> "$APT_LOG"
case " $* " in *" -s "*) ;; *) exit 0 ;; esac
if [ -n "$FAKE_APT_ERROR" ]; then echo "E: $FAKE_APT_ERROR"; exit 100; fi
for arg in "$@"; do
    case "$arg" in
        openssh-server)
            echo "Inst openssh-client [1:9.2p1-2+deb12u6] (1:9.2p1-2+deb12u10 Debian:12 [amd64])"
            echo "Inst openssh-server (1:9.2p1-2+deb12u10 Debian:12/stable [amd64])" ;;
        bubblewrap|sshfs|g++) echo "Inst $arg (1.0-1 Debian:12/stable [amd64])" ;;
    esac
done
"""


@pytest.fixture
def e2e_env(bootstrap_env: dict[str, str], fake_bin: Path, tmp_path: Path) -> dict[str, str]:
    """Root (an ``id`` that answers 0) on a machine without bwrap and sshfs: PATH holds only the
    commands the script runs, nox and uv in place, and an ``apt-get`` that logs to APT_LOG."""
    executable(fake_bin / "id", AS_USER.replace("1000", "0"))
    executable(fake_bin / "apt-get", FAKE_APT)
    system = tmp_path / "system"
    system.mkdir()
    for name in COMMANDS:
        found = shutil.which(name, path=os.pathsep.join(SYSTEM_PATH))
        assert found is not None, name
        (system / name).symlink_to(found)
    tools = tmp_path / "tools"
    seed(tools)
    return {
        **bootstrap_env,
        "PATH": os.pathsep.join([str(fake_bin), str(system)]),
        "TOOLS_DIR": str(tools),
        "BIN_DIR": str(tmp_path / "links"),
        "APT_LOG": str(tmp_path / "apt.log"),
    }


#: What --e2e finds missing in ``e2e_env``: the sshd of this machine, when it has one, is found.
def e2e_missing() -> list[str]:
    sshd = [] if os.access("/usr/sbin/sshd", os.X_OK) else ["openssh-server"]
    return ["bubblewrap", *sshd, "sshfs"]


def test_e2e_tools_install_at_the_archive_s_versions_saying_what_apt_upgrades(
    bash: str, e2e_env: dict[str, str], tmp_path: Path
) -> None:
    """An archive newer than the machine (openssh-server 1:9.2p1-2+deb12u10, client deb12u6
    installed): the old pin asked for openssh-server=1:9.2p1-2+deb12u6 and apt found no such
    version. Now nothing is pinned, and the client's upgrade is said before apt runs."""
    packages = " ".join(e2e_missing())
    out = bootstrap(bash, e2e_env, "--e2e")
    assert out.returncode == 0, out.stderr
    expected = [
        f"bootstrap: installing {packages} with apt-get (the archive's current versions)",
        f"bootstrap: installed {packages} (Debian packages)",
    ]
    if "openssh-server" in packages:
        expected.insert(
            1,
            "bootstrap: apt-get also upgrades what these need: "
            "openssh-client 1:9.2p1-2+deb12u6 -> 1:9.2p1-2+deb12u10",
        )
    assert out.stdout.splitlines()[-len(expected) :] == expected
    assert Path(e2e_env["APT_LOG"]).read_text().splitlines() == [
        "update -qq",
        f"install -s -y --no-install-recommends {packages}",
        f"install -y -qq --no-install-recommends {packages}",
    ]
    assert "=" not in Path(e2e_env["APT_LOG"]).read_text()  # no version pinned


def test_e2e_tools_apt_cannot_install_say_why_in_one_sentence(
    bash: str, e2e_env: dict[str, str]
) -> None:
    out = bootstrap(bash, {**e2e_env, "FAKE_APT_ERROR": "Unable to locate package sshfs"}, "--e2e")
    assert out.returncode == 1
    assert out.stderr == (
        f"bootstrap: apt-get cannot install {' '.join(e2e_missing())}: E: Unable to locate "
        "package sshfs. Install them with your package manager.\n"
    )


def test_e2e_tools_a_normal_user_is_told_which_are_missing(
    bash: str, e2e_env: dict[str, str], fake_bin: Path
) -> None:
    executable(fake_bin / "id", AS_USER)
    missing = {
        "bubblewrap": "bwrap (bubblewrap)",
        "openssh-server": "/usr/sbin/sshd (openssh-server)",
        "sshfs": "sshfs (sshfs)",
    }
    out = bootstrap(bash, e2e_env, "--e2e")
    assert out.returncode == 1
    assert out.stderr == (
        f"bootstrap: missing: {', '.join(missing[p] for p in e2e_missing())}; this script "
        "installs them only as root with apt-get: install them with your package manager\n"
    )
    assert not Path(e2e_env["APT_LOG"]).exists()
    # Without --e2e, the README's commands need none of them: nothing is asked of apt.
    out = bootstrap(bash, e2e_env)
    assert out.returncode == 0, out.stderr
    assert not Path(e2e_env["APT_LOG"]).exists()


def test_ci_runs_exactly_the_readme_s_test_command_and_the_reference_shows_both() -> None:
    repo = CI.parent
    readme = (repo / "README.md").read_text(encoding="utf-8").splitlines()
    commands = [line for line in readme if line.startswith("bash ci/bootstrap.sh && ")]
    main = 'bash ci/bootstrap.sh && PATH="$HOME/.local/bin:$PATH" nox -s tests-cuda'
    every = (
        'bash ci/bootstrap.sh && PATH="$HOME/.local/bin:$PATH" nox -s lint typecheck tests-cuda '
        "tests-rocm docs core s3"
    )
    smoke = 'bash ci/bootstrap.sh && PATH="$HOME/.local/bin:$PATH" nox -s smoke'
    assert commands == [main, every, smoke]
    ci_run = (repo / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci_run[-1] == every
    sessions = (repo / "docs" / "reference" / "sessions.md").read_text(encoding="utf-8")
    assert [line for line in sessions.splitlines() if line.startswith("bash ")] == [main, every]
