"""A response body read within its limits, ending as the one copy of it that the process holds.

The caller gets ``bytes``, so one copy in memory is unavoidable; collecting the chunks and then
joining them (or converting a ``bytearray``) makes a second one at the end, twice the body at
the peak. Instead the decoded chunks stream into a :class:`Spool`: memory for the first MiB, then
an unnamed temporary file on the cache's own volume (``O_TMPFILE`` where Linux has it: no name in
the directory, so the size bound's accounting never sees it, and nothing is left behind by a
crash), or in the system's temporary directory when the cache's cannot be written. Once the body
is complete it is read back with one ``read`` into a ``bytes`` of its exact size, and the file is
closed: the peak is the body plus a chunk, whatever the ``Content-Encoding``. The cache's
directory is given as its held descriptor (:mod:`._volume`), so the file is made in that very
directory whatever was swapped for its path meanwhile; it has no name, so nothing can be planted
under one.

The limit holds for the decoded bytes (what the caller gets: a small gzip body can decode to a
large one) and for the bytes on the wire, both checked at every chunk, before it is kept.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import TYPE_CHECKING, BinaryIO

from . import _volume
from ._errors import ResponseTooLarge

if TYPE_CHECKING:
    from collections.abc import Iterable

    import requests

#: Bytes asked of the transport per read (decoded), and kept in memory before spooling to disk.
CHUNK = 1 << 20
IN_MEMORY = 1 << 20


class Spool:
    """Bytes appended in chunks and read back once (see the module docstring).

    ``directories`` are tried in order for the temporary file: a descriptor of a directory (an
    unnamed ``O_TMPFILE`` file in it, or nothing where the kernel or file system has none), a
    path, or ``None`` for the system's temporary directory. If no file can be made or written
    (a full disk), the bytes stay in memory: twice the body at the end, never a failed
    download.
    """

    def __init__(self, directories: Iterable[int | str | None]) -> None:
        self._directories = tuple(directories)
        self._memory: bytearray | None = bytearray()
        self._file: BinaryIO | None = None
        self._may_spill = True
        self.size = 0

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``."""
        if self._may_spill and self.size + len(chunk) > IN_MEMORY:
            self._may_spill = False
            self._file = self._spill()
        if self._file is not None:
            try:
                _write_all(self._file.fileno(), chunk)
            except OSError:
                self._unspill(self._file)
        if self._memory is not None:
            self._memory += chunk
        self.size += len(chunk)

    def getvalue(self) -> bytes:
        """Everything written, as one ``bytes`` (read from the file in one go when spooled)."""
        if self._file is not None:
            return _pread_all(self._file.fileno(), self.size)
        return bytes(self._memory or b"")

    def close(self) -> None:
        """Free the memory or the file."""
        self._memory = None
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spill(self) -> BinaryIO | None:
        """A temporary file holding the bytes kept in memory so far, or ``None``."""
        held = self._memory or bytearray()
        for directory in self._directories:
            try:
                file = _unnamed(directory)
            except OSError:
                continue
            try:
                _write_all(file.fileno(), held)
            except OSError:
                file.close()
                continue
            self._memory = None
            return file
        return None

    def _unspill(self, file: BinaryIO) -> None:
        """The file failed (a full disk): carry on in memory with what it holds."""
        self._memory = bytearray(_pread_all(file.fileno(), self.size))
        self._file = None
        with contextlib.suppress(OSError):
            file.close()


def _unnamed(directory: int | str | None) -> BinaryIO:
    """An unnamed temporary file in ``directory`` (see :class:`Spool`)."""
    if isinstance(directory, int):
        return _volume.unnamed(directory)
    return tempfile.TemporaryFile(dir=directory, prefix=".spool-")


def read_body(
    url: str, resp: requests.Response, limit: int, spool_dirs: Iterable[int | str | None]
) -> tuple[bytes, int | None]:
    """``(body, bytes on the wire)`` of ``resp``, raising :class:`ResponseTooLarge` past ``limit``.

    ``url`` is for the message (already redacted by the caller). The wire count is ``None`` when
    urllib3 cannot say.
    """
    declared = resp.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(url, limit, int(declared))
    with Spool(spool_dirs) as spool:
        for chunk in resp.iter_content(CHUNK):
            _check(url, limit, spool.size + len(chunk), resp)
            spool.write(chunk)
        # A decoder may swallow bytes without a chunk to show for them (padding after the last
        # gzip member): the wire count is checked once more at the end.
        _check(url, limit, spool.size, resp)
        return spool.getvalue(), wire_size(resp)


def _check(url: str, limit: int, decoded: int, resp: requests.Response) -> None:
    wire = wire_size(resp) or 0
    if decoded > limit or wire > limit:
        raise ResponseTooLarge(url, limit, max(decoded, wire))


def wire_size(resp: requests.Response) -> int | None:
    """Bytes read from the socket before content decoding (``None`` if urllib3 cannot say)."""
    tell = getattr(resp.raw, "tell", None)
    if tell is None:
        return None
    try:
        return int(tell())
    except (OSError, ValueError, TypeError):
        return None


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pread_all(fd: int, size: int) -> bytes:
    """``size`` bytes from the start of ``fd``: one allocation unless the kernel reads short."""
    data = os.pread(fd, size, 0)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, got)
        if not more:
            raise OSError(f"spool file ended at byte {got} of {size}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)
