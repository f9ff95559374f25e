"""How one hub cache behaves: ``cacheroot hub serve``'s flags, in one object.

Its own module so that each part of the server (:mod:`.metacache`, :mod:`.files`,
:mod:`.passthrough`) can take it without importing the server that composes them. The parts
share one instance: ``POST /.cacheroot/hub/offline`` switches ``offline`` for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Settings"]


@dataclass
class Settings:
    """How one hub cache behaves (``cacheroot hub serve``'s flags)."""

    upstream: str
    store: str
    #: ModelScope's API (``/api/v1/...``) goes here; ``""``: to ``upstream`` as well.
    modelscope_upstream: str = ""
    ttl: float = 300.0
    negative_ttl: float = 60.0
    deadline: float = 5.0
    cooloff: float = 30.0
    offline: bool = False
    #: Hosts a file's redirect may go to at any address (see :mod:`.redirects`).
    redirect_hosts: tuple[str, ...] = ()
    #: The group that may read what came with a credential (0640); ``""``: none (0600).
    private_group: str = ""
