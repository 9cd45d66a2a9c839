"""What PRIMA reads of a snapshot: each serving instance's U (the mean of its last ``util_window``
intervals), its SF from its probe (Eq. 1 over its last ``sf_window`` samples), its measured response
time, and the total load U. A new instance serves at weight 0 until its probe has reported (with
``new_instance_load: clean`` it serves at once); an initial one counts as SF 0 until then."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from quell.core.observation import Observation, Snapshot
from quell.policy.fleet import Fleet
from quell.policy.window import UtilWindow
from quell.probe.severity import PROBE_KEY, SeverityEstimator

FloatArray = NDArray[np.float64]
T = TypeVar("T")


@dataclass(frozen=True)
class Reading:
    """What one snapshot says of the instances PRIMA weighs (arrays in the order of ``ids``)."""

    ids: list[str]
    """The serving instances: the fleet's active ones in the snapshot, less ``awaiting``."""
    util_pct: FloatArray
    """U of each: its mean over ``util_window`` intervals."""
    sf_probe: FloatArray
    """SF of each from its probe (0 for an initial instance whose probe has not reported)."""
    sf_sample: FloatArray
    """SF of this interval's probe sample (NaN where the probe did not report)."""
    rt_s: list[float | None]
    """Measured mean response time of each."""
    total_util_pct: float
    """U: the utilisations of every instance the snapshot shows (means over ``util_window``),
    added up."""
    awaiting: list[str]
    """New instances whose probe has not reported yet: capacity on its way."""


class Inputs:
    """Reads each interval's snapshot into a ``Reading``, keeping the windows it needs: the
    probe samples (``severity_``) and, for ``util_window`` > 1, the utilisations
    (``util_window_``)."""

    def __init__(
        self,
        severity: SeverityEstimator,
        util_window: UtilWindow | None,
        initial: Iterable[str],
        serve_new: bool = False,
    ) -> None:
        self.severity_ = severity
        self.util_window_ = util_window
        self.initial = frozenset(initial)
        """The instances the run starts with (SF 0 until their probe reports)."""
        self.serve_new = serve_new
        """Whether a new instance serves as SF 0 until its probe reports, as an initial one
        does (``new_instance_load: clean``), rather than waiting at weight 0."""

    def read(self, snapshot: Snapshot, fleet: Fleet) -> Reading | str:
        """The reading of the fleet's active instances (``fleet`` updated with ``snapshot``), or
        why there is nothing to decide on."""
        obs = snapshot.instances
        active = [i for i in fleet.active if i in obs]
        if not active:
            return "no serving instance reported"
        seen = _read(obs, active)
        if isinstance(seen, list):  # a missing utilisation is not a zero one: decide on nothing
            return f"no utilisation from {', '.join(seen)}: holding"
        total_u, fresh = seen.total_util_pct, seen.fresh
        util_plan = seen.util_pct
        if self.util_window_ is not None:
            mean_u = self.util_window_.update(
                {i: x.util_pct for i, x in obs.items() if x.util_pct is not None}
            )
            util_plan = np.fromiter((mean_u[i] for i in active), dtype=float, count=len(active))
            total_u = float(sum(mean_u.values()))
        severity = self.severity_
        sample = np.full(len(active), np.nan)
        sample[fresh] = severity.add(
            _pick(active, fresh), seen.probe_s[fresh], seen.util_pct[fresh]
        )
        if len(severity) > len(obs) + len(fleet.pending_add):
            severity.forget(set(obs))
        sf_est = severity.get(active)
        unknown = np.isnan(sf_est)
        awaiting_mask = np.zeros_like(unknown) if self.serve_new else unknown.copy()
        if not self.serve_new:
            for k in np.flatnonzero(unknown).tolist():
                awaiting_mask[k] = active[k] not in self.initial
        serve = np.flatnonzero(~awaiting_mask)
        return Reading(
            ids=_pick(active, serve),
            util_pct=util_plan[serve],
            sf_probe=np.where(unknown, 0.0, sf_est)[serve],
            sf_sample=sample[serve],
            rt_s=_pick(seen.rt_s, serve),
            total_util_pct=total_u,
            awaiting=_pick(active, np.flatnonzero(awaiting_mask)),
        )


@dataclass(frozen=True)
class _Observed:
    """What a snapshot says of the active instances (in their order) and of its total load."""

    util_pct: FloatArray
    probe_s: FloatArray
    """NaN where the probe did not report."""
    fresh: NDArray[np.intp]
    """Where it did."""
    rt_s: list[float | None]
    total_util_pct: float
    """U: the utilisations of every instance the snapshot shows, added up."""


def _read(obs: Mapping[str, Observation], active: list[str]) -> _Observed | list[str]:
    """What the snapshot says of the active instances, or the ids of those without a
    utilisation."""
    o = [obs[i] for i in active]
    util = [x.util_pct for x in o]
    if None in util:
        return [i for i, u in zip(active, util, strict=True) if u is None]
    probe_s, fresh = _reported([x.extra.get(PROBE_KEY) for x in o])
    return _Observed(
        np.asarray(util, dtype=float),
        probe_s,
        fresh,
        [x.mean_rt_seconds for x in o],
        _sum_reported([x.util_pct for x in obs.values()]),
    )


def _pick(items: list[T], at: NDArray[np.intp]) -> list[T]:
    """``[items[k] for k in at]`` for positions ``at`` in increasing order (``items`` itself,
    not a copy, when they are all of them)."""
    if at.size == len(items):
        return items
    return [items[k] for k in at.tolist()]


def _reported(values: list[float | None]) -> tuple[FloatArray, NDArray[np.intp]]:
    """The values as floats (NaN for ``None``), and the positions of those not ``None`` (a NaN
    reported is a value, if a bad one)."""
    out = np.array(values, dtype=float)
    missing = np.isnan(out)
    for k in np.flatnonzero(missing).tolist():
        missing[k] = values[k] is None
    return out, np.flatnonzero(~missing)


def _sum_reported(values: list[float | None]) -> float:
    """``sum(v or 0.0 for v in values)``: the values added in order, ``None`` as 0.0."""
    if None in values:
        return float(sum([0.0 if v is None else v for v in values]))
    return float(sum(cast("list[float]", values)))
