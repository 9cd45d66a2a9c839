"""PRIMA's scale-out: when the load exceeds the capacity planned now and in W + 1 of the last 2W + 1
intervals (W = ``wait_intervals``), add ⌈shortfall / (c_new − p)⌉ instances at once, c_new an
interference-free instance's capacity and p its probe's share; their real capacity replaces c_new
once their probe reports, and a shortfall left adds more."""

from __future__ import annotations

import math
from collections.abc import Mapping

from quell.core.action import Decision
from quell.policy.fleet import Fleet
from quell.policy.hysteresis import Vote
from quell.policy.prima.capacity import WEIGHTING, CapacityAccount, Plan
from quell.policy.prima.interval import Interval


class ScaleOut:
    """The vote over intervals short of capacity (``vote_``) and the instances it adds.

    ``observe`` counts every interval; ``decide``, on an interval short of capacity, weights
    the instances there are and waits or adds."""

    def __init__(self, fleet: Fleet, account: CapacityAccount, wait_intervals: int) -> None:
        self.fleet = fleet
        self.account = account
        self.vote_ = Vote(wait_intervals)
        """Whether each of the last 2W + 1 intervals was short of capacity."""
        self.due_ = False
        """Whether the shortfall has shown in W + 1 of the last 2W + 1 intervals, this one too."""

    def observe(self, shortfall: bool) -> None:
        """Count one interval, short of capacity or not."""
        self.due_ = self.vote_.update(shortfall)

    @property
    def net_pct(self) -> float:
        """What one new instance adds: c_new less its probe."""
        return self.account.new_capacity_pct - self.account.new_probe_pct

    def need(self, plan: Plan) -> int:
        """Instances that make up the shortfall: each adds c_new less its probe."""
        return self.need_for(plan.demand_pct - plan.planned_pct)

    def need_for(self, short_pct: float) -> int:
        """Instances that make up a shortfall of ``short_pct``."""
        # Less a hair, so a shortfall of exactly k instances' capacity read with rounding error
        # asks for k, not k + 1.
        return max(1, math.ceil(short_pct / max(self.net_pct, 1e-9) - 1e-9))

    def decide(
        self, now: Interval, plan: Plan, avoid: Mapping[str, float]
    ) -> tuple[Decision, bool]:
        """The decision on an interval short of capacity, and whether it adds instances
        (``avoid``: U_int last read on each host, taken last and the highest latest)."""
        weights = self.account.weights(now.ids, now.u_max)
        if not self.due_:
            reason = (
                f"{now.state}: waiting ({self.vote_.count_}/{self.vote_.wait + 1}); {WEIGHTING}"
            )
            return Decision(weights, reason=reason, detail=now.detail), False
        need = self.need(plan)
        adds = self.fleet.add_many(need, weight=0, avoid=avoid)
        now.detail["added"] = [a.instance_id for a in adds]
        if not adds:
            reason = f"{now.state} and the fleet cannot grow: {WEIGHTING}"
            return Decision(weights, reason=reason, detail=now.detail), False
        self.vote_.clear()
        names = ", ".join(
            f"{a.instance_id} on {a.host}"
            + (
                f" (U_int {avoid[a.host]:.0f}% when last used)"
                if avoid.get(a.host, 0.0) > 0
                else ""
            )
            for a in adds[:5]
        )
        more = f" and {len(adds) - 5} more" if len(adds) > 5 else ""
        short = f"; {need - len(adds)} more wanted, the fleet is full" if len(adds) < need else ""
        reason = (
            f"{now.state}: short by {plan.demand_pct - plan.planned_pct:.1f}%, scale out with "
            f"{len(adds)} instance(s) ({names}{more}){short}; {WEIGHTING} meanwhile"
        )
        return Decision((*weights, *adds), reason=reason, detail=now.detail), True
