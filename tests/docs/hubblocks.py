"""The local test hub that stands in for the Hugging Face Hub in the docs' ``hub`` blocks.

A block marked ``<!-- console: hub -->`` runs with ``HF_ENDPOINT`` and ``MODELSCOPE_ENDPOINT``
pointed at a local test hub (``tests/hub/hubserver.py``) that serves one small repository,
:data:`REPO` (``acme/tiny-model``); the docs' examples under ``docs/examples/`` name its commit
as a literal. ``hub=FAULT`` makes the hub fail, ``hub=FAULT:N`` from the block's ``N``-th command
on (counted from 1; before it, the hub is healthy):

- ``429``: every API call (``/api/...``) is answered 429 with ``Retry-After: 0``, as a rate
  limit does; file downloads still work;
- ``outage``: every request is answered 503, as during an outage.

The fault is switched on between two commands by a line the runner adds to the block's script,
a request to a control origin of the test's own; the block shows nothing of it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.hub.hubserver import HubRepo, HubServer
    from tests.origin import Exchange, Server, static
else:
    # pytest puts tests/ on sys.path; mypy names it tests.
    from hub.hubserver import HubRepo, HubServer
    from origin import Server, static

#: The repository the docs' hub examples use; its commit is fixed by its files' bytes.
REPO = HubRepo(
    "acme/tiny-model",
    {
        "config.json": json.dumps({"model_type": "llama", "hidden_size": 16}).encode(),
        "model.safetensors": b"tiny weights\n" * 256,
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}).encode(),
    },
)
#: The faults a block can ask for.
FAULTS = ("429", "outage")


def parse(value: str) -> tuple[str | None, int]:
    """``hub``'s value as ``(fault, first command it applies to, from 0)``; ``(None, 0)``: none."""
    if not value:
        return None, 0
    fault, _, start = value.partition(":")
    if fault not in FAULTS or (start and not start.isdigit()) or start == "0":
        raise ValueError(
            f"hub={value!r} is not a hub fault: expected one of {', '.join(FAULTS)}, "
            "optionally followed by :N (the command it starts at, from 1)"
        )
    return fault, int(start or "1") - 1


def _inject(hub: HubServer, fault: str) -> None:
    if fault == "429":
        hub.fail_rate(1.0, status=429, retry_after="0", match="^/api/")
    else:
        hub.fail_rate(1.0, status=503)


@contextmanager
def serving(value: str) -> Iterator[tuple[dict[str, str], dict[int, str]]]:
    """Run the test hub for a block marked ``hub=value``.

    Yields the block's extra environment and the hidden lines to run before a command (by its
    index), which switch the fault on.
    """
    fault, start = parse(value)
    with HubServer() as hub, Server() as control:
        hub.add_hf(REPO)
        hub.add_modelscope(REPO)
        before: dict[int, str] = {}
        if fault is not None:
            if start == 0:
                _inject(hub, fault)
            else:
                answer = static(b"")

                def switch(ex: Exchange) -> None:
                    _inject(hub, fault)
                    answer(ex)

                control.route("/fault", switch)
                before[start] = f"curl -fsS -o /dev/null {control.url('/fault')}"
        env = {
            "HF_ENDPOINT": hub.url,
            "MODELSCOPE_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        yield env, before
