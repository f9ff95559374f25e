"""``cacheroot warm MANIFEST``: parallel, idempotent, one summary, non-zero on any failure."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch._archive import extracted_path
from cacheroot.fetch._warm.warm import warm_manifest

from .conftest import cli, cli_json

if TYPE_CHECKING:
    from .origin import Origin

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def asset(url: str, body: bytes, namespace: str = "suite", **extra: object) -> str:
    lines = [
        "[[asset]]",
        f'url = "{url}"',
        f'sha256 = "{hashlib.sha256(body).hexdigest()}"',
        f'namespace = "{namespace}"',
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n\n"


def test_warm_100_assets_then_again_with_no_request(origin: Origin, tmp_path: Path) -> None:
    text = ""
    for i in range(100):
        body = f"asset {i}\n".encode() * (50 + i)
        text += asset(origin.serve(f"a{i:03}.txt", body), body)
    manifest = tmp_path / "suite.toml"
    manifest.write_text(text)

    first = cli_json("warm", str(manifest), "--jobs", "8")
    assert (first["hits"], first["misses"], first["failures"]) == (0, 100, 0)
    assert first["bytes"] == sum(len(f"asset {i}\n") * (50 + i) for i in range(100))
    assert origin.total == 100
    assert set(origin.requests.values()) == {1}
    assert origin.max_in_flight <= 8

    second = cli("warm", str(manifest), "--jobs", "8")
    assert second.returncode == 0, second.stderr
    assert "100 hits, 0 misses (0 B downloaded), 0 failures" in second.stdout
    assert origin.total == 100, "a warm cache made origin requests"

    check = cli_json("warm", str(manifest), "--check")
    assert check["hits"] == 100
    assert origin.total == 100


def test_failures_are_listed_and_fail_the_run(origin: Origin, tmp_path: Path) -> None:
    good = b"good bytes"
    text = asset(origin.serve("good.bin", good), good)
    text += asset(origin.serve("liar.bin", b"other bytes"), b"what the manifest expects")
    text += asset(origin.url("absent.bin"), b"never served")
    manifest = tmp_path / "m.toml"
    manifest.write_text(text)
    summary = cli_json("warm", str(manifest), "--jobs", "3", status=1)
    rows = {r["entry"].split()[-1].rsplit("/", 1)[-1]: r for r in summary["entries"]}
    assert rows["good.bin"]["status"] == "miss"
    assert rows["liar.bin"]["status"] == "failed"
    assert "ChecksumError" in rows["liar.bin"]["reason"]
    assert rows["absent.bin"]["status"] == "failed"
    assert "404" in rows["absent.bin"]["reason"]
    assert summary["failures"] == 2
    # Text mode names each failure with its reason, and the good entry is now a hit.
    done = cli("warm", str(manifest))
    assert done.returncode == 1
    assert "failed: [[asset]] #2" in done.stdout
    assert "3 entries: 1 hit, 0 misses (0 B downloaded), 2 failures" in done.stdout


def test_check_reports_missing_without_requests(origin: Origin, tmp_path: Path) -> None:
    body = b"x" * 100
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        asset(origin.serve("x.bin", body), body)
        + f'[[model]]\nhub = "hf"\nrepo_id = "org/tiny"\nrevision = "{COMMIT}"\n'
    )
    summary = cli_json("warm", str(manifest), "--check", status=1)
    assert [r["status"] for r in summary["entries"]] == ["missing", "missing"]
    assert "never warmed" in summary["entries"][1]["reason"]
    assert summary["warnings"] == []
    assert origin.total == 0
    # A branch instead of a commit is accepted with a warning in the summary.
    manifest.write_text('[[model]]\nhub = "hf"\nrepo_id = "org/tiny"\nrevision = "main"\n')
    done = cli("warm", str(manifest), "--check")
    assert done.returncode == 1
    assert "warning: [[model]] #1 hf:org/tiny@main: revision 'main' is a branch" in done.stdout


def test_jobs_must_be_positive(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text("")
    done = cli("warm", str(manifest), "--jobs", "0")
    assert done.returncode == 2
    assert "expected 1 to 256 parallel downloads, found 0" in done.stderr


def test_bad_manifest_is_a_usage_error(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text('[[asset]]\nurl = "https://h/x"\nnamespace = "n"\n')
    done = cli("warm", str(manifest))
    assert done.returncode == 2
    assert f"{manifest}: [[asset]] #1, field 'sha256'" in done.stderr


def test_extract_unpacks_once(origin: Origin, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        payload = b'{"vocab": 3}'
        info = tarfile.TarInfo("tok/vocab.json")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    body = buf.getvalue()
    manifest = tmp_path / "m.toml"
    manifest.write_text(asset(origin.serve("tok.tar.gz", body), body, extract=True))
    first = warm_manifest(manifest)
    out = Path(first["entries"][0]["path"])
    assert first["entries"][0]["status"] == "miss"
    assert (out / "tok" / "vocab.json").read_bytes() == payload
    archive = out.parent / out.name.removesuffix(".extracted")
    assert extracted_path(archive) == str(out)
    second = warm_manifest(manifest, check=True)
    assert second["entries"][0]["status"] == "hit"
    assert origin.total == 1
    assert os.path.isdir(out)


def test_model_entries_go_through_the_hub_client(origin: Origin, tmp_path: Path) -> None:
    # The local hub of the model-snapshot tests, and the snapshot support it exercises.
    hubserver = pytest.importorskip("hub.hubserver", reason="the local hub is not installed")
    pytest.importorskip("cacheroot.fetch._models.snapshot", reason="no model snapshot support")
    repo = hubserver.HubRepo(
        "acme/ops-model",
        {"config.json": b'{"hidden_size": 8}', "model.safetensors": bytes(range(256)) * 8},
    )
    body = b"tokenizer data"
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        asset(origin.serve("tok.json", body), body)
        + f'[[model]]\nhub = "hf"\nrepo_id = "{repo.repo_id}"\nrevision = "{repo.commit}"\n'
    )
    with hubserver.HubServer() as hub:
        hub.add_hf(repo)
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",  # else it also asks for its agent registry
        }
        cold = cli_json("warm", str(manifest), env=env)
        assert [r["status"] for r in cold["entries"]] == ["miss", "miss"], cold
        model_dir = Path(cold["entries"][1]["path"])
        assert (model_dir / "config.json").read_bytes() == b'{"hidden_size": 8}'
        requests = hub.total()
        assert requests == 5, hub.counts()  # 1 listing, a HEAD and a GET for each of 2 files
        warm = cli_json("warm", str(manifest), env=env)
        assert [r["status"] for r in warm["entries"]] == ["hit", "hit"]
        assert hub.total() == requests, "a warm cache asked the hub"
        verified = cli_json("cache", "verify", "--manifest", str(manifest), env=env)
        assert [m["status"] for m in verified["models"]] == ["hit"]
        (model_dir / "model.safetensors").unlink()
        check = cli_json("warm", str(manifest), "--check", env=env, status=1)
        assert check["entries"][1]["status"] == "missing"
        assert "model.safetensors" in check["entries"][1]["reason"]
        assert hub.total() == requests


def _private(tmp_path: Path, name: str, data: bytes, mode: int) -> Path:
    src = tmp_path / "src" / name
    src.parent.mkdir(exist_ok=True)
    src.write_bytes(data)
    src.chmod(mode)
    return src


def test_file_urls_in_a_manifest_need_allow_file(tmp_path: Path) -> None:
    data = b"root:$6$salt$hash:19000:0:99999:7:::\n"
    src = _private(tmp_path, "shadow", data, 0o600)
    real = hashlib.sha256(data).hexdigest()
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        asset(src.as_uri(), data, namespace="mirror")
        + asset(src.as_uri() + "?copy=2", b"not these bytes", namespace="mirror")
    )
    # Without the flag nothing is read, whatever the manifest says.
    refused = cli_json("warm", str(manifest), status=1)
    assert [r["status"] for r in refused["entries"]] == ["failed", "failed"]
    for row in refused["entries"]:
        assert "--allow-file" in row["reason"]
    assert refused["bytes"] == 0
    assert not (Path(os.environ["_VLLM_TEST_CACHE"]) / "mirror").exists()
    # With it: the copy is no more readable than its source, and the mismatch message for a
    # file not everyone may read does not show its digest.
    done = cli("warm", str(manifest), "--allow-file", "--json")
    summary = json.loads(done.stdout)
    assert [r["status"] for r in summary["entries"]] == ["miss", "failed"]
    entry = Path(summary["entries"][0]["path"])
    assert entry.read_bytes() == data
    assert entry.stat().st_mode & 0o777 == 0o600
    meta = entry.parent / f".{entry.name}.meta.json"
    assert meta.stat().st_mode & 0o077 == 0
    assert "ChecksumError" in summary["entries"][1]["reason"]
    assert "not shown" in summary["entries"][1]["reason"]
    assert real not in done.stdout + done.stderr
    text = cli("warm", str(manifest), "--allow-file")
    assert real not in text.stdout + text.stderr


def test_a_world_readable_file_mismatch_shows_its_digest(tmp_path: Path) -> None:
    data = b"public mirror bytes\n"
    src = _private(tmp_path, "public.bin", data, 0o644)
    manifest = tmp_path / "m.toml"
    manifest.write_text(asset(src.as_uri(), b"other bytes", namespace="mirror"))
    summary = cli_json("warm", str(manifest), "--allow-file", status=1)
    assert hashlib.sha256(data).hexdigest() in summary["entries"][0]["reason"]


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def test_the_unpack_bound_is_raised_per_asset(origin: Origin, tmp_path: Path) -> None:
    from cacheroot.fetch import ArchiveError, Fetcher, ManifestError, parse_manifest

    body = _tar({"w.bin": bytes(4000)})
    url = origin.serve("w.tar.gz", body)
    f = Fetcher()
    with pytest.raises(ArchiveError, match=r"bound of 1000 bytes.*max_unpacked="):
        f.fetch(url, extract=True, max_unpacked=1000)
    out = f.fetch(url, extract=True, max_unpacked=4000)
    assert (out / "w.bin").stat().st_size == 4000

    packed = _tar({"v.bin": bytes(3000)})
    other = origin.serve("v.tar.gz", packed)
    manifest = tmp_path / "m.toml"
    manifest.write_text(asset(other, packed, extract=True, max_unpacked="2K"))
    small = cli_json("warm", str(manifest), status=1)
    assert "bound of 2048 bytes" in small["entries"][0]["reason"]
    manifest.write_text(asset(other, packed, extract=True, max_unpacked=3000))
    done = cli_json("warm", str(manifest))
    assert (Path(done["entries"][0]["path"]) / "v.bin").stat().st_size == 3000
    for value, problem in (("lots", "a size"), (-1, "a size"), (True, "a size")):
        text = asset(other, b"x", extract=True, max_unpacked=value)
        with pytest.raises(ManifestError, match=f"field 'max_unpacked'.*{problem}"):
            parse_manifest(text)
    with pytest.raises(
        ManifestError, match=r"field .max_unpacked.: applies only with extract = true"
    ):
        parse_manifest(asset(other, b"x", max_unpacked=3000))


def test_a_link_planted_where_the_tree_belongs_is_no_tree(origin: Origin, tmp_path: Path) -> None:
    """Another job replaced the unpacked tree with a link to a directory of its choosing: warm
    reports no tree there under --check, and unpacks the archive again (the link removed, not
    followed) instead of reporting the link's target as the tree."""
    payload = b'{"vocab": 3}'
    body = _tar({"tok/vocab.json": payload})
    manifest = tmp_path / "m.toml"
    manifest.write_text(asset(origin.serve("tok.tar.gz", body), body, extract=True))
    out = Path(warm_manifest(manifest)["entries"][0]["path"])
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "tok").mkdir(parents=True)
    (elsewhere / "tok" / "vocab.json").write_bytes(b"planted")
    os.rename(out, tmp_path / "moved")
    out.symlink_to(elsewhere)
    checked = warm_manifest(manifest, check=True)["entries"][0]
    assert (checked["status"], checked["reason"]) == ("missing", f"not unpacked at {out}")
    again = warm_manifest(manifest)["entries"][0]
    assert again["status"] == "miss"
    assert not out.is_symlink()
    assert (out / "tok" / "vocab.json").read_bytes() == payload
    assert (elsewhere / "tok" / "vocab.json").read_bytes() == b"planted"
    assert origin.total == 1
