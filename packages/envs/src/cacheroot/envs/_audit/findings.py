"""What the audit reports: a :class:`Finding` per place that decides where something is
cached, and an :class:`Unfollowed` per place it could not follow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .names import CACHE

if TYPE_CHECKING:
    from .downloaders import Fetched


#: What an :class:`Unfollowed` is.
RUN_TIME_NAME = "environment name built at run time"
HELPER = "helper in another module"


@dataclass(frozen=True)
class Unfollowed:
    """A place the analysis could not follow: a name built at run time, a helper in another
    module. Counted per package, so that nothing found never reads as nothing there."""

    dist: str
    file: str
    line: int
    what: str
    text: str


@dataclass
class Finding:
    """One place that decides where something is cached.

    ``variable`` is the environment variable that moves it (``None``: nothing does);
    ``expression`` is the whole location as the code builds it, ``default`` where it lies when
    the variable is unset (``""``: not decided in this expression). ``fallback_of`` names the
    variable read earlier in the same function (or in its caller) that this location is the
    fallback of, with that read's line.
    """

    dist: str
    version: str
    file: str
    line: int
    variable: str | None
    expression: str
    default: str
    style: tuple[str, ...]
    fallback_of: tuple[str, int] | None = None
    #: What lies there (:data:`KINDS`), and why the audit says so.
    kind: str = CACHE
    reason: str = ""
    #: The platforms (``sys.platform`` values) on whose branch it lies; ``()``: every one.
    runs_on: tuple[str, ...] = ()
    #: In a source tree of one's own, the download that lands there (what to call instead).
    fetched: Fetched | None = None
    #: The fixed places the variable falls back on besides its own default, folded into this
    #: finding (``default`` holds the whole chain: ``~/.x, else /tmp/.x``).
    fallbacks: tuple[str, ...] = ()

    @property
    def upstream(self) -> str:
        """Where it is read, as the layout table's ``upstream`` entries spell it."""
        return f"{self.dist}=={self.version} {self.file}" if self.version else self.file
