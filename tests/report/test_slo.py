"""SLO accounting on a run store built by hand: which instance-intervals count, which a change
excludes, what an instance costs, and the oracle beside it (every number worked out below)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quell.core.action import AddInstance, Decision, RemoveInstance
from quell.core.observation import Observation, Snapshot
from quell.report.slo import default_settle_s, load_steps, slo_summary
from quell.scenario.model import Scenario
from quell.sim.headroom import run_oracle
from quell.store.run import RunStore
from tests.sim.build import build_scenario


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "slo",
        "instances": [{"id": "a", "host": "h0"}, {"id": "b", "host": "h1"}],
        "events": [{"at_s": 50, "phase": "later"}],
        "scaling": {"hosts": ["h2", "h3"], "boot_s": 10},
        "target": {"mean_rt_s": 0.1},
        # h1's neighbour: off from 0, on at 70 (fixed periods), on past the end
        "service": {
            "interference": [
                {
                    "hosts": ["h1"],
                    "bitrate_mbit": 30,
                    "on_seconds": 1000,
                    "off_seconds": 70,
                    "durations": "fixed",
                    "start": "off",
                }
            ]
        },
    }
    return build_scenario(
        n_hosts=4, rate_rps=8, size_bytes=1_000_000, arrival="deterministic", **(base | over)
    )


# mean RT per (instance, t); every interval has 10 requests except a at 100 (none)
SLOW = {("a", 20): 0.5, ("a", 90): 0.2, ("b", 40): 0.3}
STALLED: dict[tuple[str, int], dict[str, float]] = {}
"""Extras of the observations with nothing completed (a at 100)."""
REPORTED = {"a": range(10, 101, 10), "b": range(10, 101, 10), "c": range(40, 81, 10)}


def build_store(path: Path, s: Scenario) -> RunStore:
    store = RunStore.create(path)
    store.set_meta(scenario=s.name, environment="sim", duration_s=100, finished_at=1.0)
    for t in range(10, 101, 10):
        obs = {}
        for iid, times in REPORTED.items():
            if t not in times:
                continue
            idle = iid == "a" and t == 100
            rt = SLOW.get((iid, t), 0.05)
            obs[iid] = Observation(
                time_s=float(t),
                instance_id=iid,
                interval_s=10.0,
                requests=0 if idle else 10,
                mean_rt_seconds=None if idle else rt,
                p95_rt_seconds=None if idle else 2 * rt,
                extra=STALLED.get((iid, t), {}),
            )
        store.add_snapshot(Snapshot(float(t), "sim", obs))
    store.add_decision(20.0, "p", Decision((AddInstance("c", "h2"),), "grow"))
    store.add_decision(30.0, "p", Decision((AddInstance("d", "h3"),), "grow"))
    store.add_decision(40.0, "p", Decision((RemoveInstance("d"),), "cancel"))
    store.add_decision(70.0, "p", Decision((RemoveInstance("c"),), "shrink"))
    store.commit()
    return store


def test_slo_fraction_exclusions_and_instance_seconds(tmp_path: Path) -> None:
    s = scenario()
    store = build_store(tmp_path / "run", s)
    out = slo_summary(store, s)
    # settle = boot 10 + 2 x 10 = 30 s. An interval (t - 10, t] is left out when it overlaps
    # [d, d + 30): start d = 0 → t 10..30 (all); event 50 → t 60..80 (all). h1's switch at 70
    # leaves out only b's interval it takes effect in, (70, 80]; the policy's own additions and
    # removals leave out nothing. Counted: a 40, 50, 90 (100 has no requests); b 40, 50, 90,
    # 100; c 40, 50. Met: all but a 90 (0.2 s) and b 40 (0.3 s).
    assert out["settle_s"] == default_settle_s(s) == 30.0
    assert out["neighbour_settle_s"] == 0.0
    assert out["instance_intervals"] == 9 + 10 + 5
    assert out["counted_intervals"] == 9
    assert out["excluded_intervals"] == 24 - 9
    assert out["met_intervals"] == 7
    assert out["slo_fraction"] == round(7 / 9, 5)
    assert out["slo_fraction_all"] == round(21 / 24, 5)  # a 20, a 90, b 40 miss
    assert out["slo_request_fraction"] == round(7 / 9, 5)  # 10 requests in each
    assert out["settling_fraction"] == round(15 / 24, 5)
    assert out["excluded_own_intervals"] == 0
    assert out["settling_own_fraction"] == 0.0
    # billed: a, b the whole 100 s; c from its request at 20 to its last report at 80;
    # d from 30 to its cancellation at 40
    assert out["instance_seconds"] == 100 + 100 + 60 + 10
    assert out["scaling_actions"] == 4
    assert (out["instances_added"], out["instances_removed"]) == (2, 2)
    # request-weighted over the intervals: (7 x 0.05 + 0.5 + 0.2 + 9 x 0.05 + 0.3 + 5 x 0.05) / 24
    assert out["rt_source"] == "intervals"
    assert out["mean_rt_ms"] == pytest.approx(2.05 / 24 * 1e3, abs=1e-3)
    assert out["p95_rt_ms"] == pytest.approx(2 * 2.05 / 24 * 1e3, abs=1e-3)
    assert out["oracle_instance_seconds"] == run_oracle(s).instance_seconds
    store.close()


def test_the_rule_before_own_actions_and_a_wider_neighbour_window(tmp_path: Path) -> None:
    s = scenario()
    store = build_store(tmp_path / "run", s)
    # exclude_own (the rule before): c's addition at 20 also leaves out c's 30..50 and its
    # removal at 70 c's 80..100; the h1 switch at 70 with neighbour_settle_s 30 leaves out b's
    # t 80..100 ((t - 10 - 30) <= 70 < t). Counted: a 40, 50, 90; b 40, 50. Met: a 40, 50,
    # b 50; left out only for c's own actions: c 40 and 50 (60..80 fall after the event too).
    out = slo_summary(store, s, exclude_own=True, neighbour_settle_s=30.0)
    assert (out["counted_intervals"], out["met_intervals"]) == (5, 3)
    assert out["slo_fraction"] == 0.6
    assert out["settling_fraction"] == round(19 / 24, 5)
    assert out["excluded_own_intervals"] == 2
    assert out["settling_own_fraction"] == round(2 / 24, 5)
    store.close()


def test_a_longer_settle_and_no_target(tmp_path: Path) -> None:
    s = scenario()
    store = build_store(tmp_path / "run", s)
    # 35 s: the start covers t 10..40, the event t 60..90 (a's miss at 90 drops out), h1's
    # switch b's t 80; counted: a 50; b 50, 100; c 50 (a 100 is idle), all met
    out = slo_summary(store, s, settle_s=35.0)
    assert (out["counted_intervals"], out["met_intervals"]) == (4, 4)
    assert out["slo_fraction"] == 1.0
    plain = slo_summary(store, scenario(target=None))
    assert plain["target_rt_s"] is None and "slo_fraction" not in plain
    assert plain["instance_seconds"] == 270
    store.close()


def test_load_steps_are_the_changes_of_a_stepped_schedule() -> None:
    steps = {
        "process": "schedule",
        "points": [
            {"at_s": 0, "rate_rps": 5},
            {"at_s": 30, "rate_rps": 5},
            {"at_s": 40, "rate_rps": 9},
            {"at_s": 70, "rate_rps": 2},
        ],
    }
    wl = {"arrival": steps, "requests": [{"path": "/f"}]}
    assert load_steps(scenario(workload=wl)) == [40, 70]
    ramp = {**wl, "arrival": {**steps, "shape": "ramp"}}
    assert load_steps(scenario(workload=ramp)) == []


@pytest.mark.parametrize(("oldest_s", "counted", "met"), [(None, 9, 7), (0.05, 9, 7), (0.5, 10, 7)])
def test_an_instance_that_finishes_nothing_while_holding_old_requests_misses(
    tmp_path: Path, oldest_s: float | None, counted: int, met: int
) -> None:
    # a at 100 completes nothing: idle unless it holds a request older than R_th = 0.1 s
    STALLED[("a", 100)] = {} if oldest_s is None else {"oldest_in_flight_seconds": oldest_s}
    try:
        s = scenario()
        store = build_store(tmp_path / "run", s)
        out = slo_summary(store, s)
    finally:
        STALLED.clear()
    assert (out["counted_intervals"], out["met_intervals"]) == (counted, met)
    assert out["stalled_intervals"] == (1 if counted == 10 else 0)
    store.close()


def test_an_instance_interval_is_infeasible_where_the_oracle_interval_holding_its_end_is() -> None:
    import numpy as np

    from quell.models.oracle import OracleResult
    from quell.report.slo import in_infeasible

    ends = np.array([10.0, 20.0, 30.0])
    o = OracleResult(
        hosts=("h1",),
        interval_end_s=ends,
        interval_s=np.full(3, 10.0),
        rate_rps=np.zeros(3),
        mean_size_bytes=1.0,
        capacity_bytes_per_s=np.ones((3, 1)),
        instances=np.ones(3, dtype=np.int64),
        infeasible=np.array([False, True, False]),
    )
    # (10, 20] is infeasible: its end, a time inside it and nothing either side; past the run none
    got = in_infeasible(np.array([10.0, 20.0, 15.0, 20.5, 25.0, 40.0]), o)
    assert got.tolist() == [False, True, True, False, False, False]
