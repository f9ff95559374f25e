"""Exporters: the same resolved layout as shell, docker, GitHub Actions and JSON text.

Every exporter works from a :class:`~cacheroot.envs._layout.Layout`, so a variable added to the
table reaches every format (and every CI script that uses one) without further edits.
"""

from __future__ import annotations

import os
import stat

from _cacheroot_layout import (
    CACHEROOT,
    CACHEROOT_OPT_IN,
    CACHEROOT_SHARED,
    CACHEROOT_TAG,
    TABLE,
    TAGS,
    Layout,
    Variable,
    path_problem,
    resolve,
    shared_root,
)

from ._shared_tier import shared_url

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

FORMATS = ("docker", "github", "json", "sh")


def _quote(value: str) -> str:
    import shlex  # noqa: PLC0415 - exporters are off the start-up path; keep the hook lean

    return shlex.quote(value)


def _given(layout: Layout) -> list[tuple[str, str]]:
    """``CACHEROOT`` (and ``CACHEROOT_TAG``) as resolved: a process started from the exported
    environment sees the root (and tag) the layout was given, as one started by docker does."""
    given = [] if layout.root is None else [(CACHEROOT, layout.root)]
    if layout.tag:
        given.append((CACHEROOT_TAG, layout.tag))
    return given


def to_sh(layout: Layout) -> str:
    """POSIX ``export`` lines, quoted; unset and invalid variables as comments."""
    lines = [f"export {name}={_quote(value)}" for name, value in _given(layout)]
    for s in layout.settings.values():
        if s.value is not None and s.source != "invalid":
            lines.append(f"export {s.name}={_quote(s.value)}")
        else:
            lines.append(f"# {s.name}: {s.source}{': ' + s.reason if s.reason else ''}")
    return "\n".join(lines) + "\n"


def to_github(layout: Layout) -> str:
    """Lines for ``$GITHUB_ENV``; a value with a newline uses the delimiter form."""
    pairs = _given(layout) + [
        (s.name, s.value)
        for s in layout.settings.values()
        if s.value is not None and s.source != "invalid"
    ]
    lines = []
    for name, value in pairs:
        if "\n" in value:
            delimiter = "CACHEROOT_EOF"
            while delimiter in value:
                delimiter += "_"
            lines.append(f"{name}<<{delimiter}\n{value}\n{delimiter}")
        else:
            lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def to_json(layout: Layout) -> str:
    """``{"root": ..., "tag": ..., "variables": {NAME: {"value": ..., "source": ...}}}``."""
    import json  # noqa: PLC0415 - off the start-up path

    variables: dict[str, dict[str, str | None]] = {}
    for s in layout.settings.values():
        entry: dict[str, str | None] = {"value": s.value, "source": s.source}
        if s.reason:
            entry["reason"] = s.reason
        variables[s.name] = entry
    document = {
        "root": layout.root,
        "root_source": layout.root_source,
        "tag": layout.tag,
        "variables": variables,
        "problems": layout.problems,
    }
    return json.dumps(document, indent=2) + "\n"


def _with_shared(fmt: str, text: str, environ: Mapping[str, str]) -> str:
    """``text`` with the shared tier added in ``fmt``: it is no table row, but every host and
    container of a fleet needs it."""
    l2 = shared_url(environ) or shared_root(environ)
    if l2 is None:
        return text
    if fmt == "sh":
        return text + f"export {CACHEROOT_SHARED}={_quote(l2)}\n"
    if fmt == "github":
        return text + f"{CACHEROOT_SHARED}={l2}\n"
    if fmt == "json":
        import json  # noqa: PLC0415 - off the start-up path

        document = json.loads(text)
        document["shared"] = l2
        return json.dumps(document, indent=2) + "\n"
    return text


def docker_args(
    environ: Mapping[str, str],
    *,
    tag: str | None = None,
    container_root: str | None = None,
    pin: Mapping[str, str] | None = None,
) -> list[str]:
    """``--volume=HOST:CONTAINER`` for the root, then ``--env=K=V`` for each variable it sets.

    Values are resolved for the container: against ``container_root`` (by default the host's
    root path), with nothing inherited from the host but the tag and the opt-in list, since a
    host's explicit paths mean nothing inside the container. ``pin`` as for :func:`export`.
    """
    host = resolve(environ, tag, pin)
    if host.root is None:
        raise ValueError(_unusable(host))
    problem = _not_a_directory(host.root)
    if problem:
        raise ValueError(problem)
    inside = container_root or host.root
    problem = path_problem(inside)
    if problem:
        raise ValueError(
            f"cannot export docker arguments: the container root {inside!r} {problem}; "
            "give the root's absolute path inside the container"
        )
    clean = {CACHEROOT: inside, CACHEROOT_OPT_IN: environ.get(CACHEROOT_OPT_IN, "")}
    layout = resolve(clean, host.tag)
    if layout.root is None:  # pragma: no cover - path_problem above is the resolver's own check
        raise ValueError(_unusable(layout))
    for side, path in (("host", host.root), ("container", layout.root)):
        if ":" in path:
            # --volume=HOST:CONTAINER[:OPTIONS] splits on every colon: docker would mount
            # something else, or refuse the line, far from here.
            raise ValueError(
                f"cannot export docker arguments: the {side} root {path!r} contains ':', which "
                "docker's --volume=HOST:CONTAINER cannot express; use a root without ':' (a "
                "symlink to it will do)"
            )
    args = [f"--volume={host.root}:{layout.root}", f"--env={CACHEROOT}={layout.root}"]
    if layout.tag:
        args.append(f"--env={CACHEROOT_TAG}={layout.tag}")
    args += [f"--env={name}={value}" for name, value in layout.applied().items()]
    url = shared_url(environ)
    if url is not None:  # a bucket: nothing to mount, the same URL everywhere
        return [*args, f"--env={CACHEROOT_SHARED}={url}"]
    l2 = shared_root(environ)
    if l2 is not None:
        if ":" in l2:
            raise ValueError(
                f"cannot export docker arguments: {CACHEROOT_SHARED}={l2!r} contains ':', which "
                "docker's --volume=HOST:CONTAINER cannot express; use a path without ':'"
            )
        # The shared tier keeps its path inside: every host and container then names it alike.
        args += [f"--volume={l2}:{l2}", f"--env={CACHEROOT_SHARED}={l2}"]
    return args


def to_docker(args: list[str]) -> str:
    """One argument a line (``--volume=...``, ``--env=K=V``): ``mapfile -t`` reads it safely."""
    return "\n".join(args) + "\n"


def _unusable(layout: Layout) -> str:
    """One message for every format: an export without a root would leave CI with no layout."""
    return f"cannot export the layout: {layout.root_reason}"


def _not_a_directory(root: str) -> str:
    """Why the root ``root`` cannot hold a layout though it resolved (``""``: it can).

    Resolving never looks at the disk (it runs at every interpreter's start), so a root that
    exists as a file (or a FIFO, a device, a link to one) passes it; exported, every cache of the
    layout would sit below a file, and each tool would fail on its own, far from the cause. A
    root not there yet is fine: the first tool that writes creates it.
    """
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot export the layout: {CACHEROOT}={root} cannot be looked at ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return ""
    return (
        f"cannot export the layout: {CACHEROOT}={root} exists and is not a directory; "
        "move it away or point CACHEROOT at a directory"
    )


def export(
    fmt: str,
    environ: Mapping[str, str] | None = None,
    *,
    tag: str | None = None,
    container_root: str | None = None,
    pin: Mapping[str, str] | None = None,
) -> str:
    """Render the layout of ``environ`` (default: this process's) in one of :data:`FORMATS`.

    ``pin`` (what :func:`~_cacheroot_layout.read_pin` found) stands in for an unset ``CACHEROOT``
    as in the hook, so that ``cacheroot env`` shows what a hooked interpreter gets.

    Raises :class:`ValueError` when the root is unusable, in every format: text that sets no
    layout (``cacheroot env --format github >> "$GITHUB_ENV"``) would let a CI job carry on
    with every cache in its default place.
    """
    env = os.environ if environ is None else environ
    if fmt == "docker":
        return to_docker(docker_args(env, tag=tag, container_root=container_root, pin=pin))
    renderers = {"sh": to_sh, "github": to_github, "json": to_json}
    if fmt not in renderers:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if container_root is not None:
        raise ValueError(
            f"container_root applies to the docker format only, not {fmt!r}: drop it, or "
            "export in the docker format"
        )
    layout = resolve(env, tag, pin)
    if layout.root is None:
        raise ValueError(_unusable(layout))
    problem = _not_a_directory(layout.root)
    if problem:
        raise ValueError(problem)
    return _with_shared(fmt, renderers[fmt](layout), env)


def _location(var: Variable) -> str:
    if not var.parent:
        return f"`$CACHEROOT/{var.path}`" if var.path else "`$CACHEROOT`"
    return f"`${var.parent}/{var.path}`"


def _readers(var: Variable) -> str:
    """``dist==version path`` as "dist version `path`"; ``doc: ...`` as its text."""
    shown = []
    for reader in var.upstream:
        if reader.startswith("doc:"):
            shown.append(reader[4:].strip())
            continue
        dist, _, path = reader.partition(" ")
        name, _, version = dist.partition("==")
        shown.append(f"{name} {version} `{path}`" if version else f"{name} {path}")
    return "; ".join(shown)


def table_markdown() -> str:
    """The variable table of ``docs/reference/variables.md``, generated from
    :data:`_cacheroot_layout.TABLE`."""
    lines = [
        "| variable | cacheroot sets | tags | purpose | replaces (upstream default) | read by |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in TABLE:
        where = {"default": _location(v), "opt-in": f"{_location(v)} (opt-in)"}.get(v.mode, "never")
        tags = "all" if v.tags == TAGS else ", ".join(v.tags)
        cells = (f"`{v.name}`", where, tags, v.purpose, v.replaces, _readers(v))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
