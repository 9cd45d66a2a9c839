"""The PRIMA controller (Section III-B3, calibration of Section IV).

Each interval: SF per instance (Eq. 1 on the mean of its last ``sf_window`` probe samples); effective
capacity U_max per instance from the models; total load U. Capacity on its way (instances
requested or serving but without an SF yet) counts as an interference-free instance's U_max
each. When U exceeds ΣU_max plus that now and in W + 1 of the last 2W + 1 intervals
(W = ``wait_intervals``: a steady shortfall acts after W + 1 intervals, as in the paper, and one
that noise interrupts still does), add ceil(shortfall / U_max of an interference-free instance)
instances at once; their real capacity replaces the estimate once their probe reports, and a
further shortfall adds more. When the K highest-capacity instances carry U (less the probes
of the instances that would leave) with ``scale_in_headroom`` to spare (plus
``safety_instances``) in the same way for ``scale_in_wait_intervals`` and nothing is on its way,
the rest go on trial at weight 0 and are removed if the K still carry their new loads with the
same headroom (see ``scale_in_trial_intervals``). Every interval, weight the serving instances
in proportion to their capacities.

Calibration: when an instance's predicted response time at its new share is within ±δ of R_th,
its measured response time is watched; while it is above the prediction, the SF that RTM needs
to explain it replaces the probe's (when higher), which lowers the instance's capacity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar, cast

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from quell.core.action import Action, Decision, SetWeight
from quell.core.observation import Observation, Snapshot
from quell.models.bundle import ModelBundle, load_bundle
from quell.models.capacity import CapacityModel
from quell.policy.context import PolicyContext, parse_params
from quell.policy.fleet import Fleet
from quell.policy.hysteresis import MAX_TRIAL_BACKOFF, Trial, Vote
from quell.policy.weights import proportional_array
from quell.policy.window import UtilWindow
from quell.probe.severity import PROBE_KEY, SeverityEstimator

FloatArray = NDArray[np.float64]
T = TypeVar("T")


class PrimaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1)]
    """Path of the model bundle (relative to the scenario file)."""
    workload: str | None = None
    """If set, the bundle must have been built for this workload."""
    wait_intervals: Annotated[int, Field(ge=0, le=100)] = 1
    """W: scale out when a shortfall shows now and in W + 1 of the last 2W + 1 intervals (a
    steady one after W further intervals; one that noise interrupts is not reset by it)."""
    scale_in_wait_intervals: Annotated[int, Field(ge=0, le=100)] | None = None
    """Same for scale-in (default: ``wait_intervals``)."""
    scale_in_headroom: Annotated[float, Field(ge=0, le=10)] = 0.10
    """Scale in only to instances whose capacities exceed U × (1 + this): the band between
    scaling out (U > ΣU_max) and in keeps the controller from flapping."""
    scale_in_trial_intervals: Annotated[int, Field(ge=0, le=100)] | None = None
    """Before removing instances, let the ones to be kept carry the load for this many
    intervals (the others stay up at weight 0), and remove only if the kept ones' capacities,
    read at their new loads, still carry it; else restore the weights and wait twice as long
    before trying again. An instance with little load cannot show a neighbour below the IM's
    knee; a trial shows it before anything is lost. 0: remove at once, as the paper does.
    Default: the larger of ``sf_window`` and ``util_window``, + 1 (until both read the new
    load)."""
    safety_instances: Annotated[int, Field(ge=0, le=1000)] = 0
    """Extra instances kept beyond what the load needs (the paper's factor of safety)."""
    safety_factor: Annotated[float, Field(ge=0, le=10)] = 0.0
    """Plan capacity for U × (1 + this): spare capacity in proportion to the load, so an
    instance's share stays this much below its U_max and the interval-to-interval swings of
    its load and response time stay under R_th (the paper's factor of safety, relative)."""
    overload_split: Literal["capacity", "equal_rt"] = "capacity"
    """How to weight instances whose capacities do not carry the load (before new ones
    arrive, or when the fleet cannot grow): ``capacity``, in proportion to the capacities as
    at any other time (the paper; each instance exceeds its U_max by the same factor, and one
    without capacity gets nothing); ``equal_rt``, the split that gives every instance the same
    predicted response time (the worst instance suffers least, but more of them miss R_th)."""
    sf_window: Annotated[int, Field(ge=1, le=100)] = 3
    """SF of an instance over its last this many probe samples (1: the last sample)."""
    sf_estimator: Literal["mean", "median"] = "mean"
    """How the window's samples make one SF: ``mean``, Eq. 1 on their mean probe time, as the
    profile reads a model cell; ``median``, the median of their SFs, which one outlying sample
    moves less but which reads a skewed probe time low (``SeverityEstimator``)."""
    util_window: Annotated[int, Field(ge=1, le=100)] = 1
    """U of an instance (and the total load): mean of its last this many intervals' utilisations
    (1: this interval's, as the paper with its 10 s period). The probe's SF is always read at
    the interval's own U."""
    probe_accounting: bool = True
    """An instance's U includes its own probe (the probe's bytes cross the same link; its share
    is the scenario's probe size per period over each host's link). Scale-in judges U without
    the probes of the instances that would leave; a new instance adds its capacity less its
    probe; requests are weighted by capacity less the probe. False: the measured U and
    capacities as they are, as the paper does (its probe is 0.08 % of a 1 Gbit/s link)."""
    calibrate: bool = True
    calibration_delta: Annotated[float, Field(gt=0, lt=1)] = 0.10


class PrimaPolicy:
    name = "prima"

    def __init__(
        self, bundle: ModelBundle, ctx: PolicyContext, target_rt_s: float, params: PrimaParams
    ) -> None:
        self.bundle = bundle
        self.ctx = ctx
        self.target_rt_s = target_rt_s
        self.params = params
        self.capacity_: CapacityModel = bundle.capacity_model(target_rt_s)
        self.new_capacity_pct = float(self.capacity_.capacity_for(np.zeros(1)).value[0])
        """U_max of an interference-free instance: what a new instance is expected to add."""
        self.severity_ = SeverityEstimator(
            bundle.probe_table, params.sf_window, params.sf_estimator
        )
        self.fleet_ = Fleet.from_context(ctx)
        self.util_window_ = UtilWindow(params.util_window) if params.util_window > 1 else None
        self._probe_pct = dict(ctx.probe_util_pct) if params.probe_accounting else {}
        hosts = set(ctx.initial_instances.values()) | set(self.fleet_.hosts)
        per_host = {self._probe_pct.get(h, 0.0) for h in hosts}
        self._probe_uniform = per_host.pop() if len(per_host) == 1 else None
        """The probe's share of U when it is the same on every host the fleet may use."""
        self._new_probe_pct = max(
            (self._probe_pct.get(h, 0.0) for h in self.fleet_.hosts), default=0.0
        )
        """What a new instance's probe will add to U (the most any scaling host's takes)."""
        self.calibrated_sf_: dict[str, float] = {}
        self.calibrated_at_sf_: dict[str, float] = {}
        """The probe's SF of each instance when its SF was revised."""
        self.watch_: set[str] = set()
        self.host_u_int_: dict[str, float] = {}
        """U_int of each host an instance was removed from, as last read there: a scale-out
        takes free hosts with the least known interference first."""
        self._initial = frozenset(ctx.initial_instances)
        wait_in = params.scale_in_wait_intervals
        self._wait_in = params.wait_intervals if wait_in is None else wait_in
        self._short_votes = Vote(params.wait_intervals)
        """Whether each of the last 2W + 1 intervals was short of capacity."""
        trial = params.scale_in_trial_intervals
        settle = max(params.sf_window, params.util_window) + 1
        self._trial = Trial(settle if trial is None else trial, params.wait_intervals)
        """The scale-in trial; its failures since the last removal or scale-out double the
        wait."""
        longest = self._trial.wait(self._wait_in, MAX_TRIAL_BACKOFF)
        self._excess_votes = Vote(self._wait_in, longest)
        self.trial_: tuple[str, ...] = ()
        """Instances at weight 0 while the others try to carry the load without them."""

    @property
    def trial_failures_(self) -> int:
        """Failed trials since the last removal or scale-out (each doubles the wait)."""
        return self._trial.failures_

    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> PrimaPolicy:
        p = parse_params(PrimaParams, params, cls.name)
        target = ctx.require_target(cls.name)
        path = ctx.base_dir / p.model
        return cls(load_bundle(path, p.workload), ctx, target, p)

    # -- one interval --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        fleet = self.fleet_
        fleet.update(snapshot)
        obs = snapshot.instances
        active = [i for i in fleet.active if i in obs]
        if not active:
            return Decision(reason="no serving instance reported")
        seen = _read(obs, active)
        if isinstance(seen, list):  # a missing utilisation is not a zero one: decide on nothing
            return Decision(reason=f"no utilisation from {', '.join(seen)}: holding")
        total_u, fresh = seen.total_util_pct, seen.fresh
        util_plan = seen.util_pct
        if self.util_window_ is not None:
            mean_u = self.util_window_.update(
                {i: x.util_pct for i, x in obs.items() if x.util_pct is not None}
            )
            util_plan = np.fromiter((mean_u[i] for i in active), dtype=float, count=len(active))
            total_u = float(sum(mean_u.values()))
        sample = np.full(len(active), np.nan)
        sample[fresh] = self.severity_.add(
            _pick(active, fresh), seen.probe_s[fresh], seen.util_pct[fresh]
        )
        if len(self.severity_) > len(obs) + len(fleet.pending_add):
            self.severity_.forget(set(obs))
        sf_est = self.severity_.get(active)
        # A new instance serves at weight 0 until its probe has reported (initial ones: SF 0).
        unknown = np.isnan(sf_est)
        awaiting_mask = unknown.copy()
        for k in np.flatnonzero(unknown).tolist():
            awaiting_mask[k] = active[k] not in self._initial
        awaiting = _pick(active, np.flatnonzero(awaiting_mask))
        serve = np.flatnonzero(~awaiting_mask)
        ids = _pick(active, serve)
        util = util_plan[serve]
        sf_probe = np.where(unknown, 0.0, sf_est)[serve]
        rt_meas = _pick(seen.rt_s, serve)
        self._calibrate(ids, util, sf_probe, rt_meas)
        self._expire_calibration(ids, sf_probe)
        sf = sf_probe
        calibrated = np.zeros(len(ids), dtype=bool)
        if self.calibrated_sf_:
            cal = np.fromiter(
                (self.calibrated_sf_.get(i, 0.0) for i in ids), dtype=float, count=len(ids)
            )
            sf = np.maximum(sf_probe, cal)
            calibrated = np.fromiter(
                (i in self.calibrated_sf_ for i in ids), dtype=bool, count=len(ids)
            )
        u_int, u_max = self.capacity_.capacity(util, sf)
        rt_now = self.capacity_.predict_rt(util, u_int.value)
        cap_sum = float(u_max.value.sum())
        pending = sorted(fleet.pending_add)
        coming = pending + awaiting
        planned = cap_sum + len(coming) * self.new_capacity_pct
        pending_probes = self._probes(pending) if pending else None
        if pending_probes is not None:  # their probes are not in U yet; they will be
            planned -= float(pending_probes.sum())
        columns: dict[str, object] = {}
        detail: dict[str, object] = {
            "total_util_pct": total_u,
            "capacity_sum_pct": cap_sum,
            "planned_capacity_pct": planned,
            "new_instance_capacity_pct": self.new_capacity_pct,
            "target_rt_s": self.target_rt_s,
            "pending_add": pending,
            "awaiting_sf": awaiting,
            "expired_add": list(fleet.expired_),
            "instances": columns,
        }
        if ids:
            demand = total_u * (1.0 + self.params.safety_factor)
            shortfall = demand > planned
            load = (
                f"U={total_u:.1f}%"
                if self.params.safety_factor == 0
                else f"U×{1 + self.params.safety_factor:g}={demand:.1f}%"
            )
            state = (
                f"{load} {'exceeds' if shortfall else 'within'} ΣU_max={cap_sum:.1f}% "
                f"of {len(ids)} instance(s)"
            )
            if coming:
                state += f" + {len(coming)} on the way at {self.new_capacity_pct:.1f}% each"
                if pending_probes is not None:
                    state += " less their probes"
            now = _Interval(ids, total_u, util, u_max.value, u_int.value, state, detail)
            decision = self._act(now, planned, coming, shortfall)
        else:
            decision = Decision(
                reason=f"waiting for {', '.join(coming)} to report its SF", detail=detail
            )
        # One list per quantity, in the order of ``id``, made last: made before the weights,
        # 10,000-long lists are walked by the garbage collections their SetWeights set off.
        columns.update(
            {
                "id": ids,
                "util_pct": util.tolist(),
                "sf": sf.tolist(),
                "sf_probe": _nan_to_none(sample[serve]),
                "sf_calibrated": calibrated.tolist(),
                "u_int_pct": u_int.value.tolist(),
                "u_max_pct": u_max.value.tolist(),
                "predicted_rt_s": rt_now.value.tolist(),
                "measured_rt_s": rt_meas,
                "clamped": (u_max.clamped | rt_now.clamped).tolist(),
            }
        )
        return decision

    def _act(self, now: _Interval, planned: float, coming: list[str], shortfall: bool) -> Decision:
        """Weights ∝ capacity every interval; scale out after a steady shortfall, or go on to
        see whether fewer instances would do."""
        scale_out = self._short_votes.update(shortfall)
        if self.trial_:
            serving = set(now.ids)
            self.trial_ = tuple(i for i in self.trial_ if i in serving)
            if not self.trial_:  # nothing left on trial
                self._trial.cancel()
        if not shortfall:
            return self._distribute(now, coming)
        self._excess_votes.update(False)
        if self.trial_:  # even with the instances on trial back there is too little
            self._trial.fail()
            self._end_trial()
        weights = self._weights(now.ids, now.u_max, now.u_int, now.total_u)
        weighting = self._weighting(now.u_max, now.total_u)
        if not scale_out:
            return Decision(
                weights,
                reason=f"{now.state}: waiting "
                f"({self._short_votes.count_}/{self.params.wait_intervals + 1}); {weighting}",
                detail=now.detail,
            )
        return self._scale_out(now.total_u, planned, now.state, weights, weighting, now.detail)

    def _scale_out(
        self,
        total_u: float,
        planned: float,
        state: str,
        weights: tuple[SetWeight, ...],
        weighting: str,
        detail: dict[str, object],
    ) -> Decision:
        demand = total_u * (1.0 + self.params.safety_factor)
        net = self.new_capacity_pct - self._new_probe_pct
        # Less a hair, so a shortfall of exactly k instances' capacity read with rounding error
        # asks for k, not k + 1.
        need = max(1, math.ceil((demand - planned) / max(net, 1e-9) - 1e-9))
        adds = self.fleet_.add_many(need, weight=0, avoid=self.host_u_int_)
        detail["added"] = [a.instance_id for a in adds]
        if not adds:
            return Decision(
                weights,
                reason=f"{state} and the fleet cannot grow: {weighting}",
                detail=detail,
            )
        self._short_votes.clear()
        self._trial.reset()
        names = ", ".join(
            f"{a.instance_id} on {a.host}"
            + (
                f" (U_int {self.host_u_int_[a.host]:.0f}% when last used)"
                if self.host_u_int_.get(a.host, 0.0) > 0
                else ""
            )
            for a in adds[:5]
        )
        more = f" and {len(adds) - 5} more" if len(adds) > 5 else ""
        short = f"; {need - len(adds)} more wanted, the fleet is full" if len(adds) < need else ""
        return Decision(
            (*weights, *adds),
            reason=f"{state}: short by {demand - planned:.1f}%, scale out with {len(adds)} "
            f"instance(s) ({names}{more}){short}; {weighting} meanwhile",
            detail=detail,
        )

    def _distribute(self, now: _Interval, coming: list[str]) -> Decision:
        if self.trial_:
            return self._continue_trial(now)
        ids, total_u, u_max, u_int = now.ids, now.total_u, now.u_max, now.u_int
        state, detail = now.state, now.detail
        order = np.argsort(-u_max, kind="stable")
        cum = np.cumsum(u_max[order])
        factor = (1.0 + self.params.safety_factor) * (1.0 + self.params.scale_in_headroom)
        leaving = self._leaving_probes(ids, order)
        if leaving is None:
            k = int(np.searchsorted(cum, total_u * factor, side="left")) + 1
        else:  # k instances carry U less the probes of the n - k that leave
            fits = cum >= (total_u - leaving) * factor
            k = int(np.argmax(fits)) + 1 if bool(fits.any()) else len(ids) + 1
        k = min(len(ids), max(k + self.params.safety_instances, self.fleet_.min_instances))
        load_k = total_u if leaving is None else total_u - float(leaving[k - 1])
        excess = k < len(ids) and not coming and self.fleet_.can_remove()
        wait = self._trial.wait(self._wait_in)
        scale_in = self._excess_votes.update(excess, wait)
        weighting = self._weighting(u_max, total_u)
        if not scale_in:
            detail["kept"] = ids
            detail["removed"] = []
            self._watch(ids, total_u, u_max, u_int)
            weights = self._weights(ids, u_max, u_int, total_u)
            if excess:
                return Decision(
                    weights,
                    reason=f"{state}: {k} instance(s) would do, waiting "
                    f"({self._excess_votes.count_}/{wait + 1}); {weighting}",
                    detail=detail,
                )
            return Decision(weights, reason=f"{state}: {weighting}", detail=detail)
        self._excess_votes.clear()
        drop = [ids[j] for j in order[k:].tolist()]
        detail["scale_in_load_pct"] = load_k
        if self._trial.length == 0:
            return self._remove(ids, total_u, u_max, u_int, drop, detail, load_u=load_k)
        self.trial_ = tuple(drop)
        self._trial.start()
        keep_mask, keep = _without(ids, drop)
        cap_keep = float(u_max[keep_mask].sum())
        detail["kept"] = keep
        detail["removed"] = []
        detail["on_trial"] = list(self.trial_)
        self._watch(keep, total_u, u_max[keep_mask], u_int[keep_mask])
        return Decision(
            self._trial_weights(ids, keep_mask, u_max, u_int, total_u),
            reason=f"{state}: {k} instance(s) with ΣU_max={cap_keep:.1f}% would do"
            f"{self._without_probes(total_u, load_k)}: trying them without {_names(drop)} "
            f"(weight 0) for {self._trial.length} interval(s) before removing",
            detail=detail,
        )

    def _continue_trial(self, now: _Interval) -> Decision:
        """One interval of a scale-in trial: remove the instances on trial once the kept ones
        have carried the load for the trial's length; restore them if the kept ones' capacities
        fall short for longer than ``wait_intervals``. The load to carry is the kept ones' own:
        what still shows on the instances on trial is their probe, which leaves with them, and
        the tail of their last requests."""
        ids, total_u, util, u_max, u_int = now.ids, now.total_u, now.util, now.u_max, now.u_int
        state, detail = now.state, now.detail
        keep_mask, keep = _without(ids, self.trial_)
        cap_keep = float(u_max[keep_mask].sum())
        kept_u = float(util[keep_mask].sum())
        demand = kept_u * (1.0 + self.params.safety_factor)
        short = demand > cap_keep
        spare = demand * (1.0 + self.params.scale_in_headroom) <= cap_keep
        step = self._trial.step(short, spare)
        detail["on_trial"] = list(self.trial_)
        kept = f"ΣU_max={cap_keep:.1f}% of the {len(keep)} kept"
        if step == "failed":
            drop = list(self.trial_)
            self._end_trial()
            why = "fell short of" if short else f"carry without {self._headroom()} to spare"
            detail["kept"] = ids
            detail["removed"] = []
            self._watch(ids, total_u, u_max, u_int)
            return Decision(
                self._weights(ids, u_max, u_int, total_u),
                reason=f"{state}; {kept} {why} their U={kept_u:.1f}%: trial failed, "
                f"{_names(drop)} back in; next try after {self._trial.wait(self._wait_in) + 1} "
                f"interval(s) over; {self._weighting(u_max, total_u)}",
                detail=detail,
            )
        if step == "passed":
            drop = list(self.trial_)
            self.trial_ = ()
            return self._remove(ids, total_u, u_max, u_int, drop, detail, trial_u=kept_u)
        detail["kept"] = keep
        detail["removed"] = []
        self._watch(keep, total_u, u_max[keep_mask], u_int[keep_mask])
        return Decision(
            self._trial_weights(ids, keep_mask, u_max, u_int, total_u),
            reason=f"{state}; trying {len(keep)} instance(s) without {_names(list(self.trial_))} "
            f"({self._trial.runs_}/{self._trial.length}): {kept} "
            f"{'fall short of' if short else 'carry'} their U={kept_u:.1f}%",
            detail=detail,
        )

    def _end_trial(self) -> None:
        """All instances back in after a failed trial; the excess must show afresh."""
        self.trial_ = ()
        self._excess_votes.clear()

    def _remove(
        self,
        ids: list[str],
        total_u: float,
        u_max: FloatArray,
        u_int: FloatArray,
        drop: list[str],
        detail: dict[str, object],
        trial_u: float | None = None,
        load_u: float | None = None,
    ) -> Decision:
        """Remove ``drop``. ``trial_u``: the kept instances' own load at the end of a passed
        trial (what they were judged on), else they were judged on ``load_u`` (U less the
        leaving probes) with the headroom."""
        keep_mask, keep = _without(ids, drop)
        actions: list[Action] = list(
            self._weights(keep, u_max[keep_mask], u_int[keep_mask], total_u)
        )
        removed = []
        at = {iid: j for j, iid in enumerate(ids)}
        for iid in drop:
            if self.fleet_.can_remove():
                host = self.fleet_.host_of(iid)
                if host is not None:
                    self.host_u_int_[host] = max(float(u_int[at[iid]]), 0.0)
                actions.append(SetWeight(iid, 0))
                actions.append(self.fleet_.remove(iid))
                removed.append(iid)
        self._trial.reset()
        cap_keep = float(u_max[keep_mask].sum())
        detail["kept"] = keep
        detail["removed"] = removed
        self._watch(keep, total_u, u_max[keep_mask], u_int[keep_mask])
        return Decision(
            tuple(actions),
            reason=f"{len(keep)} instance(s) with ΣU_max={cap_keep:.1f}% "
            + (
                f"carry U={total_u:.1f}%{self._without_probes(total_u, load_u)} with "
                f"{self._headroom()} to spare"
                if trial_u is None
                else f"carried their U={trial_u:.1f}% through the trial with {self._headroom()} "
                "to spare"
            )
            + ": scale in, removing "
            f"{len(removed)} ({_names(removed)}); {self._weighting(u_max[keep_mask], total_u)}",
            detail=detail,
        )

    def _headroom(self) -> str:
        return f"{self.params.scale_in_headroom:.0%}"

    def _probes(self, ids: Sequence[str]) -> FloatArray | None:
        """Each instance's probe share of its U; ``None`` without probe accounting."""
        if self._probe_uniform is not None:
            return None if self._probe_uniform == 0.0 else np.full(len(ids), self._probe_uniform)
        if not self._probe_pct:
            return None
        host_of = self.fleet_.host_of
        return np.fromiter(
            (self._probe_pct.get(host_of(i) or "", 0.0) for i in ids), dtype=float, count=len(ids)
        )

    def _leaving_probes(self, ids: list[str], order: NDArray[np.intp]) -> FloatArray | None:
        """For k = 1..n, the U the probes of the n - k instances after the first k of ``order``
        take (they leave with them); ``None`` without probe accounting."""
        probe = self._probes(ids)
        if probe is None:
            return None
        tail = np.cumsum(probe[order][::-1])[::-1]
        return np.concatenate((tail[1:], [0.0]))

    @staticmethod
    def _without_probes(total_u: float, load_u: float | None) -> str:
        if load_u is None or load_u == total_u:
            return ""
        return f" (U={load_u:.1f}% without the leaving instances' probes)"

    def _equal_rt(self, u_max: FloatArray, total_u: float) -> bool:
        """Whether the load is split for equal predicted RT rather than ∝ capacity."""
        return self.params.overload_split == "equal_rt" and float(u_max.sum()) < total_u

    def _weighting(self, u_max: FloatArray, total_u: float) -> str:
        if self._equal_rt(u_max, total_u):
            return "weights for equal predicted RT (capacities short of the load)"
        return "weights ∝ capacity"

    def _shares(
        self, ids: Sequence[str], u_max: FloatArray, u_int: FloatArray, total_u: float
    ) -> FloatArray:
        """Each instance's share of the requests: in proportion to its capacity (the paper)
        less its probe, which it carries whatever its weight; or, with ``overload_split:
        equal_rt`` while the capacities do not carry the load, the split for equal predicted
        response times."""
        if u_max.size > 1 and self._equal_rt(u_max, total_u):
            return self.capacity_.equal_rt_split(total_u, u_int)
        return self._room(ids, u_max)[1]

    def _room(self, ids: Sequence[str], u_max: FloatArray) -> tuple[FloatArray | None, FloatArray]:
        """Each instance's probe share (``None``: not counted, or a single instance, which
        takes all requests anyway) and the capacity it has left for requests."""
        probe = self._probes(ids) if len(ids) > 1 else None
        return probe, u_max if probe is None else np.maximum(u_max - probe, 0.0)

    def _weights(
        self, ids: list[str], u_max: FloatArray, u_int: FloatArray, total_u: float
    ) -> tuple[SetWeight, ...]:
        shares = self._shares(ids, u_max, u_int, total_u)
        if float(shares.max(initial=0.0)) <= 0:
            shares = np.ones(len(ids))
        return self.fleet_.reweight_many(ids, proportional_array(shares))

    def _trial_weights(
        self,
        ids: list[str],
        keep_mask: NDArray[np.bool_],
        u_max: FloatArray,
        u_int: FloatArray,
        total_u: float,
    ) -> tuple[SetWeight, ...]:
        """Weights of the kept instances as if they were all; 0 for those on trial."""
        shares = np.zeros(len(ids))
        keep = _pick(ids, np.flatnonzero(keep_mask))
        kept = self._shares(keep, u_max[keep_mask], u_int[keep_mask], total_u)
        shares[keep_mask] = kept if float(kept.max(initial=0.0)) > 0 else 1.0
        return self.fleet_.reweight_many(ids, proportional_array(shares))

    # -- calibration (Section IV) --------------------------------------------------------------
    def _watch(self, keep: list[str], total_u: float, u_max: FloatArray, u_int: FloatArray) -> None:
        """Watch the instances whose predicted RT at their new share is within ±δ of R_th."""
        if not self.params.calibrate or not keep:
            self.watch_ = set()
            self.calibrated_sf_ = {}
            self.calibrated_at_sf_ = {}
            return
        new_u = self._new_loads(keep, u_max, total_u)
        rt = self.capacity_.predict_rt(new_u, u_int).value
        near = np.abs(rt - self.target_rt_s) <= self.params.calibration_delta * self.target_rt_s
        self.watch_ = {keep[k] for k in np.flatnonzero(near).tolist()}
        for gone in [i for i in self.calibrated_sf_ if i not in self.watch_]:
            del self.calibrated_sf_[gone]
            self.calibrated_at_sf_.pop(gone, None)

    def _new_loads(self, ids: list[str], u_max: FloatArray, total_u: float) -> FloatArray:
        """Each instance's U once the weights ∝ capacity (less its probe) are in force."""
        probe, room = self._room(ids, u_max)
        total_room = float(room.sum())
        if probe is None:
            return total_u * room / total_room if total_room > 0 else np.zeros_like(u_max)
        requests = max(total_u - float(probe.sum()), 0.0)
        return probe + (requests * room / total_room if total_room > 0 else 0.0)

    def _calibrate(
        self, ids: list[str], util: FloatArray, sf_probe: FloatArray, rt: list[float | None]
    ) -> None:
        """For watched instances whose measured RT exceeds the prediction from the probe's SF,
        take the SF RTM needs to explain the measurement when it is higher; a watched instance
        measured at or below the prediction loses its revised SF."""
        if not self.watch_:
            return
        pick = [k for k, i in enumerate(ids) if i in self.watch_ and rt[k] is not None]
        if not pick:
            return
        names = [ids[k] for k in pick]
        u = util[pick]
        r = np.asarray([rt[k] for k in pick], dtype=float)
        sf = sf_probe[pick]
        predicted = self.capacity_.predict_rt(u, self.capacity_.interference(u, sf).value).value
        revised = self.capacity_.revised_sf(u, r).value
        for name, over, new, old in zip(
            names, (r > predicted).tolist(), revised.tolist(), sf.tolist(), strict=True
        ):
            if over and new > old:
                self.calibrated_sf_[name] = new
                self.calibrated_at_sf_[name] = old
            else:
                self.calibrated_sf_.pop(name, None)
                self.calibrated_at_sf_.pop(name, None)

    def _expire_calibration(self, ids: list[str], sf_probe: FloatArray) -> None:
        """A revised SF describes the conditions it was measured in: drop it once the probe
        reads clearly less interference than then (the neighbour has left). An instance whose
        revision took its load away is not measured again, so without this it would keep the
        revised SF, and no capacity, for ever."""
        if not self.calibrated_sf_:
            return
        now = dict(zip(ids, sf_probe.tolist(), strict=True))
        for name in list(self.calibrated_sf_):
            then = self.calibrated_at_sf_.get(name, 0.0)
            if name not in now or now[name] < then - max(0.1, 0.5 * then):
                del self.calibrated_sf_[name]
                self.calibrated_at_sf_.pop(name, None)


@dataclass(frozen=True)
class _Interval:
    """What one decision sees of the serving instances (arrays in the order of ``ids``)."""

    ids: list[str]
    total_u: float
    util: FloatArray
    u_max: FloatArray
    u_int: FloatArray
    state: str
    detail: dict[str, object]


@dataclass(frozen=True)
class _Reading:
    """What a snapshot says of the active instances (in their order) and of its total load."""

    util_pct: FloatArray
    probe_s: FloatArray
    """NaN where the probe did not report."""
    fresh: NDArray[np.intp]
    """Where it did."""
    rt_s: list[float | None]
    total_util_pct: float
    """U: the utilisations of every instance the snapshot shows, added up."""


def _read(obs: Mapping[str, Observation], active: list[str]) -> _Reading | list[str]:
    """The reading of the active instances, or the ids of those without a utilisation."""
    o = [obs[i] for i in active]
    util = [x.util_pct for x in o]
    if None in util:
        return [i for i, u in zip(active, util, strict=True) if u is None]
    probe_s, fresh = _reported([x.extra.get(PROBE_KEY) for x in o])
    return _Reading(
        np.asarray(util, dtype=float),
        probe_s,
        fresh,
        [x.mean_rt_seconds for x in o],
        _sum_reported([x.util_pct for x in obs.values()]),
    )


def _without(ids: list[str], drop: Sequence[str]) -> tuple[NDArray[np.bool_], list[str]]:
    """A mask over ``ids`` that leaves out ``drop``, and the ids it keeps, in order."""
    gone = set(drop)
    mask = np.fromiter((i not in gone for i in ids), dtype=bool, count=len(ids))
    return mask, [i for i in ids if i not in gone]


def _names(ids: list[str], shown: int = 5) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def _nan_to_none(a: FloatArray) -> list[float | None]:
    out: list[float | None] = a.tolist()
    for k in np.flatnonzero(np.isnan(a)).tolist():
        out[k] = None
    return out


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


def instance_rows(detail: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """A PRIMA decision's per-instance columns as one row per instance id."""
    cols = detail.get("instances")
    if not isinstance(cols, Mapping) or "id" not in cols:
        return {}
    ids = list(cols["id"])
    return {iid: {k: v[n] for k, v in cols.items() if k != "id"} for n, iid in enumerate(ids)}
