"""``cacheroot hub``: run the pull-through hub cache, and turn what it served into a manifest."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import TYPE_CHECKING

from cacheroot.envs import (
    CACHEROOT_HUB_KEY_FILE,
    HF_ENDPOINT,
    MODELSCOPE_DOMAIN,
    MODELSCOPE_ENDPOINT,
    resolve,
)

from .._cli import age_arg, seconds_arg, size_arg

if TYPE_CHECKING:
    import argparse

__all__ = ["DEFAULT_UPSTREAM", "default_store", "modelscope_upstream", "register"]

#: Where huggingface_hub goes when ``HF_ENDPOINT`` is unset.
DEFAULT_UPSTREAM = "https://huggingface.co"
#: Where modelscope_hub goes when neither of its variables is set.
DEFAULT_MODELSCOPE = "https://www.modelscope.cn"
#: The store's directory under the cache root.
STORE_DIR = "hubcache"

EPILOG = f"""\
Point the clients at it: HF_ENDPOINT=http://HOST:PORT (huggingface_hub, transformers, datasets,
vLLM and the hf command all read it). `pytest --cacheroot-hub` starts one for a session.

The store is $CACHEROOT/{STORE_DIR} unless --store says otherwise; its upstream is --upstream,
else the {HF_ENDPOINT} this command was started with, else {DEFAULT_UPSTREAM}. ModelScope's API
(/api/v1/...) goes to --modelscope-upstream, else {MODELSCOPE_ENDPOINT}, else
https://${MODELSCOPE_DOMAIN}, else {DEFAULT_MODELSCOPE}: point {MODELSCOPE_ENDPOINT} at the hub
cache too.

exit status:
  0  stopped by SIGTERM or SIGINT (serve); the manifest was written (export-manifest)
  1  the store is unusable, or the address cannot be listened on
  2  usage
"""


def default_store(environ: dict[str, str] | None = None) -> str | None:
    """``$CACHEROOT/hubcache`` as the layout resolves the root now; ``None`` without a root."""
    layout = resolve(dict(os.environ) if environ is None else environ)
    return os.path.join(layout.root, STORE_DIR) if layout.root else None


def modelscope_upstream(environ: dict[str, str] | None = None) -> str:
    """ModelScope's endpoint as modelscope_hub picks it: ``MODELSCOPE_ENDPOINT``, else
    ``https://`` + ``MODELSCOPE_DOMAIN``, else the public one."""
    env = dict(os.environ) if environ is None else environ
    endpoint = env.get(MODELSCOPE_ENDPOINT, "").strip()
    if endpoint:
        return endpoint.rstrip("/")
    domain = env.get(MODELSCOPE_DOMAIN, "").strip().rstrip("/")
    if domain:
        return domain if domain.startswith(("http://", "https://")) else f"https://{domain}"
    return DEFAULT_MODELSCOPE


def _listen(text: str) -> tuple[str, int]:
    import argparse  # noqa: PLC0415

    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT (e.g. 127.0.0.1:8765, or port 0 for any free one), found {text!r}"
        )
    return host, int(port)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cacheroot hub`` and its subcommands."""
    import argparse  # noqa: PLC0415

    p = sub.add_parser(
        "hub",
        help="a pull-through cache of the Hugging Face Hub that keeps runs green through outages",
        description=(
            "A pull-through cache of the Hub's HTTP interface: metadata served stale when the "
            "Hub errs, files stored once and verified."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    hub_sub = p.add_subparsers(dest="hub_command", metavar="SUBCOMMAND", required=True)
    serve = hub_sub.add_parser(
        "serve",
        help="run a hub cache until stopped",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8765),
        metavar="HOST:PORT",
        help="address to listen on, e.g. 0.0.0.0:8765 (default 127.0.0.1:8765; port 0: any "
        "free one)",
    )
    serve.add_argument(
        "--upstream",
        default=None,
        metavar="URL",
        help="the hub to cache, e.g. https://hf-mirror.example (default: $HF_ENDPOINT, else "
        f"{DEFAULT_UPSTREAM})",
    )
    serve.add_argument(
        "--modelscope-upstream",
        default=None,
        metavar="URL",
        help="where ModelScope's API (/api/v1/...) goes, e.g. https://modelscope.example "
        f"(default: its variables, else {DEFAULT_MODELSCOPE})",
    )
    _store_option(serve)
    serve.add_argument(
        "--ttl",
        type=age_arg,
        default=300.0,
        metavar="AGE",
        help="how long an answer for a branch or tag is fresh, e.g. 10m or 1h (default 5m)",
    )
    serve.add_argument(
        "--negative-ttl",
        type=age_arg,
        default=60.0,
        metavar="AGE",
        help="how long a 'not found' answer is fresh, e.g. 30s (default 1m)",
    )
    serve.add_argument(
        "--deadline",
        type=seconds_arg,
        default=5.0,
        metavar="SECONDS",
        help="give up on an upstream metadata request after this long, e.g. 3 (default 5; "
        "huggingface_hub's own is 10)",
    )
    serve.add_argument(
        "--cooloff",
        type=seconds_arg,
        default=30.0,
        metavar="SECONDS",
        help="after 3 failures in a row of a host (timeouts, refusals, 429, 5xx), serve from "
        "the store without asking that host for this long, then let one request probe it, "
        "e.g. 60 (default 30; 0: never leave it alone)",
    )
    serve.add_argument(
        "--offline",
        action="store_true",
        help="store-only: never ask the upstream (air-gapped runs)",
    )
    serve.add_argument(
        "--allow-redirect-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a host a file's redirect may send the hub cache to at any address, loopback and "
        "private ones included (repeatable); the upstream's own host always may, any other "
        "only at public addresses; e.g. cdn.mirror.internal",
    )
    serve.add_argument(
        "--private-group",
        default=None,
        metavar="GROUP",
        help="store what came with a credential readable by this group (0640) rather than by "
        "the hub's user only (0600); e.g. ci-runners",
    )
    serve.set_defaults(func=_run_serve)
    export = hub_sub.add_parser(
        "export-manifest",
        help="print (or write) the [[model]] entries of everything the store served",
    )
    _store_option(export)
    export.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="write it to FILE in one step, e.g. -o tests/hub-manifest.toml (default: print it)",
    )
    export.set_defaults(func=_run_export)
    prune = hub_sub.add_parser(
        "prune",
        help="remove what the store has not served for a while, or past a size",
        description=(
            "Remove the answers and files the hub cache has not used for --older-than, then "
            "the least recently used until the store holds at most --max-size."
        ),
    )
    _store_option(prune)
    prune.add_argument(
        "--older-than",
        type=age_arg,
        default=None,
        metavar="AGE",
        help="remove what was not used for AGE, e.g. 14d or 36h",
    )
    prune.add_argument(
        "--max-size",
        type=size_arg,
        default=None,
        metavar="SIZE",
        help="then the least recently used until the store holds at most SIZE, e.g. 200G",
    )
    prune.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    prune.set_defaults(func=_run_prune)


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="DIR",
        help=f"the store's directory, e.g. /cache/{STORE_DIR} (default: $CACHEROOT/{STORE_DIR})",
    )


def _store(args: argparse.Namespace, command: str) -> str | None:
    store = args.store or default_store()
    if store is None:
        sys.stderr.write(
            f"cacheroot hub {command}: no cache root to keep the store in; set CACHEROOT or "
            "pass --store DIR\n"
        )
    return store


def _store_ready(store: str) -> bool:
    """Whether the store's directory is there (made if missing) and the answers' key
    (``CACHEROOT_HUB_KEY_FILE``) is usable or unset; says why not. Unset on a store others may
    write, it says once that its answers could be planted."""
    from .store import KeyFileError, Store, answer_key  # noqa: PLC0415

    try:
        # Made where missing; on the volume, reached from the cache root without following
        # a link (a store directory swapped for one is refused).
        Store(store).prepare()
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and exc.filename != store else ""
        hint = ""
        if exc.errno == errno.ELOOP:
            hint = (
                "; a store below the cache root is reached without following a link: pass "
                "--store with the real directory, or remove the link"
            )
        sys.stderr.write(
            f"cacheroot hub serve: cannot use the store {store}: {exc.strerror}{where}{hint}\n"
        )
        return False
    try:
        key = answer_key()
    except KeyFileError as exc:
        sys.stderr.write(f"cacheroot hub serve: {exc}\n")
        return False
    if key is None:
        with contextlib.suppress(OSError):
            st = os.stat(store)
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                sys.stderr.write(
                    f"cacheroot hub serve: others may write the store {store}, so they could "
                    f"plant answers in it; set {CACHEROOT_HUB_KEY_FILE} to a secret file outside "
                    "the store (every hub and warm of it the same) to have answers signed\n"
                )
    return True


def _run_serve(args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415
    import contextlib  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from .server import Settings, serve  # noqa: PLC0415

    store = _store(args, "serve")
    if store is None:
        return 1
    upstream = (
        args.upstream or os.environ.get(HF_ENDPOINT, "").strip() or DEFAULT_UPSTREAM
    ).rstrip("/")
    ms = (args.modelscope_upstream or modelscope_upstream()).rstrip("/")
    for flag, url in (("--upstream", upstream), ("--modelscope-upstream", ms)):
        if not url.startswith(("http://", "https://")):
            sys.stderr.write(
                f"cacheroot hub serve: {flag} must be an http:// or https:// URL, found {url!r}\n"
            )
            return 2
    if args.private_group:
        import grp  # noqa: PLC0415 - only where a hub runs

        try:
            grp.getgrnam(args.private_group)
        except KeyError:
            sys.stderr.write(
                f"cacheroot hub serve: --private-group {args.private_group!r} is no group here\n"
            )
            return 2
    if not _store_ready(store):
        return 1
    settings = Settings(
        upstream=upstream,
        store=store,
        modelscope_upstream=ms,
        ttl=args.ttl,
        negative_ttl=args.negative_ttl,
        deadline=args.deadline,
        cooloff=args.cooloff,
        offline=args.offline,
        redirect_hosts=tuple(args.allow_redirect_host),
        private_group=args.private_group or "",
    )
    host, port = args.listen

    def ready(url: str) -> None:
        if url.rstrip("/") == upstream:
            raise SystemExit(f"cacheroot hub serve: the upstream {upstream} is this hub itself")
        mode = "store-only" if settings.offline else f"upstream {upstream}"
        sys.stdout.write(f"cacheroot hub: serving {url} ({mode}; store {store})\n")
        sys.stdout.flush()

    async def main() -> None:
        task = asyncio.ensure_future(serve(settings, host, port, ready))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    except OSError as exc:
        sys.stderr.write(f"cacheroot hub serve: cannot listen on {host}:{port}: {exc.strerror}\n")
        return 1
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from .export import manifest_text  # noqa: PLC0415
    from .store import Store  # noqa: PLC0415

    store = _store(args, "export-manifest")
    if store is None:
        return 1
    text = manifest_text(Store(store).served_rows())
    if args.output is None:
        sys.stdout.write(text)
        return 0
    from .._store import atomic_write  # noqa: PLC0415

    atomic_write(args.output, text.encode())
    return 0


def _run_prune(args: argparse.Namespace) -> int:
    from cacheroot.envs.units import format_size  # noqa: PLC0415

    from .._progress import counted  # noqa: PLC0415
    from .prune import prune  # noqa: PLC0415

    if args.older_than is None and args.max_size is None:
        sys.stderr.write(
            "cacheroot hub prune: say what to remove: --older-than AGE (e.g. 14d), "
            "--max-size SIZE (e.g. 200G), or both\n"
        )
        return 2
    store = _store(args, "prune")
    if store is None:
        return 1
    if not os.path.isdir(store):
        sys.stderr.write(f"cacheroot hub prune: no store at {store}: nothing to remove\n")
        return 0
    done = prune(store, older_than=args.older_than, max_size=args.max_size, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    sys.stdout.write(
        f"cacheroot hub prune: {verb} {counted(done.removed, 'file')} "
        f"({format_size(done.removed_bytes)}), kept {counted(done.kept, 'file')} "
        f"({format_size(done.kept_bytes)}) in {store}\n"
    )
    if done.partials:
        sys.stdout.write(
            f"cacheroot hub prune: {verb} {counted(done.partials, 'partial file')} "
            f"({format_size(done.partial_bytes)}) of downloads whose hub is gone\n"
        )
    return 0
