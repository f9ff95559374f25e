"""Runs one hub operation in a fresh process and prints its outcome as one JSON line.

The hub clients read their environment (endpoint, cache, offline switch) when first imported,
so each operation gets a process of its own, started with exactly the environment it needs;
several of them at once are also how a fleet of CI jobs looks to the cache.

Usage: ``python hubdriver.py '<json>'`` with ``{"op": ..., "spec": {...}, "kw": {...},
"gate": bool}``. With ``gate``, the process prints ``ready`` once imported and waits for a line
on stdin before it starts, so a test can release several processes at the same moment.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _run(op: str, spec_args: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    from cacheroot.fetch import Model
    from cacheroot.fetch._models.snapshot import offline_snapshot_path, warm_snapshot

    spec = Model(**spec_args)
    if op == "warm":
        return {"path": str(warm_snapshot(spec, **kw))}
    if op == "hf-offline":
        # The transformers-free loading path: huggingface_hub resolving the cached snapshot.
        import huggingface_hub

        snapshot = huggingface_hub.snapshot_download(
            spec.repo_id, revision=spec.revision, repo_type=spec.repo_type
        )
        config = huggingface_hub.hf_hub_download(
            spec.repo_id, "config.json", revision=spec.revision, repo_type=spec.repo_type
        )
        return {
            "path": str(offline_snapshot_path(spec)),
            "snapshot": snapshot,
            "config": config,
        }
    if op == "ms-offline":
        from modelscope.hub.snapshot_download import snapshot_download

        snapshot = snapshot_download(
            repo_id=spec.repo_id, revision=spec.revision, local_files_only=True
        )
        return {"path": str(offline_snapshot_path(spec)), "snapshot": snapshot}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    """Parse the request, optionally wait at the gate, run it, print the outcome."""
    request = json.loads(sys.argv[1])
    import cacheroot.fetch._models.snapshot  # noqa: F401 - import before the gate, like a worker would

    if request.get("gate"):
        # A test worker has its hub client imported long before it needs a model; import it
        # here too, so that the released processes really reach the hub at the same moment.
        if request["spec"].get("hub", "hf") == "hf":
            import huggingface_hub  # noqa: F401
        else:
            import modelscope.hub.snapshot_download  # noqa: F401

        print("ready", flush=True)  # noqa: T201 - the protocol with the test
        sys.stdin.readline()
    start = time.monotonic()
    try:
        out = _run(request["op"], request["spec"], request.get("kw", {}))
    except Exception as error:
        out = {
            "error": type(error).__name__,
            "message": str(error),
            "status": getattr(error, "status", None),
        }
    out["elapsed"] = time.monotonic() - start
    print(json.dumps(out), flush=True)  # noqa: T201 - the protocol with the test


if __name__ == "__main__":
    main()
