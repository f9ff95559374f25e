"""``cacheroot fetch URL``: warm one entry from a shell (CI set-up steps, debugging)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE, VLLM_TEST_CACHE_ONLY

#: Exit statuses, documented in ``--help``.
OK, FAILED, USAGE, CHECKSUM, MISS, LOCKED = 0, 1, 2, 3, 4, 5

EPILOG = f"""\
The path of the cached file is printed as the last line of standard output.

exit status:
  {OK}  the file is cached (downloaded now or already there)
  {FAILED}  the download failed (network, HTTP status, disk full, refused scheme or redirect)
  {USAGE}  bad arguments (namespace, file name or digest not allowed)
  {CHECKSUM}  the bytes received do not have the expected sha256 (nothing was cached)
  {MISS}  cache-only (--offline, {CACHEROOT_OFFLINE}=1 or {VLLM_TEST_CACHE_ONLY}=1) and the file
     is not cached
  {LOCKED}  timed out waiting for another process downloading the same file
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fetch`` subcommand."""
    p = sub.add_parser(
        "fetch",
        help="download a URL into the test cache (once) and print its path",
        description=(
            f"Download URL into ${VLLM_TEST_CACHE}/NAMESPACE/ unless it is already there."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", metavar="URL")
    p.add_argument("--sha256", metavar="HEX", default=None, help="expected digest (verified)")
    p.add_argument("--namespace", metavar="NS", default="downloads", help="default: downloads")
    p.add_argument(
        "--filename", default=None, help="store under this name instead of a derived one"
    )
    p.add_argument(
        "--offline", action="store_true", default=None, help="never use the network (a miss fails)"
    )
    p.add_argument("--timeout", type=float, default=None, help="read timeout in seconds")
    p.add_argument(
        "--deadline",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="give the whole download at most this long, retries included (default 1800; 0: none)",
    )
    p.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wait at most this long for another process downloading the same file "
        f"(default 1800; exit status {LOCKED} after)",
    )
    p.add_argument("--allow-file", action="store_true", help="accept file:// URLs (local mirrors)")
    p.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds (0 or more), found {text!r}"
        )
    return value


def run(args: argparse.Namespace) -> int:
    """Fetch ``args.url``; print the path or say what went wrong."""
    from ._errors import CacheMissError, ChecksumError, FetchError, LockTimeout  # noqa: PLC0415
    from ._fetcher import Fetcher, default_fetcher  # noqa: PLC0415

    settings: dict[str, Any] = {}
    if args.allow_file:
        settings["allow_file"] = True
    if args.deadline is not None:
        settings["deadline"] = args.deadline or None
    if args.lock_timeout is not None:
        settings["lock_timeout"] = args.lock_timeout
    fetcher = Fetcher(**settings) if settings else default_fetcher()
    try:
        path = fetcher.fetch(
            args.url,
            sha256=args.sha256,
            namespace=args.namespace,
            filename=args.filename,
            offline=args.offline,
            timeout=args.timeout,
        )
    except ValueError as exc:
        status = CHECKSUM if isinstance(exc, ChecksumError) else USAGE
        sys.stderr.write(f"cacheroot fetch: {exc}\n")
        return status
    except CacheMissError as exc:
        sys.stderr.write(f"cacheroot fetch: {exc}\n")
        return MISS
    except LockTimeout as exc:
        sys.stderr.write(f"cacheroot fetch: {exc}\n")
        return LOCKED
    except FetchError as exc:
        sys.stderr.write(f"cacheroot fetch: {exc}\n")
        return FAILED
    sys.stdout.write(f"{path}\n")
    return OK
