"""What a client is told when the hub cache has no answer kept and the upstream gives none.

Written for huggingface_hub's retries (``utils/_http.py``, 2.4): the metadata request of
``hf_hub_download`` is tried once, then again up to five times on 408, 429, 500, 502, 503 and
504, sleeping 1, 2, 4, 8 and 8 s, or the ``Retry-After`` (a spent ``RateLimit``) plus 1 s. So a
cache that answers 503 with ``Retry-After`` set to the rest of a 30 s cool-off kept one
``hf_hub_download`` about 95 s on an answer known at once.

A client is therefore told to try again (the upstream's own status, with a ``Retry-After`` of
at most :data:`SHORT_WAIT` seconds) only where trying again soon reaches the upstream: its host
was not left alone (or only for a moment), and the failure was quick. Everything else (the
breaker open, a longer wait asked for, a request that already waited out the deadline) is
answered :data:`GIVE_UP` at once, a status no client retries. The reason names the hub cache,
what was asked and how to warm it; it travels in the body (``{"error": ...}``) and in
``X-Error-Message``, which huggingface_hub puts in its exception's message (a ``HEAD``, such
as ``hf_hub_download``'s, has no body).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from .._errors import WARM_HINT
from .store import Answer

if TYPE_CHECKING:
    from .routes import Route

__all__ = ["GIVE_UP", "SHORT_WAIT", "store_only", "unanswered"]

#: 424 Failed Dependency: the request failed because the one it depended on (the upstream's)
#: did. huggingface_hub (and ``requests``' and urllib3's retries) never retry it.
GIVE_UP = 424
#: The longest ``Retry-After`` a client is sent: a retry after it still falls within
#: huggingface_hub's deadline of a few seconds per call.
SHORT_WAIT = 2.0


def _asked_for(route: Route, method: str, target: str) -> str:
    """What the request was for, in words: the repository (and revision, file), or the path."""
    if not route.repo_id:
        return f"{method} {target.split('?', 1)[0]}"
    shown = f"the {route.repo_type or 'model'} {route.repo_id}"
    if route.revision:
        shown += f" at {route.revision}"
    if route.path:
        shown += f" (file {route.path})"
    return shown


def _warm(route: Route) -> str:
    """How to have the store answer this next time, without the upstream."""
    if not route.repo_id:
        return "run the suite once while the upstream answers: the hub cache keeps what it serves"
    hub = "modelscope" if route.hub == "ms" else "hf"
    revision = route.revision or ("master" if route.hub == "ms" else "main")
    fields = f'hub = "{hub}", repo_id = "{route.repo_id}", revision = "{revision}"'
    if route.repo_type and route.repo_type != "model":
        fields += f', repo_type = "{route.repo_type}"'
    return f"add a [[model]] entry with {fields} to the test manifest and run {WARM_HINT}"


def _header_text(text: str) -> str:
    """``text`` as one line of printable ASCII, what a header value may carry."""
    flat = " ".join(text.split())
    return flat.encode("ascii", "backslashreplace").decode("ascii")


def unanswered(
    route: Route,
    method: str,
    target: str,
    *,
    upstream: str,
    why: str,
    wait: float,
    status: int | None = None,
    asked: bool = False,
    timed_out: bool = False,
) -> Answer:
    """The answer to a request the store cannot answer while the upstream fails.

    ``why``: what the upstream did, in words (``failed (HTTP 503)``); ``wait``: the seconds it
    is still left alone for (0: it would be asked now); ``status``: the upstream's own failing
    status, if it gave one; ``asked``: whether the wait is one the upstream asked for (429,
    ``Retry-After``); ``timed_out``: whether this request already waited out the deadline.
    """
    retry: int | None = None
    if timed_out or wait > SHORT_WAIT:
        code = GIVE_UP
    elif wait > 0:
        code, retry = (429 if asked else 503), max(1, math.ceil(wait))
    else:
        code = status or 502  # a refused or reset connection: the gateway got no answer
    message = (
        f"cacheroot hub cache: the upstream {upstream} {why}, and the hub cache has no answer for "
        f"{_asked_for(route, method, target)} yet. To have it answer without the upstream, "
        f"{_warm(route)} while the upstream answers"
    )
    headers = [
        ("Content-Type", "application/json"),
        ("X-Error-Message", _header_text(message)),
    ]
    if retry is not None:
        headers.append(("Retry-After", str(retry)))
    return Answer(code, tuple(headers), json.dumps({"error": message}).encode())


def store_only(route: Route, method: str, target: str, what: str = "no answer") -> Answer:
    """The answer to a request a store-only hub cannot answer: 424 (never retried; a 504 was
    retried by huggingface_hub for about 23 s), naming what is missing and how to warm it.
    ``what``: what the store lacks (``no answer``, ``no copy``)."""
    message = (
        f"cacheroot hub cache: it runs store-only (--offline) and has {what} for "
        f"{_asked_for(route, method, target)}. To have it answer, {_warm(route)} while the "
        "upstream answers"
    )
    headers = (("Content-Type", "application/json"), ("X-Error-Message", _header_text(message)))
    return Answer(GIVE_UP, headers, json.dumps({"error": message}).encode())
