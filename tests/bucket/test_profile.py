"""A named AWS profile (``AWS_PROFILE``) gives the bucket tier its credentials, region, endpoint.

The server checks signatures (moto's ``INITIAL_NO_AUTH_ACTION_COUNT``: the requests that make
the bucket and its user go unchecked), so a fetch that fills the bucket proves that the
profile's keys were used, and a wrong secret in the profile is one note. Each host runs with
no ``AWS_ACCESS_KEY_ID`` in its environment unless the test says so; "without boto3" hosts
find a ``boto3`` package on ``PYTHONPATH`` that refuses to import.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from _cacheroot_layout import (
    AWS_ACCESS_KEY_ID,
    AWS_CONFIG_FILE,
    AWS_ENDPOINT_URL,
    AWS_PROFILE,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    AWS_SHARED_CREDENTIALS_FILE,
)

from cacheroot.fetch._bucket.location import open_clients, parse
from cacheroot.fetch._bucket.profile import ProfileError, find_profile, profile_settings

from . import s3server
from .conftest import ASSETS, sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Server

    from .s3server import S3

BUCKET = "fleet-profile"
#: The unchecked requests: the bucket, the user, its key and its policy.
SETUP_REQUESTS = 4
#: A secret no host may show (in the credentials file under a profile nobody uses).
BYSTANDER_SECRET = "bystander-secret-Lk20vQ"  # noqa: S105 - looked for in outputs


class Account:
    """The server and the keys (``(id, secret)``) of a user that may do anything to the bucket."""

    def __init__(self, s3: S3, key: tuple[str, str]) -> None:
        self.s3, self.key = s3, key

    def objects(self, prefix: str) -> list[str]:
        c = self.s3.client(*self.key)
        listed = c.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
        return sorted(item["Key"] for item in listed.get("Contents", []))


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Account]:
    if os.environ.get(s3server.EXTERNAL, "").strip():
        pytest.skip("needs moto's authentication switch")
    log = tmp_path_factory.mktemp("moto-profile") / "moto.log"
    for s3 in s3server.serve(log, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_REQUESTS)):
        s3.client().create_bucket(Bucket=BUCKET)
        iam = s3.client_of("iam")
        iam.create_user(UserName="ci")
        key = iam.create_access_key(UserName="ci")["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["s3:*"],
                    "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"],
                }
            ],
        }
        iam.put_user_policy(UserName="ci", PolicyName="tier", PolicyDocument=json.dumps(policy))
        yield Account(s3, (key["AccessKeyId"], key["SecretAccessKey"]))


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _without_boto3(tmp_path: Path) -> dict[str, str]:
    """``PYTHONPATH`` that makes ``import boto3`` fail in a host."""
    hidden = tmp_path / "no-boto3"
    _write(hidden / "boto3" / "__init__.py", 'raise ImportError("boto3 is hidden for this test")\n')
    inherited = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(hidden), inherited) if p)}


def _env(
    account: Account, tmp_path: Path, prefix: str, credentials: str, config: str, **extra: str
) -> dict[str, str]:
    """A host's environment: the profile ``ci`` in the two files written here, no keys."""
    files = {
        AWS_SHARED_CREDENTIALS_FILE: _write(tmp_path / "aws" / "credentials", credentials),
        AWS_CONFIG_FILE: _write(tmp_path / "aws" / "config", config),
    }
    settings = {
        AWS_ENDPOINT_URL: account.s3.endpoint,
        AWS_REGION: "us-east-1",
        AWS_PROFILE: "ci",
        **files,
        **extra,
    }
    env = host_env(tmp_path / "l1", f"s3://{BUCKET}/{prefix}", None, **settings)
    for name, value in settings.items():
        if not value:
            del env[name]
    return env


def _fetch(tmp_path: Path, origin: Server, env: dict[str, str]) -> tuple[list[str], str]:
    """Fetch ``a.bin`` in a host: ``(its sha256 as served, the host's stdout and stderr)``."""
    done = Host(tmp_path / "jobs", "h", env, urls=[[origin.url("/a.bin"), None]]).wait()
    assert done.rc == 0, done.stderr
    return done.served, done.stderr + done.stdout


def _notes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip() and not line.startswith("{")]


def _credentials(key: tuple[str, str], **more: str) -> str:
    lines = [
        "[bystander]",
        "aws_access_key_id = AKIABYSTANDER0000000",
        f"aws_secret_access_key = {BYSTANDER_SECRET}",
        "",
        "[ci]",
        f"aws_access_key_id = {key[0]}",
        f"aws_secret_access_key = {key[1]}",
        *(f"{k} = {v}" for k, v in more.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("boto3", [False, True], ids=["static-keys", "boto3"])
def test_the_profile_keys_fill_the_bucket(
    account: Account, origin: Server, tmp_path: Path, boto3: bool
) -> None:
    prefix = uuid.uuid4().hex[:8]
    extra = {} if boto3 else _without_boto3(tmp_path)
    env = _env(account, tmp_path, prefix, _credentials(account.key), "", **extra)
    assert AWS_ACCESS_KEY_ID not in env
    assert AWS_SECRET_ACCESS_KEY not in env
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    assert _notes(out) == []
    assert f"{prefix}/blobs/sha256/{sha(ASSETS['/a.bin'])}" in account.objects(prefix)
    # A second host with an empty L1 is served by the bucket, through the same profile.
    env = _env(account, tmp_path / "second", prefix, _credentials(account.key), "", **extra)
    served, out = _fetch(tmp_path / "second", origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    assert _notes(out) == []
    assert origin.count("/a.bin", "GET") == 1


@pytest.mark.parametrize("boto3", [False, True], ids=["static-keys", "boto3"])
def test_a_wrong_secret_in_the_profile_is_one_note_without_it(
    account: Account, origin: Server, tmp_path: Path, boto3: bool
) -> None:
    prefix = uuid.uuid4().hex[:8]
    wrong = "not-the-secret-" + uuid.uuid4().hex
    extra = {} if boto3 else _without_boto3(tmp_path)
    env = _env(account, tmp_path, prefix, _credentials((account.key[0], wrong)), "", **extra)
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    notes = _notes(out)
    assert len(notes) == 1, notes
    assert "refused the credentials (SignatureDoesNotMatch)" in notes[0]
    assert wrong not in out
    assert account.objects(prefix) == []


def test_keys_in_the_environment_win_over_the_profile(
    account: Account, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    env = _env(
        account,
        tmp_path,
        prefix,
        _credentials((account.key[0], "a-wrong-secret-in-the-file")),
        "",
        AWS_ACCESS_KEY_ID=account.key[0],
        AWS_SECRET_ACCESS_KEY=account.key[1],
        AWS_PROFILE="ci",
    )
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    assert _notes(out) == []
    assert f"{prefix}/blobs/sha256/{sha(ASSETS['/a.bin'])}" in account.objects(prefix)
    # A profile that does not exist is not even looked up.
    env[AWS_PROFILE] = "nowhere"
    served, out = _fetch(tmp_path / "again", origin, env)
    assert _notes(out) == []


def test_a_missing_profile_is_one_note_naming_it_and_the_files(
    account: Account, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    env = _env(account, tmp_path, prefix, _credentials(account.key), "", AWS_PROFILE="nightly")
    env[AWS_CONFIG_FILE] = str(tmp_path / "aws" / "no-config")
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]  # from the origin
    notes = _notes(out)
    assert len(notes) == 1, notes
    credentials = tmp_path / "aws" / "credentials"
    config = tmp_path / "aws" / "no-config"
    assert notes[0] == (
        f"shared tier not used by this process: the bucket at s3://{BUCKET}/{prefix} "
        f"cannot use AWS_PROFILE=nightly: no such profile in {credentials} ([nightly]) or "
        f"{config} (absent) ([profile nightly]): add it, point AWS_SHARED_CREDENTIALS_FILE or "
        "AWS_CONFIG_FILE at the files that hold it, or unset AWS_PROFILE"
    )
    assert account.key[1] not in out
    assert BYSTANDER_SECRET not in out
    assert account.objects(prefix) == []


def _process_profile(account: Account, tmp_path: Path) -> str:
    """A config file whose profile ``ci`` gets the account's keys from a ``credential_process``."""
    answer = {"Version": 1, "AccessKeyId": account.key[0], "SecretAccessKey": account.key[1]}
    script = _write(
        tmp_path / "process.py", f"import json\nprint(json.dumps({json.dumps(answer)}))\n"
    )
    command = f"{shlex.quote(sys.executable)} {shlex.quote(script)}"
    return f"[profile ci]\ncredential_process = {command}\n"


def test_a_credential_process_profile_works_through_boto3(
    account: Account, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    env = _env(account, tmp_path, prefix, "", _process_profile(account, tmp_path))
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    assert _notes(out) == []
    assert f"{prefix}/blobs/sha256/{sha(ASSETS['/a.bin'])}" in account.objects(prefix)


def test_a_credential_process_profile_without_boto3_is_one_note_saying_what_to_do(
    account: Account, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    config = _process_profile(account, tmp_path)
    env = _env(account, tmp_path, prefix, "", config, **_without_boto3(tmp_path))
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    notes = _notes(out)
    assert len(notes) == 1, notes
    assert notes[0] == (
        f"shared tier not used by this process: the bucket at s3://{BUCKET}/{prefix} "
        "cannot use AWS_PROFILE=ci: its credentials come from credential_process (in "
        f"{tmp_path / 'aws' / 'config'}), which only boto3 resolves; pip install boto3, or export "
        "the profile's keys: eval \"$(aws configure export-credentials --profile ci --format "
        'env)"'
    )
    assert account.key[1] not in out
    assert account.objects(prefix) == []


def test_the_endpoint_and_region_come_from_the_config_file(
    account: Account, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    config = f"[profile ci]\nregion = us-east-1\nendpoint_url = {account.s3.endpoint}\n"
    env = _env(
        account,
        tmp_path,
        prefix,
        _credentials(account.key),
        config,
        AWS_ENDPOINT_URL="",
        AWS_REGION="",
        **_without_boto3(tmp_path),
    )
    assert not any(k.startswith("AWS_ENDPOINT") or "REGION" in k for k in env)
    served, out = _fetch(tmp_path, origin, env)
    assert served == [sha(ASSETS["/a.bin"])]
    assert _notes(out) == []
    assert f"{prefix}/blobs/sha256/{sha(ASSETS['/a.bin'])}" in account.objects(prefix)


# What the environment makes of a profile, without a request.

LOCATION = parse("s3://fleet/p")
CONFIG = """\
[default]
region = eu-north-1

[profile ci]
region = eu-west-3
endpoint_url = http://minio.internal:9000

[profile role]
role_arn = arn:aws:iam::123456789012:role/ci
source_profile = ci

[profile sso]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = ci
"""
CREDENTIALS = """\
[default]
aws_access_key_id = AKIADEFAULT000000000
aws_secret_access_key = default-secret-77Hq

[ci]
aws_access_key_id = AKIACI00000000000000
aws_secret_access_key = ci-secret-3Rw9
aws_session_token = ci-token-Pp41

[half]
aws_access_key_id = AKIAHALF000000000000
"""
SECRETS = ("default-secret-77Hq", "ci-secret-3Rw9", "ci-token-Pp41")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HOME`` with the two files in ``.aws``, and no boto3 (static keys only)."""
    _write(tmp_path / ".aws" / "config", CONFIG)
    _write(tmp_path / ".aws" / "credentials", CREDENTIALS)
    monkeypatch.setitem(sys.modules, "boto3", None)
    return tmp_path


def test_the_files_under_home_give_static_keys_region_and_endpoint(home: Path) -> None:
    config, provider = profile_settings(LOCATION, {"HOME": str(home), AWS_PROFILE: "ci"})
    assert provider is None
    assert config == {
        "region": "eu-west-3",
        "endpoint": "http://minio.internal:9000",
        "access_key_id": "AKIACI00000000000000",
        "secret_access_key": "ci-secret-3Rw9",
        "session_token": "ci-token-Pp41",
    }
    profile = find_profile(LOCATION, {"HOME": str(home), AWS_PROFILE: "ci"})
    assert profile is not None
    assert profile.credentials_file == f"{home}/.aws/credentials"
    assert profile.config_file == f"{home}/.aws/config"
    assert not any(s in repr(profile) for s in SECRETS)


def test_the_environment_region_and_endpoint_win_over_the_profile(home: Path) -> None:
    env = {
        "HOME": str(home),
        AWS_PROFILE: "ci",
        "AWS_DEFAULT_REGION": "ap-south-1",
        "AWS_ENDPOINT_URL_S3": "https://s3.example.net",
    }
    config, _provider = profile_settings(LOCATION, env)
    assert "region" not in config
    assert "endpoint" not in config
    assert config["access_key_id"] == "AKIACI00000000000000"


def test_default_profile_is_read_before_profile_as_botocore_does(home: Path) -> None:
    env = {"HOME": str(home), AWS_PROFILE: "ci", "AWS_DEFAULT_PROFILE": "default"}
    config, _provider = profile_settings(LOCATION, env)
    assert config == {
        "region": "eu-north-1",
        "access_key_id": "AKIADEFAULT000000000",
        "secret_access_key": "default-secret-77Hq",
    }


def test_an_http_endpoint_from_the_profile_allows_http(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    from obstore.store import S3Store

    store = open_clients(LOCATION, {"HOME": str(home), AWS_PROFILE: "ci"}).control
    assert isinstance(store, S3Store)
    assert store.client_options is not None
    assert str(store.client_options.get("allow_http")).lower() == "true"
    assert store.config.get("endpoint") == "http://minio.internal:9000"
    assert store.config.get("region") == "eu-west-3"
    assert not any(s in repr(store) for s in SECRETS)


#: What each profile of the files that cannot be used says (``{home}``: where they are).
REFUSED = {
    "role": (
        "the bucket at s3://fleet/p cannot use AWS_PROFILE=role: its credentials come from "
        "role_arn (in {home}/.aws/config), which only boto3 resolves; pip install boto3, or "
        "export the profile's keys: eval "
        '"$(aws configure export-credentials --profile role --format env)"'
    ),
    "sso": (
        "the bucket at s3://fleet/p cannot use AWS_PROFILE=sso: its credentials come from "
        "sso_session, sso_account_id, sso_role_name (in {home}/.aws/config), which only "
        "boto3 resolves; pip install boto3, or export the profile's keys: eval "
        '"$(aws configure export-credentials --profile sso --format env)"'
    ),
    "half": (
        "the bucket at s3://fleet/p cannot use AWS_PROFILE=half: it names "
        "aws_access_key_id (in {home}/.aws/credentials) but no aws_secret_access_key; add "
        "it, or unset AWS_PROFILE"
    ),
    "nightly": (
        "the bucket at s3://fleet/p cannot use AWS_PROFILE=nightly: no such profile in "
        "{home}/.aws/credentials ([nightly]) or {home}/.aws/config ([profile nightly]): "
        "add it, point AWS_SHARED_CREDENTIALS_FILE or AWS_CONFIG_FILE at the files that "
        "hold it, or unset AWS_PROFILE"
    ),
}


@pytest.mark.parametrize(("name", "says"), list(REFUSED.items()), ids=list(REFUSED))
def test_a_profile_that_cannot_be_used_says_why_and_what_to_do(
    home: Path, name: str, says: str
) -> None:
    with pytest.raises(ProfileError) as raised:
        profile_settings(LOCATION, {"HOME": str(home), AWS_PROFILE: name})
    assert str(raised.value) == says.format(home=home)
    assert not any(s in str(raised.value) for s in SECRETS)


def test_a_file_that_is_not_ini_is_named_without_its_lines(home: Path) -> None:
    _write(home / ".aws" / "credentials", "aws_secret_access_key = unsectioned-secret-Qm3\n")
    with pytest.raises(ProfileError) as raised:
        profile_settings(LOCATION, {"HOME": str(home), AWS_PROFILE: "ci"})
    assert str(raised.value) == (
        "the bucket at s3://fleet/p cannot use the AWS profile files: "
        f"{home}/.aws/credentials cannot be read as an INI file (MissingSectionHeaderError)"
    )


def test_no_profile_and_other_stores_change_nothing(home: Path) -> None:
    assert profile_settings(LOCATION, {"HOME": str(home)}) == ({}, None)
    assert profile_settings(parse("gs://b/p"), {"HOME": str(home), AWS_PROFILE: "ci"}) == (
        {},
        None,
    )


def test_boto3_reads_the_files_the_environment_names_and_the_region_rules_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "aws" / "config", CONFIG)
    _write(tmp_path / "aws" / "credentials", CREDENTIALS)
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))  # botocore's own default: unused
    env = {
        AWS_PROFILE: "ci",
        AWS_SHARED_CREDENTIALS_FILE: str(tmp_path / "aws" / "credentials"),
        AWS_CONFIG_FILE: str(tmp_path / "aws" / "config"),
    }
    config, provider = profile_settings(LOCATION, env)
    assert config == {"region": "eu-west-3", "endpoint": "http://minio.internal:9000"}
    assert provider is not None
    assert type(provider).__name__ == "Boto3CredentialProvider"
    assert provider.config == {}  # boto3's region would override AWS_REGION in the client
    got = provider()
    assert (got["access_key_id"], got["secret_access_key"], got["token"]) == (
        "AKIACI00000000000000",
        "ci-secret-3Rw9",
        "ci-token-Pp41",
    )
    config, provider = profile_settings(LOCATION, {**env, AWS_REGION: "us-west-2"})
    assert config == {"endpoint": "http://minio.internal:9000"}
    assert provider is not None
    with pytest.raises(ProfileError) as raised:
        profile_settings(LOCATION, {**env, AWS_PROFILE: "nightly"})
    assert "cannot use AWS_PROFILE=nightly: no such profile in" in str(raised.value)


def test_a_profile_boto3_gets_nothing_from_is_said_at_once_without_its_output(
    tmp_path: Path,
) -> None:
    leaked = "process-printed-secret-Vb81"
    script = _write(
        tmp_path / "fail.py", f"import sys\nsys.stderr.write({leaked!r})\nsys.exit(3)\n"
    )
    command = f"{shlex.quote(sys.executable)} {shlex.quote(script)}"
    env = {
        AWS_PROFILE: "broken",
        AWS_SHARED_CREDENTIALS_FILE: str(tmp_path / "none"),
        AWS_CONFIG_FILE: _write(
            tmp_path / "config", f"[profile broken]\ncredential_process = {command}\n"
        ),
    }
    with pytest.raises(ProfileError) as raised:
        profile_settings(LOCATION, env)
    assert str(raised.value) == (
        "the bucket at s3://fleet/p cannot use AWS_PROFILE=broken: boto3 got no credentials "
        "from it (CredentialRetrievalError); check it with: aws sts get-caller-identity "
        "--profile broken (after aws sso login --profile broken for SSO)"
    )
    assert leaked not in str(raised.value)
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


def test_a_file_that_cannot_be_opened_holds_no_profile_and_is_named_so(home: Path) -> None:
    (home / "dir").mkdir()
    env = {"HOME": str(home), AWS_PROFILE: "nightly", AWS_CONFIG_FILE: str(home / "dir")}
    with pytest.raises(ProfileError) as raised:
        profile_settings(LOCATION, env)
    assert f"or {home}/dir (unreadable) ([profile nightly])" in str(raised.value)
