"""The cache key of a warmed volume: one name for what ``cacheroot warm MANIFEST...`` puts in it.

CI caches (GitHub's ``actions/cache``, Buildkite's cache plugin) save a directory under a key and
restore it when a later job asks for the same key. For the cache volume that key must change
exactly when the volume's warmed contents would: when an entry of a manifest changes (an asset's
URL, sha256, namespace, filename or unpacking; a model's hub, repo, revision, patterns or type),
when the places the layout gives the warmed caches move, when the tag (the GPU fleet) differs, or
when the key's own format does. It must not change when a manifest is only reformatted
(comments, whitespace, the order of keys or of entries), or split across several files: the key
is a digest of the parsed, normalised entries (:meth:`Asset.as_dict`, :meth:`Model.as_dict`),
sorted and without repeats, never of the files' bytes. A manifest's ``hub_cache = true`` marks
its Hugging Face models (their warm fills the hub store too); without it the key is as before.

A URL's credentials are left out (:func:`redact_url`): they do not change what is downloaded
(its sha256 pins that), and a digest of a secret is not printed.

A model pinned by a branch name instead of a commit keeps its key when the branch moves; pin a
commit so that the key follows the files (``cacheroot warm`` warns about such entries).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from cacheroot.envs import (
    CACHEROOT,
    CACHEROOT_TAG,
    HF_HOME,
    HF_HUB_CACHE,
    MODELSCOPE_CACHE,
    TAGS,
    VLLM_TEST_CACHE,
    resolve,
)

from .._redact import redact_url
from .manifest import Manifest, load_manifest

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["KEY_VERSION", "cache_key", "environ_tag"]

#: The key's format, and the on-disk format of what it names: bump it when either changes, so
#: that no job restores a volume written in the old format (``restore-keys`` prefixes hold it).
KEY_VERSION = 1
#: The caches ``warm`` fills (the hub cache lies under HF_HOME unless the layout names it): their
#: places under the root are part of the key.
WARMED = (VLLM_TEST_CACHE, HF_HOME, HF_HUB_CACHE, MODELSCOPE_CACHE)
#: A stand-in root: the key holds places relative to the root, never a machine's path.
_ROOT = "/cacheroot"
#: Hex digits of the digest in the key (128 bits).
_DIGEST_CHARS = 32


def _layout(tag: str | None) -> dict[str, str]:
    """Where each warmed cache lies relative to the root, for ``tag``."""
    applied = resolve({CACHEROOT: _ROOT}, tag).applied()
    return {name: os.path.relpath(applied[name], _ROOT) for name in WARMED if name in applied}


def _entries(manifests: Iterable[Manifest]) -> list[dict[str, Any]]:
    """Every entry once, normalised and in a fixed order, whatever the files' order and form."""
    found: dict[str, dict[str, Any]] = {}
    for manifest in manifests:
        for asset in manifest.assets:
            fields = {"kind": "asset", **asset.as_dict()}
            fields["url"] = redact_url(fields["url"])
            found[json.dumps(fields, sort_keys=True)] = fields
        for model in manifest.models:
            fields = {"kind": "model", **model.as_dict()}
            if manifest.hub_cache and model.hub == "hf":
                # The volume holds the hub store's answers for it too (``hub_cache = true``).
                fields["hub_cache"] = True
            found[json.dumps(fields, sort_keys=True)] = fields
    return [found[text] for text in sorted(found)]


def environ_tag() -> str | None:
    """The tag named by ``CACHEROOT_TAG`` now (blank counts as unset), as given: unchecked."""
    value = os.environ.get(CACHEROOT_TAG, "").strip().lower()
    return value or None


def cache_key(
    manifests: Iterable[Manifest | str | os.PathLike[str]], *, tag: str | None = None
) -> str:
    """The key under which a CI cache saves the volume that warming ``manifests`` fills.

    ``cacheroot-v<KEY_VERSION>-<tag or "any">-<32 hex digits>``: the prefix up to the digest
    suits ``restore-keys`` (an older volume of the same fleet and format still saves
    downloads). Raises :class:`~cacheroot.fetch.ManifestError` for a manifest that cannot be
    read, and ``ValueError`` for an unknown tag.
    """
    if tag is not None and tag not in TAGS:
        raise ValueError(
            f"unknown tag {tag!r} ({CACHEROOT_TAG}): expected one of {', '.join(TAGS)}, or "
            "leave it unset"
        )
    parsed = [m if isinstance(m, Manifest) else load_manifest(m) for m in manifests]
    document = {
        "key_version": KEY_VERSION,
        "tag": tag,
        "layout": _layout(tag),
        "entries": _entries(parsed),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()[:_DIGEST_CHARS]
    return f"cacheroot-v{KEY_VERSION}-{tag or 'any'}-{digest}"
