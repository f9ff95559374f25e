"""Answers a warm leaves in a hub store, so a later run asks the upstream nothing.

``cacheroot warm`` fills the clients' caches with a snapshot's files, but a suite run through a
hub cache also calls the metadata API (``model_info``, ``list_repo_files``, ``file_exists``),
and a store-only hub answers those from its store alone. A warm that asks those calls through a
hub cache leaves their answers there (:mod:`cacheroot.fetch._warm.hubanswers` asks them with
the client itself); this module gives it the hub to ask, and writes what the upstream cannot be
asked for.

- :func:`warm_hub`: the hub cache the warm asks through. The one this process's ``HF_ENDPOINT``
  already points at (a ``--cacheroot-hub`` session's, which ``CACHEROOT_HUB_OWNER`` names), or
  one started for the warm on the volume's store (``$CACHEROOT/hubcache``) and stopped after.
  The hub's upstream is the one a ``--cacheroot-hub`` run would start with, since the upstream
  is part of every answer's key (:func:`.store.key_of`).
- :func:`pin_branch`: a warm pins a commit, and names the branch it came from. The upstream's
  branch may have moved since; asked now, it would name another commit, whose files the warm
  did not fetch, and every request for the branch would follow it (:mod:`.branches`). So the
  branch's revision answer is written from the commit's, as the warm writes the client's
  ``refs/<branch>``; for the default branch, the repository's own answer too (``model_info``
  without a revision). They are kept like any branch answer: fresh for the TTL, then asked again
  by an online hub, and served as they are by a store-only one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import quote

from cacheroot.envs import CACHEROOT_HUB_OWNER, HF_ENDPOINT

from . import branches, routes
from .cli import DEFAULT_UPSTREAM, default_store, modelscope_upstream
from .service import HubProcess
from .store import PUBLIC, Store, answer_key, credential, key_of

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["DEFAULT_BRANCH", "WarmHub", "pin_branch", "warm_hub"]

#: The branch a repository's own answer (no revision) describes: huggingface_hub's default.
DEFAULT_BRANCH = "main"


@dataclass(frozen=True)
class WarmHub:
    """A hub cache a warm asks through: its URL, its upstream and its store's directory."""

    url: str
    upstream: str
    store: str


def _running(environ: Mapping[str, str]) -> WarmHub | None:
    """The hub cache ``HF_ENDPOINT`` points at, when a ``--cacheroot-hub`` session runs one."""
    _owner, _, url = environ.get(CACHEROOT_HUB_OWNER, "").partition(" ")
    if not url or environ.get(HF_ENDPOINT, "").rstrip("/") != url.rstrip("/"):
        return None
    try:
        with urllib.request.urlopen(url + "/.cacheroot/hub", timeout=10) as resp:  # noqa: S310 - the session's own hub
            stats = json.load(resp)
        return WarmHub(url, str(stats["upstream"]), str(stats["store"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def warm_hub(environ: Mapping[str, str] | None = None) -> Iterator[WarmHub]:
    """The hub cache to ask through (see the module docstring), stopped after if started here.

    Raises :class:`.service.HubStartError` (or :class:`OSError`) when none can be started, and
    :class:`ValueError` when there is no cache root to keep a store in.
    """
    env = dict(os.environ if environ is None else environ)
    found = _running(env)
    if found is not None:
        yield found
        return
    store = default_store(env)
    if store is None:
        raise ValueError(
            "no cache root to keep the hub cache's store in; set CACHEROOT (`cacheroot doctor` "
            "explains)"
        )
    upstream = (env.get(HF_ENDPOINT, "").strip() or DEFAULT_UPSTREAM).rstrip("/")
    hub = HubProcess.start(
        upstream=upstream, store=store, modelscope=modelscope_upstream(env), env=env
    )
    try:
        yield WarmHub(hub.url, upstream, store)
    finally:
        hub.stop()


def _info_target(repo_type: str, repo_id: str, revision: str) -> str:
    """The request target of a repository's answer at ``revision`` (``""``: its own, the
    default branch's), as huggingface_hub sends it and :mod:`.branches` resolves a branch."""
    route = routes.Route(routes.META, repo_type=repo_type, repo_id=repo_id, revision=revision)
    if revision:
        return branches.revision_target(route)
    return f"/api/{repo_type}s/{quote(repo_id, safe='/')}"


def pin_branch(
    hub: WarmHub,
    *,
    repo_type: str,
    repo_id: str,
    branch: str,
    commit: str,
    authorization: str | None,
) -> list[str]:
    """Write the answers that resolve ``branch`` to ``commit`` into ``hub``'s store, from the
    commit's revision answer (asked through the hub before); the targets written.

    :class:`LookupError` when the store has no answer naming ``commit`` for it to copy.
    """
    store = Store(hub.store, answer_key=answer_key())
    cred = credential(authorization)
    source = store.load(key_of(hub.upstream, "GET", _info_target(repo_type, repo_id, commit), cred))
    try:
        sha = json.loads(source.body).get("sha") if source is not None else None
    except (ValueError, AttributeError):
        sha = None
    if source is None or source.status != 200 or sha != commit:
        raise LookupError(
            f"the hub store {hub.store} has no answer for {repo_id}@{commit} to resolve "
            f"{branch!r} with"
        )
    targets = [_info_target(repo_type, repo_id, branch)]
    if branch == DEFAULT_BRANCH:
        targets.append(_info_target(repo_type, repo_id, ""))
    for target in targets:
        kept = replace(source, stored=time.time())
        # An answer asked with a credential stays its holder's (0600), as the hub keeps it.
        store.save(key_of(hub.upstream, "GET", target, cred), kept, private=cred != PUBLIC)
    return targets
