"""Credentials the bucket refuses, and a policy that denies writes: read-only use, one note.

moto checks signatures and IAM policies when told to (``INITIAL_NO_AUTH_ACTION_COUNT``: the
first requests, which make the bucket and the users, are let through unchecked). Each test
makes its own prefix in the one bucket of this module's server.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import s3server
from .conftest import ASSETS, sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.origin import Server

    from .s3server import S3

BUCKET = "fleet-auth"
#: The unchecked requests: the bucket, two users, their keys and their policies.
SETUP_REQUESTS = 7


class Users:
    """The server, and a writer's and a reader's keys (``(id, secret)``)."""

    def __init__(self, s3: S3, writer: tuple[str, str], reader: tuple[str, str]) -> None:
        self.s3, self.writer, self.reader = s3, writer, reader

    def env(self, root: Path, prefix: str, key: tuple[str, str]) -> dict[str, str]:
        return host_env(
            root,
            f"s3://{BUCKET}/{prefix}",
            self.s3,
            AWS_ACCESS_KEY_ID=key[0],
            AWS_SECRET_ACCESS_KEY=key[1],
        )

    def objects(self) -> dict[str, bytes]:
        c = self.s3.client(*self.writer)
        found = {}
        for item in c.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            found[item["Key"]] = c.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        return found


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    if os.environ.get(s3server.EXTERNAL, "").strip():
        pytest.skip("needs moto's authentication switch")
    log = tmp_path_factory.mktemp("moto-auth") / "moto.log"
    for s3 in s3server.serve(log, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_REQUESTS)):
        s3.client().create_bucket(Bucket=BUCKET)
        iam = s3.client_of("iam")
        keys = []
        for user, actions in (("writer", ["s3:*"]), ("reader", ["s3:GetObject", "s3:ListBucket"])):
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys.append((key["AccessKeyId"], key["SecretAccessKey"]))
            policy = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": actions,
                        "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"],
                    }
                ],
            }
            iam.put_user_policy(UserName=user, PolicyName="tier", PolicyDocument=json.dumps(policy))
        yield Users(s3, keys[0], keys[1])


def test_a_policy_that_denies_writes_makes_the_tier_read_only(
    users: Users, origin: Server, tmp_path: Path
) -> None:
    prefix = uuid.uuid4().hex[:8]
    a, b = origin.url("/a.bin"), origin.url("/b.bin")
    seeded = Host(
        tmp_path, "writer", users.env(tmp_path / "l1-w", prefix, users.writer), urls=[[a, None]]
    )
    done = seeded.wait()
    assert done.rc == 0, done.stderr
    assert done.stderr == ""
    before = users.objects()
    assert f"{prefix}/blobs/sha256/{sha(ASSETS['/a.bin'])}" in before

    env = users.env(tmp_path / "l1-r", prefix, users.reader)
    done = Host(
        tmp_path, "reader", env, urls=[[a, None], [b, None], [origin.url("/c.txt"), None]]
    ).wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(ASSETS[p]) for p in ("/a.bin", "/b.bin", "/c.txt")]
    notes = done.stderr.strip().splitlines()
    assert len(notes) == 1, notes
    assert "denies this process writes: read through, never written" in notes[0]
    assert origin.count("/a.bin", "GET") == 1  # the reader was served a.bin by the bucket
    assert users.objects() == before
    assert users.reader[1] not in done.stderr


def test_credentials_the_bucket_refuses_are_one_note_without_the_secret(
    users: Users, origin: Server, tmp_path: Path
) -> None:
    wrong = (users.reader[0], "not-the-secret-" + uuid.uuid4().hex)
    env = users.env(tmp_path / "l1", uuid.uuid4().hex[:8], wrong)
    done = Host(tmp_path, "h", env, urls=[[origin.url(p), None] for p in ASSETS]).wait()
    assert done.rc == 0, done.stderr
    assert done.served == [sha(d) for d in ASSETS.values()]
    notes = done.stderr.strip().splitlines()
    assert len(notes) == 1, notes
    assert "refused the credentials (SignatureDoesNotMatch)" in notes[0]
    assert wrong[1] not in done.stderr + done.stdout
