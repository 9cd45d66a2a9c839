"""Records to features: what the request's own thread saw, per request.

Per request: CPU time, run-queue wait, blocked time (wall − CPU − run-queue wait, clipped at 0),
timeslices, voluntary and involuntary context switches, yields; with the optional eBPF part the
run-queue wait behind other cgroups and the preemptions by them; PSI "some" stall time over the
request's window, from a sample series of cumulative totals (``PsiSeries``, system and the
service's cgroup) interpolated linearly to the request's start and end; what the machine was like
in the second before the request started (``RECENT_S``: the run-queue wait of the service's
requests that ended in it, and the PSI stall time over it, each as a share of the second); and
the request's class,
one-hot (the seed trains one model over all requests and suggests per-class models where classes
load the machine differently: a one-hot column lets one model learn per-class offsets).

The recent features are what tells a request queued behind the service's own workers on a quiet
machine (no excess) from the same request on a shared one (the neighbours slow every worker): the
request's own counters look alike in both. They are computed over the records as given, so give
one service's records together (a subset changes its neighbours).

Times are in seconds. Wall time itself is not a feature: the label is the wall time's excess,
and blocked time carries what of the wall time is neither CPU nor run-queue wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from quell.attribute.records import Records
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]

BASE_FEATURES: Final[tuple[str, ...]] = (
    "cpu_seconds",
    "runq_wait_seconds",
    "blocked_seconds",
    "timeslices",
    "vol_cs",
    "invol_cs",
    "yields",
)
EBPF_FEATURES: Final[tuple[str, ...]] = ("runq_wait_other_cgroup_seconds", "preempt_other_total")
RECENT_S: Final = 1.0
"""The window before a request's start that its recent features look at."""
RECENT_FEATURES: Final[tuple[str, ...]] = ("recent_runq_wait_share",)
"""From the records alone: seconds of run-queue wait per second of the window."""
EBPF_RECENT_FEATURES: Final[tuple[str, ...]] = ("recent_runq_wait_other_cgroup_share",)
"""With the eBPF part: the same for the wait behind other cgroups."""
RUNQ_WAIT: Final = "runq_wait_seconds"
CLASS_PREFIX: Final = "class="
PSI_KEYS: Final[tuple[str, ...]] = (
    "psi_cpu_some_us",
    "psi_mem_some_us",
    "psi_io_some_us",
    "cgroup_psi_cpu_some_us",
    "cgroup_psi_mem_some_us",
    "cgroup_psi_io_some_us",
)
"""Cumulative "some" totals in microseconds (``/proc/pressure/*`` and the cgroup's
``*.pressure``), as a PSI sample series names them."""


@dataclass(frozen=True)
class PsiSeries:
    """PSI samples: ``time_ns`` on the records' clock (CLOCK_MONOTONIC), strictly increasing, and
    per key of ``PSI_KEYS`` its cumulative total in microseconds at each sample."""

    time_ns: NDArray[np.int64]
    totals_us: Mapping[str, FloatArray]

    def check(self, source: str) -> None:
        problems: list[Problem] = []
        t = np.asarray(self.time_ns)
        if t.ndim != 1 or len(t) < 2:
            problems.append(Problem("time_ns", "needs at least two samples"))
        elif np.any(np.diff(t) <= 0):
            problems.append(Problem("time_ns", "not strictly increasing"))
        for key, v in self.totals_us.items():
            if key not in PSI_KEYS:
                problems.append(Problem(key, f"not a PSI key ({', '.join(PSI_KEYS)})"))
            elif np.shape(v) != np.shape(t):
                problems.append(Problem(key, f"{np.shape(v)} samples, time_ns has {np.shape(t)}"))
            elif np.any(np.diff(np.asarray(v, dtype=np.float64)) < 0):
                problems.append(Problem(key, "a cumulative total that decreases"))
        if problems:
            raise InputError(source, problems)

    def over(self, key: str, start_ns: NDArray[np.int64], end_ns: NDArray[np.int64]) -> FloatArray:
        """``key``'s stall time in seconds over each window, the totals interpolated linearly
        (held flat outside the series)."""
        t = np.asarray(self.time_ns, dtype=np.float64)
        v = np.asarray(self.totals_us[key], dtype=np.float64)
        end = np.interp(end_ns.astype(np.float64), t, v)
        start = np.interp(start_ns.astype(np.float64), t, v)
        return np.asarray((end - start) / 1e6, dtype=np.float64)


def psi_feature(key: str) -> str:
    """The feature name of PSI key ``key`` (``psi_cpu_some_us`` → ``psi_cpu_some_seconds``)."""
    return key.removesuffix("_us") + "_seconds"


def psi_recent_feature(key: str) -> str:
    """The recent feature of PSI key ``key`` (``psi_cpu_some_us`` → ``psi_cpu_some_recent_share``)."""
    return key.removesuffix("_us") + "_recent_share"


def recent_share(
    start_ns: NDArray[np.int64],
    end_ns: NDArray[np.int64],
    value_ns: NDArray[np.int64],
    window_ns: int,
) -> FloatArray:
    """Per request, the sum of ``value_ns`` over the requests that ended in
    [start − ``window_ns``, start), divided by the window: a share of it."""
    order = np.argsort(end_ns, kind="stable")
    ends = end_ns[order]
    total = np.concatenate([[0.0], np.cumsum(value_ns[order].astype(np.float64))])
    hi = np.searchsorted(ends, start_ns, side="left")
    lo = np.searchsorted(ends, start_ns - window_ns, side="left")
    return np.asarray((total[hi] - total[lo]) / window_ns, dtype=np.float64)


@dataclass(frozen=True)
class FeatureMatrix:
    """Features per request: ``x`` (requests × ``names``), with each request's id and class."""

    x: FloatArray
    names: tuple[str, ...]
    classes: tuple[str, ...]
    """The one-hot vocabulary, in the order of the ``class=`` columns."""
    request_id: NDArray[np.int64]
    request_class: NDArray[np.str_]

    def column(self, name: str) -> FloatArray:
        return np.asarray(self.x[:, self.names.index(name)], dtype=np.float64)


def _raw(records: Records, psi: PsiSeries | None) -> dict[str, FloatArray]:
    ns = {k: records[k].astype(np.float64) for k in ("wall_ns", "cpu_ns", "runq_wait_ns")}
    raw: dict[str, FloatArray] = {
        "cpu_seconds": ns["cpu_ns"] / 1e9,
        "runq_wait_seconds": ns["runq_wait_ns"] / 1e9,
        "blocked_seconds": np.maximum(ns["wall_ns"] - ns["cpu_ns"] - ns["runq_wait_ns"], 0) / 1e9,
    }
    for name in ("timeslices", "vol_cs", "invol_cs", "yields"):
        raw[name] = records[name].astype(np.float64)
    if records.has("runq_wait_other_cgroup_ns"):
        raw["runq_wait_other_cgroup_seconds"] = (
            records["runq_wait_other_cgroup_ns"].astype(np.float64) / 1e9
        )
    if records.has("preempt_other_total"):
        raw["preempt_other_total"] = records["preempt_other_total"].astype(np.float64)
    start, end = records["start_ns"], records["end_ns"]
    window_ns = round(RECENT_S * 1e9)
    raw["recent_runq_wait_share"] = recent_share(start, end, records["runq_wait_ns"], window_ns)
    if records.has("runq_wait_other_cgroup_ns"):
        raw["recent_runq_wait_other_cgroup_share"] = recent_share(
            start, end, records["runq_wait_other_cgroup_ns"], window_ns
        )
    if psi is not None:
        for key in psi.totals_us:
            raw[psi_feature(key)] = psi.over(key, start, end)
        for key in psi.totals_us:
            raw[psi_recent_feature(key)] = psi.over(key, start - window_ns, start) / RECENT_S
    return raw


def available_features(records: Records, psi: PsiSeries | None = None) -> tuple[str, ...]:
    """Every non-class feature ``records`` (and ``psi``) give, in a fixed order."""
    return tuple(_raw(records.select(np.zeros(len(records), dtype=bool)), psi))


def build_features(
    records: Records,
    psi: PsiSeries | None = None,
    *,
    names: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
    source: str = "records",
) -> FeatureMatrix:
    """The feature matrix of ``records``. ``names``: the non-class features to use, in order
    (default: all available); ``classes``: the one-hot vocabulary (default: the records'
    classes, sorted). A feature asked for and not available, or a request of a class outside
    ``classes``, raises ``InputError`` naming every one."""
    if psi is not None:
        psi.check(f"{source} PSI series")
    raw = _raw(records, psi)
    chosen = tuple(raw) if names is None else tuple(n for n in names)
    vocabulary = (
        tuple(sorted(set(records.request_class.tolist()))) if classes is None else tuple(classes)
    )
    problems = [
        Problem(n, "feature not available in these records") for n in chosen if n not in raw
    ]
    unknown = sorted(set(records.request_class.tolist()) - set(vocabulary))
    if unknown:
        problems.append(
            Problem(
                "request_class",
                f"class(es) the model was not trained on: {', '.join(unknown[:5])}",
            )
        )
    if problems:
        raise InputError(source, problems)
    one_hot = [
        (records.request_class == c).astype(np.float64) for c in vocabulary if len(vocabulary) > 1
    ]
    columns = [raw[n] for n in chosen] + one_hot
    x = np.column_stack(columns) if columns else np.zeros((len(records), 0))
    class_names = tuple(CLASS_PREFIX + c for c in vocabulary) if len(vocabulary) > 1 else ()
    return FeatureMatrix(
        x=np.asarray(x, dtype=np.float64),
        names=chosen + class_names,
        classes=vocabulary,
        request_id=records["request_id"],
        request_class=records.request_class,
    )
