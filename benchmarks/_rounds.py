"""Interleaved rounds with the order of the arms rotated, and the figures drawn from them.

Every benchmark script measures its arms the same way: each round runs every arm once, and the
order rotates by one arm per round (ABC, BCA, CAB, ...), so that drift in the machine's load and
whatever one arm leaves behind for the next (dirty pages, a busy core, a warm CPU cache) fall on
every arm alike. With as many rounds as arms (or a multiple), each arm runs in each position
equally often. Each arm reports one sample per round; the scripts print, per arm, the median and
the spread (min-max and the interquartile range) over the rounds, and ratios are taken round by
round (arm against baseline in the same round) before their median is taken.

:class:`Conditions` records what the figures were measured under: the Python, the CPUs and the
load average before and after, which every script prints with its figures.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

#: The fewest rounds a reported figure may come from.
MIN_ROUNDS = 5


def rotated(names: Sequence[str], index: int) -> list[str]:
    """``names`` rotated left by ``index`` places: round 0 ABC, round 1 BCA, round 2 CAB."""
    if not names:
        return []
    shift = index % len(names)
    return [*names[shift:], *names[:shift]]


@dataclass(frozen=True)
class Rounds:
    """The samples of every arm in round order, and the order each round ran in."""

    samples: dict[str, list[float]]
    orders: list[list[str]]

    def last(self, scale: float = 1.0, fmt: str = ".4g") -> str:
        """The latest round: its number and each arm's sample (times ``scale``), in run order."""
        order = self.orders[-1]
        return f"round {len(self.orders)}: " + ", ".join(
            f"{name} {self.samples[name][-1] * scale:{fmt}}" for name in order
        )

    def summary(self, arm: str) -> Summary:
        """Median and spread of ``arm``'s samples."""
        return Summary.of(self.samples[arm])

    def ratios(self, numerator: str, denominator: str) -> list[float]:
        """``numerator / denominator`` in each round (the same round's samples)."""
        return [
            n / d for n, d in zip(self.samples[numerator], self.samples[denominator], strict=True)
        ]


def run_rounds(
    arms: Mapping[str, Callable[[], float]],
    rounds: int,
    *,
    warmup: int = 0,
    each: Callable[[Rounds], None] | None = None,
) -> Rounds:
    """Call every arm once per round, in an order rotated each round; each call is one sample.

    ``warmup`` rounds run first, rotated alike, and are dropped. ``each(so_far)`` is called
    after every measured round (to print progress or that round's figures).
    """
    names = list(arms)
    result = Rounds({name: [] for name in names}, [])
    for index in range(-warmup, rounds):
        order = rotated(names, index)
        values = [(name, arms[name]()) for name in order]
        if index < 0:
            continue
        for name, value in values:
            result.samples[name].append(value)
        result.orders.append(order)
        if each is not None:
            each(result)
    return result


@dataclass(frozen=True)
class Summary:
    """Median, min-max and interquartile range of some samples."""

    n: int
    median: float
    low: float
    high: float
    q1: float
    q3: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """The summary of ``values`` (at least one)."""
        if not values:
            raise ValueError("no samples to summarise")
        if len(values) == 1:
            q1 = q3 = values[0]
        else:
            q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return cls(len(values), statistics.median(values), min(values), max(values), q1, q3)

    def scaled(self, factor: float) -> Summary:
        """Every figure multiplied by ``factor`` (seconds to milliseconds, ...)."""
        return Summary(
            self.n,
            self.median * factor,
            self.low * factor,
            self.high * factor,
            self.q1 * factor,
            self.q3 * factor,
        )

    def text(self, fmt: str = ".2f") -> str:
        """``median (min-max)``, as the tables print it."""
        return f"{self.median:{fmt}} ({self.low:{fmt}}-{self.high:{fmt}})"

    def as_dict(self) -> dict[str, float]:
        """The figures as a JSON-ready mapping."""
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def table(
    rows: Mapping[str, Summary],
    *,
    unit: str,
    fmt: str = ".2f",
    ratios: Mapping[str, Summary] | None = None,
    ratio_title: str = "ratio",
) -> list[str]:
    """Lines of a table: per arm the median, min, max, IQR and, if given, a ratio."""
    width = max([len("arm"), *(len(name) for name in rows)]) + 2
    rounds = next(iter(rows.values())).n if rows else 0
    head = f"{'arm':<{width}}{'median':>10}{'min':>10}{'max':>10}{'p25':>10}{'p75':>10}"
    head += f"  {ratio_title}: median (min-max)" if ratios else ""
    lines = [f"{unit}, over {rounds} rounds:", head]
    for name, s in rows.items():
        line = f"{name:<{width}}"
        line += "".join(f"{v:>10{fmt}}" for v in (s.median, s.low, s.high, s.q1, s.q3))
        if ratios and name in ratios:
            line += f"  {ratios[name].text('.2f')}"
        lines.append(line)
    return lines


@dataclass
class Conditions:
    """What a run was measured under: Python, CPUs, and the load before and after."""

    python: str
    cpus: int
    usable_cpus: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] | None = None

    @classmethod
    def now(cls) -> Conditions:
        """The conditions at the start of a run."""
        cpus = os.cpu_count() or 1
        affinity = getattr(os, "sched_getaffinity", None)
        usable = len(affinity(0)) if affinity is not None else cpus
        python = f"{platform.python_implementation()} {platform.python_version()}"
        return cls(f"{python} ({sys.executable})", cpus, usable, os.getloadavg())

    def header(self) -> str:
        """The line printed before the figures."""
        return (
            f"python: {self.python}\n"
            f"nproc: {self.usable_cpus} usable of {self.cpus}\n"
            f"load average before (1, 5, 15 min): {_load(self.load_before)}"
        )

    def footer(self) -> str:
        """The line printed after the figures (records the load after)."""
        self.load_after = os.getloadavg()
        busiest = max(self.load_before[0], self.load_after[0])
        line = f"load average after (1, 5, 15 min): {_load(self.load_after)}"
        if busiest >= self.usable_cpus:
            line += (
                f"\nnote: the 1-minute load reached {busiest:.2f} on {self.usable_cpus} CPUs: "
                "the machine was busy, so absolute times are inflated and ratios noisier"
            )
        return line

    def as_dict(self) -> dict[str, object]:
        """The conditions as a JSON-ready mapping."""
        return dataclasses.asdict(self)


def _load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in load)
