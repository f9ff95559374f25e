"""Building blocks of the cache, shared by cacheroot's own distributions.

The media cache (``cacheroot-mediacache``), the pytest plugin, :mod:`cacheroot.fetch.vllm_compat`
and the project's tests build on the same pieces as :func:`cacheroot.fetch.fetch`: the
cross-process lock, partial files published atomically, directories staged and published
atomically, the ``.<name>.meta.json`` records, "last used" stamps, entry naming, URL redaction,
and the parsing of HTTP dates and ``Retry-After``.

For names on a volume other jobs write: :func:`open_regular` (``O_NOFOLLOW | O_NONBLOCK``, then
refuses anything but a regular file with :class:`NotRegularFileError`), :func:`remove_planted`
(removes a link, FIFO or device under one of cacheroot's own names), :func:`printable` (escapes
control characters in anything printed), and :class:`Secret` (a header value whose ``repr`` is
redacted).

**Stability.** This module is for cacheroot's own distributions, which are released together.
Its names may change in a minor release (with a changelog entry); code outside cacheroot
should use the top level, :mod:`cacheroot.fetch`, whose ``__all__`` follows semantic
versioning.
"""

from __future__ import annotations

from ._archive import extract_entry
from ._httpvalues import parse_http_date, retry_after
from ._lock import PathLock, holder
from ._naming import check_filename, check_namespace, entry_name, entry_path
from ._redact import Secret, forget_locals, forgets_locals, printable, redact_url
from ._store import (
    MAX_RECORD,
    SHARED_DIR,
    SHARED_FILE,
    NotRegularFileError,
    Partial,
    Staging,
    atomic_write,
    current_meta,
    fsync_dir,
    kind,
    lock_path,
    open_regular,
    open_regular_stat,
    partial_abandoned,
    partials,
    publish_dir,
    read_meta,
    remove_abandoned,
    remove_planted,
    sha256_file,
    staged_dir,
    write_meta,
)
from ._used import touch_used

__all__ = [
    "MAX_RECORD",
    "SHARED_DIR",
    "SHARED_FILE",
    "NotRegularFileError",
    "Partial",
    "PathLock",
    "Secret",
    "Staging",
    "atomic_write",
    "check_filename",
    "check_namespace",
    "current_meta",
    "entry_name",
    "entry_path",
    "extract_entry",
    "forget_locals",
    "forgets_locals",
    "fsync_dir",
    "holder",
    "kind",
    "lock_path",
    "open_regular",
    "open_regular_stat",
    "parse_http_date",
    "partial_abandoned",
    "partials",
    "printable",
    "publish_dir",
    "read_meta",
    "redact_url",
    "remove_abandoned",
    "remove_planted",
    "retry_after",
    "sha256_file",
    "staged_dir",
    "touch_used",
    "write_meta",
]
