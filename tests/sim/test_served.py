"""What the event core and the simulator report of the capacity each instance was served, in
progress or finished (``EventCore.served``, ``served_util_pct``, ``busy_seconds``), against
closed forms, and read by PRIMA's fast rule when a neighbour arrives between two intervals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from quell.core.loop import FAST_KEY
from quell.core.observation import BUSY_KEY, SERVED_UTIL_KEY, Snapshot
from quell.core.rng import component_rng
from quell.experiment.run import scenario_loop
from quell.scenario import load_scenario, parse_scenario
from quell.scenario.model import Scenario
from quell.scenario.policy import build_policy
from quell.sim import EventCore, SimEnvironment

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_mm1_ps_busy_share_is_rho_and_the_rate_while_busy_is_the_capacity() -> None:
    # M/M/1-PS, capacity 2 bytes/s, λ = 0.7 / s of mean-2-byte jobs: ρ = 0.7. Busy share
    # ρ ± 0.01 (200,000 jobs: the batch-means spread is about 0.002); served while busy is the
    # capacity to rounding, read part-way through with jobs still in service.
    rng = component_rng(3, "test/served")
    n = 200_000
    arrivals = np.cumsum(rng.exponential(1.0 / 0.7, n))
    sizes = rng.exponential(2.0, n)
    core = EventCore()
    core.add_instance(core.add_resource(2.0))
    mid = float(arrivals[n // 2]) + 0.5  # not at an event
    core.run(mid, arrivals[: n // 2 + 1], sizes[: n // 2 + 1])
    served, busy = core.served()
    assert busy[0] / mid == pytest.approx(0.7, abs=0.01)
    assert served[0] / busy[0] == pytest.approx(2.0, rel=1e-9)
    # what the unfinished jobs received is counted, and only that: served − completed work is
    # at most the work of the jobs still in service
    in_service = core.in_system()[0]
    assert in_service > 0 or served[0] == pytest.approx(core.instances_.work[0], rel=1e-12)
    assert 0.0 <= served[0] - core.instances_.work[0] <= sizes[: n // 2 + 1][-in_service:].sum()
    end = float(arrivals[-1]) + 1e4  # drained: served is the completed work
    core.run(end, arrivals[n // 2 + 1 :], sizes[n // 2 + 1 :])
    served, busy = core.served()
    assert core.in_system()[0] == 0
    assert served[0] == pytest.approx(core.instances_.work[0], rel=1e-12)
    assert served[0] == pytest.approx(sizes.sum(), rel=1e-12)
    assert served[0] / busy[0] == pytest.approx(2.0, rel=1e-9)


def test_instances_sharing_a_resource_each_get_their_share_in_progress() -> None:
    # one link of 1 byte/s and a permanent antagonist stream on it; a job of 2 bytes arrives at
    # instance a at 0 and one at b at 1: a alone with the stream at 1/2 until 1 (0.5 served),
    # then three ways at 1/3: at t = 4, a has 1.5 of its 2, b has 1.
    core = EventCore()
    r = core.add_resource(1.0)
    a = core.add_instance(r)
    b = core.add_instance(r, eligible=False)
    core.set_permanent_jobs(r, 1.0)
    core.run(1.0, np.array([0.0]), np.array([2.0]))
    core.set_eligible(a, False)
    core.set_eligible(b, True)
    core.run(4.0, np.array([1.0]), np.array([2.0]))
    served, busy = core.served()
    assert served.tolist() == pytest.approx([1.5, 1.0])
    assert busy.tolist() == pytest.approx([4.0, 3.0])
    assert core.instances_.work.tolist() == [0.0, 0.0]  # nothing finished yet
    # an aborted job keeps what it was served, and its instance stops being busy; a goes on
    # alone with the stream at 1/2 and finishes its last 0.5 at 5
    core.drop_jobs(b)
    core.run(6.0, np.empty(0), np.empty(0))
    served, busy = core.served()
    assert served.tolist() == pytest.approx([2.0, 1.0])
    assert busy.tolist() == pytest.approx([5.0, 3.0])
    assert core.instances_.work.tolist() == pytest.approx([2.0, 0.0])
    core.drop_jobs(b)  # nothing in service: nothing changes
    assert core.served()[1].tolist() == pytest.approx([5.0, 3.0])


def test_the_simulator_reports_served_capacity_and_busy_time_in_observe_and_glance() -> None:
    # sim-mm1: M/M/1-PS at ρ = 0.8 (80 req/s of 10 kB on 1 MB/s). Over 600 s the busy share is
    # ρ ± 0.02, served while busy the whole capacity; a glance reads its own window and leaves
    # observe's interval as it was.
    scenario = load_scenario(SCENARIOS / "sim-mm1.yaml")
    env = SimEnvironment(scenario)
    env.clock.sleep_until(300.0)
    first = env.glance().instances["i1"]
    assert first.interval_s == 300.0
    rate = first.extra[SERVED_UTIL_KEY] * first.interval_s / first.extra[BUSY_KEY]
    assert rate == pytest.approx(100.0)
    env.clock.sleep_until(600.0)
    second = env.glance().instances["i1"]
    assert second.interval_s == 300.0
    o = env.observe().instances["i1"]
    assert o.interval_s == 600.0
    assert o.extra[BUSY_KEY] / 600.0 == pytest.approx(0.8, abs=0.02)
    assert o.extra[SERVED_UTIL_KEY] * 600.0 / o.extra[BUSY_KEY] == pytest.approx(100.0)
    # the two glances add up to observe's interval
    assert o.extra[BUSY_KEY] == pytest.approx(first.extra[BUSY_KEY] + second.extra[BUSY_KEY])
    assert o.extra[SERVED_UTIL_KEY] == pytest.approx(
        (first.extra[SERVED_UTIL_KEY] + second.extra[SERVED_UTIL_KEY]) / 2
    )
    # served counts the downloads still in progress: at least what completed (util_pct)
    assert o.util_pct is not None and o.extra[SERVED_UTIL_KEY] >= o.util_pct - 1e-9


def scenario_with_neighbour(tmp: Path) -> Scenario:
    """``prima-sim-table8`` cut to 60 s with a neighbour on i1's host at 25 s (between the 10 s
    intervals) that takes 95 Mbit/s of its 100: the most the simulator lets one take."""
    base = load_scenario(SCENARIOS / "prima-sim-table8.yaml")
    doc = base.model_dump(mode="json", exclude_none=True)
    shutil.copy(SCENARIOS / "prima-sim-bundle.json", tmp / "b.json")
    params = dict(doc["policy"]["params"], model="b.json", fast_interval_s=1.0)
    doc |= {
        "duration_s": 60,
        "compare": [],
        "antagonists": [{"id": "n", "kind": "iperf3", "host": "h1", "bitrate_mbit": 95}],
        "events": [{"at_s": 25, "phase": "n", "start": ["n"]}],
        "policy": dict(doc["policy"], params=params),
    }
    doc["workload"]["arrival"]["points"] = doc["workload"]["arrival"]["points"][:1]
    return parse_scenario(doc, "test", tmp)


def test_a_neighbour_that_leaves_no_capacity_is_cut_at_the_next_glance(tmp_path: Path) -> None:
    scenario = scenario_with_neighbour(tmp_path)
    env = SimEnvironment(scenario)
    policy = build_policy(scenario.policy, scenario, tmp_path)
    glances: list[Snapshot] = []
    decisions: list[tuple[float, dict[str, object]]] = []
    real_glance = env.glance

    def glance() -> Snapshot:
        g = real_glance()
        glances.append(g)
        return g

    env.glance = glance
    loop = scenario_loop(
        scenario,
        env,
        policy,
        on_decision=lambda t, d: decisions.append((t, dict(d.detail))),
    )
    loop.run()
    cuts = [(t, d) for t, d in decisions if d.get(FAST_KEY) and "'i1'" in str(d.get("cut"))]
    assert cuts, "no fast decision cut i1"
    t_cut, detail = cuts[0]
    assert 25.0 < t_cut <= 26.0 + 1e-9
    assert detail["weight"] == [0]  # 5 % of the link left: no room for requests at R_th
    # the glance that cut it read the 5 % the neighbour left, while i1 served
    g = next(g for g in glances if g.time_s == t_cut)
    o = g.instances["i1"]
    rate = o.extra[SERVED_UTIL_KEY] * o.interval_s / o.extra[BUSY_KEY]
    assert rate == pytest.approx(5.0, rel=1e-6)
    # before the neighbour, each glance read the whole link while i1 served
    before = [g.instances["i1"] for g in glances if g.time_s <= 25.0]
    rates = [o.extra[SERVED_UTIL_KEY] * o.interval_s / o.extra[BUSY_KEY] for o in before]
    assert rates and rates == pytest.approx([100.0] * len(rates), rel=1e-6)
