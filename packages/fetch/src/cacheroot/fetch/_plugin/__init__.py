"""The pytest plugin: cached test data as fixtures, an offline mode, and one report line.

Enabled by the ``pytest11`` entry point of ``cacheroot-fetch`` (named ``cacheroot``; ``-p
no:cacheroot`` turns all of it off), or ``-p cacheroot.fetch._plugin``. This package registers
one plugin module per concept through ``pytest_plugins``, so pytest (and every xdist worker)
loads them with it and never without it:

- :mod:`.options`: the options, and the session state they settle into (``pytest_configure``);
- :mod:`.shard`: ``--shard-id``/``--num-shards`` (or Buildkite's parallel-job variables) mapped
  to pytest-split, balanced by recorded durations;
- :mod:`.hub`: ``--cacheroot-hub``, a hub cache for the session in front of the Hugging Face
  Hub (``HF_ENDPOINT``), started before any conftest is imported;
- :mod:`.offline`: offline-first runs: ``--cacheroot-manifest`` checked before the tests, warmed
  when incomplete, then every process is offline;
- :mod:`.guard`: loopback-only connections on offline runs (pytest-socket), and what a failed
  test is told about a miss;
- :mod:`.fixtures`: ``cached_file``, ``model_snapshot``, ``test_cache_dir``, ``build_once``,
  ``media_cache``;
- :mod:`.audit`: ``--cacheroot-audit[=warn|fail]``, the run-time audit of writes outside the
  cache root (:mod:`_cacheroot_audit`);
- :mod:`.report`: the closing line and ``--cacheroot-report`` JSON (:mod:`.figures`), counting
  the session's volume apart from the caches tests make for themselves.

``--cacheroot-offline`` (or ``CACHEROOT_OFFLINE=1``, or upstream vLLM's
``_VLLM_TEST_CACHE_ONLY=1``): every cache miss fails its test, naming the URL and the command
that warms it, and (where pytest-socket is installed) only loopback connections are allowed;
``--cacheroot-no-network`` asks for that guard alone. An offline run sets both variables for
every process it starts, so unchanged vLLM tests using upstream's helper are cache-only too.

What it may import: the download core of ``cacheroot.fetch`` and ``cacheroot.envs``; of the
other wings, the hub's :mod:`.._hub.cli` and :mod:`.._hub.service` (a session's hub cache), the
warm command :mod:`.._warm.warm` (an incomplete manifest is warmed) and :mod:`.._models.model`
and :mod:`.._models.snapshot` (the ``model_snapshot`` fixture).
"""

from __future__ import annotations

__all__: list[str] = []

#: The plugin modules pytest registers with this one (in this order: ``--help`` lists the
#: options as :mod:`.options` declares them). This package imports none of them itself, and none
#: imports another of them: pytest marks each for assertion rewriting just before importing it,
#: and warns about (under ``filterwarnings = error``: fails on) one that is already imported.
#: :mod:`.offline`, :mod:`.state` and :mod:`.figures` hold no hooks and are plain imports.
pytest_plugins = [
    f"{__name__}.{part}"
    for part in ("options", "hub", "shard", "guard", "fixtures", "audit", "report")
]
