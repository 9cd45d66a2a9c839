"""What the ``service`` section turns into before the run: request sizes and slowdown changes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.errors import InputError, Problem
from quell.scenario.service import OnOffSlowdown, ScheduledSlowdown, SizeModel


def draw_sizes(
    model: SizeModel | None, nominal_bytes: NDArray[np.int64], seed: int
) -> NDArray[np.float64]:
    """Request sizes: the nominal ones (each request's file) or drawn from ``model``, whose mean
    is ``model.mean_bytes`` or, when unset, each request's nominal size."""
    nominal = nominal_bytes.astype(np.float64)
    if model is None:
        return nominal
    rng = component_rng(seed, "sim/sizes")
    n = nominal.size
    mean: NDArray[np.float64] | float = (
        nominal if model.mean_bytes is None else float(model.mean_bytes)
    )
    if model.distribution == "exponential":
        return np.asarray(mean * rng.standard_exponential(n), dtype=np.float64)
    if model.distribution == "deterministic":
        return np.broadcast_to(np.asarray(mean, dtype=np.float64), (n,)).copy()
    if model.distribution == "lognormal":
        z = rng.standard_normal(n)
        return np.asarray(mean * np.exp(model.sigma * z - model.sigma**2 / 2.0), dtype=np.float64)
    values = np.asarray(model.values_bytes or [], dtype=np.float64)
    if values.size == 0:
        raise InputError(
            "service", [Problem("service.size.values_bytes", "empirical sizes need values_bytes")]
        )
    return values[rng.integers(0, values.size, size=n)]


def slowdown_changes(
    specs: Sequence[ScheduledSlowdown | OnOffSlowdown],
    instance_ids: Sequence[str],
    duration_s: float,
    seed: int,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """(time, instance index, slowdown factor) for every change, sorted by time."""
    index = {iid: k for k, iid in enumerate(instance_ids)}
    times: list[float] = []
    insts: list[int] = []
    factors: list[float] = []
    problems: list[Problem] = []
    owner: dict[str, int] = {}
    for k, spec in enumerate(specs):
        targets = list(instance_ids) if spec.instances is None else spec.instances
        for iid in targets:
            where = f"service.slowdown[{k}].instances"
            if iid not in index:
                problems.append(Problem(where, f"unknown instance {iid!r}"))
                continue
            if iid in owner:
                problems.append(
                    Problem(where, f"{iid!r} already has slowdown[{owner[iid]}] (one per instance)")
                )
                continue
            owner[iid] = k
            i = index[iid]
            if isinstance(spec, ScheduledSlowdown):
                for pt in spec.points:
                    if pt.at_s < duration_s:
                        times.append(pt.at_s)
                        insts.append(i)
                        factors.append(pt.factor)
                continue
            rng = component_rng(seed, f"sim/slowdown/{k}/{iid}")
            t, on = 0.0, spec.start_on
            while t < duration_s:
                times.append(t)
                insts.append(i)
                factors.append(spec.factor if on else 1.0)
                mean = spec.on_seconds if on else spec.off_seconds
                t += mean if spec.durations == "fixed" else float(rng.exponential(mean))
                on = not on
    if problems:
        raise InputError("service", problems)
    t_arr = np.asarray(times, dtype=np.float64)
    i_arr = np.asarray(insts, dtype=np.int64)
    order = np.lexsort((i_arr, t_arr))
    return t_arr[order], i_arr[order], np.asarray(factors, dtype=np.float64)[order]
