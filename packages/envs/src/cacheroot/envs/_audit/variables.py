"""What a variable's name and default say, and what a fixed place's path says: a place, a
cache, a value given to a download (a URL, a version, a timeout), a switch, configuration."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .names import BASES, CONFIG_SUFFIXES, LAYOUT_NAMES

if TYPE_CHECKING:
    from .values import Rendered


#: Last words of a variable that names a location.
_PATH_WORDS = frozenset(
    {"DIR", "DIRS", "DIRECTORY", "PATH", "ROOT", "HOME", "CACHE", "BASE", "FOLDER", "LOCATION"}
)
#: Words that make a location variable a cache (rather than, say, an install prefix).
_CACHE_WORDS = frozenset({"CACHE", "CACHES", "CACHEDIR", "JIT", "AOT", "TMP", "TEMP", "WORKSPACE"})
#: Words of settings that are not caches: configuration is deliberately left where it is.
_NOT_CACHE_WORDS = frozenset(
    {
        "CONFIG",
        "CONF",
        "CFG",
        "NO",
        "DISABLE",
        "DISABLED",
        "ENABLE",
        "ENABLED",
        "USE",
        "SKIP",
        "CLEAR",
        "EMPTY",
        "MEMORY",
        "REMOTE",
        "MOUNT",  # a mount point: provided by the platform and read, not decided here
    }
)
#: Names of credential files (requests' ``NETRC_FILES``): not caches, however they are built.
_CREDENTIAL_NAMES = frozenset({"netrc", ".netrc", "_netrc"})
#: Fixed places under the home directory that are not caches: configuration, data, shell
#: start-up files, and other platforms' folders (CI runs Linux).
_NOT_CACHE_PLACES = (
    "~/.config",
    "~/.local/",
    "~/.ssh",
    "~/.bashrc",
    "~/.zshrc",
    "~/.profile",
    "~/.bash_profile",
    "~/Library/",
    "~/AppData/",
    "~/Desktop",
    "~/Documents",
    "~/Downloads",
    "~/Pictures",
    "~/Movies",
    "~/Music",
    "~/Videos",
    "~/.pypirc",
    "~/.netrc",
    "~/.bash_completion",
)
#: Words of a variable that holds a setting, never a place, whatever call it is given to.
SETTING_WORDS = frozenset(
    {"TIMEOUT", "RETRIES", "RETRY", "SIZE", "LIMIT", "TTL", "MAX", "MIN", "SECONDS", "LEVEL"}
    | {"VERBOSITY", "URL", "ENDPOINT", "TOKEN", "KEY", "HOST", "PORT", "USER", "PASSWORD"}
)
#: Words of a variable that holds a value other than a place (a version, an address, a name):
#: it is no place unless its name ends in a place's word or its default is a path.
_VALUE_WORDS = frozenset(
    {"VERSION", "URL", "URI", "NAME", "ENDPOINT", "HOST", "PORT", "BRANCH", "REVISION", "TAG"}
)
#: A URL of another host (``file://`` names a place).
_REMOTE_URL = re.compile(r"(?!file://)[A-Za-z][A-Za-z0-9+.-]*://")
#: A version (PEP 440-ish: ``1.5.0``, ``v2.1``, ``1.0rc1``, ``2.0.post1``).
_VERSION = re.compile(r"[vV]?[0-9]+(?:\.[0-9]+)+(?:[-._+]?[A-Za-z]+[0-9]*)*")
#: XDG variables that are not the cache home.
OTHER_XDG = frozenset({"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"})
#: Defaults that make a ``X_CACHE`` variable a switch or a size, not a place.
_SWITCH_VALUES = re.compile(r"-?[0-9.]+|true|false|yes|no|on|off|none", re.IGNORECASE)
_NESTED_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-(.*)\}")


def place_like(name: str, default: Rendered) -> bool:
    """Whether a variable may name a place: ``X_DIR``, ``X_PATH``, ``X_HOME``, ``X_ROOT``,
    ``X_CACHE``, ... that is not configuration (``X_CONFIG_DIR``), a switch
    (``X_CACHE_ENABLED``, a default of ``0``) nor a base the audit renders (``HOME``)."""
    if name in LAYOUT_NAMES:
        return True  # the layout decided about it (VLLM_CONFIG_ROOT: never set, on purpose)
    if name in BASES or name in OTHER_XDG or switch(default.text):
        return False
    if holds_a_value(name, default):
        return False  # a URL or a version (``X_MIRROR_PATH=https://...``)
    words = name.split("_")
    return words[-1] in _PATH_WORDS and _NOT_CACHE_WORDS.isdisjoint(words)


def interesting(name: str, default: Rendered) -> bool:
    """Whether a place-like variable (:func:`place_like`) is a cache by itself: by its name
    (``X_CACHE_DIR``, ``X_JIT_DIR``, ``X_TMP_DIR``, ``X_WORKSPACE_BASE``), by its default (under
    the home or temporary directory: ``CUDA_HOME=/usr/local/cuda`` is not), or by the layout
    knowing it."""
    if name in LAYOUT_NAMES:
        return True
    words = name.split("_")
    if _CACHE_WORDS.intersection(words) or "CACHE" in words[-1]:
        return True
    if default.root == "var" and default.variables:
        # ``X_HOME`` whose default is a cache variable (``${X_HOME:-$HF_HOME}``).
        first = default.variables[0]
        return first in LAYOUT_NAMES or "CACHE" in first
    return default.root in ("home", "tmp", "xdg")


def holds_a_value(name: str, default: Rendered) -> bool:
    """Whether a variable holds a value that is no path, whatever it is given to: its default
    is a URL of a host or a version (``1.5.0``), or its name says version, URL, name, host,
    port, branch, ... (``STANZA_RESOURCES_VERSION``, ``X_MODEL_NAME``) and its default is no
    path. A name that ends in a place's word (``X_VERSION_DIR``) is a place all the same."""
    if name in LAYOUT_NAMES:
        return False
    text = default.text
    if _REMOTE_URL.match(text) or _VERSION.fullmatch(text):
        return True
    words = name.split("_")
    if words[-1] in _PATH_WORDS or _VALUE_WORDS.isdisjoint(words):
        return False
    return not _path_like(default)


def _path_like(default: Rendered) -> bool:
    """Whether a default may be a path: under a base, absolute, relative with a ``/`` or a
    leading dot, or another variable's value that is no value of the same kind."""
    text = default.text
    if default.root == "var":
        first = default.variables[0] if default.variables else ""
        return _VALUE_WORDS.isdisjoint(first.split("_"))
    return bool(default.root) or "/" in text or text.startswith(".")


def switch(text: str) -> bool:
    """Whether a default is a flag or a number (``${A:-${B:-0}}`` included), not a place."""
    while (match := _NESTED_DEFAULT.fullmatch(text)) is not None:
        text = match[1]
    return _SWITCH_VALUES.fullmatch(text) is not None


def not_a_cache(text: str) -> bool:
    """Whether a fixed place is configuration, data, a credential file or another platform's
    folder: a known place, a ``netrc`` file anywhere, or a configuration file (``.ini``,
    ``.cfg``, ``.conf``, ``.toml``, ``.yaml``, ``.json``) under the home directory whose path
    does not say cache (``~/pip/pip.ini`` is configuration, ``~/.cache/x/index.json`` is not;
    one the package writes is a place all the same, :func:`written_file`)."""
    if text.startswith(_NOT_CACHE_PLACES):
        return True
    parts = text.rstrip("/").split("/")
    if _CREDENTIAL_NAMES.intersection(parts):
        return True
    return (
        text.startswith("~/")
        and parts[-1].lower().endswith(CONFIG_SUFFIXES)
        and "cache" not in text.lower()
    )


def written_file(text: str) -> bool:
    """Whether a fixed place is a file under the home directory that :func:`not_a_cache` leaves
    out only for its configuration file's ending (``~/.x/tokens.json``): a place once the
    package writes it (tokens kept from one run to the next)."""
    if not text.startswith("~/") or text.startswith(_NOT_CACHE_PLACES):
        return False
    parts = text.rstrip("/").split("/")
    return _CREDENTIAL_NAMES.isdisjoint(parts) and parts[-1].lower().endswith(CONFIG_SUFFIXES)
