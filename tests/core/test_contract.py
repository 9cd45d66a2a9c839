"""The contract's rules for one snapshot, on hand-built observations: a good one passes, and each
way of breaking a rule is named by the field it breaks."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, get_args

import pytest

from quell.core.action import Action
from quell.core.contract import ACTION_KINDS, observation_problems, sample_action, snapshot_problems
from quell.core.observation import Observation, Snapshot

GOOD = Observation(
    time_s=10.0,
    instance_id="i0",
    interval_s=2.0,
    requests=10,
    throughput_rps=5.0,
    mean_rt_seconds=0.02,
    p50_rt_seconds=0.015,
    p95_rt_seconds=0.05,
    p99_rt_seconds=0.08,
    errors=1,
    cpu_util=1.6,
    steal_ratio=0.0,
    psi_cpu_some_pct=12.0,
    runqueue_wait_seconds=0.01,
    net_rx_bytes=1000,
    net_tx_bytes=200_000,
    util_pct=40.0,
    weight=256,
    extra={"link_util_pct": 41.0},
)
IDLE = dataclasses.replace(
    GOOD,
    requests=0,
    throughput_rps=0.0,
    mean_rt_seconds=None,
    p50_rt_seconds=None,
    p95_rt_seconds=None,
    p99_rt_seconds=None,
)


def test_good_observations_pass() -> None:
    assert observation_problems(GOOD, "i0") == []
    assert observation_problems(IDLE, "i0") == []
    assert observation_problems(dataclasses.replace(GOOD, weight=0, cpu_util=None), "i0") == []


@pytest.mark.parametrize(
    ("base", "change", "field"),
    [
        (GOOD, {"throughput_rps": 10.0}, "throughput_rps"),  # requests / interval is 5
        (IDLE, {"interval_s": 0.0}, "interval_s"),
        (IDLE, {"mean_rt_seconds": 0.0}, "p50_rt_seconds"),  # idle: None, not 0
        (GOOD, {"p95_rt_seconds": 0.01}, "p95_rt_seconds"),  # below p50
        (GOOD, {"p99_rt_seconds": None}, "p50_rt_seconds"),  # requests completed: all four
        (GOOD, {"mean_rt_seconds": -0.01}, "mean_rt_seconds"),
        (GOOD, {"errors": -1}, "errors"),
        (GOOD, {"requests": 10.0}, "requests"),
        (GOOD, {"net_tx_bytes": 1.5}, "net_tx_bytes"),
        (GOOD, {"steal_ratio": 1.5}, "steal_ratio"),
        (GOOD, {"psi_io_some_pct": 100.5}, "psi_io_some_pct"),
        (GOOD, {"weight": 257}, "weight"),
        (GOOD, {"weight": -1}, "weight"),
        (GOOD, {"cpu_util": math.nan}, "cpu_util"),
        (GOOD, {"util_pct": -3.0}, "util_pct"),
        (GOOD, {"extra": {"link_util_pct": math.nan}}, "extra['link_util_pct']"),
        (GOOD, {"extra": {"lb_queue": 3}}, "extra['lb_queue']"),  # an int, not a float
    ],
)
def test_each_broken_rule_is_named(base: Observation, change: dict[str, Any], field: str) -> None:
    found = observation_problems(dataclasses.replace(base, **change), "i0")
    assert [p.location for p in found] == [f"i0.{field}"], found


def test_a_snapshot_s_keys_times_and_name_agree_with_its_observations() -> None:
    other = dataclasses.replace(GOOD, instance_id="i1", time_s=9.0)
    snap = Snapshot(10.0, "sim", {"i0": GOOD, "i2": other})
    found = [str(p) for p in snapshot_problems(snap, "lab")]
    assert found == [
        "snapshot@10.0: environment 'sim', not 'lab'",
        "snapshot@10.0/i2: keyed 'i2', instance_id 'i1'",
        "snapshot@10.0/i2: time_s 9.0, the snapshot's 10.0",
    ]
    assert snapshot_problems(Snapshot(10.0, "lab", {"i0": GOOD}), "lab") == []


def test_every_action_kind_is_tried_and_has_a_sample() -> None:
    assert set(ACTION_KINDS) == set(get_args(Action))
    for kind in ACTION_KINDS:
        a = sample_action(kind, "i0", "h0")
        assert type(a) is kind and a.instance_id == "i0"
