"""Offline-first runs: the manifest step before the tests, and the switch every process inherits.

``--cacheroot-manifest PATH`` (or the ``cacheroot_manifest`` ini option) names the warm
manifest(s) the tests need. Before any test runs, the controller checks them without the network;
when every entry is complete, the run is offline (``CACHEROOT_OFFLINE=1``,
``_VLLM_TEST_CACHE_ONLY=1`` and ``HF_HUB_OFFLINE=1`` in the environment every test process
inherits), so the hubs' rate limits and outages cannot fail it. When something is missing it says
what, warms it (``cacheroot warm``) and then goes offline; when offline is forced, it stops the
session with the list.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from cacheroot.envs import (
    CACHEROOT_HUB_OWNER,
    CACHEROOT_OFFLINE,
    HF_HUB_OFFLINE,
    VLLM_TEST_CACHE_ONLY,
)

from .._errors import WARM_HINT, FetchError, fetch_command, loopback_address
from .._progress import counted
from .._redact import redact_url
from .._warm.warm import HIT, warm_manifest
from .figures import Figures

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "FAILURE_HOLD",
    "INCOMPLETE_MANIFEST",
    "PLUGIN_ATTEMPTS",
    "flush_said",
    "go_offline",
    "manifest_entry",
    "manifests",
    "miss_hint",
    "offline_first",
]

#: The exit status of a forced-offline session whose manifest is incomplete: a usage error, as
#: the run was started in a state in which its tests cannot work (nothing ran).
INCOMPLETE_MANIFEST = pytest.ExitCode.USAGE_ERROR
#: ``cacheroot warm`` in a fresh interpreter (see :func:`_warm_manifests`).
_CLI = ("-m", "cacheroot.envs._cli")
#: Seconds a failed model warm is honoured on the volume by the plugin's warms (the manifest
#: step, ``model_snapshot``): a model the hub would not give costs one attempt per run, shared
#: by the run's sessions and workers, and the tests that need it fail at once with the reason.
FAILURE_HOLD = 600.0
#: How many times the plugin's warms run a hub client (which retries each request itself).
PLUGIN_ATTEMPTS = 1


def go_offline() -> None:
    """Make this process and every process it starts cache-only (ours and upstream's switch)."""
    os.environ[CACHEROOT_OFFLINE] = "1"
    os.environ[VLLM_TEST_CACHE_ONLY] = "1"


def manifests(config: pytest.Config) -> list[str]:
    """The manifests the session names: the options (from the invocation directory), else ini.

    Read from the command line as parsed so far, so that it also answers before the initial
    conftests are imported (``pytest_load_initial_conftests``), when the options are not set yet.
    """
    given = getattr(config.known_args_namespace, "cacheroot_manifest", None) or config.getoption(
        "cacheroot_manifest", default=None
    )
    if given:
        return [os.path.abspath(config.invocation_params.dir / p) for p in given]
    return [os.path.abspath(p) for p in config.getini("cacheroot_manifest")]


def manifest_entry(
    url: str, *, sha256: str | None, namespace: str = "downloads", filename: str | None = None
) -> str:
    """The ``[[asset]]`` entry that warms ``url`` (TOML, credentials redacted), one field a line.

    Without a known digest, ``sha256`` holds what to put there instead.
    """
    digest = sha256.lower() if sha256 else "<64 hex digits: sha256sum of the file>"
    lines = ["[[asset]]", f"url = {json.dumps(redact_url(url))}", f'sha256 = "{digest}"']
    lines.append(f"namespace = {json.dumps(namespace)}")
    if filename is not None:
        lines.append(f"filename = {json.dumps(filename)}")
    return "\n".join(lines)


def miss_hint(
    url: str,
    *,
    sha256: str | None = None,
    namespace: str = "downloads",
    filename: str | None = None,
    paths: Sequence[str] = (),
    own_root: bool = False,
) -> str:
    """What to do about an offline run's miss of ``url``: only commands that can still work.

    - The miss is in a cache root the test made for itself (``own_root``): no warm step before
      the run reaches that root, so neither ``cacheroot fetch`` nor a manifest entry helps.
    - ``url`` is on loopback: its server ran on this machine for the tests (a test's port is
      gone after the run), so there is no ``cacheroot fetch`` of it, only the manifest entry to
      add, warmed while a server listens at that address.
    - Otherwise: the ``cacheroot fetch`` command, or the manifest entry and ``cacheroot warm``.
    """
    if own_root:
        return (
            "the test reads a cache root it made for itself, which nothing before the run can "
            "warm: let that test fetch with the offline switches off for its own root (data "
            "from a server it starts needs no network), or have it read the run's volume"
        )
    manifest = f"this run's manifest ({paths[0]})" if len(paths) == 1 else "the run's manifest"
    warm = f"`cacheroot warm {paths[0]}`" if len(paths) == 1 else WARM_HINT
    entry = manifest_entry(url, sha256=sha256, namespace=namespace, filename=filename)
    where = loopback_address(url)
    if where:
        return (
            f"its server ({where}) is on the machine that ran the tests, so no later "
            f"`cacheroot fetch` reaches it: add this entry to {manifest} and run {warm} while a "
            f"server listens at {where}, before the tests:\n{entry}"
        )
    command = fetch_command(url, namespace=namespace, filename=filename)
    return (
        f"warm it with `{command}`, or add this entry to "
        f"{manifest} and run {warm} before the tests:\n{entry}"
    )


#: Lines said before the terminal reporter exists (the manifest step runs before the initial
#: conftests are imported); :func:`flush_said` prints them through it once it does.
_PENDING = pytest.StashKey[list[str]]()


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)
    else:
        config.stash.setdefault(_PENDING, []).append(text)


def flush_said(config: pytest.Config) -> None:
    """Print what the manifest step said before the terminal reporter existed."""
    lines = config.stash.get(_PENDING, [])
    config.stash[_PENDING] = []
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            sys.stderr.write(line + "\n")


def _check(paths: list[str]) -> list[dict[str, Any]]:
    """Every entry of ``paths`` that is not complete (``cacheroot warm --check``), no network."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            summary = warm_manifest(path, check=True)
        except FetchError as exc:  # unreadable or invalid: the message names file and field
            raise pytest.UsageError(f"--cacheroot-manifest: {exc}") from None
        rows += [dict(row, manifest=path) for row in summary["entries"] if row["status"] != HIT]
    return rows


def _warm_manifests(paths: list[str]) -> tuple[Figures, dict[tuple[str, str], str]]:
    """``cacheroot warm`` on each manifest, in a fresh interpreter.

    Returns what it downloaded, and why each entry that failed did (by manifest and entry).

    A fresh interpreter, because the hub clients read their environment once, at import: warming
    here would import them into the controller before the run is offline, and a test run in the
    controller would then see them online.
    """
    warmed = Figures()
    reasons: dict[tuple[str, str], str] = {}
    for path in paths:
        done = subprocess.run(
            [
                sys.executable,
                *_CLI,
                "warm",
                path,
                "--json",
                f"--failure-hold={FAILURE_HOLD:g}",
                f"--attempts={PLUGIN_ATTEMPTS}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            summary = json.loads(done.stdout)
        except ValueError:
            sys.stderr.write(done.stdout + done.stderr)
            continue
        for row in summary["entries"]:
            if row["status"] != "miss":
                if row["reason"]:  # one line per entry, whatever the client's message
                    reasons[path, row["entry"]] = " ".join(row["reason"].split())
                continue
            if row["kind"] == "model":
                warmed.model_misses += 1
            else:
                warmed.fetch["misses"] += 1
                warmed.fetch["downloads"] += 1
        warmed.fetch["bytes_downloaded"] += summary["bytes"]
    return warmed, reasons


def _listing(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"  {row['status']}: {row['entry']} ({row['manifest']}): {row['reason']}" for row in rows
    ]


def _hub_store_only() -> bool:
    """Switch the hub cache this process started (``--cacheroot-hub``) to store-only; whether
    there is one. With it, the clients stay online against the hub, which answers metadata
    calls from its store where ``HF_HUB_OFFLINE`` would fail them."""
    owner, _, url = os.environ.get(CACHEROOT_HUB_OWNER, "").partition(" ")
    if owner != str(os.getpid()) or not url:
        return False
    from .._hub.service import store_only  # noqa: PLC0415 - only with a session hub

    try:
        store_only(url)
    except OSError:
        return False
    return True


def offline_first(
    config: pytest.Config, paths: list[str], *, forced: bool
) -> tuple[dict[str, Any], Figures]:
    """Check the manifests; warm what is missing (unless offline is forced); go offline.

    Returns the JSON-ready account for the report and the figures of what was warmed.
    """
    missing = _check(paths)
    warmed = Figures()
    account: dict[str, Any] = {"paths": paths, "missing": [r["entry"] for r in missing]}
    if missing and forced:
        warm = " && ".join(f"cacheroot warm {p}" for p in sorted({r["manifest"] for r in missing}))
        entries = counted(len(missing), "manifest entry", "manifest entries")
        are = "is" if len(missing) == 1 else "are"
        head = f"cacheroot: offline run, but {entries} {are} not complete in the cache:"
        them = "it" if len(missing) == 1 else "them"
        hint = (
            f"warm {them} with network access first: `{warm}` (or run without "
            f"--cacheroot-offline / {CACHEROOT_OFFLINE}=1 / {VLLM_TEST_CACHE_ONLY}=1, which "
            f"warms {them})"
        )
        # A usage error (the status INCOMPLETE_MANIFEST) is printed once; pytest.exit() in
        # pytest_configure would print the list twice, on its own and in the session's summary.
        raise pytest.UsageError("\n".join([head, *_listing(missing), hint]))
    if missing:
        entries = counted(len(missing), "entry", "entries")
        them = "it" if len(missing) == 1 else "them"
        _say(config, f"cacheroot manifest: {entries} missing; warming {them}:")
        for line in _listing(missing):
            _say(config, line)
        warmed, reasons = _warm_manifests(sorted({r["manifest"] for r in missing}))
        still = _check(paths)
        for row in still:
            reason = reasons.get((row["manifest"], row["entry"]))
            if reason is not None:
                row.update(status="failed", reason=reason)
        if still:
            entries = counted(len(still), "entry", "entries")
            _say(config, f"cacheroot manifest: {entries} could not be warmed; running online:")
            for line in _listing(still):
                _say(config, line)
            return account | {"offline": False, "failed": [r["entry"] for r in still]}, warmed
    go_offline()
    if not _hub_store_only():
        os.environ[HF_HUB_OFFLINE] = "1"
    if missing:
        _say(config, "cacheroot manifest: complete; running offline")
    return account | {"offline": True, "failed": []}, warmed
