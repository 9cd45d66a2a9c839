"""What IC2's detector reads of one instance over one interval: the paper's attributes and
what else a tenant can read here.

The paper's (Section 4, "Interference detection"): response time, throughput, CPU, and two
derived metrics, **LPO** = CPU / throughput (load per operation: CPU time per request) and
**WorkDone** = RT × throughput × CPU (by Little's law RT × throughput is the mean number of
requests in the server, so WorkDone is that number times the cores busy). Beside them, what it
lacked and a tenant can read from its own cgroup and host: PSI "some" shares for CPU, memory and
IO, run-queue wait, CFS throttling and the host link's utilisation. Hardware counters (LLC miss
rate, CPI), the paper's "conclusive proof" on its own testbed, are optional: clouds hide them,
and the detector works without them.

A value that was not measured is NaN, never a made-up zero: the tree routes it the way its
training sent missing values (``quell.detect.tree``), and the three attributes the paper's tree
is built on (``CORE_FEATURES``) must all be present for a verdict at all (``core_present``).

**Over a window of intervals.** A detector may read each feature as its median over the last
``window_intervals`` intervals (this one and those before it; ``roll`` over a run,
``FeatureWindow`` one interval at a time, both giving the same numbers). At 1 s sampling an
antagonist's effect on one interval is noisy (the service's own response time swings as much
between seconds); the median of three keeps one odd second from deciding. NaN values are left
out of a median (NaN if all are); a core feature an interval did not measure stays NaN in its
row whatever the window holds, so that interval still gets no verdict. The window is the detector's
(``CostSensitiveTree.window_intervals``), recorded in its bundle.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import THROTTLED_KEY, Observation
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]

LINK_UTIL_KEY: Final = "link_util_pct"
"""``Observation.extra`` key: the host link's utilisation in the interval, in per cent (the lab's
sampler and the simulator report it)."""
LLC_MISS_RATE_KEY: Final = "llc_miss_rate_pct"
"""``Observation.extra`` key: last-level-cache misses per reference, in per cent (hardware
counters; the paper's CMR). Absent here."""
CPI_KEY: Final = "cpi"
"""``Observation.extra`` key: cycles per instruction retired (hardware counters). Absent here."""

RT = "rt_s"
THROUGHPUT = "throughput_rps"
CPU = "cpu_cores"
LPO = "lpo_cpu_s_per_req"
WORKDONE = "workdone_req_cores"

PAPER_FEATURES: Final[tuple[str, ...]] = (LPO, WORKDONE, RT)
"""The attributes of the paper's tree (Section 4, "Decision Tree for Detecting Interference")."""
CORE_FEATURES: Final[tuple[str, ...]] = PAPER_FEATURES
"""Without all three the detector gives no verdict for the interval."""
TENANT_FEATURES: Final[tuple[str, ...]] = (
    "psi_cpu_some_pct",
    "psi_memory_some_pct",
    "psi_io_some_pct",
    "runqueue_wait_s_per_s",
    "cfs_throttled_s_per_s",
    LINK_UTIL_KEY,
)
"""What the paper lacked and a tenant can read here."""
HARDWARE_FEATURES: Final[tuple[str, ...]] = (LLC_MISS_RATE_KEY, CPI_KEY)
DEFAULT_FEATURES: Final[tuple[str, ...]] = (
    RT,
    THROUGHPUT,
    CPU,
    LPO,
    WORKDONE,
    *TENANT_FEATURES,
)
"""Every feature but the hardware counters'."""
ALL_FEATURES: Final[tuple[str, ...]] = (*DEFAULT_FEATURES, *HARDWARE_FEATURES)

NAN: Final = math.nan


def _per_s(value: float | None, interval_s: float) -> float:
    return NAN if value is None or interval_s <= 0 else value / interval_s


def _ratio(num: float | None, den: float | None) -> float:
    return NAN if num is None or den is None or den <= 0 else num / den


def _extra(obs: Observation, key: str) -> float:
    value = obs.extra.get(key)
    return NAN if value is None else float(value)


def _workdone(obs: Observation) -> float:
    rt, cpu = obs.mean_rt_seconds, obs.cpu_util
    return NAN if rt is None or cpu is None else rt * obs.throughput_rps * cpu


def _psi(name: str) -> Callable[[Observation], float]:
    def read(obs: Observation) -> float:
        value = getattr(obs, name)
        return NAN if value is None else float(value)

    return read


_READ: Final[dict[str, Callable[[Observation], float]]] = {
    RT: lambda o: NAN if o.mean_rt_seconds is None else o.mean_rt_seconds,
    THROUGHPUT: lambda o: o.throughput_rps,
    CPU: lambda o: NAN if o.cpu_util is None else o.cpu_util,
    LPO: lambda o: _ratio(o.cpu_util, o.throughput_rps),
    WORKDONE: _workdone,
    **{n: _psi(n) for n in ("psi_cpu_some_pct", "psi_memory_some_pct", "psi_io_some_pct")},
    "runqueue_wait_s_per_s": lambda o: _per_s(o.runqueue_wait_seconds, o.interval_s),
    "cfs_throttled_s_per_s": lambda o: _per_s(o.extra.get(THROTTLED_KEY), o.interval_s),
    LINK_UTIL_KEY: lambda o: _extra(o, LINK_UTIL_KEY),
    LLC_MISS_RATE_KEY: lambda o: _extra(o, LLC_MISS_RATE_KEY),
    CPI_KEY: lambda o: _extra(o, CPI_KEY),
}
"""How each feature is read from an observation; NaN when it was not measured. Throughput is
always measured (0 when nothing completed); LPO is then undefined, not infinite."""


def check_features(names: Sequence[str], source: str = "features") -> tuple[str, ...]:
    """``names`` as a tuple, refused (``InputError``) if one is unknown or repeated or a core
    feature is missing."""
    problems = [
        Problem(f"{source}[{k}]", f"unknown feature {n!r} (known: {', '.join(ALL_FEATURES)})")
        for k, n in enumerate(names)
        if n not in ALL_FEATURES
    ]
    if len(set(names)) != len(names):
        problems.append(Problem(source, "a feature is named twice"))
    missing = [n for n in CORE_FEATURES if n not in names]
    if missing:
        problems.append(Problem(source, f"the paper's attributes are required: {missing}"))
    if problems:
        raise InputError(source, problems)
    return tuple(names)


def feature_row(obs: Observation, names: Sequence[str]) -> list[float]:
    """One interval's features in the order of ``names`` (plain floats; NaN where not
    measured). The single-instance path: no numpy, so one call costs a few microseconds."""
    return [_READ[n](obs) for n in names]


def feature_matrix(
    observations: Sequence[Observation], names: Sequence[str], window_intervals: int = 1
) -> FloatArray:
    """One row per observation, one column per name; NaN where not measured. With
    ``window_intervals`` > 1 the observations are one instance's, in time order, and each row
    is rolled over the window (``roll``)."""
    out = np.full((len(observations), len(names)), np.nan)
    for k, obs in enumerate(observations):
        out[k] = feature_row(obs, names)
    if window_intervals == 1:
        return out
    return roll(out, window_intervals, core_index(names))


def core_index(names: Sequence[str]) -> tuple[int, ...]:
    """Where the core features are in ``names``."""
    return tuple(list(names).index(n) for n in CORE_FEATURES)


def core_present(row: Sequence[float], core_index: Sequence[int]) -> bool:
    """Whether every core feature (at ``core_index`` in ``row``) was measured."""
    return all(row[k] == row[k] for k in core_index)  # NaN != NaN


def _median(values: list[float]) -> float:
    """The median of the values that are not NaN (NaN if none is); an even count gives the
    mean of the middle two, as ``numpy.nanmedian``."""
    v = sorted(x for x in values if x == x)
    n = len(v)
    if n == 0:
        return NAN
    mid = n // 2
    return v[mid] if n % 2 else (v[mid - 1] + v[mid]) / 2


class FeatureWindow:
    """One instance's rows, one interval at a time, as medians over the last
    ``window_intervals`` (module docstring); ``core_index``: where the core features are."""

    def __init__(self, window_intervals: int, core_index: Sequence[int]) -> None:
        if window_intervals < 1:
            raise ValueError(f"window_intervals must be >= 1, got {window_intervals}")
        self.window_intervals = window_intervals
        self.core_index = tuple(core_index)
        self.rows_: deque[list[float]] = deque(maxlen=window_intervals)

    def push(self, row: Sequence[float]) -> list[float]:
        """Take this interval's row; return the row the detector reads for it."""
        if self.window_intervals == 1:
            return list(row)
        self.rows_.append(list(row))
        out = [_median([r[j] for r in self.rows_]) for j in range(len(row))]
        for k in self.core_index:
            if row[k] != row[k]:  # not measured in this interval: no verdict for it
                out[k] = NAN
        return out


def roll(x: FloatArray, window_intervals: int, core_index: Sequence[int]) -> FloatArray:
    """The rows of one instance's run, in time order, as ``FeatureWindow`` gives them."""
    x = np.asarray(x, dtype=float)
    if window_intervals == 1:
        return x.copy()
    win = FeatureWindow(window_intervals, core_index)
    out = np.empty_like(x)
    for k, row in enumerate(x.tolist()):
        out[k] = win.push(row)
    return out


__all__ = [
    "ALL_FEATURES",
    "CORE_FEATURES",
    "CPI_KEY",
    "DEFAULT_FEATURES",
    "HARDWARE_FEATURES",
    "LINK_UTIL_KEY",
    "LLC_MISS_RATE_KEY",
    "PAPER_FEATURES",
    "TENANT_FEATURES",
    "FeatureWindow",
    "check_features",
    "core_index",
    "core_present",
    "feature_matrix",
    "feature_row",
    "roll",
]
