"""A local wheelhouse made in the test session from the distributions this environment holds.

Installs that the tests run offline (``pip install .``, ``uv pip install .``, ``uv build``, the
bootstrap's ``uv pip install nox``) need wheels: the build backend, the members' dependencies,
nox. Taking them from uv's or pip's cache made the outcome depend on what that cache happened
to hold. Here each needed distribution is packed back into a wheel from its installed files (as
listed in its ``RECORD``), with a fresh ``RECORD``; pip comes from the wheel ``ensurepip``
bundles. Installers then get ``--find-links`` to this directory and no index, and a cache of
their own.

Only what the running environment holds can be packed: a missing distribution is named (with
what to install) by :class:`MissingError`, which the tests turn into a skip that says so.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import re
import shutil
import sysconfig
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if TYPE_CHECKING:
    from collections.abc import Iterable

#: Files of an installed ``.dist-info`` that describe the installation, not the wheel.
INSTALL_RECORDS = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


class MissingError(LookupError):
    """A distribution the wheelhouse needs is not installed here."""

    def __init__(self, name: str, wanted_by: str) -> None:
        super().__init__(name, wanted_by)
        self.name = name
        self.wanted_by = wanted_by

    def __str__(self) -> str:
        return (
            f"{self.name} (needed by {self.wanted_by}) is not installed in this environment, so "
            "no offline wheel of it can be made here; install it into this environment (the "
            "test dependency group of pyproject.toml is where it belongs)"
        )


def closure(names: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` and everything they require here (markers
    evaluated for this interpreter, no extras), each once."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(Requirement(n), "the tests") for n in names]
    while todo:
        req, wanted_by = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # not for this interpreter (tomli on 3.11+), nor an extra's
        key = canonicalize_name(req.name)
        if key in found:
            continue
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            raise MissingError(req.name, wanted_by) from None
        found[key] = dist
        todo += [(Requirement(line), req.name) for line in dist.requires or []]
    return list(found.values())


def _digest(data: bytes) -> str:
    raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={raw.decode()}"


def repack(dist: importlib.metadata.Distribution, dest: Path) -> Path:
    """``dist`` as a wheel in ``dest``, from its installed files; its path."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"]).lower()
    version = dist.version
    info = f"{name}-{version}.dist-info"
    lines = (dist.read_text("WHEEL") or "").splitlines()
    tags = [ln.split(":", 1)[1].strip().split("-") for ln in lines if ln.startswith("Tag:")]
    # The compressed tag set of the file name: py2-none-any and py3-none-any are py2.py3-none-any.
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3)) if tags else ""
    path = dest / f"{name}-{version}-{tag or 'py3-none-any'}.whl"
    records: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in dist.files or []:
            parts = file.parts
            if parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc":
                continue  # scripts (made again from entry_points.txt) and bytecode
            if parts[0].endswith(".dist-info") and file.name in INSTALL_RECORDS:
                continue
            data = Path(str(dist.locate_file(file))).read_bytes()
            # The dist-info directory takes the wheel's spelling of the name (PyYAML: pyyaml).
            inside = "/".join(parts[1:])
            arcname = f"{info}/{inside}" if parts[0].endswith(".dist-info") else "/".join(parts)
            wheel.writestr(arcname, data)
            records.append(f"{arcname},{_digest(data)},{len(data)}")
        records.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return path


def bundled_pip(dest: Path) -> Path:
    """The pip wheel that ``ensurepip`` installs for this interpreter, copied into ``dest``.

    CPython bundles it in ``ensurepip/_bundled``; a distribution's Python (Debian's, Ubuntu's)
    leaves that out and names the directory of its own wheels in the build configuration
    variable ``WHEEL_PKG_DIR``, where its ``ensurepip`` looks instead.
    """
    import ensurepip

    places = [Path(ensurepip.__file__).parent / "_bundled"]
    if packaged := sysconfig.get_config_var("WHEEL_PKG_DIR"):
        places.append(Path(packaged))
    for place in places:
        wheels = sorted(place.glob("pip-*.whl"))
        if wheels:
            return Path(shutil.copy2(wheels[-1], dest / wheels[-1].name))
    raise MissingError("pip", f"ensurepip (looked in {', '.join(map(str, places))})")


def build(dest: Path, names: Iterable[str], *, pip: bool = False) -> Path:
    """A wheelhouse in ``dest`` with ``names`` and what they require (and pip); ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for dist in closure(names):
        repack(dist, dest)
    if pip:
        bundled_pip(dest)
    return dest


def offline(env: dict[str, str], wheels: Path, cache: Path) -> dict[str, str]:
    """``env`` with pip and uv pointed at ``wheels`` only: no index, no network, no user
    configuration, and ``cache`` (a fresh directory) as uv's cache."""
    out = dict(env)
    out.update(
        UV_CACHE_DIR=str(cache),
        UV_OFFLINE="1",
        UV_NO_INDEX="1",
        UV_FIND_LINKS=str(wheels),
        UV_PYTHON_DOWNLOADS="never",
        UV_NO_CONFIG="1",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_CONSTRAINT", "UV_INDEX_URL", "UV_INDEX"):
        out.pop(name, None)
    return out
