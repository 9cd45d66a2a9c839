"""The oracle: the fewest instances that could have met the response-time target, interval by
interval, had someone known every host's true available capacity and the load in advance.

Model: every instance is an M/G/1 processor-sharing server (its host's link), so its mean
response time is (S / C) / (1 − λS / C) whatever the size distribution (PS insensitivity), with
S the mean request size, C the capacity its host has left and λ its arrival rate. Mean RT ≤ R_th
holds while λ ≤ λ_max = (C − S / R_th) / S. One instance per host a policy may use: the fewest
that carry the interval's load λ are the hosts with the largest λ_max, taken in descending
order until their sum is ≥ λ.

The capacity a host has left, at each moment: C_left = (C − min(T, s · C)) / (1 + k), with C
its nominal capacity, T the bytes/s its neighbours with a bitrate take (at most the share s of
C) and k the streams of neighbours without one (k jobs that never finish: one request alone
gets C / (k + 1)); per interval, the time average of that step function.

Plain functions over numbers (``quell.sim.headroom`` reads a scenario's hosts, neighbours and
load into them); every bad argument raises ``InputError`` naming it. Source for M/G/1-PS:
L. Kleinrock, *Queueing Systems, Vol. 2* (Wiley, 1976), §4.8."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem

SOURCE = "oracle"


def _positive(**values: float) -> list[Problem]:
    return [
        Problem(name, f"must be a finite number > 0, got {v!r}")
        for name, v in values.items()
        if not (math.isfinite(v) and v > 0)
    ]


def _refuse(problems: list[Problem]) -> None:
    if problems:
        raise InputError(SOURCE, problems)


def max_rate_rps(
    capacity_bytes_per_s: NDArray[np.float64] | float, mean_size_bytes: float, target_rt_s: float
) -> NDArray[np.float64]:
    """λ_max = (C − S / R_th) / S: the highest arrival rate an M/G/1-PS server of capacity C
    takes with mean response time ≤ R_th (0 where even an idle server is too slow; NaN, no
    capacity known, counts as 0)."""
    _refuse(_positive(mean_size_bytes=mean_size_bytes, target_rt_s=target_rt_s))
    c = np.nan_to_num(np.asarray(capacity_bytes_per_s, dtype=np.float64), nan=0.0)
    return np.maximum((c - mean_size_bytes / target_rt_s) / mean_size_bytes, 0.0)


def fewest_instances(
    capacity_bytes_per_s: NDArray[np.float64],
    rate_rps: NDArray[np.float64],
    mean_size_bytes: float,
    target_rt_s: float,
    min_instances: int = 1,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Per interval (rows of ``capacity_bytes_per_s``, one column per available host): the
    fewest instances whose λ_max, largest first, sum to at least the interval's ``rate_rps``
    (never fewer than ``min_instances``), and whether even every host together falls short
    (then the count is every host)."""
    cap = np.asarray(capacity_bytes_per_s, dtype=np.float64)
    rate = np.asarray(rate_rps, dtype=np.float64)
    problems = []
    if cap.ndim != 2 or rate.shape != cap.shape[:1]:
        problems.append(
            Problem(
                "capacity_bytes_per_s",
                f"must be (intervals, hosts) with one rate per interval; got {cap.shape} and"
                f" {rate.shape}",
            )
        )
    if min_instances < 0:
        problems.append(Problem("min_instances", f"must be ≥ 0, got {min_instances}"))
    _refuse(problems)
    lam_max = -np.sort(-max_rate_rps(cap, mean_size_bytes, target_rt_s), axis=1)
    total = np.cumsum(lam_max, axis=1)
    n_hosts = lam_max.shape[1]
    short = (total < rate[:, None]).sum(axis=1)
    count = np.minimum(short + 1, n_hosts)
    count = np.maximum(count, min(min_instances, n_hosts))
    infeasible = total[:, -1] < rate if n_hosts else np.ones(rate.size, dtype=np.bool_)
    return count.astype(np.int64), infeasible


def capacity_left(
    nominal_bytes_per_s: float,
    taken_bytes_per_s: NDArray[np.float64],
    unlimited_streams: NDArray[np.float64],
    max_taken_share: float,
) -> NDArray[np.float64]:
    """C_left = (C − min(T, s · C)) / (1 + k), elementwise (module docstring)."""
    problems = _positive(nominal_bytes_per_s=nominal_bytes_per_s)
    if not 0.0 <= max_taken_share <= 1.0:
        problems.append(Problem("max_taken_share", f"must be in [0, 1], got {max_taken_share!r}"))
    _refuse(problems)
    taken = np.minimum(np.asarray(taken_bytes_per_s), max_taken_share * nominal_bytes_per_s)
    return np.asarray(
        (nominal_bytes_per_s - taken) / (1.0 + np.asarray(unlimited_streams)), dtype=np.float64
    )


def interval_means(
    times_s: NDArray[np.float64], values: NDArray[np.float64], edges_s: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Mean over each [edges_s[k], edges_s[k + 1]) of the step function that is ``values[j]``
    from ``times_s[j]`` on (``times_s`` ascending from 0)."""
    t = np.asarray(times_s, dtype=np.float64)
    problems = []
    if t.size == 0 or t[0] != 0.0 or np.any(np.diff(t) < 0):
        problems.append(Problem("times_s", "must ascend from 0"))
    if np.asarray(values).shape != t.shape:
        problems.append(Problem("values", "must have one value per time"))
    _refuse(problems + _edge_problems(edges_s))
    end = max(float(edges_s[-1]), float(t[-1]))
    bp = np.append(t, end)
    area = np.concatenate([[0.0], np.cumsum(values * np.diff(bp))])
    f = np.interp(edges_s, bp, area)
    return np.asarray(np.diff(f) / np.diff(edges_s))


def _edge_problems(edges_s: NDArray[np.float64]) -> list[Problem]:
    e = np.asarray(edges_s, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        return [Problem("edges_s", "must be at least two strictly increasing times")]
    return []


@dataclass(frozen=True)
class OracleResult:
    hosts: tuple[str, ...]
    """The hosts it may choose from."""
    interval_end_s: NDArray[np.float64]
    interval_s: NDArray[np.float64]
    rate_rps: NDArray[np.float64]
    mean_size_bytes: float
    capacity_bytes_per_s: NDArray[np.float64]
    """Mean available capacity per (interval, host)."""
    instances: NDArray[np.int64]
    infeasible: NDArray[np.bool_]

    @property
    def instance_seconds(self) -> float:
        return float((self.instances * self.interval_s).sum())

    def to_dict(self) -> dict[str, object]:
        return {
            "instance_seconds": round(self.instance_seconds, 3),
            "infeasible_intervals": int(self.infeasible.sum()),
            "mean_instances": round(self.instance_seconds / float(self.interval_s.sum()), 3),
            "max_instances": int(self.instances.max(initial=0)),
            "mean_size_bytes": round(self.mean_size_bytes, 1),
        }


def oracle(
    hosts: Sequence[str],
    edges_s: NDArray[np.float64],
    arrivals_s: NDArray[np.float64],
    mean_size_bytes: float,
    capacity_bytes_per_s: NDArray[np.float64],
    target_rt_s: float,
    min_instances: int = 1,
) -> OracleResult:
    """The fewest instances per interval [edges_s[k], edges_s[k + 1]) for the requests arriving
    at ``arrivals_s`` (λ: their count over the interval's length), of mean size
    ``mean_size_bytes``, on ``hosts`` with ``capacity_bytes_per_s`` left per (interval, host)."""
    _refuse(_edge_problems(edges_s))
    edges = np.asarray(edges_s, dtype=np.float64)
    cap = np.asarray(capacity_bytes_per_s, dtype=np.float64)
    if cap.shape != (edges.size - 1, len(hosts)):
        _refuse(
            [
                Problem(
                    "capacity_bytes_per_s",
                    f"must be one row per interval and one column per host"
                    f" ({edges.size - 1} × {len(hosts)}), got {cap.shape}",
                )
            ]
        )
    widths = np.diff(edges)
    counts, _ = np.histogram(arrivals_s, bins=edges)
    rate = counts / widths
    inst, infeasible = fewest_instances(cap, rate, mean_size_bytes, target_rt_s, min_instances)
    return OracleResult(
        hosts=tuple(hosts),
        interval_end_s=edges[1:],
        interval_s=widths,
        rate_rps=rate,
        mean_size_bytes=mean_size_bytes,
        capacity_bytes_per_s=cap,
        instances=inst,
        infeasible=infeasible,
    )
