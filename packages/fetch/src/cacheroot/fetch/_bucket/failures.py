"""What a failed request to the bucket says, in words that repeat no secret.

The client's own messages carry the request URL, the server's whole answer and a debug dump;
a server may echo the access key id, a signature or the string it signed. None of that is
shown: a failure is reduced to its kind (the client's exception class, the S3 error code, the
HTTP status, a connect or timeout error) and said in fixed words with what to do.

Some failures say the bucket cannot serve this process at all (nothing listens at the endpoint,
the bucket does not exist, the credentials are refused): the tier is then dropped for the rest
of the process after one note, so that no later fetch waits on it again. A server that asks to
slow down (503 SlowDown) or does not answer in time is left alone for a while: the entries of
that while go to the origin without asking it. Others concern one request: that entry goes to
the origin, and the next one tries the bucket again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cacheroot.envs import CACHEROOT_SHARED

__all__ = ["ConfigurationError", "Failure", "denied", "describe"]

_CODE = re.compile(r"<Code>([A-Za-z0-9]{1,64})</Code>")
_STATUS = re.compile(r"status code: (\d{3})|status: (\d{3})")
#: S3 error codes that mean the credentials themselves are refused.
_AUTH_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "RequestExpired",
        "InvalidClientTokenId",
    }
)


class ConfigurationError(ValueError):
    """A configuration of the bucket's client that cannot be used, raised before any request
    with a message written to be shown as it is: it names what was found and what to do, and
    repeats no secret."""


@dataclass(frozen=True)
class Failure:
    """One failed request, described: :attr:`cause` (fixed words, no secret) and whether the
    tier is unusable for the rest of the process (:attr:`fatal`)."""

    cause: str
    fatal: bool
    denied: bool = False
    #: The server is overloaded or slow: leave it alone a while (:data:`.tier.REST`).
    rest: bool = False


def _code(text: str) -> str:
    match = _CODE.search(text)
    return match.group(1) if match else ""


def _status(text: str) -> int:
    match = _STATUS.search(text)
    if not match:
        return 0
    return int(match.group(1) or match.group(2))


def describe(exc: BaseException, url: str) -> Failure:  # noqa: PLR0911 - one answer a kind
    """What ``exc``, raised by a request to the bucket at ``url``, says (see the module
    docstring)."""
    if isinstance(exc, ConfigurationError):
        return Failure(str(exc), fatal=True)
    kind = type(exc).__name__
    text = str(exc)
    code = _code(text)
    status = _status(text)
    if code == "NoSuchBucket":
        return Failure(
            f"the bucket of {CACHEROOT_SHARED}={url} does not exist (NoSuchBucket): create it, "
            "or point the variable at the fleet's bucket",
            fatal=True,
        )
    if code in _AUTH_CODES or kind == "UnauthenticatedError":
        return Failure(
            f"the bucket at {url} refused the credentials ({code or 'unauthenticated'}): check "
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (expired?)",
            fatal=True,
        )
    if code == "AccessDenied" or kind == "PermissionDeniedError" or status == 403:
        return Failure(
            f"the bucket at {url} denied the request (AccessDenied): grant this job's "
            "credentials the actions the tier needs on the prefix (see docs/bucket.md)",
            fatal=False,
            denied=True,
        )
    if code in ("SlowDown", "ServiceUnavailable") or status == 503:
        return Failure(
            f"the bucket at {url} asks to slow down (503 {code or 'Service Unavailable'})",
            fatal=False,
            rest=True,
        )
    lowered = text.lower()
    if "kind: connect" in lowered or "error sending request" in lowered or "dns" in lowered:
        return Failure(
            f"nothing answers at the endpoint of {url} (connection failed): check "
            "AWS_ENDPOINT_URL and that the store is up",
            fatal=True,
        )
    if "timed out" in lowered or "timeout" in lowered:
        return Failure(
            f"the bucket at {url} did not answer in time (timeout)", fatal=False, rest=True
        )
    if kind in ("UnknownConfigurationKeyError", "ValueError") or "configuration" in lowered:
        return Failure(
            f"the client refused the configuration of {url} ({kind}): check the AWS_* variables",
            fatal=True,
        )
    detail = f"{code}, " if code else ""
    detail += f"HTTP {status}, " if status else ""
    return Failure(f"a request to the bucket at {url} failed ({detail}{kind})", fatal=False)


def denied(exc: BaseException) -> bool:
    """Whether ``exc`` says this process may not do what it asked (it may still read)."""
    kind = type(exc).__name__
    text = str(exc)
    code = _code(text)
    if code in _AUTH_CODES:  # refused credentials: not a policy, nothing can be read either
        return False
    return kind == "PermissionDeniedError" or code == "AccessDenied" or _status(text) == 403
