"""The PRIMA controller (Section III-B3, calibration of Section IV).

Each interval: SF per instance from its probe; effective capacity U_max per instance from the
models; total load U. When U exceeds ΣU_max, add one instance and wait until it serves and its
probe has reported, then look again. Otherwise keep the K highest-capacity instances whose
capacities first exceed U (plus ``safety_instances``), remove the rest, and weight the kept ones
in proportion to their capacities. Violations and scale-in must persist ``wait_intervals``
further intervals before the controller acts.

Calibration: when an instance's predicted response time at its new share is within ±δ of R_th,
its measured response time is watched; if it is above the prediction, the SF that RTM needs to
explain it replaces the probe's (when higher), which lowers the instance's capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from quell.core.action import Action, Decision, RemoveInstance, SetWeight
from quell.core.observation import Snapshot
from quell.policy.context import PolicyContext, parse_params
from quell.policy.fleet import Fleet
from quell.policy.weights import proportional_weights
from quell.prima.bundle import ModelBundle, load_bundle
from quell.prima.model import CapacityModel
from quell.probe.severity import SeverityEstimator


class PrimaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1)]
    """Path of the model bundle (relative to the scenario file)."""
    workload: str | None = None
    """If set, the bundle must have been built for this workload."""
    wait_intervals: Annotated[int, Field(ge=0, le=100)] = 1
    """W: further intervals a violation must persist before acting."""
    scale_in_wait_intervals: Annotated[int, Field(ge=0, le=100)] | None = None
    """Same for scale-in (default: ``wait_intervals``)."""
    safety_instances: Annotated[int, Field(ge=0, le=1000)] = 0
    """Extra instances kept beyond what the load needs (the paper's factor of safety)."""
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
        self.severity_ = SeverityEstimator(bundle.probe_table)
        self.fleet_ = Fleet.from_context(ctx)
        self.calibrated_sf_: dict[str, float] = {}
        self.watch_: set[str] = set()
        self.awaiting_sf_: set[str] = set()
        self._shortfall_runs = 0
        self._excess_runs = 0

    @classmethod
    def build(cls, params: dict[str, float | int | str | bool], ctx: PolicyContext) -> PrimaPolicy:
        p = parse_params(PrimaParams, params, cls.name)
        target = ctx.require_target(cls.name)
        path = ctx.base_dir / p.model
        return cls(load_bundle(path, p.workload), ctx, target, p)

    # -- one interval --------------------------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Decision:
        fleet = self.fleet_
        known_before = set(fleet.active)
        fleet.update(snapshot)
        sf_probe = self.severity_.update(snapshot)
        self.awaiting_sf_ |= set(fleet.active) - known_before - set(self.ctx.initial_instances)
        self.awaiting_sf_ -= self.severity_.fresh_
        self.awaiting_sf_ &= set(fleet.active)

        obs = snapshot.instances
        ids = [i for i in fleet.active if i in obs]
        if not ids:
            return Decision(reason="no serving instance reported")
        silent = [i for i in ids if obs[i].util_pct is None]
        if silent:  # a missing utilisation is not a zero one: decide on nothing half-seen
            return Decision(reason=f"no utilisation from {', '.join(silent)}: holding")
        util = np.array([obs[i].util_pct or 0.0 for i in ids])
        total_u = float(sum(o.util_pct or 0.0 for o in obs.values()))
        self._calibrate(snapshot, ids)
        sf = np.array([max(sf_probe.get(i, 0.0), self.calibrated_sf_.get(i, 0.0)) for i in ids])
        u_int, u_max = self.capacity_.capacity(util, sf)
        rt_now = self.capacity_.predict_rt(util, u_int.value)
        cap_sum = float(u_max.value.sum())
        detail: dict[str, object] = {
            "total_util_pct": total_u,
            "capacity_sum_pct": cap_sum,
            "target_rt_s": self.target_rt_s,
            "instances": {
                # One list per quantity, in the order of ``id`` (cheap for 10,000 instances).
                "id": ids,
                "util_pct": util.tolist(),
                "sf": sf.tolist(),
                "sf_probe": [sf_probe.get(i) for i in ids],
                "u_int_pct": u_int.value.tolist(),
                "u_max_pct": u_max.value.tolist(),
                "predicted_rt_s": rt_now.value.tolist(),
                "measured_rt_s": [obs[i].mean_rt_seconds for i in ids],
                "clamped": (u_max.clamped | rt_now.clamped).tolist(),
            },
        }
        if fleet.pending_add or self.awaiting_sf_:
            waiting = sorted(fleet.pending_add) + sorted(self.awaiting_sf_)
            return Decision(
                reason=f"waiting for {', '.join(waiting)} to serve and report its SF "
                f"(U={total_u:.1f}%, ΣU_max={cap_sum:.1f}%)",
                detail=detail,
            )
        violating = bool(np.any(rt_now.value > self.target_rt_s))
        shortfall = total_u > cap_sum
        self._shortfall_runs = self._shortfall_runs + 1 if (shortfall or violating) else 0
        if shortfall:
            if self._shortfall_runs <= self.params.wait_intervals:
                return Decision(
                    reason=f"U={total_u:.1f}% exceeds ΣU_max={cap_sum:.1f}%: "
                    f"waiting ({self._shortfall_runs}/{self.params.wait_intervals + 1})",
                    detail=detail,
                )
            actions: list[Action] = list(self._weights(ids, u_max.value))
            if fleet.can_add():
                add = fleet.add(weight=0)
                actions.append(add)
                return Decision(
                    tuple(actions),
                    reason=f"U={total_u:.1f}% exceeds ΣU_max={cap_sum:.1f}% of "
                    f"{len(ids)} instance(s): scale out with {add.instance_id} on {add.host}; "
                    "weights ∝ capacity meanwhile",
                    detail=detail,
                )
            return Decision(
                tuple(actions),
                reason=f"U={total_u:.1f}% exceeds ΣU_max={cap_sum:.1f}% and the fleet cannot "
                "grow: weights ∝ capacity",
                detail=detail,
            )
        return self._distribute(ids, total_u, u_max.value, u_int.value, violating, detail)

    def _distribute(
        self,
        ids: list[str],
        total_u: float,
        u_max: np.ndarray,
        u_int: np.ndarray,
        violating: bool,
        detail: dict[str, object],
    ) -> Decision:
        order = np.argsort(-u_max, kind="stable")
        cum = np.cumsum(u_max[order])
        k = int(np.searchsorted(cum, total_u, side="left")) + 1
        k = min(len(ids), max(k + self.params.safety_instances, self.fleet_.min_instances))
        keep_idx = order[:k]
        keep = [ids[j] for j in keep_idx]
        drop = [ids[j] for j in order[k:]]
        wait_in = self.params.scale_in_wait_intervals
        wait_in = self.params.wait_intervals if wait_in is None else wait_in
        self._excess_runs = self._excess_runs + 1 if drop else 0
        if drop and self._excess_runs <= wait_in:
            keep_idx, keep, drop = np.arange(len(ids)), ids, []
        shares = dict(zip(keep, u_max[keep_idx].tolist(), strict=True))
        actions: list[Action] = list(self._weights(keep, u_max[keep_idx]))
        for iid in drop:
            if self.fleet_.can_remove():
                actions.append(SetWeight(iid, 0))
                actions.append(self.fleet_.remove(iid))
        removed = [a.instance_id for a in actions if isinstance(a, RemoveInstance)]
        cap_keep = sum(shares.values())
        detail["kept"] = keep
        detail["removed"] = removed
        self._watch(keep, total_u, u_max[keep_idx], u_int[keep_idx])
        if removed:
            reason = (
                f"{len(keep)} instance(s) with ΣU_max={cap_keep:.1f}% carry U={total_u:.1f}%: "
                f"scale in, removing {', '.join(removed)}; weights ∝ capacity"
            )
        elif violating:
            reason = (
                f"predicted RT above R_th={self.target_rt_s * 1e3:.0f} ms on some instance: "
                f"weights ∝ capacity (U={total_u:.1f}%, ΣU_max={cap_keep:.1f}%)"
            )
        else:
            reason = f"U={total_u:.1f}% within ΣU_max={cap_keep:.1f}%: weights ∝ capacity"
        return Decision(tuple(actions), reason=reason, detail=detail)

    def _weights(self, ids: list[str], u_max: np.ndarray) -> tuple[SetWeight, ...]:
        return self.fleet_.reweight(
            proportional_weights(dict(zip(ids, u_max.tolist(), strict=True)))
        )

    # -- calibration (Section IV) --------------------------------------------------------------
    def _watch(self, keep: list[str], total_u: float, u_max: np.ndarray, u_int: np.ndarray) -> None:
        """Watch the instances whose predicted RT at their new share is within ±δ of R_th."""
        if not self.params.calibrate or not keep:
            self.watch_ = set()
            return
        cap = float(u_max.sum())
        new_u = total_u * u_max / cap if cap > 0 else np.zeros_like(u_max)
        rt = self.capacity_.predict_rt(new_u, u_int).value
        near = np.abs(rt - self.target_rt_s) <= self.params.calibration_delta * self.target_rt_s
        self.watch_ = {i for i, n in zip(keep, near.tolist(), strict=True) if n}
        for gone in set(self.calibrated_sf_) - self.watch_:
            del self.calibrated_sf_[gone]

    def _calibrate(self, snapshot: Snapshot, ids: list[str]) -> None:
        """For watched instances whose measured RT exceeds the prediction, take the SF RTM
        needs to explain the measurement when it is higher than the probe's."""
        watched = [i for i in ids if i in self.watch_]
        obs = [snapshot.instances[i] for i in watched]
        pick = [
            k for k, o in enumerate(obs) if o.mean_rt_seconds is not None and o.util_pct is not None
        ]
        if not pick:
            return
        names = [watched[k] for k in pick]
        u = np.array([obs[k].util_pct for k in pick], dtype=float)
        rt = np.array([obs[k].mean_rt_seconds for k in pick], dtype=float)
        sf = np.array([self.severity_.sf_.get(i, 0.0) for i in names])
        u_int = self.capacity_.interference(u, sf).value
        predicted = self.capacity_.predict_rt(u, u_int).value
        revised = self.capacity_.revised_sf(u, rt).value
        for name, over, new, old in zip(
            names, (rt > predicted).tolist(), revised.tolist(), sf.tolist(), strict=True
        ):
            if over and new > old:
                self.calibrated_sf_[name] = new


def instance_rows(detail: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """A PRIMA decision's per-instance columns as one row per instance id."""
    cols = detail.get("instances")
    if not isinstance(cols, Mapping) or "id" not in cols:
        return {}
    ids = list(cols["id"])
    return {iid: {k: v[n] for k, v in cols.items() if k != "id"} for n, iid in enumerate(ids)}
