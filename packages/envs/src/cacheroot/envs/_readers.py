"""Known readers the static audit cannot judge from a name alone.

Some cache roots are named by variables that say nothing of a cache (``MPLCONFIGDIR``,
``NLTK_DATA``), and some locations come from a library's function whose result only its docs
describe (``torch.hub.get_dir()``). One row per name, each with where it is read, so that a row
can be checked against its source again when the library moves. This table lives beside the
layout table but is the audit's: the layout decides what is set, this says what is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from _cacheroot_layout import CACHEROOT_AUDIT_DIR, CACHEROOT_AUDIT_REPORT

__all__ = ["FUNCTIONS", "VARIABLES", "Function", "Reader"]


@dataclass(frozen=True)
class Reader:
    """An environment variable that names a location, whatever its name says."""

    name: str
    #: The audit's class of what lies there (``cache``, ``download``, ``config``, ...).
    kind: str
    #: Where the library reads it.
    source: str


@dataclass(frozen=True)
class Function:
    """A call whose result is a location: rendered in the audit's notation."""

    #: The dotted name as it is called once aliases are resolved (``torch.hub.get_dir``).
    name: str
    #: The location it returns, ``${NAME:-default}`` where a variable moves it; ``{0}`` stands
    #: for the call's first argument (``pooch.os_cache("librosa")``).
    location: str
    #: The variables that move it, first the one that decides.
    variables: tuple[str, ...]
    kind: str
    source: str


VARIABLES: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader(
            "MPLCONFIGDIR",
            "cache",
            "matplotlib matplotlib/__init__.py _get_config_or_cache_dir (font cache, tex cache)",
        ),
        Reader(
            "NLTK_DATA",
            "download",
            "nltk nltk/data.py path (and nltk/downloader.py default_download_dir)",
        ),
        Reader(
            "SCIKIT_LEARN_DATA",
            "download",
            "scikit-learn sklearn/datasets/_base.py get_data_home",
        ),
        Reader(
            "SEABORN_DATA",
            "download",
            "seaborn seaborn/utils.py get_data_home",
        ),
        Reader(
            "GENSIM_DATA_DIR",
            "download",
            "gensim gensim/downloader.py base_dir",
        ),
        Reader(
            CACHEROOT_AUDIT_DIR,
            "throwaway",
            "cacheroot-envs _cacheroot_audit.py install: the run-time audit's session directory, "
            "made by tempfile.mkdtemp for each session and handed to its child processes",
        ),
        Reader(
            CACHEROOT_AUDIT_REPORT,
            "output",
            "cacheroot-envs cacheroot/envs/_audit_report.py report_at_exit: the run-time audit's "
            "JSON report",
        ),
    )
}

FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function(
            "torch.hub.get_dir",
            "${TORCH_HOME:-${XDG_CACHE_HOME:-~/.cache}/torch}/hub",
            ("TORCH_HOME", "XDG_CACHE_HOME"),
            "download",
            "torch torch/hub.py get_dir (_get_torch_home: TORCH_HOME, else XDG_CACHE_HOME/torch)",
        ),
        Function(
            "torch.hub._get_torch_home",
            "${TORCH_HOME:-${XDG_CACHE_HOME:-~/.cache}/torch}",
            ("TORCH_HOME", "XDG_CACHE_HOME"),
            "download",
            "torch torch/hub.py _get_torch_home",
        ),
        Function(
            "pooch.os_cache",
            "${XDG_CACHE_HOME:-~/.cache}/{0}",
            ("XDG_CACHE_HOME",),
            "download",
            "pooch pooch/utils.py os_cache (platformdirs.user_cache_dir(project), where "
            "pooch.create and pooch.retrieve keep what they fetch)",
        ),
    )
}
