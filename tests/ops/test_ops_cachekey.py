"""``cacheroot warm MANIFEST... --key``: the CI cache key of a warmed volume.

The key must survive every way of writing the same manifest and change with every entry field,
the tag and the layout. Manifests here are literal text; the expected key is the sha256 of a
literal document, so the test states exactly what the key is made of.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_TAG
from cacheroot.fetch._warm.cachekey import cache_key
from cacheroot.fetch._warm.manifest import parse_manifest

from .conftest import cli

if TYPE_CHECKING:
    from pathlib import Path

    from .origin import Origin

SHA = "0f3c" + "a" * 60
REV = "4f1c" + "b" * 36
PATTERNS = 'allow_patterns = ["*.json", "*.safetensors"]'

BASE = f"""
[[asset]]
url = "https://example.org/data/gsm8k-test.jsonl"
sha256 = "{SHA}"
namespace = "gsm8k"

[[model]]
hub = "hf"
repo_id = "org/tiny-model"
revision = "{REV}"
allow_patterns = ["*.json", "*.safetensors"]
"""

#: What the key of BASE under the cuda tag digests: the normalised entries (sorted, every field
#: spelled out), the key's version, where the warmed caches lie under the root, the tag.
BASE_DOCUMENT = (
    '{"entries":['
    '{"allow_patterns":["*.json","*.safetensors"],"hub":"hf","ignore_patterns":null,'
    f'"kind":"model","repo_id":"org/tiny-model","repo_type":"model","revision":"{REV}"}},'
    '{"extract":false,"filename":null,"kind":"asset","max_unpacked":null,"namespace":"gsm8k",'
    f'"sha256":"{SHA}","url":"https://example.org/data/gsm8k-test.jsonl"}}'
    '],"key_version":1,'
    '"layout":{"HF_HOME":"huggingface","MODELSCOPE_CACHE":"modelscope",'
    '"_VLLM_TEST_CACHE":"vllm/test_cache"},'
    '"tag":"cuda"}'
)

#: BASE written other ways: comments, blank lines, key order, entry order, inline tables,
#: defaults spelled out, upper-case hex, a pattern list of one as a string, a repeated entry.
SAME_AS_BASE = {
    "comments and spacing": f"""
# what the suite needs
[[asset]]   # the dataset
  url     = "https://example.org/data/gsm8k-test.jsonl"
  sha256  = "{SHA}"     # sha256sum
  namespace = "gsm8k"


[[model]]
  hub = "hf"
  repo_id = "org/tiny-model"
  revision = "{REV}"
  allow_patterns = [
    "*.json",   # configs
    "*.safetensors",
  ]
""",
    "key order": f"""
[[asset]]
namespace = "gsm8k"
sha256 = "{SHA}"
url = "https://example.org/data/gsm8k-test.jsonl"

[[model]]
allow_patterns = ["*.json", "*.safetensors"]
revision = "{REV}"
repo_id = "org/tiny-model"
hub = "hf"
""",
    "models first": f"""
[[model]]
hub = "hf"
repo_id = "org/tiny-model"
revision = "{REV}"
allow_patterns = ["*.json", "*.safetensors"]

[[asset]]
url = "https://example.org/data/gsm8k-test.jsonl"
sha256 = "{SHA}"
namespace = "gsm8k"
""",
    "inline tables and defaults": f"""
asset = [{{ url = "https://example.org/data/gsm8k-test.jsonl", sha256 = "{SHA.upper()}", namespace = "gsm8k", extract = false }}]
model = [{{ hub = "hf", repo_id = "org/tiny-model", revision = "{REV}", allow_patterns = ["*.json", "*.safetensors"], repo_type = "model" }}]
""",  # noqa: E501 - one inline table a line is the point
}

#: BASE with one thing changed: each must get a key of its own.
CHANGED = {
    "url": BASE.replace("gsm8k-test.jsonl", "gsm8k-train.jsonl"),
    "sha256": BASE.replace(SHA, "1" + SHA[1:]),
    "namespace": BASE.replace('namespace = "gsm8k"', 'namespace = "gsm8k2"'),
    "filename": BASE.replace('namespace = "gsm8k"', 'namespace = "gsm8k"\nfilename = "t.jsonl"'),
    "extract": BASE.replace('namespace = "gsm8k"', 'namespace = "gsm8k"\nextract = true'),
    "max_unpacked": BASE.replace(
        'namespace = "gsm8k"', 'namespace = "gsm8k"\nextract = true\nmax_unpacked = "1G"'
    ),
    "hub": BASE.replace('hub = "hf"', 'hub = "modelscope"'),
    "repo_id": BASE.replace("org/tiny-model", "org/small-model"),
    "revision": BASE.replace(REV, "5" + REV[1:]),
    "revision as a branch": BASE.replace(REV, "main"),
    "allow_patterns": BASE.replace('["*.json", "*.safetensors"]', '["*.json"]'),
    "ignore_patterns": BASE.replace(PATTERNS, PATTERNS + '\nignore_patterns = ["*.bin"]'),
    "repo_type": BASE.replace(PATTERNS, PATTERNS + '\nrepo_type = "dataset"'),
    "an entry more": BASE
    + '\n[[asset]]\nurl = "https://example.org/b"\nsha256 = "'
    + SHA
    + '"\nnamespace = "b"\n',
    "an entry less": BASE.split("[[model]]", maxsplit=1)[0],
}


def key_of(text: str, tag: str | None = "cuda") -> str:
    return cache_key([parse_manifest(text)], tag=tag)


def test_the_key_digests_the_normalised_entries_the_layout_and_the_tag() -> None:
    digest = hashlib.sha256(BASE_DOCUMENT.encode("ascii")).hexdigest()[:32]
    assert key_of(BASE) == f"cacheroot-v1-cuda-{digest}"


@pytest.mark.parametrize("form", sorted(SAME_AS_BASE))
def test_reformatting_a_manifest_keeps_its_key(form: str) -> None:
    assert key_of(SAME_AS_BASE[form]) == key_of(BASE)


def test_splitting_a_manifest_in_two_or_repeating_it_keeps_its_key() -> None:
    assets, models = BASE.split("[[model]]")
    split = [parse_manifest("[[model]]" + models), parse_manifest(assets)]
    assert cache_key(split, tag="cuda") == key_of(BASE)
    twice = [parse_manifest(BASE), parse_manifest(BASE)]
    assert cache_key(twice, tag="cuda") == key_of(BASE)


def test_each_changed_entry_gets_a_key_of_its_own() -> None:
    keys = {what: key_of(text) for what, text in CHANGED.items()}
    keys["base"] = key_of(BASE)
    assert len(set(keys.values())) == len(keys), keys


def test_the_tag_names_the_fleet_and_the_key_is_stable_across_calls() -> None:
    keys = {tag: key_of(BASE, tag) for tag in ("cuda", "rocm", None)}
    assert keys["cuda"].startswith("cacheroot-v1-cuda-")
    assert keys["rocm"].startswith("cacheroot-v1-rocm-")
    assert keys[None].startswith("cacheroot-v1-any-")
    assert len(set(keys.values())) == 3
    assert key_of(BASE, "cuda") == keys["cuda"]
    with pytest.raises(ValueError, match="unknown tag 'tpu'"):
        key_of(BASE, "tpu")


def test_a_urls_credentials_do_not_reach_the_key() -> None:
    one = BASE.replace("https://example.org", "https://alice:s3cret@example.org")
    other = BASE.replace("https://example.org", "https://alice:0ther@example.org")
    assert key_of(one) == key_of(other)


def test_the_command_prints_the_key_and_downloads_nothing(
    origin: Origin, tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = b"what the suite needs\n"
    url = origin.serve("data.txt", body)
    first = tmp_path / "a.toml"
    first.write_text(
        f'[[asset]]\nurl = "{url}"\nsha256 = "{hashlib.sha256(body).hexdigest()}"\n'
        'namespace = "ops"\n'
    )
    second = tmp_path / "b.toml"
    second.write_text(BASE)
    monkeypatch.setenv(CACHEROOT_TAG, "rocm")
    done = cli("warm", str(first), str(second), "--key")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cacheroot-v1-rocm-")
    assert len(lines[0]) == len("cacheroot-v1-rocm-") + 32
    assert origin.total == 0
    assert not any(isolated_cache.rglob("data.txt"))
    # Its key is the library's, and the same whatever the order of the files.
    assert lines[0] == cache_key([second, first], tag="rocm")
    assert cli("warm", "--key", str(second), str(first)).stdout == done.stdout


def test_the_command_refuses_what_it_cannot_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[asset]]\nurl = "https://example.org/x"\nsha265 = "typo"\n')
    done = cli("warm", "--key", str(bad))
    assert done.returncode == 2
    assert "cacheroot warm --key:" in done.stderr
    assert "sha265" in done.stderr
    assert done.stdout == ""
    good = tmp_path / "good.toml"
    good.write_text(BASE)
    done = cli("warm", "--key", str(good), env={**os.environ, CACHEROOT_TAG: "tpu"})
    assert done.returncode == 2
    assert "unknown tag 'tpu' (CACHEROOT_TAG): expected one of cuda, rocm" in done.stderr
    several = cli("warm", str(good), str(good))
    assert several.returncode == 2
    assert "one MANIFEST at a time (several only with --key)" in several.stderr
