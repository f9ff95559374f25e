"""The hub wing: ``cacheroot hub``, a pull-through cache of the Hugging Face Hub's HTTP interface.

A warm file cache does not keep a test suite green through a Hub outage: every process still
resolves branches (``HEAD /resolve/main/...``) and calls the metadata API (``model_info``,
``list_repo_files``, ``file_exists``), and ``HF_HUB_OFFLINE`` turns each of those into a certain
failure. Pointing ``HF_ENDPOINT`` at this cache protects every client (huggingface_hub,
transformers, datasets, vLLM, the ``hf`` command) without a line of test code changing:
metadata is kept per URL and credential and served stale when the Hub errs, file bytes are
fetched once, verified and served with ``Range``.

What the wing owns: the request routes (:mod:`.routes`), the store of answers and files
(:mod:`.store`), the upstream client (:mod:`.upstream`) and the large downloads it receives off
the event loop (:mod:`.receive`), the server (:mod:`.server`: the app and its dispatch, with
its :mod:`.settings` and the states it answers with, :mod:`.responses`), the metadata cache
(:mod:`.metacache`), the fill registry (:mod:`.files`: a file's digest from its metadata,
:mod:`.filemeta`; who may be sent what came with a credential, :mod:`.grants`), requests passed
through unstored (:mod:`.passthrough`), a branch's answers on one commit (:mod:`.branches`), the
Xet fields kept from clients (:mod:`.xet`), the files being fetched (:mod:`.fills`), another hub
process's download followed (:mod:`.peers`) and the partial files of dead ones
(:mod:`.partials`), the probe and the figures of a service (:mod:`.metrics`), starting one as a
child process (:mod:`.service`), the manifest of what was served (:mod:`.export`), the hub a
warm asks through and the branch answers it writes (:mod:`.answers`, called by the warm wing's
``hubanswers`` alone), the store's pruning (:mod:`.prune`, called by ``cacheroot hub prune``
and by the upkeep wing's ``cache prune``) and the command (:mod:`.cli`). What it may import: the
download core of ``cacheroot.fetch`` (``_cli``, ``_held``, ``_httpvalues``, ``_proc``,
``_progress``, ``_shared``, ``_store``) and ``cacheroot.envs``; never another wing. aiohttp is
imported only here, and only when a hub runs.
"""
