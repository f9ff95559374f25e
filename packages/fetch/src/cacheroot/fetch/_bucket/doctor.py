"""``cacheroot doctor``'s ``shared:`` line for a bucket: does it answer, may we list, read, write?

The doctor lives in ``cacheroot-envs``, which loads no object-store client; it finds this
function through the entry point ``cacheroot.doctor`` of ``cacheroot-fetch``. Each question is
asked with one small request (a listing of at most one record, a read of an object that is not
there, the write probe of :mod:`.probe` in trust tier ``rw``), and answered in words that name
no credential (:mod:`.failures`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from cacheroot.envs import CACHEROOT_SHARED_MODE
from cacheroot.envs._shared_tier import RW

from .failures import denied, describe
from .location import INSTALL, ClientMissingError, open_clients, parse
from .names import PROBES, RECORDS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from obstore.store import ObjectStore

__all__ = ["shared_line"]


def _ask(store: ObjectStore, url: str, mode: str) -> tuple[list[str], str]:
    """What the bucket lets this process do, and the problem that stops it (``""``: none)."""
    import obstore  # noqa: PLC0415 - the client, present: the clients opened

    from .probe import CONDITIONAL, DENIED, probe  # noqa: PLC0415 - needs the client

    said: list[str] = []
    try:
        next(iter(obstore.list(store, prefix=RECORDS, chunk_size=1)), None)
        said.append("list ok")
    except Exception as exc:  # noqa: BLE001 - every answer is reported
        if not denied(exc):
            return said, describe(exc, url).cause
        said.append("list denied")
    try:
        obstore.head(store, f"{PROBES}/doctor-absent")
        said.append("read ok")
    except FileNotFoundError:
        said.append("read ok")
    except Exception as exc:  # noqa: BLE001 - every answer is reported
        if not denied(exc):
            return said, describe(exc, url).cause
        return [*said, "read denied"], f"the bucket at {url} denies reads: grant s3:GetObject"
    if mode != RW:
        said.append(f"read only: {CACHEROOT_SHARED_MODE}={mode}; never written")
        return said, ""
    try:
        verdict = probe(store)
    except Exception as exc:  # noqa: BLE001 - every answer is reported
        return said, describe(exc, url).cause
    if verdict == DENIED:
        said.append("write denied: read through only")
    elif verdict == CONDITIONAL:
        said.append("write ok, conditional writes honoured")
    else:
        said.append("write ok, conditional writes ignored: no leases, hosts may download twice")
    return said, ""


def shared_line(
    url: str, mode: str, timeout: float = 10.0, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The doctor's ``shared:`` line for the bucket ``url`` used in trust tier ``mode``, and
    its problem (``""``: none). Asked on a helper thread, answered within ``timeout``."""
    env = os.environ if environ is None else environ
    try:
        location = parse(url)
    except ValueError as exc:
        return "shared: (invalid bucket URL)", str(exc)
    try:
        clients = open_clients(location, env)
    except ClientMissingError:
        return (
            f"shared: {location.url} (bucket; not usable)",
            f"{location.url} needs the object-store client obstore: {INSTALL}",
        )
    except Exception as exc:  # noqa: BLE001 - the client refused its configuration
        return f"shared: {location.url} (bucket; not usable)", describe(exc, location.url).cause
    found: list[tuple[list[str], str]] = []
    worker = threading.Thread(
        target=lambda: found.append(_ask(clients.control, location.url, mode)), daemon=True
    )
    worker.start()
    worker.join(timeout)
    if not found:
        problem = f"the bucket {location.url} did not answer within {timeout:.0f} s"
        return f"shared: {location.url} (bucket; not reachable)", problem
    said, problem = found[0]
    state = ", ".join(said) if said else "not reachable"
    return f"shared: {location.url} (bucket: {state})", problem
