"""What the commands count: an entry's size for a hit as for a miss, and singular nouns for 1."""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING

from cacheroot.envs._cli import main
from cacheroot.fetch import Fetcher

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from .origin import Origin

BODY = b"eleven byte"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cacheroot ARGV`` in this process: (exit status, stdout, stderr)."""
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def _manifest(tmp_path: Path, *urls: str) -> Path:
    path = tmp_path / "m.toml"
    digest = hashlib.sha256(BODY).hexdigest()
    path.write_text(
        "".join(
            f'[[asset]]\nurl = "{u}"\nsha256 = "{digest}"\nnamespace = "suite"\n\n' for u in urls
        )
    )
    return path


def test_warm_json_reports_a_hit_s_size(
    origin: Origin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(tmp_path, origin.serve("a.bin", BODY))
    status, out, err = run(capsys, "warm", str(manifest), "--json", "-q")
    assert status == 0, err
    cold = json.loads(out)
    assert status == 0
    assert [(r["status"], r["bytes"], r["downloaded"]) for r in cold["entries"]] == [
        ("miss", 11, 11)
    ]
    assert cold["bytes"] == 11
    status, out, _ = run(capsys, "warm", str(manifest), "--json", "-q")
    warm = json.loads(out)
    assert [(r["status"], r["bytes"], r["downloaded"]) for r in warm["entries"]] == [("hit", 11, 0)]
    assert warm["bytes"] == 0  # the summary adds up what was downloaded
    # As `cacheroot fetch --json` reports the same hit.
    status, out, _ = run(
        capsys, "fetch", origin.url("a.bin"), "--namespace", "suite", "--json", "-q"
    )
    assert (json.loads(out)["status"], json.loads(out)["bytes"]) == ("hit", 11)
    assert origin.requests["/a.bin"] == 1


def test_warm_says_1_entry_1_hit_1_failure(
    origin: Origin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = origin.serve("b.bin", BODY)
    manifest = _manifest(tmp_path, good)
    assert run(capsys, "warm", str(manifest), "-q")[0] == 0
    status, out, _ = run(capsys, "warm", str(manifest), "-q")
    assert status == 0
    assert out.startswith(
        f"warm {manifest}: 1 entry: 1 hit, 0 misses (0 B downloaded), 0 failures in "
    )
    manifest = _manifest(tmp_path, good, origin.url("absent.bin"))
    status, out, _ = run(capsys, "warm", str(manifest), "-q")
    assert status == 1
    assert out.splitlines()[-1].startswith(
        f"warm {manifest}: 2 entries: 1 hit, 0 misses (0 B downloaded), 1 failure in "
    )


def test_prune_says_1_entry_and_1_stray_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "a.bin"
    source.write_bytes(BODY)
    entry = Fetcher(allow_file=True).fetch(source.as_uri(), namespace="ns")
    orphan = entry.parent / ".gone.bin.meta.json"
    orphan.write_text("{}")
    os.utime(orphan, (1_000_000_000, 1_000_000_000))
    status, out, _ = run(capsys, "cache", "prune", "--max-size", "0", "--dry-run")
    assert status == 0
    assert "  1 entry, 11 B\n" in out
    assert "would remove 1 entry and 1 stray file, " in out
