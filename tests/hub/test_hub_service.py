"""The hub cache as a service: ``/healthz`` and ``/metrics`` for a Kubernetes Deployment.

A real ``cacheroot hub serve`` child in front of the local test hub, asked with a real HTTP
client; the exposition is read back with a strict parser of the text format (version 0.0.4),
so a line Prometheus would reject fails the test, and every value is written out.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from cacheroot.envs import BUILDKITE, GITHUB_STEP_SUMMARY
from cacheroot.fetch._hub.service import HubProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .hubserver import HubRepo, HubServer

#: ``name{labels} value`` (no timestamps: the hub writes none).
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _labels(text: str) -> frozenset[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        match = _LABEL.match(text, at)
        assert match is not None, f"a label that does not parse: {text[at:]!r}"
        value = match[2].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        found.append((match[1], value))
        at = match.end()
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), f"a label named twice: {text!r}"
    return frozenset(found)


def _value(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    assert re.fullmatch(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", text), text
    return float(text)


def parse_exposition(text: str) -> tuple[dict[str, str], Samples]:
    """The families' types and the samples of a text exposition; fails on any line that breaks
    the format: a sample before its family's ``# TYPE``, a family seen twice, a sample of
    another family inside one, a duplicate series, histogram buckets that are not cumulative
    or do not end with ``+Inf`` equal to ``_count``."""
    assert text.endswith("\n"), "the exposition ends with a line feed"
    types: dict[str, str] = {}
    helps: set[str] = set()
    samples: Samples = {}
    family = ""
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert _NAME.match(name), line
            assert name not in helps, line
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert _NAME.match(name), line
            assert name not in types, line
            assert kind in _TYPES, line
            family = name
            types[name] = kind
            continue
        assert line, "an empty line"
        assert not line.startswith("#"), f"an unexpected comment: {line!r}"
        match = _SAMPLE.match(line)
        assert match is not None, f"a sample that does not parse: {line!r}"
        name = match[1]
        suffixes = ("_bucket", "_sum", "_count") if types.get(family) == "histogram" else ()
        assert name == family or name in {family + s for s in suffixes}, (
            f"{name} is not of family {family!r}"
        )
        key = (name, _labels(match[2] or ""))
        assert key not in samples, f"a series seen twice: {line!r}"
        samples[key] = _value(match[3])
    assert helps == set(types), "every family has its HELP and TYPE"
    for name, kind in types.items():
        if kind == "histogram":
            _check_histogram(name, samples)
    return types, samples


def _check_histogram(name: str, samples: Samples) -> None:
    series: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
    for (sample, labels), value in samples.items():
        if sample == f"{name}_bucket":
            le = dict(labels)["le"]
            rest = frozenset(item for item in labels if item[0] != "le")
            series.setdefault(rest, []).append((_value(le), value))
    for rest, buckets in series.items():
        buckets.sort()
        counts = [count for _, count in buckets]
        assert counts == sorted(counts), f"{name} buckets are not cumulative"
        assert buckets[-1][0] == math.inf, f"{name} has no +Inf bucket"
        assert samples[(f"{name}_count", rest)] == buckets[-1][1]
        assert (f"{name}_sum", rest) in samples


def _at(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def proxy(tmp_path: Path, hub: HubServer) -> Iterator[HubProcess]:
    """A hub cache in front of the local hub that asks again at every request (``--ttl=0``)."""
    started = HubProcess.start(upstream=hub.url, store=str(tmp_path / "store"), options=["--ttl=0"])
    yield started
    started.stop()


def test_metrics_after_a_known_sequence_of_requests(
    proxy: HubProcess, hub: HubServer, tiny_repo: HubRepo
) -> None:
    api = proxy.url + f"/api/models/{tiny_repo.repo_id}/revision/main"
    weights = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/model.safetensors"
    size = len(tiny_repo.files["model.safetensors"])
    seen = [requests.get(api, timeout=10).headers["X-Cacheroot-Hub"] for _ in range(2)]
    for _ in range(2):
        got = requests.get(proxy.url + weights, timeout=10)
        assert got.content == tiny_repo.files["model.safetensors"]
        seen.append(got.headers["X-Cacheroot-Hub"])
    missing = requests.get(proxy.url + "/api/models/acme/missing/revision/main", timeout=10)
    seen.append(missing.headers["X-Cacheroot-Hub"])
    # An outage: three failures in a row open the API's breaker; the fourth is not sent.
    hub.fail_next(3, status=503, retry_after=None, match="/revision/")
    seen += [requests.get(api, timeout=10).headers["X-Cacheroot-Hub"] for _ in range(4)]
    assert seen == ["miss", "revalidated", "miss", "hit", "miss", *["stale"] * 4]
    assert missing.status_code == 401

    scrape = requests.get(proxy.url + "/metrics", timeout=10)
    assert scrape.status_code == 200
    assert scrape.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    types, samples = parse_exposition(scrape.text)

    assert types == {
        "cacheroot_hub_requests_total": "counter",
        "cacheroot_hub_answers_total": "counter",
        "cacheroot_hub_file_answers_total": "counter",
        "cacheroot_hub_served_file_bytes_total": "counter",
        "cacheroot_hub_upstream_file_bytes_total": "counter",
        "cacheroot_hub_upstream_requests_total": "counter",
        "cacheroot_hub_upstream_failures_total": "counter",
        "cacheroot_hub_fill_duration_seconds": "histogram",
        "cacheroot_hub_breaker_open": "gauge",
        "cacheroot_hub_offline": "gauge",
        "cacheroot_hub_events_total": "counter",
    }
    fill = "cacheroot_hub_fill_duration_seconds"
    timed = {key: samples.pop(key) for key in list(samples) if key[0] == f"{fill}_sum"}
    assert list(timed) == [(f"{fill}_sum", frozenset({("outcome", "ok")}))]
    assert 0 < next(iter(timed.values())) < 60
    origin = hub.url
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
        ("cacheroot_hub_requests_total", ()): 9,
        ("cacheroot_hub_answers_total", (("state", "hit"),)): 0,
        ("cacheroot_hub_answers_total", (("state", "miss"),)): 2,
        ("cacheroot_hub_answers_total", (("state", "revalidated"),)): 1,
        ("cacheroot_hub_answers_total", (("state", "stale"),)): 4,
        ("cacheroot_hub_answers_total", (("state", "error"),)): 0,
        ("cacheroot_hub_answers_total", (("state", "pass"),)): 0,
        ("cacheroot_hub_file_answers_total", (("source", "store"),)): 1,
        ("cacheroot_hub_file_answers_total", (("source", "shared_tier"),)): 0,
        ("cacheroot_hub_file_answers_total", (("source", "upstream"),)): 1,
        ("cacheroot_hub_file_answers_total", (("source", "fill_in_progress"),)): 0,
        ("cacheroot_hub_file_answers_total", (("source", "passed_through"),)): 0,
        ("cacheroot_hub_served_file_bytes_total", (("source", "store"),)): size,
        ("cacheroot_hub_served_file_bytes_total", (("source", "upstream"),)): size,
        ("cacheroot_hub_upstream_file_bytes_total", ()): size,
        # Two revision answers, the weights' HEAD and GET; the 401; the three 503s.
        ("cacheroot_hub_upstream_requests_total", (("origin", origin), ("status", "2xx"))): 4,
        ("cacheroot_hub_upstream_requests_total", (("origin", origin), ("status", "4xx"))): 1,
        ("cacheroot_hub_upstream_requests_total", (("origin", origin), ("status", "5xx"))): 3,
        ("cacheroot_hub_upstream_failures_total", ()): 3,
        **{
            (f"{fill}_bucket", (("outcome", "ok"), ("le", le))): 1
            for le in ("5", "15", "60", "300", "900", "+Inf")
        },
        (f"{fill}_count", (("outcome", "ok"),)): 1,
        ("cacheroot_hub_breaker_open", (("origin", origin),)): 1,
        ("cacheroot_hub_offline", ()): 0,
        ("cacheroot_hub_events_total", (("event", "partials_removed"),)): 0,
    }
    # A fill of a few KiB on loopback takes well under 0.1 s, though a loaded machine may not.
    quick = [
        samples.pop((f"{fill}_bucket", frozenset({("outcome", "ok"), ("le", le)})))
        for le in ("0.1", "0.5", "1")
    ]
    assert quick in ([0, 0, 0], [0, 0, 1], [0, 1, 1], [1, 1, 1])  # cumulative, one fill
    assert samples == {
        (name, frozenset(labels)): value for (name, labels), value in expected.items()
    }
    assert hub.count_path(f"/api/models/{tiny_repo.repo_id}/revision/main") == 5
    # Scrapes and probes are no client's requests and never reach the upstream.
    requests.get(proxy.url + "/healthz", timeout=10)
    again = parse_exposition(requests.get(proxy.url + "/metrics", timeout=10).text)[1]
    assert _at(again, "cacheroot_hub_requests_total") == 9
    assert hub.count_path("/metrics") == hub.count_path("/healthz") == 0


def _files_open(proxy: HubProcess) -> list[str]:
    """What the hub process holds open, sockets left out (clients' connections come and go)."""
    fds = f"/proc/{proxy.proc.pid}/fd"
    found = []
    for fd in os.listdir(fds):
        with contextlib.suppress(FileNotFoundError):
            found.append(os.readlink(f"{fds}/{fd}"))
    return sorted(f for f in found if not f.startswith(("socket:", "anon_inode:", "pipe:")))


def test_healthz_answers_200_while_the_store_takes_files_and_503_once_it_cannot(
    proxy: HubProcess, hub: HubServer, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    ok = requests.get(proxy.url + "/healthz", timeout=10)
    assert ok.status_code == 200
    assert ok.json() == {
        "serving": True,
        "store": {"path": store, "writable": True},
        "offline": False,
        "breakers": {},
    }
    assert sorted(p.name for p in (tmp_path / "store" / "blobs").iterdir()) == []
    # A probe holds nothing open after it: a Deployment probes every few seconds, for weeks.
    before = _files_open(proxy)
    for _ in range(20):
        assert requests.get(proxy.url + "/healthz", timeout=10).status_code == 200
    assert _files_open(proxy) == before

    # The blobs' directory replaced by a file: no fill could write there any more.
    shutil.rmtree(tmp_path / "store" / "blobs")
    (tmp_path / "store" / "blobs").write_bytes(b"not a directory\n")
    down = requests.get(proxy.url + "/healthz", timeout=10)
    assert down.status_code == 503
    body = down.json()
    assert body["serving"] is False
    assert body["store"] == {"path": store, "writable": False}
    assert body["problem"].startswith("the store cannot take a file: ")
    assert hub.total() == 0


# -- the session's report, where CI shows it ---------------------------------------------------
_RUNNER: Any = importlib.import_module("harness.runner")

WARM = """\
import os
import urllib.request

BASE = os.environ["HF_ENDPOINT"]


def test_warm():
    urllib.request.urlopen(BASE + "/api/models/{repo}/revision/main").read()
    urllib.request.urlopen(BASE + "/{repo}/resolve/{commit}/config.json").read()
"""

OUTAGE = """\
import os
import urllib.request

BASE = os.environ["HF_ENDPOINT"]


def test_through_an_outage():
    for _ in range(2):
        urllib.request.urlopen(BASE + "/api/models/{repo}/revision/main").read()
    for name in ("config.json", "tokenizer.json"):
        urllib.request.urlopen(BASE + "/{repo}/resolve/{commit}/" + name).read()
"""

#: A stand-in for Buildkite's agent: records its arguments and standard input, then exits.
AGENT = """\
#!{python}
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a", encoding="utf-8") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "stdin": sys.stdin.read()}}) + "\\n")
sys.stderr.write("{stderr}")
sys.exit({code})
"""


def _agent(where: Path, *, code: int = 0, stderr: str = "") -> Path:
    """A directory holding a ``buildkite-agent`` that exits ``code`` (see :data:`AGENT`)."""
    where.mkdir()
    script = where / "buildkite-agent"
    script.write_text(AGENT.format(python=sys.executable, code=code, stderr=stderr))
    script.chmod(0o755)
    return where


def _calls(where: Path) -> list[dict[str, Any]]:
    log = where / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _project(tmp_path: Path, repo: HubRepo) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name, text in (("test_warm.py", WARM), ("test_outage.py", OUTAGE)):
        body = text.format(repo=repo.repo_id, commit=repo.commit)
        (project / name).write_text(textwrap.dedent(body), encoding="utf-8")
    return project


def _hub_session(project: Path, env: dict[str, str], *args: str) -> Any:
    common = [*_RUNNER.plugin_args(), "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0"]
    run = _RUNNER.run_pytest([*common, "--cacheroot-hub", *args], env=env, cwd=project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_the_session_report_goes_to_the_job_summary_and_a_buildkite_annotation(
    tmp_path: Path, hub: HubServer, tiny_repo: HubRepo
) -> None:
    project = _project(tmp_path, tiny_repo)
    bin_dir = _agent(tmp_path / "bin")
    summary = tmp_path / "step-summary.md"
    summary.write_text("An earlier step's summary.\n", encoding="utf-8")
    env = _RUNNER.layout_env(tmp_path / "root", HF_ENDPOINT=hub.url)
    _hub_session(project, env, "test_warm.py")

    # The same store, the Hub failing the revision answers: served stale, and one new file.
    hub.fail_next(2, status=503, retry_after=None, match="/revision/")
    env[GITHUB_STEP_SUMMARY] = str(summary)
    env[BUILDKITE] = "true"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    run = _hub_session(project, env, "test_outage.py", "--cacheroot-hub-option=--ttl=0")
    assert (
        "cacheroot hub: 4 requests (0 hit, 0 miss, 0 revalidated, 2 stale, 0 error); files: "
        "1 from the store, 1 fetched; 4 upstream requests, 2 failed"
    ) in run.stdout.splitlines()
    assert "warning" not in run.stdout

    size = len(tiny_repo.files["tokenizer.json"])
    target = f"/{tiny_repo.repo_id}/resolve/{tiny_repo.commit}/tokenizer.json"
    report = summary.read_text(encoding="utf-8")
    seconds = re.search(r"^\| ([0-9]+\.[0-9]{3}) \|", report, re.MULTILINE)
    assert seconds is not None, report
    assert report == textwrap.dedent(
        f"""\
        An earlier step's summary.
        ### cacheroot hub cache

        | | |
        |---|---:|
        | Requests | 4 |
        | Answers from the store (hits) | 0 |
        | Answers asked upstream (misses) | 0 |
        | Answers asked again (revalidated) | 0 |
        | Stale answers served while the upstream failed | 2 |
        | Errors | 0 |
        | Files from the store | 1 |
        | Files fetched from the upstream | 1 |
        | Bytes from the upstream | {size} B |
        | Upstream requests (failed) | 4 (2) |

        Slowest fills:

        | Seconds | Size | File | Outcome |
        |---:|---:|---|---|
        | {seconds[1]} | {size} B | `{target}` | stored |

        """
    )
    calls = _calls(bin_dir)
    assert [call["argv"] for call in calls] == [
        ["annotate", "--style", "info", "--context", "cacheroot-hub"]
    ]
    assert calls[0]["stdin"] + "\n" == report.removeprefix("An earlier step's summary.\n")


def test_a_report_that_cannot_be_written_is_one_warning_and_never_fails_the_run(
    tmp_path: Path, hub: HubServer, tiny_repo: HubRepo
) -> None:
    project = _project(tmp_path, tiny_repo)
    bin_dir = _agent(tmp_path / "bin", code=1, stderr="fatal: no agent access token")
    summary_dir = tmp_path / "a-directory"
    summary_dir.mkdir()
    env = _RUNNER.layout_env(tmp_path / "root", HF_ENDPOINT=hub.url)
    env[GITHUB_STEP_SUMMARY] = str(summary_dir)
    env[BUILDKITE] = "true"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    run = _hub_session(project, env, "test_warm.py")
    warnings = [line for line in run.stdout.splitlines() if "warning" in line]
    assert warnings == [
        (
            "cacheroot hub: warning: the CI report was not written: "
            f"GITHUB_STEP_SUMMARY {summary_dir}: Is a directory; "
            "buildkite-agent annotate exited 1: fatal: no agent access token"
        )
    ]
    assert len(_calls(bin_dir)) == 1

    # Not on Buildkite: the agent on PATH is left alone.
    del env[BUILDKITE], env[GITHUB_STEP_SUMMARY]
    quiet = _hub_session(project, env, "test_warm.py")
    assert "warning" not in quiet.stdout
    assert len(_calls(bin_dir)) == 1
