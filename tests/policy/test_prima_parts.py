"""PRIMA's parts, each on its own (quell.policy.prima.*): the reading of a snapshot, the
capacity planned against the load, the size of a scale-out, and the start of a scale-in trial,
on the bundle whose capacities are known in closed form (tests/prima/bundles.py: U_max = 45 %
without a neighbour at R_th = 25 ms)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.core.action import SetWeight
from quell.core.observation import Observation, Snapshot
from quell.models.capacity import CapacityModel
from quell.policy.fleet import Fleet
from quell.policy.prima.capacity import CapacityAccount
from quell.policy.prima.inputs import Inputs
from quell.policy.prima.interval import Interval
from quell.policy.prima.params import PrimaParams
from quell.policy.prima.scale_in import ScaleIn
from quell.policy.prima.scale_out import ScaleOut
from quell.probe import SeverityEstimator
from tests.prima import bundles as sb

TARGET_S = 0.025
PROBE_PCT = 4.0


@pytest.fixture(scope="module")
def model() -> CapacityModel:
    return sb.linear_bundle().capacity_model(TARGET_S)


def _fleet(n: int, hosts: int = 5) -> Fleet:
    return Fleet(
        {f"i{k}": f"h{k}" for k in range(1, n + 1)}, [f"h{k}" for k in range(1, hosts + 1)]
    )


def _account(model: CapacityModel, fleet: Fleet, probes: bool = True) -> CapacityAccount:
    pct = dict.fromkeys(fleet.hosts, PROBE_PCT) if probes else {}
    return CapacityAccount(model, fleet, pct, [], 0.0)


def _obs(iid: str, u: float | None, probe_s: float | None) -> Observation:
    extra = {} if probe_s is None else {"probe_rt_seconds": probe_s}
    return Observation(
        time_s=10.0, instance_id=iid, interval_s=10.0, util_pct=u, weight=1, extra=extra
    )


def test_inputs_set_apart_a_new_instance_until_its_probe_reports() -> None:
    fleet = _fleet(2)
    (new,) = fleet.add_many(1)
    inputs = Inputs(SeverityEstimator(sb.probe_table(), 3), None, ["i1", "i2"])
    probe = sb.R_ISO0 + sb.R_ISO_SLOPE * 20.0  # no interference: SF 0
    snapshot = Snapshot(
        10.0,
        "test",
        {
            o.instance_id: o
            for o in (
                _obs("i1", 20.0, probe * 1.5),
                _obs("i2", 30.0, None),
                _obs(new.instance_id, 5.0, None),
            )
        },
    )
    fleet.update(snapshot)
    seen = inputs.read(snapshot, fleet)
    assert not isinstance(seen, str)
    assert seen.ids == ["i1", "i2"] and seen.awaiting == [new.instance_id]
    assert seen.util_pct.tolist() == [20.0, 30.0] and seen.total_util_pct == 55.0
    assert seen.sf_probe[0] == pytest.approx(0.5) and seen.sf_probe[1] == 0.0  # initial: SF 0
    assert seen.sf_sample[0] == pytest.approx(0.5) and math.isnan(seen.sf_sample[1])


def test_inputs_hold_on_a_missing_utilisation() -> None:
    fleet = _fleet(2)
    inputs = Inputs(SeverityEstimator(sb.probe_table()), None, ["i1", "i2"])
    snapshot = Snapshot(10.0, "test", {"i1": _obs("i1", 20.0, None), "i2": _obs("i2", None, None)})
    fleet.update(snapshot)
    assert inputs.read(snapshot, fleet) == "no utilisation from i2: holding"


def test_the_plan_counts_capacity_on_its_way_less_the_probes_not_in_u_yet(
    model: CapacityModel,
) -> None:
    fleet = _fleet(2)
    account = _account(model, fleet)
    c_new = account.new_capacity_pct
    assert c_new == pytest.approx(sb.capacity(0.0, TARGET_S), abs=0.1)
    u_max = np.array([40.0, 30.0])
    plan = account.plan(90.0, u_max, ["n1"], ["n2"])
    assert plan.planned_pct == 70.0 + 2 * c_new - PROBE_PCT
    assert plan.coming == ["n1", "n2"] and plan.shortfall is False
    assert plan.state == (
        f"U=90.0% within ΣU_max=70.0% of 2 instance(s) + 2 on the way at {c_new:.1f}% each "
        "less their probes"
    )
    short = account.plan(80.0, u_max, [], [])
    assert short.shortfall and short.planned_pct == 70.0
    assert short.state == "U=80.0% exceeds ΣU_max=70.0% of 2 instance(s)"


def test_shares_are_capacity_less_the_probe(model: CapacityModel) -> None:
    fleet = _fleet(2)
    account = _account(model, fleet)
    u_max = np.array([40.0, 20.0])
    assert account.shares(["i1", "i2"], u_max).tolist() == [36.0, 16.0]
    assert account.weights(["i1", "i2"], u_max) == (
        SetWeight("i1", 256),
        SetWeight("i2", 114),
    )
    assert account.new_loads(["i1", "i2"], u_max, 50.0).tolist() == pytest.approx(
        [4.0 + 42.0 * 36 / 52, 4.0 + 42.0 * 16 / 52]
    )


def test_min_room_pct_gives_an_instance_with_a_sliver_of_capacity_no_requests(
    model: CapacityModel,
) -> None:
    ids = ["i1", "i2", "i3"]
    pct = dict.fromkeys(_fleet(3).hosts, PROBE_PCT)
    u_max = np.array([40.0, 6.0, 7.0])
    # room for requests: 36, 2, 3; below 3 → none (3 itself stays)
    account = CapacityAccount(model, _fleet(3), pct, [], 0.0, 3.0)
    assert account.shares(ids, u_max).tolist() == [36.0, 0.0, 3.0]
    assert [w.weight for w in account.weights(ids, u_max)] == [
        256,
        0,
        21,  # 256 × 3 / 36 = 21.3
    ]
    # the loads once in force: each probe's 4 plus the 38 of requests over 36 and 3
    assert account.new_loads(ids, u_max, 50.0).tolist() == pytest.approx(
        [4.0 + 38.0 * 36 / 39, 4.0, 4.0 + 38.0 * 3 / 39]
    )
    # the plan still counts every capacity
    assert account.plan(50.0, u_max, [], []).capacity_sum_pct == 53.0
    # without it, 2 % of room is a share
    plain = CapacityAccount(model, _fleet(3), pct, [], 0.0)
    assert plain.shares(ids, u_max).tolist() == [36.0, 2.0, 3.0]


def test_a_scale_out_asks_for_exactly_the_instances_the_shortfall_needs(
    model: CapacityModel,
) -> None:
    fleet = _fleet(1)
    account = _account(model, fleet, probes=False)
    scale_out = ScaleOut(fleet, account, wait_intervals=0)
    c_new = account.new_capacity_pct
    for k in (1, 2, 3):
        plan = account.plan(40.0 + k * c_new, np.array([40.0]), [], [])
        assert scale_out.need(plan) == k
        plan = account.plan(40.0 + k * c_new + 0.01, np.array([40.0]), [], [])
        assert scale_out.need(plan) == k + 1


def test_a_scale_out_waits_for_the_vote_then_adds(model: CapacityModel) -> None:
    fleet = _fleet(1, hosts=3)
    account = _account(model, fleet, probes=False)
    scale_out = ScaleOut(fleet, account, wait_intervals=1)
    now = Interval(["i1"], 60.0, np.array([60.0]), np.array([40.0]), np.zeros(1), "S", {})
    plan = account.plan(60.0, now.u_max, [], [])
    scale_out.observe(True)
    decision, grew = scale_out.decide(now, plan, {})
    assert not grew and decision.reason == "S: waiting (1/2); weights ∝ capacity"
    scale_out.observe(True)
    decision, grew = scale_out.decide(now, plan, {"h2": 30.0})
    assert grew and now.detail["added"] == ["n1"]
    assert decision.reason.startswith("S: short by 20.0%, scale out with 1 instance(s) (n1 on h3)")
    assert len(scale_out.vote_.held_) == 0


def test_a_scale_in_puts_the_instances_not_needed_on_trial(model: CapacityModel) -> None:
    fleet = _fleet(3)
    account = _account(model, fleet, probes=False)
    # the trial lasts until the windows read the new loads: the larger of them, + 1
    params = PrimaParams(model="m.json", scale_in_wait_intervals=0, sf_window=1)
    scale_in = ScaleIn(fleet, account, params)
    u_max = np.array([20.0, 45.0, 30.0])
    now = Interval(["i1", "i2", "i3"], 40.0, np.full(3, 13.0), u_max, np.zeros(3), "S", {})
    scale_in.observe(now.ids, shortfall=False)
    decision, kept = scale_in.decide(now, coming=[])
    # by U_max: i2 (45) carries 40 with 10 % to spare (44); then i3 and i1, in that order, go on trial
    assert scale_in.on_trial_ == ("i3", "i1") and scale_in.trial_.on_
    assert kept.ids == ["i2"] and kept.u_max.tolist() == [45.0]
    assert decision.reason == (
        "S: 1 instance(s) with ΣU_max=45.0% would do: trying them without i3, i1 (weight 0) "
        "for 2 interval(s) before removing"
    )
    # a shortfall ends the trial as failed and doubles the wait
    scale_in.observe(now.ids, shortfall=True)
    assert not scale_in.on_trial_ and scale_in.trial_.failures_ == 1
    assert scale_in.trial_.wait(scale_in.wait_intervals) == 1


def test_an_interval_without_some_instances_keeps_the_rest_in_order() -> None:
    now = Interval(
        ["a", "b", "c"], 9.0, np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]),
        np.array([7.0, 8.0, 9.0]), "S", {},
    )  # fmt: skip
    mask, kept = now.without(["b"])
    assert mask.tolist() == [True, False, True] and kept.ids == ["a", "c"]
    assert (kept.util.tolist(), kept.u_max.tolist(), kept.u_int.tolist()) == (
        [1.0, 3.0],
        [4.0, 6.0],
        [7.0, 9.0],
    )
    assert kept.total_u == 9.0 and kept.detail is now.detail
