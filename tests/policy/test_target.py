"""Target tracking on latency (the ``target`` policy): HPA's arithmetic, worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from quell.core.action import AddInstance, RemoveInstance
from quell.errors import InputError
from quell.policy import BALANCER_OF, policy_class
from quell.policy.target import (
    Stabilizer,
    TargetTrackingPolicy,
    desired_instances,
    fleet_metric,
)
from tests.policy.snapshots import context, snap


def test_desired_is_ceil_of_current_times_metric_over_target() -> None:
    # 4 instances at 150 ms against 100 ms: ceil(4 x 1.5) = 6
    assert desired_instances(4, 0.150, 0.100, 0.1) == 6
    # 3 at 130 ms: ceil(3.9) = 4; 10 at 43 ms against 100: ceil(4.3) = 5
    assert desired_instances(3, 0.130, 0.100, 0.1) == 4
    assert desired_instances(10, 0.043, 0.100, 0.1) == 5
    # exactly 2x: 8, not 9 despite 0.2 / 0.1 reading 2.0000000000000004
    assert desired_instances(4, 0.2, 0.1, 0.1) == 8


def test_tolerance_keeps_the_count_within_ten_per_cent() -> None:
    assert desired_instances(10, 0.109, 0.100, 0.1) == 10  # ratio 1.09
    assert desired_instances(10, 0.091, 0.100, 0.1) == 10  # ratio 0.91
    assert desired_instances(10, 0.111, 0.100, 0.1) == 12  # ratio 1.11: ceil(11.1)


def test_stabilisation_window_scales_in_to_the_largest_recent_recommendation() -> None:
    st = Stabilizer(down_s=30.0)
    assert st.update(0.0, 10, 10) == 10
    assert st.update(10.0, 10, 6) == 10  # 10 was recommended 10 s ago
    assert st.update(20.0, 10, 7) == 10
    assert st.update(31.0, 10, 5) == 7  # the window (1..31 s) holds 6, 7, 5: the largest, 7
    # a scale-out acts at once and is not held back by the window
    assert st.update(32.0, 7, 12) == 12


def test_fleet_metric_weighs_instances_by_their_requests() -> None:
    s = snap(
        10.0,
        i1={"requests": 30, "mean_rt_seconds": 0.1},
        i2={"requests": 10, "mean_rt_seconds": 0.3},
        i3={"requests": 0},
    )
    assert fleet_metric(s, ("i1", "i2", "i3")) == pytest.approx(0.15)
    assert fleet_metric(s, ("i3",)) is None


def build(**params: Any) -> TargetTrackingPolicy:
    ctx = context(initial={"i1": "h1", "i2": "h2"}, hosts=("h3", "h4", "h5"), target_rt_s=0.2)
    policy = policy_class("target").build(dict(params), ctx)
    assert isinstance(policy, TargetTrackingPolicy)
    return policy


def test_the_policy_scales_out_at_once_and_in_after_its_window() -> None:
    # T = 0.8 x R_th = 160 ms; two instances at 240 ms: ceil(2 x 1.5) = 3
    p = build()
    slow = {"requests": 10, "mean_rt_seconds": 0.24}
    d = p.decide(snap(10.0, i1=slow, i2=slow))
    adds = [a for a in d.actions if isinstance(a, AddInstance)]
    assert [(a.instance_id, a.host) for a in adds] == [("n1", "h3")]
    assert d.detail["recommended"] == 3 and d.detail["desired"] == 3
    # n1 serves; all at 50 ms: ceil(3 x 0.3125) = 1, held at 3 while the 3 recommended at 10 s
    # is in the 300 s window
    fast = {"requests": 10, "mean_rt_seconds": 0.05}
    for t in (20.0, 310.0):
        d = p.decide(snap(t, i1=fast, i2=fast, n1=fast))
        assert not [a for a in d.actions if isinstance(a, RemoveInstance)]
    d = p.decide(snap(311.0, i1=fast, i2=fast, n1=fast))
    gone = [a.instance_id for a in d.actions if isinstance(a, RemoveInstance)]
    assert gone == ["n1", "i2"]  # newest first, down to 1


def test_target_runs_behind_least_connections_and_refuses_bad_params() -> None:
    assert BALANCER_OF["target"] == "leastconn"
    assert build().target_rt_s == pytest.approx(0.16)
    assert build(target_fraction=0.5).target_rt_s == 0.1
    with pytest.raises(InputError, match="target_fraction"):
        build(target_fraction=0.0)
    with pytest.raises(InputError, match="tolerance: unknown parameter"):
        build(tolerance=0.2)
