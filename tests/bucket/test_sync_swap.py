"""``tier sync`` pushes what its walk found, through the directory it walked.

A namespace directory of L1 that another job swaps for a link after the walk listed it must not
lead the push elsewhere: the bytes read for the upload are the walked entry's, never a file of
the same name behind the link (root reading, and hashing, a root-only file a co-tenant points
it at).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cacheroot.fetch._bucket import upkeep
from cacheroot.fetch._bucket.tier import open_bucket

from .conftest import sha
from .fleet import Host, host_env

if TYPE_CHECKING:
    from pathlib import Path

    from cacheroot.fetch._bucket.records import Record
    from tests.origin import Server, static
    from tests.planted import LONG_AGO, outside_dir, state

    from .s3server import S3
else:
    from origin import Server, static
    from planted import LONG_AGO, outside_dir, state

#: The entry: as long as ``outside_dir``'s ``keep/old.bin`` (300 bytes), another content.
BODY = b"new" * 100


def test_sync_reads_the_walked_entry_not_one_behind_a_swapped_in_link(
    s3: S3, bucket: str, tmp_path: Path
) -> None:
    shared = f"s3://{bucket}/swap"
    l1 = tmp_path / "l1"
    with Server() as origin:
        origin.route("/old.bin", static(BODY))
        urls = [[origin.url("/old.bin"), None]]
        done = Host(tmp_path, "ro", host_env(l1, shared, s3, mode="ro"), urls=urls).wait()
    assert done.rc == 0, done.stderr
    entry = next(p for p in l1.rglob("*-old.bin") if p.is_file())
    namespace = entry.parent
    outside = outside_dir(tmp_path / "outside")
    # Behind the link: a root-only file of the entry's name and size, and the entry's record.
    planted = outside / "keep" / entry.name
    planted.write_bytes(b"old" * 100)
    planted.chmod(0o600)
    record = namespace / f".{entry.name}.meta.json"
    (outside / "keep" / record.name).write_bytes(record.read_bytes())
    os.utime(planted, (LONG_AGO, LONG_AGO))
    before = state(outside), os.lstat(planted)
    env = host_env(l1, shared, s3)
    opened, problem = open_bucket(shared, "rw", env)
    assert opened is not None, problem
    asked = opened.record

    def swap_then_ask(rel: str) -> Record | None:
        if not namespace.is_symlink():
            namespace.rename(namespace.with_name("walked"))
            namespace.symlink_to(outside / "keep")
        return asked(rel)

    opened.record = swap_then_ask  # type: ignore[method-assign] # the swap, timed
    report = upkeep.sync(opened, str(l1))
    assert report.done == 1, report
    assert s3.objects(bucket)[f"swap/blobs/sha256/{sha(BODY)}"] == BODY
    assert f"swap/blobs/sha256/{sha(b'old' * 100)}" not in s3.objects(bucket)
    st = os.lstat(planted)
    assert (state(outside), st.st_atime_ns) == (before[0], before[1].st_atime_ns)
