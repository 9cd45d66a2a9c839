"""The detector's three classes and the labels a run's antagonist timeline gives its intervals.

Section 5.1.3: "Data from the start (stop) of an interference up to 30 s is labelled Transient,
rest are labelled according to which interval it is (Interference or No-interference)." Here an
interval ``[end − interval, end)`` is **T** if any part of it lies within ``transient_s`` after
a start or a stop of any antagonist (one starting while another runs changes the context too);
otherwise it lies wholly inside or wholly outside the antagonists' union and is **I** or **NI**.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

ClassName = Literal["NI", "T", "I"]
CLASSES: Final[tuple[ClassName, ClassName, ClassName]] = ("NI", "T", "I")
"""Class codes are indices into this: NI = 0, T = 1, I = 2 (rows and columns of the cost
matrix in the same order)."""
NI: Final = 0
T: Final = 1
I: Final = 2  # noqa: E741 - the paper's name for the class
TRANSIENT_S: Final = 30.0
"""How long after a start or a stop an interval counts as transient (the paper's 30 s)."""


@dataclass(frozen=True)
class Period:
    """One antagonist's run: from ``start_s`` to ``stop_s`` (``inf``: to the end of the run).
    ``kind`` and ``intensity`` say what it does, for whoever makes data from a timeline; the
    labels read only the times."""

    start_s: float
    stop_s: float = math.inf
    kind: str = "cache"
    intensity: float = 1.0


@dataclass(frozen=True)
class Timeline:
    """When antagonists ran during a run (seconds since its start)."""

    periods: tuple[Period, ...] = ()

    def __post_init__(self) -> None:
        problems = [
            Problem(f"periods[{k}]", f"start {p.start_s} must be finite and before stop {p.stop_s}")
            for k, p in enumerate(self.periods)
            if not (math.isfinite(p.start_s) and p.start_s < p.stop_s)
        ]
        if problems:
            raise InputError("antagonist timeline", problems)

    @classmethod
    def of(cls, *spans: tuple[float, float]) -> Timeline:
        """A timeline of (start, stop) spans."""
        return cls(tuple(Period(a, b) for a, b in spans))

    @classmethod
    def from_events(cls, events: Iterable[tuple[float, str, Literal["start", "stop"]]]) -> Timeline:
        """From (time, antagonist id, start or stop) events in any order, as a scenario's
        timed events give them; an antagonist not stopped runs to the end, one stopped
        without having started is refused."""
        running: dict[str, float] = {}
        periods: list[Period] = []
        problems: list[Problem] = []
        for t, aid, what in sorted(events, key=lambda e: (e[0], e[2] == "start")):
            if what == "start":
                running.setdefault(aid, t)
            elif aid in running:
                periods.append(Period(running.pop(aid), t))
            else:
                problems.append(Problem(f"{aid} at {t} s", "stopped without having started"))
        if problems:
            raise InputError("antagonist timeline", problems)
        periods.extend(Period(t) for t in running.values())
        return cls(tuple(sorted(periods, key=lambda p: p.start_s)))

    def changes_s(self) -> FloatArray:
        """Every start and finite stop, sorted: the moments the context changed."""
        times = [p.start_s for p in self.periods]
        times += [p.stop_s for p in self.periods if math.isfinite(p.stop_s)]
        return np.sort(np.asarray(times, dtype=float))

    def union(self) -> list[tuple[float, float]]:
        """The spans during which at least one antagonist ran, merged, in order."""
        out: list[tuple[float, float]] = []
        for p in sorted(self.periods, key=lambda p: p.start_s):
            if out and p.start_s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], p.stop_s))
            else:
                out.append((p.start_s, p.stop_s))
        return out

    def active(self, t_s: FloatArray) -> NDArray[np.bool_]:
        """Whether an antagonist runs at each time."""
        t = np.asarray(t_s, dtype=float)
        on = np.zeros(t.shape, dtype=bool)
        for a, b in self.union():
            on |= (t >= a) & (t < b)
        return on


def label_intervals(
    end_s: Sequence[float] | FloatArray,
    interval_s: float | Sequence[float] | FloatArray,
    timeline: Timeline,
    transient_s: float = TRANSIENT_S,
    warmup_s: float = 0.0,
) -> IntArray:
    """The class of each interval ``[end − interval, end)`` (codes of ``CLASSES``); intervals
    that start before ``warmup_s`` are T as well: the service's own start, while its workers
    spawn and its caches fill, is a change of context like an antagonist's."""
    end = np.asarray(end_s, dtype=float)
    start = end - np.broadcast_to(np.asarray(interval_s, dtype=float), end.shape)
    transient = start < warmup_s
    for c in timeline.changes_s():
        transient |= (start < c + transient_s) & (end > c)
    labels = np.where(timeline.active((start + end) / 2), I, NI).astype(np.int64)
    labels[transient] = T
    return labels


__all__ = [
    "CLASSES",
    "NI",
    "TRANSIENT_S",
    "ClassName",
    "I",
    "Period",
    "T",
    "Timeline",
    "label_intervals",
]
