"""Target tracking on a latency metric: what users of Kubernetes' HorizontalPodAutoscaler (or
KEDA with a Prometheus latency query) run today, behind a least-connections balancer.

Each interval the fleet's metric M is read from the instances that served requests: the
request-weighted mean of their mean response times (``metric: mean``), or of their p95s
(``metric: p95``; a fleet p95 would need the requests themselves, and HPA's per-pod average
of a p95 metric is this too). With T the target value and n the instances serving, HPA's rule
(kubernetes.io, "Horizontal Pod Autoscaling", algorithm details)::

    ratio   = M / T
    desired = n                      if |ratio - 1| <= tolerance
              ceil(n * ratio)        otherwise

bounded by ``scaling.min_instances`` / ``max_instances`` and, per decision, by
``max_scale_up_ratio`` × n (HPA's default scale-up policy doubles at most). The recommendation
is then *stabilised*: a scale-in acts on the largest recommendation of the last
``scale_down_stabilization_s`` (HPA's default 300 s), a scale-out on the smallest of the last
``scale_up_stabilization_s`` (default 0: at once). Instances asked for and not yet serving count
as there (HPA's spec replicas). Removals take the newest instances first. Weights stay equal:
the balancer's least-connections algorithm (``BALANCER_OF``) sends each request to the instance
with the fewest open ones, so a slow instance gets less without the policy knowing why."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from quell.core.action import Action, Decision
from quell.core.observation import Snapshot
from quell.policy.baselines import equal_weights
from quell.policy.context import PolicyContext, parse_params
from quell.policy.fleet import Fleet

Params = dict[str, float | int | str | bool]


class TargetParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    metric: Literal["mean", "p95"] = "mean"
    """The fleet's request-weighted mean of the instances' mean (or p95) response times."""
    target_rt_s: Annotated[float, Field(gt=0)] | None = None
    """T. Default: ``target_fraction`` × the scenario's R_th (``target.mean_rt_s``)."""
    target_fraction: Annotated[float, Field(gt=0, le=10)] = 0.8
    """T as a fraction of R_th when ``target_rt_s`` is not given: an operator aims the
    autoscaler below the objective, as HPA's users aim CPU at 50-80 %."""
    tolerance: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """No change while |M / T − 1| is within this (HPA's default 0.1)."""
    scale_up_stabilization_s: Annotated[float, Field(ge=0)] = 0.0
    """Scale out to the smallest recommendation of this long (HPA's default 0)."""
    scale_down_stabilization_s: Annotated[float, Field(ge=0)] = 300.0
    """Scale in to the largest recommendation of this long (HPA's default 300 s)."""
    max_scale_up_ratio: Annotated[float, Field(gt=1, le=100)] = 2.0
    """At most this many times the instances serving after one decision (HPA: +100 %)."""


def desired_instances(current: int, metric: float, target: float, tolerance: float) -> int:
    """HPA's rule: ``current`` unchanged while ``metric / target`` is within ``tolerance`` of 1,
    else ceil(current × metric / target)."""
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance:
        return current
    # less a hair, so a ratio that is exactly k / current reads as k despite rounding
    return math.ceil(current * ratio - 1e-9)


def fleet_metric(
    snapshot: Snapshot, ids: tuple[str, ...], metric: Literal["mean", "p95"]
) -> float | None:
    """The request-weighted mean of the instances' mean (or p95) response times; ``None``
    when none of ``ids`` completed a request."""
    total, weight = 0.0, 0
    for i in ids:
        o = snapshot.instances.get(i)
        if o is None or o.requests <= 0:
            continue
        v = o.mean_rt_seconds if metric == "mean" else o.p95_rt_seconds
        if v is None:
            continue
        total += v * o.requests
        weight += o.requests
    return total / weight if weight else None


class Stabilizer:
    """HPA's stabilisation windows over recommendations made at (virtual) times: a scale-in
    goes to the largest of the last ``down_s``, a scale-out to the smallest of the last
    ``up_s``; otherwise the count stays."""

    def __init__(self, up_s: float, down_s: float) -> None:
        self.up_s = up_s
        self.down_s = down_s
        self.history_: deque[tuple[float, int]] = deque()

    def update(self, now_s: float, current: int, recommended: int) -> int:
        self.history_.append((now_s, recommended))
        keep = max(self.up_s, self.down_s)
        while self.history_ and self.history_[0][0] < now_s - keep:
            self.history_.popleft()
        down = [r for t, r in self.history_ if t >= now_s - self.down_s]
        up = [r for t, r in self.history_ if t >= now_s - self.up_s]
        floor_in = max(down)  # a scale-in no lower than any recommendation in its window
        ceil_out = min(up)  # a scale-out no higher than any recommendation in its window
        if recommended < current:
            return min(current, floor_in)
        if recommended > current:
            return max(current, ceil_out)
        return current


class TargetTrackingPolicy:
    """Target tracking on the fleet's response time, HPA's arithmetic; least connections."""

    name = "target"

    def __init__(
        self, fleet: Fleet, target_rt_s: float, params: TargetParams, interval_s: float
    ) -> None:
        self.fleet = fleet
        self.target_rt_s = target_rt_s
        self.params = params
        self.interval_s = interval_s
        self.stabilizer_ = Stabilizer(
            params.scale_up_stabilization_s, params.scale_down_stabilization_s
        )

    @classmethod
    def build(cls, params: Params, ctx: PolicyContext) -> TargetTrackingPolicy:
        p = parse_params(TargetParams, params, cls.name)
        target = p.target_rt_s
        if target is None:
            target = p.target_fraction * ctx.require_target(cls.name)
        return cls(Fleet.from_context(ctx), target, p, ctx.interval_s)

    def decide(self, snapshot: Snapshot) -> Decision:
        fleet = self.fleet
        fleet.update(snapshot)
        p = self.params
        serving = tuple(i for i in fleet.active if i in snapshot.instances)
        metric = fleet_metric(snapshot, serving, p.metric)
        actions: list[Action] = []
        detail: dict[str, Any] = {
            "metric": p.metric,
            "metric_s": metric,
            "target_rt_s": self.target_rt_s,
        }
        why = ""
        if metric is not None and serving:
            n = len(serving)
            spec = n + len(fleet.pending_add)
            raw = desired_instances(n, metric, self.target_rt_s, p.tolerance)
            raw = min(raw, math.ceil(n * p.max_scale_up_ratio))
            limit_max = fleet.max_instances if fleet.max_instances is not None else raw
            raw = max(fleet.min_instances, min(raw, limit_max))
            desired = self.stabilizer_.update(snapshot.time_s, spec, raw)
            detail |= {"serving": n, "spec": spec, "recommended": raw, "desired": desired}
            why = (
                f"{p.metric} RT {metric * 1e3:.1f} ms against {self.target_rt_s * 1e3:.1f} ms "
                f"(ratio {metric / self.target_rt_s:.2f}) on {n} instance(s): "
                f"{raw} recommended, {desired} after stabilisation"
            )
            if desired > spec:
                adds = fleet.add_many(desired - spec, weight=_typical(fleet))
                actions.extend(adds)
                if adds:
                    why += f"; adding {', '.join(a.instance_id for a in adds[:5])}"
                    why += f" and {len(adds) - 5} more" if len(adds) > 5 else ""
            elif desired < spec:
                drop = [i for i in reversed(fleet.active)][: spec - desired]
                removed = []
                for iid in drop:
                    if fleet.can_remove():
                        actions.append(fleet.remove(iid))
                        removed.append(iid)
                if removed:
                    why += f"; removing {', '.join(removed[:5])}"
                    why += f" and {len(removed) - 5} more" if len(removed) > 5 else ""
        weights = equal_weights(fleet.active)
        reweights = fleet.reweight(weights)
        actions.extend(reweights)
        if not actions:
            return Decision(reason=f"{self.name}: {why}" if why else "", detail=detail)
        if reweights:
            why = (why + "; " if why else "") + (
                f"equal weights on the {len(weights)} active instances (least connections)"
            )
        detail |= fleet.describe()
        return Decision(tuple(actions), f"{self.name}: {why}", detail)


def _typical(fleet: Fleet) -> int:
    w: Mapping[str, int] = fleet.weights
    return max((w[i] for i in fleet.active if i in w), default=1)


__all__ = [
    "Stabilizer",
    "TargetParams",
    "TargetTrackingPolicy",
    "desired_instances",
    "fleet_metric",
]
