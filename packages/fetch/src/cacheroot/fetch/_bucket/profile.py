"""The AWS tools' named profiles, which the object-store client does not read.

Where the environment names a profile (``AWS_DEFAULT_PROFILE`` or ``AWS_PROFILE``, botocore's
order) and no ``AWS_ACCESS_KEY_ID`` (keys in the environment win), the profile is looked up in
the shared credentials file and the config file (``AWS_SHARED_CREDENTIALS_FILE``,
``AWS_CONFIG_FILE``; ``~/.aws/credentials``, ``~/.aws/config``), the first's ``[NAME]`` over the
second's ``[profile NAME]``. Its credentials come from boto3 where it is installed (obstore's
:class:`~obstore.auth.boto3.Boto3CredentialProvider`: static keys, roles, SSO, a
``credential_process``, refreshed as they expire), or else from its static keys; a profile whose
credentials only the SDK can resolve, or that neither file holds, is refused before any request
with a message that names the profile, the files and what to do, never a value. Its ``region``
and ``endpoint_url`` apply where the environment names none. A profile that names no credentials
leaves them to the client's own chain (web identity, container, instance).
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from _cacheroot_layout import (
    AWS_ACCESS_KEY_ID,
    AWS_CONFIG_FILE,
    AWS_DEFAULT_PROFILE,
    AWS_DEFAULT_REGION,
    AWS_ENDPOINT,
    AWS_ENDPOINT_URL,
    AWS_ENDPOINT_URL_S3,
    AWS_PROFILE,
    AWS_REGION,
    AWS_SHARED_CREDENTIALS_FILE,
)

from .failures import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .location import Location

__all__ = ["ENDPOINTS", "Profile", "ProfileError", "find_profile", "first_set", "profile_settings"]

#: Where the AWS tools read an S3 endpoint from, most specific first.
ENDPOINTS = (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_ENDPOINT)
#: Where they read the profile's name from, in botocore's order, and the region.
_PROFILES = (AWS_DEFAULT_PROFILE, AWS_PROFILE)
_REGIONS = (AWS_REGION, AWS_DEFAULT_REGION)
#: The profile files when the environment names none.
CREDENTIALS_FILE = "~/.aws/credentials"
CONFIG_FILE = "~/.aws/config"
#: A profile's static keys.
_KEYS = ("aws_access_key_id", "aws_secret_access_key")
#: A profile's settings whose credentials only the AWS SDK resolves (a role, a process, a web
#: identity token, single sign-on: every ``sso_*`` setting too).
_RESOLVED = (
    "role_arn",
    "credential_source",
    "credential_process",
    "web_identity_token_file",
    "login_session",
)
#: What a profile that only the SDK resolves asks for.
INSTALL_BOTO3 = "pip install boto3"


class ProfileError(ConfigurationError):
    """The AWS profile the environment names cannot give this process credentials (said as
    it is: the message names the profile, the files and what to do, never a value)."""


def first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str:
    """The first of ``names`` that ``environ`` sets to more than blanks; ``""`` if none."""
    return next((k for k in names if environ.get(k, "").strip()), "")


@dataclass(frozen=True)
class Profile:
    """The AWS profile a process uses: :attr:`variable`'s value :attr:`name`, its settings
    merged from the two files (never shown: keys sit there) and the file each came from."""

    variable: str
    name: str
    credentials_file: str
    config_file: str
    settings: dict[str, str] = field(repr=False)
    sources: dict[str, str] = field(repr=False)

    @property
    def named(self) -> str:
        return f"{self.variable}={self.name}"

    def found(self, keys: list[str]) -> str:
        """``keys`` and the files they are in, as a message names them (names, no value)."""
        files = sorted({self.sources[k] for k in keys})
        return f"{', '.join(keys)} (in {' and '.join(files)})"


def _home(path: str, environ: Mapping[str, str]) -> str:
    """``path`` with ``~`` read against ``environ``'s ``HOME`` (the process's where unset)."""
    home = environ.get("HOME", "").strip()
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def _sections(path: str, location: Location) -> dict[str, dict[str, str]] | None:
    """The sections of the INI file ``path``; ``None`` where it cannot be opened (absent or
    unreadable: skipped, as botocore does). :class:`ProfileError` for a file that cannot be
    parsed, naming its error's kind, never its lines (a key may sit there)."""
    parser = configparser.RawConfigParser()
    try:
        if not parser.read(path, encoding="utf-8"):
            return None
    except (UnicodeError, configparser.Error) as exc:
        raise ProfileError(
            f"the bucket at {location.url} cannot use the AWS profile files: {path} cannot be "
            f"read as an INI file ({type(exc).__name__})"
        ) from None
    return {name: dict(parser.items(name)) for name in parser.sections()}


def _config_section(section: str, name: str) -> bool:
    """Whether the config file's ``[section]`` is profile ``name``'s (``[profile NAME]``, and
    ``[default]`` for the default one)."""
    words = section.split(None, 1)
    return (len(words) == 2 and words[0] == "profile" and words[1].strip() == name) or (
        section == name == "default"
    )


def find_profile(location: Location, environ: Mapping[str, str]) -> Profile | None:
    """The profile the environment names for ``location``; ``None`` where it names none, sets
    ``AWS_ACCESS_KEY_ID`` (explicit keys win) or the bucket is not S3. :class:`ProfileError`
    where neither file holds it (a file that cannot be opened holds none), or one cannot be
    parsed."""
    variable = first_set(environ, _PROFILES)
    if (
        location.scheme not in ("s3", "s3a")
        or not variable
        or first_set(environ, (AWS_ACCESS_KEY_ID,))
    ):
        return None
    name = environ[variable].strip()
    credentials = _home(
        environ.get(AWS_SHARED_CREDENTIALS_FILE, "").strip() or CREDENTIALS_FILE, environ
    )
    config = _home(environ.get(AWS_CONFIG_FILE, "").strip() or CONFIG_FILE, environ)
    settings: dict[str, str] = {}
    sources: dict[str, str] = {}
    held = False
    read: list[str] = []
    # The config file first: the credentials file's values win (botocore merges them so).
    for path, config_file in ((config, True), (credentials, False)):
        sections = _sections(path, location)
        missing = "unreadable" if os.path.exists(path) else "absent"
        read.append(path if sections is not None else f"{path} ({missing})")
        for section, values in (sections or {}).items():
            if _config_section(section, name) if config_file else section == name:
                held = True
                settings.update(values)
                sources.update(dict.fromkeys(values, path))
    if not held:
        section = name if name == "default" else f"profile {name}"
        raise ProfileError(
            f"the bucket at {location.url} cannot use {variable}={name}: no such profile in "
            f"{read[1]} ([{name}]) or {read[0]} ([{section}]): add it, point "
            f"{AWS_SHARED_CREDENTIALS_FILE} or {AWS_CONFIG_FILE} at the files that hold it, "
            f"or unset {variable}"
        )
    return Profile(variable, name, credentials, config, settings, sources)


def _credential_settings(profile: Profile) -> list[str]:
    """The profile's settings that make credentials, in the order the files name them."""
    return [
        k
        for k in profile.settings
        if k in _KEYS or k == "aws_session_token" or k in _RESOLVED or k.startswith("sso_")
    ]


def _boto3_provider(profile: Profile, url: str) -> Any | None:
    """obstore's boto3 credential provider over ``profile`` (the files this module read),
    asked once here so that a profile that gives nothing is said now, in words that name it
    (a role, SSO and a process are asked lazily otherwise, and would fail a request later);
    ``None`` without boto3. :class:`ProfileError` where boto3 gets no credentials from it."""
    try:
        import boto3  # type: ignore[import-untyped]  # noqa: PLC0415 - only a profile loads it
        import botocore.session  # type: ignore[import-untyped]  # noqa: PLC0415
        from obstore.auth.boto3 import Boto3CredentialProvider  # noqa: PLC0415
    except ImportError:
        return None
    core = botocore.session.Session()
    core.set_config_variable("credentials_file", profile.credentials_file)
    core.set_config_variable("config_file", profile.config_file)
    try:
        provider = Boto3CredentialProvider(
            boto3.Session(botocore_session=core, profile_name=profile.name)
        )
        provider()
    except Exception as exc:  # noqa: BLE001 - said in fixed words: its text may hold a value
        raise ProfileError(
            f"the bucket at {url} cannot use {profile.named}: boto3 got no credentials from it "
            f"({type(exc).__name__}); check it with: aws sts get-caller-identity --profile "
            f"{profile.name} (after aws sso login --profile {profile.name} for SSO)"
        ) from None
    # The provider's region (boto3's) would override AWS_REGION: the region is chosen here.
    provider.config = {}
    return provider


def profile_settings(
    location: Location, environ: Mapping[str, str]
) -> tuple[dict[str, Any], Any | None]:
    """``(config, credential provider)`` for the client from the profile the environment
    names (see the module docstring); ``({}, None)`` where none applies. The config holds
    secrets: never show it."""
    profile = find_profile(location, environ)
    if profile is None:
        return {}, None
    settings = profile.settings
    config: dict[str, Any] = {}
    region = settings.get("region", "").strip()
    if region and not first_set(environ, _REGIONS):
        config["region"] = region
    endpoint = settings.get("endpoint_url", "").strip()
    ignored = settings.get("ignore_configured_endpoint_urls", "").strip().lower() == "true"
    if endpoint and not ignored and not first_set(environ, ENDPOINTS):
        config["endpoint"] = endpoint
    made = _credential_settings(profile)
    if not made:
        return config, None  # no credentials named: the client's own chain finds them
    provider = _boto3_provider(profile, location.url)
    if provider is not None:
        return config, provider
    resolved = [k for k in made if k not in _KEYS and k != "aws_session_token"]
    keys = [k for k in _KEYS if settings.get(k, "").strip()]
    what = (
        f"{INSTALL_BOTO3}, or export the profile's keys: eval \"$(aws configure "
        f'export-credentials --profile {profile.name} --format env)"'
    )
    if resolved:
        raise ProfileError(
            f"the bucket at {location.url} cannot use {profile.named}: its credentials come "
            f"from {profile.found(resolved)}, which only boto3 resolves; {what}"
        )
    if len(keys) < len(_KEYS):
        missing = next(k for k in _KEYS if k not in keys)
        raise ProfileError(
            f"the bucket at {location.url} cannot use {profile.named}: it names "
            f"{profile.found(made)} but no {missing}; add it, or unset {profile.variable}"
        )
    config["access_key_id"] = settings["aws_access_key_id"].strip()
    config["secret_access_key"] = settings["aws_secret_access_key"].strip()
    token = settings.get("aws_session_token", "").strip()
    if token:
        config["session_token"] = token
    return config, None
