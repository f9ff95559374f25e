"""The plugin as an adopting project sees it: fixtures, one report line, offline mode, the guard.

Each test writes a small test project into ``tmp_path`` and runs it with a real pytest process
(xdist where it matters) against a real origin process.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY
from cacheroot.fetch._plugin.figures import Figures, Summary

from .runner import (
    ServedOrigin,
    layout_env,
    media_cache_available,
    plugin_args,
    report_lines,
    run_pytest,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

GSM8K = "/datasets/gsm8k/test.jsonl"
BPE = "/encodings/scenario_bpe.tiktoken"


@pytest.fixture(scope="module")
def origin() -> Iterator[ServedOrigin]:
    with ServedOrigin() as served:
        yield served


def _project(tmp_path: Path, origin: ServedOrigin, body: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    header = f"from __future__ import annotations\n\nORIGIN = {origin.url!r}\n"
    (project / "test_adopter.py").write_text(header + textwrap.dedent(body))
    return project


def _failure(text: str, test: str) -> str:
    """The block pytest prints for the failure of ``test`` (up to the next header)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip("_ ") == test)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(("____", "===="))),
        len(lines),
    )
    return "\n".join(lines[start + 1 : end])


#: What to do about a miss of an offline run that names no manifest.
#: The end of a manifest entry without a known digest, for a namespace.
SHA_NS = 'sha256 = "<64 hex digits: sha256sum of the file>"\nnamespace = "{}"'


def _sha(origin: ServedOrigin, path: str) -> tuple[str, int]:
    import urllib.request

    with urllib.request.urlopen(origin.url + path, timeout=30) as resp:
        data = resp.read()
    return hashlib.sha256(data).hexdigest(), len(data)


def test_workers_report_one_aggregated_line_and_json(tmp_path: Path, origin: ServedOrigin) -> None:
    (gsm8k_sha, gsm8k_size), (bpe_sha, bpe_size) = _sha(origin, GSM8K), _sha(origin, BPE)
    project = _project(
        tmp_path,
        origin,
        f"""
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_fetch(i, cached_file, test_cache_dir):
            path, sha = [({GSM8K!r}, {gsm8k_sha!r}), ({BPE!r}, {bpe_sha!r})][i % 2]
            got = cached_file(ORIGIN + path, sha256=sha, namespace="adopter")
            assert got.parent == test_cache_dir / "adopter"

        def test_media_cache_is_opt_in(media_cache):
            pass
        """,
    )
    before = origin.stats()["total"]
    report = tmp_path / "out" / "report.json"
    out = run_pytest(
        ["-n", "2", "-rs", *plugin_args(), "--cacheroot-report", str(report)],
        env=layout_env(tmp_path / "root"),
        cwd=project,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    reason = "CACHEROOT_MEDIA_CACHE is off" if media_cache_available() else "not installed"
    assert reason in out.stdout  # skipped, with the reason
    lines = report_lines(out.stdout)
    assert len(lines) == 1, out.stdout
    figures = json.loads(report.read_text())
    assert figures["line"] == lines[0]
    assert figures["processes"] == 2
    assert figures["hits"] + figures["misses"] == 6
    assert figures["misses"] == figures["downloads"] == 2  # single-flight across workers
    assert figures["bytes_downloaded"] == gsm8k_size + bpe_size
    assert origin.stats()["total"] - before == 2


@pytest.mark.parametrize("switch", [CACHEROOT_OFFLINE, VLLM_TEST_CACHE_ONLY])
def test_offline_run_fails_misses_and_foreign_connections(
    tmp_path: Path, origin: ServedOrigin, switch: str
) -> None:
    project = _project(
        tmp_path,
        origin,
        f"""
        import os
        import socket
        import urllib.request

        from cacheroot.fetch import fetch

        def test_fixture_miss(cached_file):
            cached_file(ORIGIN + {GSM8K!r}, namespace="adopter")

        def test_direct_fetch_miss():
            fetch(ORIGIN + {BPE!r}, namespace="adopter")

        def test_loopback_is_allowed():
            with urllib.request.urlopen(ORIGIN + "/__stats", timeout=30) as resp:
                assert resp.status == 200

        def test_foreign_host_is_refused():
            socket.create_connection(("192.0.2.7", 9), timeout=1)

        def test_every_fetch_of_the_run_is_cache_only():
            assert os.environ[{CACHEROOT_OFFLINE!r}] == "1"
        """,
    )
    before = origin.stats()["total"]
    report = tmp_path / "report.json"
    out = run_pytest(
        [*plugin_args(), "--cacheroot-report", str(report)],
        env=layout_env(tmp_path / "root", **{switch: "1"}),
        cwd=project,
    )
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, text
    assert "3 failed, 2 passed" in text
    # Each miss says what to do once: the fixture's message (not its cause again, nor a
    # section), and a fetch's own error (which says it: no section repeats it).
    fixture = _failure(text, "test_fixture_miss")
    assert fixture.startswith(f"cacheroot offline run: {origin.url}{GSM8K} is not in the cache")
    # The origin ran on this machine for the tests: no later `cacheroot fetch` reaches it, so
    # the message gives the manifest entry instead, to warm while a server listens there.
    where = origin.url.removeprefix("http://")
    assert fixture.endswith(
        f"its server ({where}) is on the machine that ran the tests, so no later `cacheroot "
        "fetch` reaches it: add this entry to the run's manifest and run `cacheroot warm "
        f"MANIFEST` while a server listens at {where}, before the tests:\n"
        f'[[asset]]\nurl = "{origin.url}{GSM8K}"\n'
        'sha256 = "<64 hex digits: sha256sum of the file>"\nnamespace = "adopter"'
    )
    assert fixture.count("cacheroot warm") == 1
    assert "The above exception" not in fixture
    direct = _failure(text, "test_direct_fetch_miss")
    assert f"CacheMissError: offline and {origin.url}{BPE} is not cached at " in direct
    assert direct.count("is not cached at") == 1  # (the traceback quotes the code around it)
    assert f"warm it while its server ({where}, on this machine) listens" in direct
    # The section adds the entry the error cannot know to give.
    assert f"cache miss on an offline run: its server ({where}) is on the machine" in direct
    assert f'url = "{origin.url}{BPE}"' in direct
    assert "nox -s warm" not in text
    assert 'socket.socket.connect() with host "192.0.2.7"' in text  # the guard names it
    assert "allows loopback connections only" in text
    assert origin.stats()["total"] == before  # nothing reached the origin
    figures = json.loads(report.read_text())
    assert (figures["offline"], figures["offline_misses"], figures["misses"]) == (True, 2, 2)
    assert figures["downloads"] == 0
    lines = report_lines(out.stdout)
    assert lines == [figures["line"]]
    assert lines[0].startswith(
        "cacheroot: offline run; 0 hits, 2 misses (2 offline), 0 B downloaded, "
        "0 B served from cache, "
    )


def test_offline_miss_report_names_the_namespace_and_never_the_password(
    tmp_path: Path, origin: ServedOrigin
) -> None:
    secret = "S3cr3t"  # noqa: S105 - a test credential for the local origin
    private = origin.url.replace("://", f"://alice:{secret}@", 1)
    project = _project(
        tmp_path,
        origin,
        f"""
        from cacheroot.fetch import fetch

        PRIVATE = {private!r}

        def test_fixture_miss(cached_file):
            cached_file(PRIVATE + {GSM8K!r}, namespace="adopter")

        def test_direct_fetch_miss():
            fetch(PRIVATE + {BPE!r}, namespace="adopter", filename="bpe.tiktoken")
        """,
    )
    out = run_pytest(
        ["--cacheroot-offline", *plugin_args()], env=layout_env(tmp_path / "root"), cwd=project
    )
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, text
    shown = origin.url.replace("://", "://alice:***@", 1)
    assert f'url = "{shown}{GSM8K}"\nsha256 = "<64 hex digits: sha256sum of the file>"\n' in text
    assert 'namespace = "adopter"\n' in text
    assert f"offline and {shown}{BPE} is not cached at " in text
    assert f"cacheroot fetch {shown}{BPE} --namespace adopter --filename bpe.tiktoken`" in text
    assert f'url = "{shown}{BPE}"' in text
    assert 'namespace = "adopter"\nfilename = "bpe.tiktoken"' in text
    assert secret not in text


def test_an_offline_miss_names_the_run_s_manifest(tmp_path: Path, origin: ServedOrigin) -> None:
    manifest = tmp_path / "manifest.toml"
    manifest.write_text("# nothing listed: complete, so the run goes offline\n")
    project = _project(
        tmp_path,
        origin,
        f"""
        from cacheroot.fetch import fetch

        def test_fixture_miss(cached_file):
            cached_file(ORIGIN + {GSM8K!r})

        def test_direct_fetch_miss():
            fetch(ORIGIN + {BPE!r})
        """,
    )
    out = run_pytest(
        ["--cacheroot-offline", *plugin_args(), "--cacheroot-manifest", str(manifest)],
        env=layout_env(tmp_path / "root"),
        cwd=project,
    )
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, text
    hint = (
        f"list it in this run's manifest (--cacheroot-manifest {manifest}) and run "
        f"`cacheroot warm {manifest}` before the tests"
    )
    where = origin.url.removeprefix("http://")
    entry = (
        f"add this entry to this run's manifest ({manifest}) and run `cacheroot warm {manifest}` "
        f"while a server listens at {where}, before the tests:\n[[asset]]\n"
    )
    fixture = _failure(text, "test_fixture_miss")
    assert entry in fixture
    assert fixture.endswith(f'url = "{origin.url}{GSM8K}"\n' + SHA_NS.format("downloads"))
    assert fixture.count("cacheroot warm") == 1
    direct = _failure(text, "test_direct_fetch_miss")
    # The fetch's error names `cacheroot warm MANIFEST`; the section adds the run's manifest.
    assert f"cache miss on an offline run: its server ({where}) is on the machine" in direct
    assert direct.count(entry) == 1
    assert hint not in direct


def test_offline_runs_are_cache_only_for_upstream_vllm_helpers_too(
    tmp_path: Path, origin: ServedOrigin
) -> None:
    """Unchanged vLLM tests read only ``_VLLM_TEST_CACHE_ONLY``: an offline run sets it."""
    project = _project(
        tmp_path,
        origin,
        f"""
        import os

        import pytest

        from cacheroot.fetch.vllm_compat import download_to_vllm_test_cache

        def test_the_switch_is_set():
            assert os.environ[{VLLM_TEST_CACHE_ONLY!r}] == "1"

        def test_a_helper_that_reads_only_the_upstream_switch(monkeypatch):
            monkeypatch.delenv({CACHEROOT_OFFLINE!r})
            with pytest.raises(FileNotFoundError, match="cache-only"):
                download_to_vllm_test_cache(ORIGIN + {GSM8K!r}, "adopter")
        """,
    )
    before = origin.stats()["total"]
    # (xdist workers inherit it: test_offline_first checks it there.)
    out = run_pytest(
        ["--cacheroot-offline", *plugin_args()], env=layout_env(tmp_path / "root"), cwd=project
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    assert origin.stats()["total"] == before


def test_upstream_cache_only_switch_forces_offline_first_runs(
    tmp_path: Path, origin: ServedOrigin
) -> None:
    sha, _ = _sha(origin, GSM8K)
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        f'[[asset]]\nurl = "{origin.url}{GSM8K}"\nsha256 = "{sha}"\nnamespace = "gsm8k"\n'
    )
    project = _project(tmp_path, origin, "def test_never_runs():\n    raise AssertionError\n")
    before = origin.stats()["total"]
    out = run_pytest(
        [*plugin_args(), "--cacheroot-manifest", str(manifest)],
        env=layout_env(tmp_path / "root", **{VLLM_TEST_CACHE_ONLY: "1"}),
        cwd=project,
    )
    text = out.stdout + out.stderr
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, text
    assert "offline run, but 1 manifest entry is not complete in the cache:" in text
    assert text.count(f"missing: [[asset]] #1 {origin.url}{GSM8K} ({manifest})") == 1
    assert "Exit" not in text
    assert f"{VLLM_TEST_CACHE_ONLY}=1, which warms it)" in text
    assert "test_never_runs" not in text
    assert origin.stats()["total"] == before  # forced offline: nothing was warmed


def _figures(
    hits: int, misses: int, media: dict[str, float] | None = None, processes: int = 1
) -> Figures:
    fetch = {"hits": hits, "misses": misses, "bytes_downloaded": 3 * misses << 20}
    return Figures(fetch={k: float(v) for k, v in fetch.items()}, media=media, processes=processes)


def test_figures_add_up_and_survive_the_trip_to_the_controller() -> None:
    total = Summary(offline=True)  # the controller's view; a worker's flag does not change it
    parts = (
        Summary(_figures(3, 1), _figures(1, 0, processes=0)),
        Summary(_figures(0, 2, {"hits": 4.0, "misses": 1.0}), _figures(0, 2, processes=0)),
    )
    for part in parts:
        total.add(Summary.from_dict(json.loads(json.dumps(part.as_dict()))))
    data: dict[str, Any] = total.as_dict()
    assert (data["hits"], data["misses"], data["processes"], data["offline"]) == (3, 3, 2, True)
    assert data["bytes_downloaded"] == 9 << 20
    assert data["media"]["hits"] == 4
    own = data["tests_own_roots"]
    assert (own["hits"], own["misses"], own["bytes_downloaded"]) == (1, 2, 6 << 20)
    assert "processes" not in own
    assert Summary.from_dict(data).as_dict() == data
    assert total.line() == (
        "cacheroot: offline run; 3 hits, 3 misses, 9.0 MiB downloaded, 0 B served from cache, "
        "0.00 s waiting on locks; media: 4 hits, 1 miss, 0 revalidated, 0 B saved; "
        "tests' own roots: 1 hit, 2 misses, 6.0 MiB downloaded (2 processes)"
    )
    assert Summary().line() == (
        "cacheroot: 0 hits, 0 misses, 0 B downloaded, 0 B served from cache, "
        "0.00 s waiting on locks (0 processes)"
    )
    assert Summary(_figures(1, 0)).line().endswith("waiting on locks (1 process)")
