"""``cacheroot fetch URL``: warm one entry from a shell (CI set-up steps, debugging).

Also the argument types that every command of this distribution shares (``cacheroot cache``
takes sizes and ages): each raises :class:`argparse.ArgumentTypeError` saying what it expected,
with examples, so argparse prints ``argument --max-size: size 'abc': expected ...`` rather than
``invalid parse_size value``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cacheroot.envs import CACHEROOT_OFFLINE, VLLM_TEST_CACHE, VLLM_TEST_CACHE_ONLY
from cacheroot.envs.units import parse_age, parse_size

from ._naming import check_filename, check_namespace
from ._redact import printable, redact_url

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ._fetcher import Fetcher

#: Exit statuses, documented in ``--help``.
OK, FAILED, USAGE, CHECKSUM, MISS, LOCKED = 0, 1, 2, 3, 4, 5

EPILOG = f"""\
The path of the cached file is printed as the last line of standard output (with --json, a
summary instead). Standard error gets one line when the fetch is done (hit or miss, size,
seconds; for a miss its rate and the host it came from) and one per retry as it happens
(unless -q); on a terminal, a progress bar while it downloads (none with -q, none in a CI
job, where CI is set, nor with TERM=dumb).

exit status:
  {OK}  the file is cached (downloaded now or already there)
  {FAILED}  the download failed (network, HTTP status, disk full, refused redirect)
  {USAGE}  bad arguments (a URL that is not http:// or https://, file:// without --allow-file,
     a namespace, file name or digest that is not allowed)
  {CHECKSUM}  the bytes received do not have the expected sha256 (nothing was cached)
  {MISS}  cache-only (--offline, {CACHEROOT_OFFLINE}=1 or {VLLM_TEST_CACHE_ONLY}=1) and the file
     is not cached
  {LOCKED}  timed out waiting for another process downloading the same file
"""


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its :class:`ValueError` becomes the usage error."""

    def arg(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return arg


#: ``--max-size 20G``: bytes (see :func:`cacheroot.envs.units.parse_size`).
size_arg: Callable[[str], int] = _checked(parse_size)
#: ``--older-than 1h30m``: seconds (see :func:`cacheroot.envs.units.parse_age`).
age_arg: Callable[[str], float] = _checked(parse_age)
#: ``--namespace gpt_oss/tiktoken``: a checked, possibly nested namespace.
namespace_arg: Callable[[str], str] = _checked(check_namespace)
_filename_arg: Callable[[str], str] = _checked(check_filename)


def seconds_arg(text: str) -> float:
    """A number of seconds, 0 or more (``--deadline 600``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, 0 or more (e.g. 600 or 1.5), found {text!r}"
        )
    return value


def _timeout_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds above 0 (e.g. 30 or 2.5), found {text!r}"
        )
    return value


def _sha256_arg(text: str) -> str:
    digest = text.strip().lower().removeprefix("sha256:")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise argparse.ArgumentTypeError(
            "expected 64 hexadecimal digits (what `sha256sum FILE` prints), optionally after "
            f"'sha256:', found {text!r}"
        )
    return text


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
    p.add_argument(
        "url",
        metavar="URL",
        help="an http:// or https:// URL (file:// with --allow-file), "
        "e.g. https://example.org/data/test.jsonl",
    )
    p.add_argument(
        "--sha256",
        metavar="HEX",
        type=_sha256_arg,
        default=None,
        help="the file's expected sha256: 64 hex digits, e.g. the first word `sha256sum FILE` "
        "prints ('sha256:' before them is allowed); checked before anything is cached",
    )
    p.add_argument(
        "--namespace",
        metavar="NS",
        type=namespace_arg,
        default="downloads",
        help=f"the directory under ${VLLM_TEST_CACHE}, e.g. gsm8k, or a nested one such as "
        "gpt_oss/tiktoken (default: downloads)",
    )
    p.add_argument(
        "--filename",
        metavar="NAME",
        type=_filename_arg,
        default=None,
        help="store under this name instead of one derived from the URL, e.g. test.jsonl",
    )
    p.add_argument(
        "--offline", action="store_true", default=None, help="never use the network (a miss fails)"
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_timeout_arg,
        default=None,
        help="read timeout of each attempt in seconds, e.g. 30 (default 60)",
    )
    p.add_argument(
        "--deadline",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="give the whole download at most this long, retries included, e.g. 600 "
        "(default 1800; 0: none)",
    )
    p.add_argument(
        "--lock-timeout",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="wait at most this long for another process downloading the same file, e.g. 3600 "
        f"(default 1800; exit status {LOCKED} after)",
    )
    p.add_argument(
        "--allow-file",
        action="store_true",
        help="accept file:// URLs (local mirrors), e.g. file:///srv/mirror/test.jsonl",
    )
    p.add_argument(
        "--quiet", "-q", action="store_true", help="no progress bar and no lines on stderr"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary on stdout (status, url, path, bytes, seconds, source, from) "
        "instead of the path",
    )
    p.set_defaults(func=run)


def _refused_scheme(url: str, *, allow_file: bool) -> str:
    """The command line's words for a URL whose scheme ``cacheroot fetch`` will not download
    (the library's message names its Python API), or ``""`` when it would download it."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https") or (scheme == "file" and allow_file):
        return ""
    if scheme == "file":
        return (
            f"{redact_url(url)}: file:// URLs are read only with --allow-file (they are meant "
            "for local mirrors)"
        )
    return (
        f"{redact_url(url)}: scheme {scheme!r} is not supported: give an http:// or https:// "
        "URL, or a file:// URL with --allow-file"
    )


def run(args: argparse.Namespace) -> int:
    """Fetch ``args.url``; print the path (or the JSON summary), or say what went wrong."""
    from ._fetcher import Fetcher  # noqa: PLC0415
    from ._progress import LineReporter  # noqa: PLC0415

    settings: dict[str, Any] = {}
    if args.allow_file:
        settings["allow_file"] = True
    if args.deadline is not None:
        settings["deadline"] = args.deadline or None
    if args.lock_timeout is not None:
        settings["lock_timeout"] = args.lock_timeout
    reporter = LineReporter("cacheroot fetch", quiet=args.quiet)
    status, message, path = _fetch(args, Fetcher(reporter=reporter, **settings))
    if message:
        # Records and names on the volume, and answers of origins, may hold escape sequences:
        # each line is escaped, and a message of several lines (every source of a URL failed,
        # each escaped where the message is made) keeps its line feeds.
        lines = "\n".join(printable(line) for line in message.split("\n"))
        sys.stderr.write(f"cacheroot fetch: {lines}\n")
    if args.json:
        done = reporter.last
        if done is not None and path is not None:
            summary = {**done.as_dict(), "path": str(path)}
        else:
            summary = {"status": "failed", "url": redact_url(args.url), "path": None}
            summary.update(exit=status, reason=message)
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
    elif path is not None:
        sys.stdout.write(f"{printable(str(path))}\n")
    return status


def _fetch(args: argparse.Namespace, fetcher: Fetcher) -> tuple[int, str, Path | None]:
    """``(exit status, error message or "", path or None)`` of fetching ``args.url``."""
    from ._errors import CacheMissError, ChecksumError, FetchError, LockTimeout  # noqa: PLC0415

    try:
        path = fetcher.fetch(
            args.url,
            sha256=args.sha256,
            namespace=args.namespace,
            filename=args.filename,
            offline=args.offline,
            timeout=args.timeout,
            progress=False if args.quiet else None,
        )
    except ValueError as exc:
        return (CHECKSUM if isinstance(exc, ChecksumError) else USAGE), str(exc), None
    except CacheMissError as exc:
        return MISS, str(exc), None
    except LockTimeout as exc:
        return LOCKED, str(exc), None
    except FetchError as exc:
        # A refused scheme fails only on a miss (a cached file:// entry is served without the
        # flag), and the library's message names its Python API: say it in the CLI's words.
        refused = _refused_scheme(args.url, allow_file=args.allow_file)
        if refused:
            return USAGE, refused, None
        from ._http import DEADLINE_HINT  # noqa: PLC0415 - requests is imported on a miss only

        return FAILED, str(exc).replace(DEADLINE_HINT, "--deadline SECONDS, 0 for none"), None
    finally:
        fetcher.close()
    return OK, "", path
