"""A warmed volume answers what the suite asks, not only its files (``hub_cache = true``).

A suite run through the hub cache (``pytest --cacheroot-hub``) calls the Hub's metadata API as
well as downloading files, and once its manifest is complete the run is offline: the hub cache
answers from its store alone. A warm that only downloads snapshots leaves that store empty, so
on a fresh volume ``model_info``, ``list_repo_files`` and ``file_exists`` fail with the Hub
gone. A manifest that says ``hub_cache = true`` (``cacheroot hub export-manifest`` writes it)
has each Hugging Face ``[[model]]`` asked, after its snapshot is complete, through a hub cache
whose store is the volume's (:func:`.._hub.answers.warm_hub`), with huggingface_hub itself, so
the requests are the very ones the suite's client sends (the same paths, queries and
credential). For huggingface_hub 2.4 they are, at the pinned commit and at the branch it came
from:

- ``GET /api/models/R/revision/REV``: ``model_info(R, revision=REV)``; what resolves a branch.
- ``GET /api/models/R/tree/REV?recursive=true&expand=false``: ``list_repo_files``, and the
  listing ``snapshot_download`` downloads by.
- ``HEAD /R/resolve/REV/PATH`` of each file of the entry: ``file_exists`` and
  ``hf_hub_download`` (whose bytes the snapshot already holds).
- for the branch ``main``, ``GET /api/models/R``: ``model_info(R)``, ``repo_exists(R)``.

The branch's answers are written from the commit's (:func:`.._hub.answers.pin_branch`), so that
a branch that moved since the manifest was written still names the commit the volume holds.
The commit's answers are kept for good: warming again asks the upstream nothing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._hub.answers import WarmHub
    from .._models.model import Model

__all__ = ["keep_answers"]


def keep_answers(models: Sequence[tuple[Model, str]], *, jobs: int = 4) -> dict[int, str]:
    """Leave in the volume's hub store the answers each ``(model, commit)`` needs (Hugging Face
    models; the others are skipped), ``jobs`` models at a time (a first warm asks the upstream
    a ``HEAD`` per file); why each that failed did, by its position in ``models``."""
    wanted = [(n, model, commit) for n, (model, commit) in enumerate(models) if model.hub == "hf"]
    if not wanted:
        return {}
    try:
        import huggingface_hub  # noqa: PLC0415 - optional, as for the snapshots
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError as exc:
        why = f"huggingface_hub is not installed ({exc})"
        return {n: why for n, _model, _commit in wanted}
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set, so the hub cache cannot be asked for the answers"
        return {n: why for n, _model, _commit in wanted}
    from .._hub.answers import warm_hub  # noqa: PLC0415 - only for a manifest that asks

    try:
        with warm_hub() as hub:
            api = huggingface_hub.HfApi(endpoint=hub.url)
            authorization = build_hf_headers().get("authorization")

            def one(model: Model, commit: str) -> str | None:
                try:
                    _keep(api, hub, model, commit, authorization)
                except Exception as exc:  # noqa: BLE001 - each model's failure is its row's
                    return f"the hub cache's answers were not kept: {_reason(exc)}"
                return None

            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                found = {n: pool.submit(one, model, commit) for n, model, commit in wanted}
                done = {n: future.result() for n, future in found.items()}
    except (RuntimeError, OSError, ValueError) as exc:  # HubStartError is a RuntimeError
        why = f"no hub cache to keep the answers in: {_reason(exc)}"
        return {n: why for n, _model, _commit in wanted}
    return {n: why for n, why in done.items() if why is not None}


def _reason(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _ask(api: Any, model: Model, revision: str | None, paths: Sequence[str] | None) -> list[str]:
    """Make the suite's calls for ``model`` at ``revision`` (``None``: the repository's own
    answer only) through the hub; the paths of the entry's files there."""
    kind, repo = model.repo_type, model.repo_id
    api.repo_info(repo, revision=revision, repo_type=kind)
    if revision is None:
        return []
    if paths is None:
        from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # noqa: PLC0415

        listed = api.list_repo_files(repo, revision=revision, repo_type=kind)
        paths = list(
            filter_repo_objects(
                listed,
                allow_patterns=list(model.allow_patterns or ()) or None,
                ignore_patterns=list(model.ignore_patterns or ()) or None,
            )
        )
    else:
        api.list_repo_files(repo, revision=revision, repo_type=kind)
    for path in paths:
        if not api.file_exists(repo, path, repo_type=kind, revision=revision):
            raise LookupError(f"{path} is not in {repo}@{revision}")
    return list(paths)


def _keep(api: Any, hub: WarmHub, model: Model, commit: str, authorization: str | None) -> None:
    """The answers of one model: the commit's from the upstream, the branch's written from
    them, and the branch's asked again to check that the store answers them."""
    from .._hub.answers import DEFAULT_BRANCH, pin_branch  # noqa: PLC0415

    paths = _ask(api, model, commit, None)
    branch = model.branch or (None if model.pinned else model.revision)
    if branch is None:
        return
    pin_branch(
        hub,
        repo_type=model.repo_type,
        repo_id=model.repo_id,
        branch=branch,
        commit=commit,
        authorization=authorization,
    )
    _ask(api, model, branch, paths)
    if branch == DEFAULT_BRANCH:
        _ask(api, model, None, None)
