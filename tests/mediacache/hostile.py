"""A volume shared the way "share a volume between users" says (a ``2775`` directory of a group),
a co-tenant in that group who plants things in it, and the files outside it that must not change.

The co-tenant is a real second user (made with ``useradd`` when the tests run as root, removed
afterwards); what it plants it plants itself, with coreutils run under its uid, so ownership,
permissions and ``protected_*`` sysctls are the kernel's, not the test's. Without root the
planting runs as the current user (links, FIFOs and sparse files are the same objects) and the
tests that need a second uid or a root-only file skip.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from typing import Any

#: The co-tenant's user name (its own group, which the volume is shared with, has the same name).
TENANT = "cacheroot-media-tenant"
#: What the root-only file outside the volume holds, and the access time it is given.
SECRET = b"root-only: never a media body\n"
OLD_ATIME_NS = 1_000_000_000_000_000_000


class Volume:
    """The paths of one prepared volume, and how the co-tenant acts on it."""

    def __init__(self, top: str, uid: int | None, gid: int | None) -> None:
        self.top = top
        self.uid, self.gid = uid, gid
        self.root = os.path.join(top, "vol")
        self.media = os.path.join(self.root, "mediacache")
        self.outside = os.path.join(top, "outside")
        self.secret = os.path.join(self.outside, "secret")
        self.target = os.path.join(self.outside, "target")
        self.private = os.path.join(self.outside, "private")

    @property
    def as_root(self) -> bool:
        """Whether the tests run as root with a second uid in the volume's group."""
        return self.uid is not None

    def tenant(self, *argv: str, data: bytes | None = None) -> None:
        """Run ``argv`` as the co-tenant (the current user without root)."""
        who: dict[str, Any] = {}
        if self.uid is not None and self.gid is not None:
            who = {"user": self.uid, "group": self.gid, "extra_groups": [self.gid]}
        done = subprocess.run(
            argv, input=data, capture_output=True, check=False, timeout=60, cwd=self.top, **who
        )
        assert done.returncode == 0, (argv, done.stderr)

    def write(self, path: str, data: bytes) -> None:
        """The co-tenant replaces ``path`` with a file holding ``data`` (renamed, as tools do)."""
        script = 'cat > "$1.tenant" && mv -f "$1.tenant" "$1"'
        self.tenant("sh", "-c", script, "sh", path, data=data)

    def link(self, target: str, path: str) -> None:
        """The co-tenant replaces ``path`` with a symbolic link to ``target``."""
        self.tenant("ln", "-sfn", target, path)

    def forge(self, name: str, *, vouch_for: str, **fields: Any) -> dict[str, Any]:
        """The co-tenant rewrites the record of entry ``name`` so that it describes the file at
        ``vouch_for`` (its size, mtime and inode, all of which anyone may ``stat``)."""
        record = os.path.join(self.media, f".{name}.meta.json")
        with open(record, encoding="utf-8") as f:
            meta: dict[str, Any] = json.load(f)
        st = os.stat(vouch_for)
        meta.update(stat=[st.st_size, st.st_mtime_ns, st.st_ino], **fields)
        self.write(record, json.dumps(meta).encode())
        return meta


def snapshot(path: str) -> dict[str, tuple[int, int, int, int, bytes]]:
    """``{name: (mode, uid, size, atime_ns, bytes)}`` of every file under ``path``."""
    seen = {}
    for here, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(here, name)
            st = os.lstat(full)
            # Read without moving the access time, which is part of what is compared.
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOATIME", 0))
            with open(fd, "rb") as f:
                data = f.read()
            rel = os.path.relpath(full, path)
            seen[rel] = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_size, st.st_atime_ns, data)
    return seen
