"""Records, partials and names another tenant of the volume planted: giant sparse records, a
partial hard-linked to a file of theirs, a socket, control characters and credentials.

The giant records are real sparse files (``truncate``: no disk, gigabytes of size); the code that
meets them runs in a child process whose address space is capped below their size, so a read of
one whole fails there (``MemoryError``) instead of taking the test machine's memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from cacheroot.envs import CACHEROOT_AUTH_TOKENS
from cacheroot.fetch import Fetcher, FetchError, _proc
from cacheroot.fetch._auth import auth_headers
from cacheroot.fetch._lock import holder
from cacheroot.fetch._redact import SECRET_NAMES, SECRET_PARTS, printable, redact_url
from cacheroot.fetch._store import meta_path, open_regular, read_meta

if TYPE_CHECKING:
    from pathlib import Path

#: The largest record cacheroot reads (``_store.MAX_RECORD``), written out.
MAX_RECORD = 262144
#: Size of the planted records: far above what the child may map.
GIANT = 2 << 30
#: The child's address-space cap: room for the interpreter and a download, not for a record read
#: whole.
CAP = 1 << 30


def sparse(path: str, size: int) -> None:
    """Make ``path`` ``size`` bytes long by a hole (what it held stays at its head)."""
    with open(path, "ab") as f:
        f.truncate(size)


CHILD = """
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from cacheroot.fetch import Fetcher
from cacheroot.fetch._lock import holder
from cacheroot.fetch._upkeep.cache import entries, prune, verify
cache, url, lock = sys.argv[2:5]
out = {}
try:
    out["fetched"] = Fetcher(allow_file=True).fetch(url).read_bytes().decode()
    out["ls"] = [(e.name, e.meta) for e in entries(cache)]
    out["verify"] = [(r["status"], r["detail"]) for r in verify(cache, move=False)]
    out["holder"] = holder(lock)
    out["prune"] = [r["reason"] for r in prune(cache, older_than=0.0, grace=0.0)["removed"]]
    out["left"] = sorted(n for _, _, names in os.walk(cache) for n in names)
except MemoryError:
    out["error"] = "MemoryError"
print(json.dumps(out))
"""


def test_a_giant_sparse_record_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    src = tmp_path / "weights.bin"
    src.write_bytes(b"weights")
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
    entry = Fetcher(allow_file=True).fetch(src.as_uri())
    env = {**os.environ, "_VLLM_TEST_CACHE": str(cache)}
    env.pop("CACHEROOT", None)
    record = meta_path(str(entry))
    sparse(record, GIANT)  # costs no disk: a hole after the JSON
    lock = tmp_path / "held.lock"
    lock.touch()
    sparse(f"{lock}.holder", GIANT)
    assert os.stat(record).st_blocks * 512 < 1 << 20
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(CAP), str(cache), src.as_uri(), str(lock)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out, out
    assert out["fetched"] == "weights"  # a miss, downloaded again (the record replaced)
    assert out["ls"][0][1]["url"] == src.as_uri()
    assert out["holder"] is None
    assert out["left"] == []  # pruned, record and all


def test_an_oversized_record_is_reported_by_verify_and_removed_by_prune(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entry = cache / "downloads" / "0123456789abcdef-model.bin"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"model")
    sparse(meta_path(str(entry)), GIANT)
    env = {**os.environ, "_VLLM_TEST_CACHE": str(cache)}
    env.pop("CACHEROOT", None)
    script = CHILD.replace(
        'out["fetched"] = Fetcher(allow_file=True).fetch(url).read_bytes().decode()', ""
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(CAP), str(cache), "-", "/nonexistent"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "error" not in out, out
    assert out["ls"] == [["0123456789abcdef-model.bin", None]]
    assert out["verify"] == [
        [
            "corrupt",
            "its record is 2147483648 bytes, over the 262144-byte limit: damaged, not read",
        ]
    ]
    assert len(out["prune"]) == 1
    assert out["left"] == []


def test_a_record_just_over_the_cap_is_not_read_and_one_under_it_is(tmp_path: Path) -> None:
    dest = tmp_path / "entry"
    body = b'{"url": "u"}'
    with open(meta_path(str(dest)), "wb") as f:
        f.write(body + b" " * (MAX_RECORD - len(body)))
    assert read_meta(str(dest)) == {"url": "u"}
    with open(meta_path(str(dest)), "ab") as f:
        f.write(b" ")
    assert read_meta(str(dest)) is None
    lock = tmp_path / "x.lock"
    with open(f"{lock}.holder", "wb") as f:
        f.write(b'{"pid": 1}' + b" " * MAX_RECORD)
    assert holder(str(lock)) is None


# -- a partial linked to someone else's file --------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_hard_linked_partial_is_never_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "weights.bin"
    data = b"the real weights\n" * 64
    src.write_bytes(data)
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(tmp_path / "cache"))
    fetcher = Fetcher(allow_file=True)
    url = src.as_uri()
    dest = fetcher.path(url)
    dest.parent.mkdir(parents=True)
    victim = tmp_path / "victim.conf"
    victim.write_bytes(b"the real weights\n")  # a prefix of the download: "resumable"
    partial = dest.parent / f".{dest.name}.{_proc.machine_tag()}-{_dead_pid()}.0badcafe.partial"
    os.link(victim, partial)
    path = fetcher.fetch(url, sha256=hashlib.sha256(data).hexdigest())
    assert path.read_bytes() == data
    assert victim.read_bytes() == b"the real weights\n"  # not appended to
    assert os.stat(victim).st_nlink == 1  # the entry is not the victim's inode
    assert os.stat(path).st_ino != os.stat(victim).st_ino
    fetcher.close()


# -- a socket is named a socket ---------------------------------------------------------------


def test_a_socket_is_named_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "s"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        with pytest.raises(OSError, match="found a socket:") as info:
            open_regular(str(path))
        assert "FIFO" not in str(info.value)
    finally:
        sock.close()


# -- output a co-tenant could forge lines in ----------------------------------------------------


def test_printable_escapes_line_breaks_and_tabs() -> None:
    assert printable("a\nb\tc\r\x1b[2J\u2028d") == "a\\nb\\tc\\r\\x1b[2J\\u2028d"


def test_cache_ls_escapes_a_forged_line_in_a_record(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    entry = cache / "downloads" / "0123456789abcdef-model.bin"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"model")
    forged = "https://h/x\ndownloads/evil\t1 B\tnever\thttps://evil/"
    with open(meta_path(str(entry)), "w", encoding="utf-8") as f:
        json.dump({"url": forged}, f)
    env = {**os.environ, "_VLLM_TEST_CACHE": str(cache)}
    env.pop("CACHEROOT", None)
    done = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "cache", "ls", "--namespace", "downloads"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("downloads/")]
    assert len(rows) == 1, done.stdout
    assert rows[0].endswith("\thttps://h/x\\ndownloads/evil\\t1 B\\tnever\\thttps://evil/")


# -- tokens and credentials -----------------------------------------------------------------


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
def test_a_token_for_a_port_that_cannot_exist_is_refused(port: str) -> None:
    env = {CACHEROOT_AUTH_TOKENS: f"ok.internal=AAA host.internal:{port}=SECRETTOKEN"}
    with pytest.raises(FetchError) as info:
        auth_headers("https://ok.internal/x", env)
    message = str(info.value)
    assert f"entry 2 names port {int(port)}, outside 1..65535" in message
    assert "SECRETTOKEN" not in message


def test_ports_at_the_ends_of_the_range_are_accepted() -> None:
    env = {CACHEROOT_AUTH_TOKENS: "a.internal:1=T1 b.internal:65535=T2"}
    assert auth_headers("https://b.internal:65535/x", env) == {"Authorization": "Bearer T2"}


def test_query_credentials_are_redacted_like_passwords() -> None:
    url = (
        "https://bucket.s3.amazonaws.com/w.bin?X-Amz-Credential=AKIA%2F1&X-Amz-Date=20250101"
        "&X-Amz-Signature=deadbeef&sig=abc&token=t0k&access_token=a1&v=2#frag"
    )
    assert redact_url(url) == (
        "https://bucket.s3.amazonaws.com/w.bin?X-Amz-Credential=***&X-Amz-Date=20250101"
        "&X-Amz-Signature=***&sig=***&token=***&access_token=***&v=2#frag"
    )
    assert redact_url(f"could not fetch {url}: 403") == (
        "could not fetch https://bucket.s3.amazonaws.com/w.bin?X-Amz-Credential=***&"
        "X-Amz-Date=20250101&X-Amz-Signature=***&sig=***&token=***&access_token=***&v=2#frag: 403"
    )


def test_a_signed_url_is_stored_and_printed_without_its_signature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "w.bin"
    src.write_bytes(b"signed")
    url = f"{src.as_uri()}?X-Amz-Signature=deadbeef&token=t0k&v=1"
    cache = tmp_path / "cache"
    env = {**os.environ, "_VLLM_TEST_CACHE": str(cache)}
    env.pop("CACHEROOT", None)
    done = subprocess.run(
        [sys.executable, "-m", "cacheroot.envs._cli", "fetch", "--allow-file", "--json", url],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "deadbeef" not in done.stdout + done.stderr
    assert "t0k" not in done.stdout + done.stderr
    (record,) = (cache / "downloads").glob(".*.meta.json")
    stored = json.loads(record.read_text(encoding="utf-8"))
    assert stored["url"] == f"{src.as_uri()}?X-Amz-Signature=***&token=***&v=1"
    monkeypatch.setenv("_VLLM_TEST_CACHE", str(cache))
    other = f"{src.as_uri()}?X-Amz-Signature=cafe&token=t0k&v=1"
    assert Fetcher().path(other) != Fetcher().path(url)  # the key is still the full URL


def test_every_secret_name_passes_the_quick_look() -> None:
    """The scan that spares URLs without credentials a parse must never skip one that has."""
    names = [*SECRET_NAMES, *SECRET_PARTS, "X-Amz-Signature", "x-goog-credential", "API-KEY"]
    for name in names:
        assert redact_url(f"https://h/x?{name}=v&w=1") == f"https://h/x?{name}=***&w=1", name
    assert redact_url("https://h/x?%74oken=v") == "https://h/x?%74oken=***"
