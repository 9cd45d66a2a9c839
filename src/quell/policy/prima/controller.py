"""The PRIMA controller (Section III-B3, calibration of Section IV), composed of its parts.

Each interval: SF per instance (Eq. 1 on the mean of its last ``sf_window`` probe samples); effective
capacity U_max per instance from the models; total load U. Capacity on its way (instances
requested or serving but without an SF yet) counts as an interference-free instance's U_max
each. When U exceeds ΣU_max plus that now and in W + 1 of the last 2W + 1 intervals
(W = ``wait_intervals``: a steady shortfall acts after W + 1 intervals, as in the paper, and one
that noise interrupts still does), add ceil(shortfall / U_max of an interference-free instance)
instances at once; their real capacity replaces the estimate once their probe reports, and a
further shortfall adds more. When the K highest-capacity instances carry U (less the probes
of the instances that would leave) with ``scale_in_headroom`` to spare in the same way for
``scale_in_wait_intervals`` and nothing is on its way, the rest go on trial at weight 0 and are
removed if the K still carry their new loads with the same headroom (``scale_in``). Every
interval, weight the serving instances in proportion to their capacities.

Calibration: when an instance's predicted response time at its new share is within ±δ of R_th,
its measured response time is watched; while it is above the prediction, the SF that RTM needs
to explain it replaces the probe's (when higher), which lowers the instance's capacity.

The parts: ``inputs`` reads a snapshot, ``calibration`` revises SFs, ``capacity`` accounts the
capacity against the load and splits the requests, ``scale_out`` and ``scale_in`` act on a
shortfall and on capacity to spare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from quell.core.action import Action, Decision, SetWeight
from quell.core.observation import Snapshot
from quell.models.bundle import ModelBundle, load_bundle
from quell.models.capacity import CapacityModel, Query
from quell.policy.context import PolicyContext, parse_params
from quell.policy.fleet import Fleet
from quell.policy.prima import fast
from quell.policy.prima.calibration import Calibration
from quell.policy.prima.capacity import WEIGHTING, CapacityAccount, Plan
from quell.policy.prima.inputs import Inputs
from quell.policy.prima.interval import Interval
from quell.policy.prima.onset import Onset
from quell.policy.prima.params import PrimaParams
from quell.policy.prima.scale_in import ScaleIn
from quell.policy.prima.scale_out import ScaleOut
from quell.policy.window import UtilWindow
from quell.probe.severity import SeverityEstimator

FloatArray = NDArray[np.float64]


class PrimaPolicy:
    """PRIMA: each interval, read the snapshot, revise the SFs, account the capacity against
    the load, then scale out on a lasting shortfall or see whether fewer instances would do;
    weights ∝ capacity every interval."""

    name = "prima"
    params_model = PrimaParams

    def __init__(
        self, bundle: ModelBundle, ctx: PolicyContext, target_rt_s: float, params: PrimaParams
    ) -> None:
        self.bundle = bundle
        self.ctx = ctx
        self.target_rt_s = target_rt_s
        self.params = params
        self.capacity_: CapacityModel = bundle.capacity_model(target_rt_s)
        self.fleet_ = Fleet.from_context(ctx)
        self.inputs_ = Inputs(
            SeverityEstimator(
                bundle.probe_table,
                params.sf_window,
                jump=params.sf_jump,
                confidence_z=params.sf_confidence_z,
            ),
            UtilWindow(params.util_window) if params.util_window > 1 else None,
            ctx.initial_instances,
            serve_new=params.new_instance_load == "clean",
        )
        self.account_ = CapacityAccount(
            self.capacity_,
            self.fleet_,
            ctx.probe_util_pct,
            ctx.initial_instances.values(),
            params.safety_factor,
            params.min_room_pct,
        )
        self.calibration_ = Calibration(
            self.capacity_, self.account_, target_rt_s, params.calibrate
        )
        self.scale_out_ = ScaleOut(self.fleet_, self.account_, params.wait_intervals)
        self.scale_in_ = ScaleIn(self.fleet_, self.account_, params)
        self.onset_: Onset | None = None
        if params.onset_scale is not None:
            self.onset_ = Onset(
                params.onset_scale,
                self.target_rt_s if params.onset_zero_on_miss else None,
            )
        self.host_read_: dict[str, tuple[float, float]] = {}
        """With ``host_memory_s``: (U_int, time) last read on each host left behind."""
        self.now_s_ = 0.0
        self.idle_: dict[str, int] = {}
        """Intervals in a row each instance has had no capacity left for requests."""
        self.intervals_ = 0
        """Intervals decided on so far (``warmup_intervals``)."""
        self.fast_interval_s = params.fast_interval_s
        """How often the control loop glances between intervals (``react``); ``None``: never."""
        self.fast_: fast.FastRule | None = None
        if params.fast_interval_s is not None:
            self.fast_ = fast.FastRule(
                self.capacity_,
                bundle.capacity_model(fast.SHED_RT_FACTOR * target_rt_s),
                bundle.probe_table,
                target_rt_s,
                params.min_room_pct,
            )
        self.fast_cut_: dict[str, float] = {}
        """U_max of each instance a glance cut since the last interval: its capacity there is at
        most this."""

    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> PrimaPolicy:
        p = parse_params(cls.params_model, params, cls.name)
        target = ctx.require_target(cls.name)
        path = ctx.base_dir / p.model
        return cls(load_bundle(path, p.workload), ctx, target, p)

    # -- the parts' state, by the names the controller has always shown ------------------------
    @property
    def trial_(self) -> tuple[str, ...]:
        """Instances at weight 0 while the others try to carry the load without them."""
        return self.scale_in_.on_trial_

    @property
    def trial_failures_(self) -> int:
        """Failed trials since the last removal or scale-out (each doubles the wait)."""
        return self.scale_in_.trial_.failures_

    @property
    def host_u_int_(self) -> Mapping[str, float]:
        """U_int of each host an instance was removed from, as last read there: a scale-out
        takes free hosts with the least known interference first."""
        return self.scale_in_.host_u_int_

    @property
    def watch_(self) -> set[str]:
        return self.calibration_.watch_

    @property
    def calibrated_sf_(self) -> Mapping[str, float]:
        return self.calibration_.calibrated_sf_

    # -- one interval --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        fleet = self.fleet_
        fleet.update(snapshot)
        self.now_s_ = snapshot.time_s
        seen = self.inputs_.read(snapshot, fleet)
        if isinstance(seen, str):
            return Decision(reason=seen)
        ids, util = seen.ids, seen.util_pct
        sf, calibrated = self.calibration_.sf(ids, util, seen.sf_probe, seen.rt_s)
        u_int, u_max = self.capacity_.capacity(util, sf)
        onsets: list[str] = []
        if self.onset_ is not None:
            fresh = ~np.isnan(seen.sf_sample)
            u_int, u_max, onsets = self.onset_.adjust(
                self.capacity_, ids, u_int, u_max, fresh, seen.rt_s
            )
        if self.fast_cut_:
            u_max = self._carry_cuts(ids, u_max)
        rt_now = self.capacity_.predict_rt(util, u_int.value)
        pending = sorted(fleet.pending_add)
        plan = self.account_.plan(seen.total_util_pct, u_max.value, pending, seen.awaiting)
        columns: dict[str, object] = {}
        detail: dict[str, object] = {
            "total_util_pct": seen.total_util_pct,
            "capacity_sum_pct": plan.capacity_sum_pct,
            "planned_capacity_pct": plan.planned_pct,
            "new_instance_capacity_pct": self.account_.new_capacity_pct,
            "target_rt_s": self.target_rt_s,
            "pending_add": pending,
            "awaiting_sf": seen.awaiting,
            "expired_add": list(fleet.expired_),
            "instances": columns,
        }
        if onsets:
            detail["onset"] = onsets
        if ids:
            now = Interval(
                ids, seen.total_util_pct, util, u_max.value, u_int.value, plan.state, detail
            )
            decision = self._act(now, plan)
            if self.fast_ is not None:
                self._arm(now, plan)
        else:
            decision = Decision(
                reason=f"waiting for {', '.join(plan.coming)} to report its SF", detail=detail
            )
        # One list per quantity, in the order of ``id``, made last: made before the weights,
        # 10,000-long lists are walked by the garbage collections their SetWeights set off.
        columns.update(
            {
                "id": ids,
                "util_pct": util.tolist(),
                "sf": sf.tolist(),
                "sf_probe": _nan_to_none(seen.sf_sample),
                "sf_calibrated": calibrated.tolist(),
                "u_int_pct": u_int.value.tolist(),
                "u_max_pct": u_max.value.tolist(),
                "predicted_rt_s": rt_now.value.tolist(),
                "measured_rt_s": seen.rt_s,
                "clamped": (u_max.clamped | rt_now.clamped).tolist(),
            }
        )
        if self.params.sf_confidence_z is not None:
            # the window's SF before the gate, and the z standard errors it had to exceed
            window, gate = self.inputs_.severity_.gate(ids)
            columns["sf_window"] = _nan_to_none(window)
            columns["sf_gate"] = _nan_to_none(gate)
        return decision

    # -- between intervals (``fast_interval_s``) ----------------------------------------------
    def react(self, glance: Snapshot) -> Decision:
        """The fast rule on a glance: cut the weight of each instance that lost capacity, as far
        as the others have room (``quell.policy.prima.fast``); the interval scales out."""
        rule = self.fast_
        found = None if rule is None else rule.read(glance)
        if found is None or rule is None or rule.armed_ is None:
            return Decision()
        armed = rule.armed_
        ids = [armed.ids[k] for k in found.at.tolist()]
        for iid, u in zip(ids, found.u_max_pct.tolist(), strict=True):
            self.fast_cut_[iid] = min(u, self.fast_cut_.get(iid, u))
        actions: list[Action] = list(self.fleet_.set_weights(ids, found.weight))
        names = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        reason = (
            f"glance: {len(ids)} instance(s) lost capacity ({names}; {found.by_served} by the "
            f"rate served while busy, {found.by_probe} by the probe, "
            f"{len(ids) - found.by_served - found.by_probe} by a request held over "
            f"{fast.AGE_FACTOR:g} R_th): weights ∝ their capacity now"
        )
        detail: dict[str, object] = {
            "cut": ids,
            "u_max_pct": found.u_max_pct.tolist(),
            "weight": found.weight.tolist(),
            "planned_capacity_pct": found.planned_pct,
        }
        return Decision(tuple(actions), reason=reason, detail=detail)

    def _carry_cuts(self, ids: list[str], u_max: Query) -> Query:
        """U_max at most what the glances since the last interval found, then forget them."""
        cut = np.fromiter((self.fast_cut_.get(i, np.inf) for i in ids), dtype=float, count=len(ids))
        self.fast_cut_ = {}
        return Query(np.minimum(u_max.value, cut), u_max.clamped)

    def _arm(self, now: Interval, plan: Plan) -> None:
        """The fast rule reads the glances until the next interval against this one's plan."""
        assert self.fast_ is not None
        if self.intervals_ <= self.params.warmup_intervals:
            self.fast_.armed_ = None
            return
        weights = self.fleet_.weights
        probe = self.account_.probes(now.ids)
        added = now.detail.get("added")
        coming = len(added) if isinstance(added, list) else 0
        self.fast_.arm(
            fast.Armed(
                ids=list(now.ids),
                util_pct=now.util.copy(),
                u_max_pct=now.u_max.copy(),
                weight=np.fromiter(
                    (weights.get(i, 0) for i in now.ids), dtype=np.int64, count=len(now.ids)
                ),
                probe_pct=np.zeros(len(now.ids)) if probe is None else probe,
                total_util_pct=now.total_u,
                # with what this decision added, on its way
                planned_pct=plan.planned_pct + coming * self.scale_out_.net_pct,
            )
        )

    def _act(self, now: Interval, plan: Plan) -> Decision:
        """Weights ∝ capacity every interval; scale out after a lasting shortfall, or go on to
        see whether fewer instances would do, and watch the instances that keep serving."""
        self.intervals_ += 1
        warmup = self.params.warmup_intervals
        if self.intervals_ <= warmup:
            weights = self.account_.weights(now.ids, now.u_max)
            reason = (
                f"{now.state}: warming up ({self.intervals_}/{warmup}), not scaling until the "
                f"windows fill; {WEIGHTING}"
            )
            return Decision(weights, reason=reason, detail=now.detail)
        self.scale_out_.observe(plan.shortfall)
        self.scale_in_.observe(now.ids, plan.shortfall)
        if plan.shortfall:
            decision, grew = self.scale_out_.decide(now, plan, self._avoid())
            if grew:
                self.scale_in_.trial_.reset()
            return self._drop_idle(now, decision)
        decision, kept = self.scale_in_.decide(now, plan.coming)
        self.calibration_.watch(kept.ids, kept.total_u, kept.u_max, kept.u_int)
        return self._drop_idle(now, decision)

    def _avoid(self) -> Mapping[str, float]:
        """The score a scale-out ranks free hosts by: the U_int last read on each, or with
        ``host_memory_s`` that U_int × exp(−age / host_memory_s)."""
        read = self.scale_in_.host_u_int_
        tau = self.params.host_memory_s
        if tau is None:
            return read
        now, seen = self.now_s_, self.host_read_
        for host, u in read.items():
            if host not in seen or seen[host][0] != u:
                seen[host] = (u, now)
        return {h: u * math.exp(-(now - at) / tau) for h, (u, at) in seen.items()}

    def _drop_idle(self, now: Interval, decision: Decision) -> Decision:
        """With ``drop_idle_intervals``: also remove the instances whose capacity has left
        nothing for requests that long, while another instance has some."""
        n_idle = self.params.drop_idle_intervals
        if n_idle is None:
            return decision
        probe = self.account_.probes(now.ids)
        room = now.u_max if probe is None else now.u_max - probe
        idle = {iid for iid, r in zip(now.ids, room.tolist(), strict=True) if r <= 0}
        self.idle_ = {i: self.idle_.get(i, 0) + 1 for i in idle}
        if len(idle) == len(now.ids):
            return decision
        acted = {getattr(a, "instance_id", None) for a in decision.actions}
        on_trial = set(self.scale_in_.on_trial_)
        due = [
            i
            for i in now.ids
            if self.idle_.get(i, 0) >= n_idle and i not in acted and i not in on_trial
        ]
        removed = []
        extra: list[Action] = []
        at = {iid: j for j, iid in enumerate(now.ids)}
        for iid in due:
            if not self.fleet_.can_remove():
                break
            host = self.fleet_.host_of(iid)
            if host is not None:
                self.scale_in_.host_u_int_[host] = max(float(now.u_int[at[iid]]), 0.0)
            extra += [SetWeight(iid, 0), self.fleet_.remove(iid)]
            removed.append(iid)
            self.idle_.pop(iid, None)
        if not removed:
            return decision
        now.detail["dropped_idle"] = removed
        reason = (
            f"{decision.reason}; removing {len(removed)} instance(s) with no capacity left for "
            f"requests for {n_idle} interval(s) ({', '.join(removed[:5])}"
            f"{' and more' if len(removed) > 5 else ''})"
        )
        return Decision((*decision.actions, *extra), reason=reason, detail=decision.detail)


def _nan_to_none(a: FloatArray) -> list[float | None]:
    out: list[float | None] = a.tolist()
    for k in np.flatnonzero(np.isnan(a)).tolist():
        out[k] = None
    return out


def instance_rows(detail: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """A PRIMA decision's per-instance columns as one row per instance id."""
    cols = detail.get("instances")
    if not isinstance(cols, Mapping) or "id" not in cols:
        return {}
    ids = list(cols["id"])
    return {iid: {k: v[n] for k, v in cols.items() if k != "id"} for n, iid in enumerate(ids)}
