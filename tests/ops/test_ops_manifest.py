"""The warm manifest: what parses, and errors that name the file, entry, field and values."""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import Model
from cacheroot.fetch._warm.manifest import Asset, ManifestError, load_manifest, parse_manifest

if TYPE_CHECKING:
    from pathlib import Path

SHA = "a" * 64
COMMIT = "0123456789abcdef0123456789abcdef01234567"

GOOD = f"""
[[asset]]
url = "https://example.org/data/test.jsonl"
sha256 = "{SHA.upper()}"
namespace = "gsm8k"

[[asset]]
url = "https://example.org/data/weights.tar.gz"
sha256 = "{"b" * 64}"
namespace = "models"
filename = "weights.tar.gz"
extract = true

[[model]]
hub = "hf"
repo_id = "org/tiny"
revision = "{COMMIT}"
allow_patterns = "*.json"

[[model]]
hub = "modelscope"
repo_id = "org/tiny"
revision = "master"
ignore_patterns = ["*.bin", "*.pt"]
repo_type = "model"
"""


def test_a_good_manifest(tmp_path: Path) -> None:
    path = tmp_path / "manifest.toml"
    path.write_text(GOOD)
    m = load_manifest(path)
    assert m.path == str(path)
    assert m.assets == [
        Asset(url="https://example.org/data/test.jsonl", sha256=SHA, namespace="gsm8k"),
        Asset(
            url="https://example.org/data/weights.tar.gz",
            sha256="b" * 64,
            namespace="models",
            filename="weights.tar.gz",
            extract=True,
        ),
    ]
    assert [a.index for a in m.assets] == [1, 2]
    hf, ms = m.models
    assert hf == Model(hub="hf", repo_id="org/tiny", revision=COMMIT, allow_patterns=("*.json",))
    assert hf.pinned
    assert not ms.pinned
    assert ms.ignore_patterns == ("*.bin", "*.pt")
    assert ms.label == "[[model]] #2 modelscope:org/tiny@master"


def test_an_empty_manifest_is_valid() -> None:
    m = parse_manifest("# nothing yet\n")
    assert (m.assets, m.models) == ([], [])


def _asset(**fields: object) -> str:
    base: dict[str, object] = {
        "url": "https://h/x",
        "sha256": SHA,
        "namespace": "ns",
        **fields,
    }
    body = "\n".join(f"{k} = {_toml(v)}" for k, v in base.items() if v is not None)
    ok = f'[[asset]]\nurl = "https://h/ok"\nsha256 = "{SHA}"\nnamespace = "ns"\n'
    return ok + "\n[[asset]]\n" + body + "\n"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


BAD_ASSETS = [
    ({"url": None}, "field 'url'", "expected a string, found (missing)"),
    ({"url": "ftp://h/x"}, "field 'url'", "http://, https:// or file://"),
    ({"sha256": "abc"}, "field 'sha256'", "expected 64 hexadecimal digits"),
    ({"sha256": None}, "field 'sha256'", "(missing)"),
    ({"sha256": 5}, "field 'sha256'", "found 5"),
    ({"namespace": "../up"}, "field 'namespace'", "'../up' is not allowed"),
    ({"namespace": ".hidden"}, "field 'namespace'", "not allowed"),
    ({"filename": "a/b"}, "field 'filename'", "'a/b' is not allowed"),
    ({"extract": "yes"}, "field 'extract'", "expected true or false, found 'yes'"),
    ({"sha265": SHA}, "field 'sha265'", "unknown field (a typo?)"),
]


@pytest.mark.parametrize(("fields", "where", "what"), BAD_ASSETS)
def test_asset_errors_name_entry_field_expected_found(
    tmp_path: Path, fields: dict[str, object], where: str, what: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(_asset(**fields))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    text = str(info.value)
    assert text.startswith(f"{path}: [[asset]] #2, {where}")
    assert what in text
    assert info.value.path == str(path)


BAD_MODELS = [
    ('hub = "gitlab"', "field 'hub'", "expected 'hf' or 'modelscope', found 'gitlab'"),
    ('repo_type = "space"', "field 'repo_type'", "found 'space'"),
    ('repo_id = "a/b/c"', "field 'repo_id'", "found 'a/b/c'"),
    ("allow_patterns = [1, 2]", "field 'allow_patterns'", "glob string"),
    ('revison = "main"', "field 'revison'", "unknown field"),
    ('branch = "../main"', "field 'branch'", "a branch or tag name such as 'main'"),
    (f'branch = "{"0" * 40}"', "field 'branch'", "a branch or tag name such as 'main'"),
    ("branch = 3", "field 'branch'", "expected a non-blank string, found 3"),
]


def test_branch_names_where_a_pinned_commit_came_from() -> None:
    base = f'[[model]]\nhub = "hf"\nrepo_id = "org/m"\nrevision = "{COMMIT}"\n'
    [model] = parse_manifest(base + 'branch = "release/v1"\n').models
    assert model.branch == "release/v1"
    assert model.as_dict()["branch"] == "release/v1"
    assert 'branch = "release/v1"' in model.to_toml()
    # Without it, an entry's fields (and so its CI cache key) are what they were.
    assert "branch" not in parse_manifest(base).models[0].as_dict()
    with pytest.raises(ManifestError, match="revision 'dev' is itself a branch or tag"):
        parse_manifest(base.replace(COMMIT, "dev") + 'branch = "main"\n')
    with pytest.raises(ManifestError, match="branch applies to hub = 'hf' only"):
        parse_manifest(base.replace('"hf"', '"modelscope"') + 'branch = "master"\n')


@pytest.mark.parametrize(("line", "where", "what"), BAD_MODELS)
def test_model_errors(line: str, where: str, what: str) -> None:
    fields = {"hub": '"hf"', "repo_id": '"org/m"', "revision": f'"{COMMIT}"'}
    key = line.split(" = ", 1)[0]
    fields[key] = line.split(" = ", 1)[1]
    text = "[[model]]\n" + "\n".join(f"{k} = {v}" for k, v in fields.items())
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, path="suite.toml")
    assert str(info.value).startswith(f"suite.toml: [[model]] #1, {where}")
    assert what in str(info.value)


def test_modelscope_needs_owner_and_name() -> None:
    text = f'[[model]]\nhub = "modelscope"\nrepo_id = "bare"\nrevision = "{COMMIT}"\n'
    with pytest.raises(ManifestError, match="repo_id"):
        parse_manifest(text)
    parse_manifest(text.replace('"modelscope"', '"hf"'))  # a bare name is fine on the HF hub


def test_whole_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="is not valid TOML"):
        parse_manifest("[[asset]\n", path="x.toml")
    with pytest.raises(ManifestError, match="unknown top-level key"):
        parse_manifest('[[assets]]\nurl = "https://h/x"\n')
    with pytest.raises(ManifestError, match="expected an array of tables"):
        parse_manifest('asset = "https://h/x"\n')
    with pytest.raises(ManifestError, match="cannot be read"):
        load_manifest(tmp_path / "absent.toml")


def test_duplicates_are_refused() -> None:
    entry = f'[[asset]]\nurl = "https://h/x"\nsha256 = "{SHA}"\nnamespace = "ns"\n'
    with pytest.raises(ManifestError, match=r"\[\[asset\]\] #2: names the same cache entry as"):
        parse_manifest(entry + entry)


def test_manifest_error_pickles() -> None:
    exc = ManifestError("m.toml", "[[asset]] #1, field 'url'", "expected a string")
    back = pickle.loads(pickle.dumps(exc))  # noqa: S301 - our own bytes
    assert str(back) == str(exc)
    assert isinstance(back, ManifestError)
    assert isinstance(back, ValueError)
    assert back.where == exc.where


def test_fallback_urls_parse_and_leave_the_entry_and_its_key_alone(tmp_path: Path) -> None:
    from cacheroot.fetch._warm.cachekey import cache_key

    plain = f'[[asset]]\nurl = "https://h/x"\nsha256 = "{SHA}"\nnamespace = "ns"\n'
    with_urls = plain + 'urls = ["https://mirror.example/x", "file:///srv/mirror/x"]\n'
    [asset] = parse_manifest(with_urls).assets
    assert asset.urls == ("https://mirror.example/x", "file:///srv/mirror/x")
    assert asset.url == "https://h/x"
    [bare] = parse_manifest(plain).assets
    assert bare.urls == ()
    assert asset != bare
    assert asset.as_dict() == bare.as_dict()
    # Where the bytes may come from is not what is cached: the CI cache key stays.
    (tmp_path / "a.toml").write_text(plain)
    (tmp_path / "b.toml").write_text(with_urls)
    assert cache_key([tmp_path / "a.toml"]) == cache_key([tmp_path / "b.toml"])


BAD_URLS = [
    (
        {"urls": "https://h/y"},
        "field 'urls'",
        (
            "expected a list of http://, https:// or file:// URLs (fallbacks of url), found "
            "'https://h/y'"
        ),
    ),
    ({"urls": ["https://h/y", "ftp://h/y"]}, "field 'urls[2]'", "found 'ftp://h/y'"),
    ({"urls": [5]}, "field 'urls[1]'", "found 5"),
    (
        {"urls": ["https://h/x"]},
        "field 'urls[1]'",
        "expected a URL other than url and the earlier urls, found 'https://h/x'",
    ),
    (
        {"urls": ["https://h/y", "https://h/y"]},
        "field 'urls[2]'",
        "expected a URL other than url and the earlier urls, found 'https://h/y'",
    ),
]


@pytest.mark.parametrize(("fields", "where", "what"), BAD_URLS)
def test_fallback_url_errors_name_the_item(
    tmp_path: Path, fields: dict[str, object], where: str, what: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(_asset(**fields))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    text = str(info.value)
    assert text.startswith(f"{path}: [[asset]] #2, {where}: expected "), text
    assert text.endswith(what), text
