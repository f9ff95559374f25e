"""``cacheroot warm MANIFEST``: fill the caches with everything a manifest lists, in parallel.

One step before a fleet of CI jobs starts: each ``[[asset]]`` is fetched (and unpacked when it
says ``extract = true``), each ``[[model]]`` snapshot is downloaded by its hub's own client
(:mod:`.._models.snapshot`); with ``hub_cache = true``, each Hugging Face model's metadata
calls are then asked through a hub cache on the volume's store, so that a run through the hub
cache answers them with the Hub gone (:mod:`.hubanswers`). Running it again costs no request:
an asset already cached is found offline first, a pinned complete snapshot is recognised from
its record, and the hub cache answers a commit's metadata from its store. Failures do not stop
the others; the summary lists each with its reason and the exit status is non-zero.

``file://`` assets are read only when the caller says so (``--allow-file``): a manifest names
paths on the machine that warms it, which may read what the manifest's author could not. A copy
is never more readable than its source, and a mismatch does not show the digest of a source
that not everyone may read (see :mod:`.._http`).

The command prints a line on standard error as each entry is done (and one per retry as it
happens): a CI log shows what was hit, what was downloaded from where and how fast, while it
runs; the totals close the run on standard output. On a terminal each asset being downloaded
also has a progress bar (:func:`.._progress.bars_wanted`); a CI log gets none.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import stat
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from cacheroot.envs.units import format_size

from .._archive import MAX_SIZE, extract_entry, extracted_path
from .._cachedir import cache_dir
from .._cli import seconds_arg
from .._errors import CacheMissError, FetchError
from .._naming import entry_path
from .._progress import FAILED as FAILED_EVENT
from .._progress import SHARED_TIER, FetchEvent, LineReporter, counted
from .._redact import redact_url
from .._used import touch_used
from .cachekey import cache_key, environ_tag
from .manifest import Asset, Manifest, load_manifest

if TYPE_CHECKING:
    from types import ModuleType

    from .._fetcher import Fetcher
    from .._models.model import Model
    from .._progress import Reporter

#: Exit statuses, documented in ``--help``.
OK, FAILED, USAGE = 0, 1, 2

EPILOG = f"""\
The totals are printed on standard output (with --json, the summary). Standard error gets one
line per entry when it is done (hit or miss, size, seconds; for a miss its rate and where it came
from) and one per retry as it happens (unless -q); on a terminal, a progress bar per asset while
it downloads (none with -q, none in a CI job, where CI is set, nor with TERM=dumb).

exit status:
  {OK}  every entry is cached (--check: and complete)
  {FAILED}  some entry failed (--check: is missing or incomplete); the summary says which and why
  {USAGE}  the manifest cannot be read or is invalid (the message names the entry and field)
"""

HIT, MISS, MISSING, FAILURE = "hit", "miss", "missing", "failed"


def _snapshot_module() -> ModuleType:
    try:
        return importlib.import_module("cacheroot.fetch._models.snapshot")
    except ImportError as exc:
        raise FetchError(
            f"model snapshot support is not installed ({exc}); install cacheroot-fetch with "
            "the hub clients (huggingface_hub, modelscope) to warm [[model]] entries"
        ) from None


def _row(entry: Asset | Model, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "entry": entry.label,
        "kind": "asset" if isinstance(entry, Asset) else "model",
        "status": status,
        "path": None,
        "bytes": 0,
        "downloaded": 0,
        "copied": 0,
        "reason": "",
        **extra,
    }


def kwargs_cached(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of :meth:`Fetcher.fetch` that :meth:`Fetcher.cached` takes too."""
    return {k: v for k, v in kwargs.items() if k in ("sha256", "namespace", "filename")}


def warm_asset(asset: Asset, fetcher: Fetcher, *, check: bool = False) -> dict[str, Any]:
    """Fetch one asset (offline first, so a cached one costs no request); a summary row."""
    kwargs: dict[str, Any] = {
        "sha256": asset.sha256,
        "namespace": asset.namespace,
        "filename": asset.filename,
    }
    if asset.urls:
        kwargs["fallbacks"] = asset.urls
    status, source = HIT, ""
    cached = fetcher.cached(asset.url, **kwargs_cached(kwargs))
    if check and cached is None:
        # --check never downloads, nor copies from the shared tier: it says what this host has.
        where = entry_path(cache_dir(), asset.namespace, asset.url, asset.filename)
        return _row(asset, MISSING, path=where, reason="not cached")
    try:
        # A hit, or (not on this host) a copy from the shared tier, reported as a miss from it.
        path = fetcher.fetch(asset.url, offline=True, **kwargs)
        if cached is None:
            status, source = MISS, SHARED_TIER
        touch_used(path)
    except CacheMissError as exc:
        if asset.url.startswith("file://") and not fetcher.allow_file:
            return _row(
                asset,
                FAILURE,
                path=exc.path,
                reason="file:// URLs are read only with `cacheroot warm --allow-file` "
                "(warm_manifest(..., allow_file=True)); a manifest never turns them on itself",
            )
        path = fetcher.fetch(asset.url, **kwargs)
        status, source = MISS, "origin"
    size = os.stat(path).st_size
    # ``bytes`` is the entry's size, as `cacheroot fetch --json` reports it for a hit too;
    # ``downloaded`` is what this run fetched from the origin, ``copied`` what it took from the
    # shared tier; the summary adds both up.
    row = _row(
        asset,
        status,
        path=str(path),
        bytes=size,
        downloaded=size if source == "origin" else 0,
        copied=size if source == SHARED_TIER else 0,
    )
    if asset.extract:
        out = extracted_path(path)
        # Its own name a directory (a link planted there is no tree: extract_entry removes it).
        unpacked = stat.S_ISDIR(_lmode(out))
        if check and not unpacked:
            return {**row, "status": MISSING, "reason": f"not unpacked at {out}"}
        if not check:
            # A tree there is judged as a fetch judges it (reached without following a link,
            # its record checked), and unpacked again where it does not hold.
            bound = MAX_SIZE if asset.max_unpacked is None else asset.max_unpacked
            out = str(extract_entry(path, max_size=bound))
            if not unpacked:
                row["status"] = MISS
        row["path"] = out
    return row


def _lmode(path: str) -> int:
    """The mode of ``path`` itself (0 where there is nothing)."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def check_model(model: Model, *, deep: bool = False) -> dict[str, Any]:
    """Whether ``model``'s snapshot is complete, without the network; a summary row."""
    try:
        report = _snapshot_module().check_snapshot(model, deep=deep)
    except (FetchError, ValueError, OSError) as exc:
        return _row(model, FAILURE, reason=str(exc))
    if report.complete:
        return _row(model, HIT, path=str(report.path))
    return _row(model, MISSING, reason="; ".join(report.problems))


def warm_model(
    model: Model,
    *,
    check: bool = False,
    failure_hold: float | None = None,
    attempts: int = 6,
) -> dict[str, Any]:
    """Download one model snapshot with its hub's client unless complete; a summary row.

    ``failure_hold`` and ``attempts``: see :func:`~cacheroot.fetch.warm_snapshot` (a recent
    failure is reported again instead of asking the hub; how many times the client is run).
    """
    row = check_model(model)
    if check or row["status"] == FAILURE or (row["status"] == HIT and model.pinned):
        return row
    # Missing, or complete for a branch that may have moved: the client re-resolves it.
    warmed = _snapshot_module().fill_snapshot(model, failure_hold=failure_hold, attempts=attempts)
    # Nothing downloaded (the files were all there; a ref or the record was written): a hit.
    return _row(
        model,
        MISS if warmed.downloaded else HIT,
        path=str(warmed.path),
        downloaded=warmed.downloaded,
    )


def _keep_hub_answers(
    models: list[Model], rows: list[dict[str, Any]], reporter: Reporter | None, *, jobs: int
) -> list[dict[str, Any]]:
    """``rows`` of ``models`` once the hub cache's answers of each warmed one are kept (a
    manifest's ``hub_cache = true``, :mod:`.hubanswers`): a model whose answers could not be
    kept has failed, since a run through the hub cache would fail its metadata calls."""
    from .hubanswers import keep_answers  # noqa: PLC0415 - only for a manifest that asks

    warmed = [
        (n, model, model.revision if model.pinned else os.path.basename(str(row["path"])))
        for n, (model, row) in enumerate(zip(models, rows, strict=True))
        if row["status"] in (HIT, MISS) and row["path"]
    ]
    problems = keep_answers([(model, commit) for _n, model, commit in warmed], jobs=jobs)
    out = list(rows)
    for k, why in problems.items():
        n, model, _commit = warmed[k]
        out[n] = {**rows[n], "status": FAILURE, "reason": why}
        if reporter is not None:
            reporter(FetchEvent(FAILED_EVENT, model.label, reason=why))
    return out


#: An asset's reason when no asset can be cached: the summary's warning says why, once.
NOT_ATTEMPTED = "not attempted: no asset can be cached here (the summary's warning says why)"


def _not_attempted(asset: Asset) -> dict[str, Any]:
    return _row(asset, FAILURE, reason=NOT_ATTEMPTED)


def _guarded(
    fn: Any, entry: Asset | Model, *args: Any, reporter: Reporter | None = None, **kwargs: Any
) -> dict[str, Any]:
    started = time.monotonic()
    try:
        result: dict[str, Any] = fn(entry, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the rest
        result = _row(entry, FAILURE, reason=redact_url(f"{type(exc).__name__}: {exc}"))
    if reporter is None:
        return result
    if result["status"] in (FAILURE, MISSING):
        reporter(FetchEvent(FAILED_EVENT, entry.label, reason=result["reason"]))
    elif not isinstance(entry, Asset):  # an asset's fetch has reported itself
        seconds = time.monotonic() - started
        reporter(
            FetchEvent(
                result["status"],
                entry.label,
                path=result["path"],
                seconds=seconds,
                source=entry.hub if result["status"] == MISS else "",
            )
        )
    return result


def warm_manifest(
    manifest: Manifest | str | os.PathLike[str],
    *,
    jobs: int = 4,
    check: bool = False,
    allow_file: bool = False,
    reporter: Reporter | None = None,
    failure_hold: float | None = None,
    attempts: int = 6,
    deadline: float | None = 1800.0,
) -> dict[str, Any]:
    """Warm (or with ``check``, only inspect) every entry of ``manifest``; the summary.

    ``file://`` assets are read only with ``allow_file`` (else they fail, unread, unless
    already cached). ``reporter`` is called with a :class:`~cacheroot.fetch.FetchEvent` as
    each entry is done (and for each retry), as the command prints them. The summary has
    ``hits``, ``misses``, ``missing``, ``failures`` (counts), ``bytes`` (downloaded by this
    run, assets and models), ``seconds``, ``warnings`` and one row per entry (an asset's
    ``bytes`` is its size, hit or miss; an entry's ``downloaded``, what this run fetched of it).
    ``failure_hold`` (seconds): a model whose warm failed less than that long ago fails again
    at once with that failure's reason; ``attempts``: how many times a model's hub client is
    run on transient failures (:func:`~cacheroot.fetch.warm_snapshot`); ``deadline``
    (seconds, ``None``: none) bounds each asset's download, retries and waits included, as
    :class:`~cacheroot.fetch.Fetcher`'s does. A manifest with ``hub_cache = true`` also has its
    Hugging Face models' metadata answers kept in the volume's hub store (:mod:`.hubanswers`);
    a model whose answers cannot be kept has failed, as a run through the hub would fail.
    """
    from .._fetcher import Fetcher, not_a_directory  # noqa: PLC0415 - requests only when warming

    m = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    started = time.monotonic()
    fetcher = Fetcher(allow_file=allow_file, reporter=reporter, deadline=deadline)
    notes = [
        f"{model.label}: revision {model.revision!r} is a branch or tag, which can move; pin a "
        "commit hash so every job gets the same files"
        for model in m.models
        if not model.pinned
    ]
    # A test cache that cannot be, for every asset alike: said once, as a warning, and each
    # asset's row points there, instead of the same reason on every row (and line of stderr).
    unusable = ""
    if m.assets:
        try:
            unusable = not_a_directory(cache_dir())
        except FetchError as exc:
            unusable = str(exc)
    if unusable:
        notes.append(unusable)
    with contextlib.ExitStack() as stack:
        # The summary carries the unpinned-revision warnings; the threads should not repeat them.
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message=".*is a branch or tag.*")
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=max(1, jobs)))
        futures = [
            pool.submit(_guarded, _not_attempted, a, reporter=reporter)
            if unusable
            else pool.submit(_guarded, warm_asset, a, fetcher, check=check, reporter=reporter)
            for a in m.assets
        ]
        futures += [
            pool.submit(
                _guarded,
                warm_model,
                md,
                check=check,
                failure_hold=failure_hold,
                attempts=attempts,
                reporter=reporter,
            )
            for md in m.models
        ]
        rows = [f.result() for f in futures]
    fetcher.close()
    if m.hub_cache and not check:
        rows[len(m.assets) :] = _keep_hub_answers(
            m.models, rows[len(m.assets) :], reporter, jobs=jobs
        )
    count = {s: sum(r["status"] == s for r in rows) for s in (HIT, MISS, MISSING, FAILURE)}
    return {
        "manifest": m.path,
        "check": check,
        "entries": rows,
        "hits": count[HIT],
        "misses": count[MISS],
        "missing": count[MISSING],
        "failures": count[FAILURE],
        "bytes": sum(r["downloaded"] for r in rows),
        "copied": sum(r.get("copied", 0) for r in rows),
        "seconds": round(time.monotonic() - started, 3),
        "warnings": notes,
    }


def _jobs(text: str) -> int:
    digits = text.strip()
    value = int(digits) if digits.isascii() and digits.isdigit() else None
    if value is None or not 1 <= value <= 256:
        found = text if value is None else value
        raise argparse.ArgumentTypeError(
            f"expected 1 to 256 parallel downloads, found {found!r}; e.g. --jobs 8"
        )
    return value


def _attempts(text: str) -> int:
    digits = text.strip()
    value = int(digits) if digits.isascii() and digits.isdigit() else None
    if value is None or not 1 <= value <= 20:
        raise argparse.ArgumentTypeError(
            f"expected 1 to 20 attempts, found {text!r}; e.g. --attempts 2"
        )
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400 * 7:
        raise argparse.ArgumentTypeError(
            f"expected seconds from 0 to 604800, found {text!r}; e.g. --failure-hold 600"
        )
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``warm`` subcommand."""
    p = sub.add_parser(
        "warm",
        help="fetch every asset and model snapshot a manifest lists (idempotent)",
        description="Fill the caches with the [[asset]] and [[model]] entries of MANIFEST.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "manifest",
        metavar="MANIFEST",
        nargs="+",
        help="a TOML file of [[asset]] and [[model]] entries, e.g. tests/manifest.toml "
        "(several only with --key)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        metavar="N",
        type=_jobs,
        default=4,
        help="parallel downloads, 1 to 256, e.g. 8 (default 4)",
    )
    p.add_argument(
        "--check", action="store_true", help="only report what is missing; never download"
    )
    p.add_argument(
        "--deadline",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="give each asset's download at most this long, retries included, e.g. 600 "
        "(default 1800; 0: none)",
    )
    p.add_argument(
        "--allow-file",
        action="store_true",
        help="read file:// assets (local mirrors, e.g. file:///srv/mirror/data.tar); without it "
        "they fail unless already cached",
    )
    p.add_argument(
        "--failure-hold",
        metavar="SECONDS",
        type=_seconds,
        default=None,
        help="a model whose warm failed less than SECONDS ago fails again at once with that "
        "failure's reason instead of asking the hub (the pytest plugin's warms use 600, so "
        "that a run's sessions try a missing model once), e.g. --failure-hold 600; "
        "default: always ask",
    )
    p.add_argument(
        "--attempts",
        metavar="N",
        type=_attempts,
        default=6,
        help="run a model's hub client up to N times, 1 to 20, on transient failures (429, "
        "5xx, no listing), with backoff and Retry-After between (default 6); the client "
        "retries each request itself too; e.g. --attempts 3",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no line per entry and no progress bar on stderr (the summary is still printed)",
    )
    p.add_argument(
        "--key",
        action="store_true",
        help="print the CI cache key of what warming the MANIFESTs fills (their entries, the "
        "layout, CACHEROOT_TAG), e.g. cacheroot-v1-cuda-<32 hex>, and download nothing; "
        "reformatting a manifest keeps it, changing an entry changes it",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Warm ``args.manifest``; print the summary; the exit status says whether all is there."""
    if args.key:
        try:
            sys.stdout.write(cache_key(args.manifest, tag=environ_tag()) + "\n")
        except (FetchError, ValueError) as exc:
            sys.stderr.write(f"cacheroot warm --key: {exc}\n")
            return USAGE
        return OK
    if len(args.manifest) > 1:
        sys.stderr.write("cacheroot warm: one MANIFEST at a time (several only with --key)\n")
        return USAGE
    try:
        summary = warm_manifest(
            args.manifest[0],
            jobs=args.jobs,
            check=args.check,
            allow_file=args.allow_file,
            # A quiet reporter writes nothing, and the downloads it watches draw no bar.
            reporter=None if args.check else LineReporter("cacheroot warm", quiet=args.quiet),
            failure_hold=args.failure_hold,
            attempts=args.attempts,
            **({} if args.deadline is None else {"deadline": args.deadline or None}),
        )
    except FetchError as exc:
        sys.stderr.write(f"cacheroot warm: {exc}\n")
        return USAGE
    bad = summary["failures"] + summary["missing"]
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    else:
        lines = [f"warning: {w}\n" for w in summary["warnings"]]
        lines += [
            f"{r['status']}: {r['entry']}: {r['reason']}\n"
            for r in summary["entries"]
            if r["status"] in (MISSING, FAILURE)
        ]
        total = len(summary["entries"])
        if args.check:
            head = f"{total - bad} complete, {summary['missing']} missing"
        else:
            hits, misses = (
                counted(summary["hits"], "hit"),
                counted(summary["misses"], "miss", "misses"),
            )
            head = f"{hits}, {misses} ({format_size(summary['bytes'])} downloaded"
            if summary["copied"]:
                head += f", {format_size(summary['copied'])} from the shared tier"
            head += ")"
        lines.append(
            f"warm {summary['manifest']}: {counted(total, 'entry', 'entries')}: {head}, "
            f"{counted(summary['failures'], 'failure')} in {summary['seconds']:.1f} s\n"
        )
        sys.stdout.write("".join(lines))
    return FAILED if bad else OK
