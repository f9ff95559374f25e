"""Who may be sent the bytes of a file that first came with a credential.

The store keeps a file once, under its digest, whichever repository named it. A digest is not
a permission: a public repository whose metadata names the sha256 of a gated file would
otherwise get any anonymous client that gated file's bytes from the store. So the bytes of a
file first downloaded with a credential (:meth:`Grants.mark`) are sent for a repository's URL,
with a credential (or none), only once the upstream itself served that URL to that credential
(:meth:`Grants.grant`): the download that stored them grants its own URL and credential; any
other URL and credential is granted by asking the upstream for the file's first byte
(``Range: bytes=0-0``; a redirect to its CDN counts), and refused with the upstream's own
answer (401, 403, 404) when it says no. While the upstream cannot be asked, an ungranted
request is refused (424), never served on the digest's word.

Marks and grants are small files under ``grants/`` in the store, written like its answers
(through held directory descriptors, 0600); ``hub prune`` leaves them. A writer of the store
can remove a mark (and so serve a file it could plant anyway); it cannot learn a credential
from a grant, which names only a hash of it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import _held, _store
from .store import PUBLIC, key_of

if TYPE_CHECKING:
    from .routes import Route
    from .store import Store

__all__ = ["DIRECTORY", "Grants"]

#: The directory of the marks and grants, under the store's root.
DIRECTORY = "grants"


class Grants:
    """The marks and grants of one store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.root = os.path.join(store.root, DIRECTORY)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def _there(self, key: str) -> bool:
        """Whether the mark or grant ``key`` is a regular file, reached from the store's root
        without following a link (a planted link or FIFO is no grant)."""
        try:
            dfd = _held.tree(self.store.root, os.path.join(DIRECTORY, key[:2]))
        except OSError:
            return False
        try:
            os.close(_store.open_regular(key, dir_fd=dfd))
        except OSError:
            return False
        finally:
            os.close(dfd)
        return True

    @staticmethod
    def _mark_key(etag: str) -> str:
        return key_of("", "CREDENTIALED", etag, PUBLIC)

    @staticmethod
    def _grant_key(route: Route, etag: str, cred: str) -> str:
        where = f"{route.hub}:{route.repo_type}:{route.repo_id}:{route.path}:{etag}"
        return key_of("", "GRANT", where, cred)

    def marked(self, etag: str) -> bool:
        """Whether the file named ``etag`` first came with a credential. Blocking."""
        return self._there(self._mark_key(etag))

    def mark(self, etag: str) -> None:
        """The file named ``etag`` came with a credential. Blocking."""
        self.store.publish(self._path(self._mark_key(etag)), b"", private=True)

    def granted(self, route: Route, etag: str, cred: str) -> bool:
        """Whether the upstream served ``route``'s file (named ``etag``) to ``cred``."""
        return self._there(self._grant_key(route, etag, cred))

    def grant(self, route: Route, etag: str, cred: str) -> None:
        """The upstream served ``route``'s file (named ``etag``) to ``cred``. Blocking."""
        self.store.publish(self._path(self._grant_key(route, etag, cred)), b"", private=True)
