"""build_once: one build per volume, nothing published by a failing builder, rebuild on change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch._build import build_once, built_path, fingerprint
from cacheroot.fetch._store import read_meta

if TYPE_CHECKING:
    from pathlib import Path

#: A child process: says "ready", waits for the gate, then builds a dummy model. The builder
#: waits (bounded) until every child has arrived, so all of them are inside build_once while
#: the build runs, and appends one line per run to the marker file.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from cacheroot.fetch._build import build_once

    marker, arrived, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def dummy_model(out: Path) -> None:
        with open(marker, "a") as f:
            f.write(f"{os.getpid()}\\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(arrived) as f:
                if len(f.read().split()) >= n:
                    break
            time.sleep(0.02)
        (out / "config.json").write_text(json.dumps({"layers": 2, "kinds": sorted({"a", "b"})}))
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 16)

    print("ready", flush=True)
    sys.stdin.readline()
    with open(arrived, "a") as f:
        f.write(f"{os.getpid()}\\n")
    print(build_once("dummy-model", dummy_model, inputs={"layers": 2}), flush=True)
    """
)


def test_eight_processes_build_once(tmp_path: Path) -> None:
    marker, arrived = tmp_path / "marker", tmp_path / "arrived"
    arrived.write_text("")
    n = 8
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(marker), str(arrived), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # Different hash seeds: the fingerprint must not depend on set or dict order.
            env={**os.environ, "PYTHONHASHSEED": str(i)},
        )
        for i in range(n)
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0] * n
    assert len(marker.read_text().split()) == 1, "the builder ran more than once"
    assert len(set(outputs)) == 1
    out = outputs[0]
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["layers"] == 2
    meta = read_meta(out)
    assert meta is not None
    assert (meta["kind"], meta["key"], meta["files"]) == ("built", "dummy-model", 2)


def _writer(out: Path) -> None:
    (out / "w.bin").write_bytes(b"w")


def test_a_failing_builder_publishes_nothing_and_the_next_caller_retries() -> None:
    calls = []

    def flaky(out: Path) -> None:
        calls.append(1)
        (out / "half.bin").write_bytes(b"half")
        if len(calls) == 1:
            raise RuntimeError("ran out of patience")
        (out / "full.bin").write_bytes(b"full")

    dest = built_path("flaky", flaky)
    with pytest.raises(RuntimeError, match="patience"):
        build_once("flaky", flaky)
    assert not dest.exists()
    assert read_meta(str(dest)) is None
    assert [n for n in os.listdir(dest.parent) if "partial" in n] == []
    got = build_once("flaky", flaky)
    assert got == dest
    assert sorted(os.listdir(got)) == ["full.bin", "half.bin"]
    assert build_once("flaky", flaky) == dest
    assert len(calls) == 2


def test_inputs_and_code_changes_rebuild() -> None:
    a = build_once("thing", _writer, inputs={"size": 1})
    assert build_once("thing", _writer, inputs={"size": 1}) == a
    b = build_once("thing", _writer, inputs={"size": 2})
    assert a != b

    source = "def builder(out):\n    (out / 'v').write_text({!r})\n"
    one: dict[str, object] = {}
    two: dict[str, object] = {}
    exec(source.format("1"), one)  # noqa: S102 - two versions of "the same" builder
    exec(source.format("2"), two)  # noqa: S102
    f1, f2 = one["builder"], two["builder"]
    assert callable(f1)
    assert callable(f2)
    assert fingerprint(f1) != fingerprint(f2)
    p1, p2 = build_once("edited", f1), build_once("edited", f2)
    assert (p1 / "v").read_text() == "1"
    assert (p2 / "v").read_text() == "2"


def test_fingerprint_is_stable_across_processes() -> None:
    script = textwrap.dedent(
        """
        from cacheroot.fetch._build import fingerprint
        def builder(out, kinds=frozenset({"x", "y", "z"})):
            return {"p", "q", "r"} | kinds
        print(fingerprint(builder, {"b": {1, 2, 3}, "a": [1.5, None]}))
        """
    )
    prints = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(prints) == 1


def test_inputs_must_be_data() -> None:
    with pytest.raises(TypeError, match="JSON-like"):
        build_once("bad", _writer, inputs={"obj": object()})


def test_bad_key_is_refused() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        build_once("../escape", _writer)
