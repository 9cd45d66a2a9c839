"""What the simulator promises policies, as the lab does: an added instance shows once it serves,
a removed one until it has drained; weight 0 is allowed; the probe runs once per period per
instance at its own phase, and its latest completed download is in the observation."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from quell.core.action import AddInstance, RemoveInstance, SetWeight
from quell.core.loop import ControlLoop
from quell.core.observation import Snapshot
from quell.errors import ActionError
from quell.policy.static import StaticPolicy
from quell.scenario.model import Scenario
from quell.sim import SimEnvironment
from quell.sim.core import EventCore, Records, interval_stats
from tests.sim.build import build_scenario


def scenario(**over: Any) -> Scenario:
    over = {"seed": 11, "duration_s": 200, "interval_s": 1} | over
    if "instances" not in over:
        over["instances"] = [{"id": "i0", "host": "h0"}, {"id": "i1", "host": "h1"}]
    return build_scenario(n_hosts=4, **over)


def observe_at(env: SimEnvironment, t: float) -> Snapshot:
    env.clock.sleep_until(t)
    return env.observe()


@pytest.mark.parametrize(
    ("scaling", "boot_s"), [(None, 30.0), ({"hosts": ["h2"], "boot_s": 12}, 12.0)]
)
def test_an_added_instance_shows_once_it_serves(
    scaling: dict[str, Any] | None, boot_s: float
) -> None:
    env = SimEnvironment(scenario(scaling=scaling))
    observe_at(env, 10)
    env.apply([AddInstance("n1", "h2", weight=100)])
    ready = 10 + boot_s
    assert "n1" not in observe_at(env, ready - 1).instances
    assert "n1" in observe_at(env, ready + 1).instances
    assert observe_at(env, ready + 10).instances["n1"].requests > 100


def test_removing_a_booting_instance_cancels_it() -> None:
    env = SimEnvironment(scenario())
    observe_at(env, 1)
    env.apply([AddInstance("n1", "h2"), SetWeight("n1", 50)])  # a booting one takes actions
    observe_at(env, 5)
    env.apply([RemoveInstance("n1")])
    for t in range(10, 60, 10):
        assert "n1" not in observe_at(env, t).instances
    with pytest.raises(ActionError, match="unknown instance 'n1'"):
        env.apply([SetWeight("n1", 10)])
    env.apply([AddInstance("n1", "h3")])  # the id is free again


def test_a_removed_instance_is_reported_until_drained() -> None:
    # i1 serves 14 of the 20 req/s it gets: a backlog that takes seconds to drain
    s = scenario(
        hosts=[{"id": "h0"}, {"id": "h1"}],
        workload={
            "arrival": {"process": "deterministic", "rate_rps": 40},
            "requests": [{"path": "/f"}],
        },
        service={
            "discipline": "fcfs",
            "capacity_bytes_per_s": 2_100_000,
            "slowdown": [
                {"kind": "schedule", "instances": ["i1"], "points": [{"at_s": 0, "factor": 1.5}]}
            ],
        },
    )
    env = SimEnvironment(s)
    observe_at(env, 20)
    backlog = int(env.in_system()[1])
    assert backlog > 10
    env.apply([RemoveInstance("i1")])
    seen = []
    for t in range(21, 40):
        snap = observe_at(env, t)
        seen.append("i1" in snap.instances)
        assert snap.instances["i0"].requests > 0
    served_after = seen.count(True)
    assert served_after == pytest.approx(backlog / 14, abs=2)
    assert seen == [True] * served_after + [False] * (len(seen) - served_after)


def test_weight_zero_serves_nothing_until_weighted_but_is_probed() -> None:
    s = scenario(
        probe={"period_s": 2, "size_bytes": 50_000}, scaling={"hosts": ["h2"], "boot_s": 0}
    )
    env = SimEnvironment(s)
    observe_at(env, 1)
    env.apply([AddInstance("n1", "h2", weight=0)])
    snaps = [observe_at(env, t) for t in range(2, 12)]
    assert all(sn.instances["n1"].requests == 0 and sn.instances["n1"].weight == 0 for sn in snaps)
    assert sum("probe_rt_seconds" in sn.instances["n1"].extra for sn in snaps) == 5
    env.apply([SetWeight("n1", 100)])
    assert observe_at(env, 20).instances["n1"].requests > 10


def test_probes_run_once_per_period_at_each_instance_s_own_phase() -> None:
    s = scenario(
        duration_s=100,
        probe={"period_s": 10, "size_bytes": 20_000},
        instances=[{"id": f"i{k}", "host": f"h{k % 4}"} for k in range(8)],
    )
    env = SimEnvironment(s)
    snaps: list[Snapshot] = []
    ControlLoop(env, StaticPolicy(), 1, 100, on_snapshot=snaps.append).run()
    first_probe = {}
    for iid in [f"i{k}" for k in range(8)]:
        got = [sn.time_s for sn in snaps if "probe_rt_seconds" in sn.instances[iid].extra]
        assert len(got) in (9, 10)  # one per 10 s; the last may complete after the end
        gaps = np.diff(got)
        assert np.all((gaps >= 9) & (gaps <= 11))
        first_probe[iid] = got[0]
    assert len(set(first_probe.values())) >= 5  # phases differ
    assert env.instances_.probe_phase.tolist() == SimEnvironment(s).instances_.probe_phase.tolist()
    # a probe takes at least its size over the link
    rts = [
        o.extra["probe_rt_seconds"]
        for sn in snaps
        for o in sn.instances.values()
        if o.extra.get("probe_rt_seconds")
    ]
    assert min(rts) == pytest.approx(20_000 / 12.5e6) or min(rts) > 20_000 / 12.5e6


def test_no_probe_section_no_probe() -> None:
    env = SimEnvironment(scenario(duration_s=20))
    snaps: list[Snapshot] = []
    ControlLoop(env, StaticPolicy(), 1, 20, on_snapshot=snaps.append).run()
    assert not any("probe_rt_seconds" in o.extra for sn in snaps for o in sn.instances.values())
    assert all("link_util_pct" in o.extra for sn in snaps for o in sn.instances.values())


def test_oldest_request_in_flight_leaves_probes_out() -> None:
    # FCFS, one at a time, 1 B/s: the request of t = 0 runs until 10, the one of t = 1 waits
    core = EventCore()
    core.add_instance(core.add_resource(1.0), concurrency_limit=1)
    core.run(4.0, np.array([0.0, 1.0]), np.array([10.0, 10.0]))
    assert core.oldest_start_s().tolist() == [0.0]
    core.run(12.0, np.empty(0), np.empty(0))  # the first is done, the second in service
    assert core.oldest_start_s().tolist() == [1.0]
    probe = (np.array([25.0]), np.array([0]), np.array([10.0]))
    core.run(30.0, np.empty(0), np.empty(0), *probe)
    assert core.in_system().tolist() == [1]
    assert core.oldest_start_s().tolist() == [np.inf]  # a probe is not a request
    env = SimEnvironment(scenario(duration_s=30))
    snap = observe_at(env, 10)
    ages = [o.extra.get("oldest_in_flight_seconds") for o in snap.instances.values()]
    assert all(a is None or 0.0 <= a < 10.0 for a in ages)


def test_interval_stats_match_numpy_exactly() -> None:
    """Counts, sums and quantiles of an interval's records, as numpy computes them: one
    instance with none, refused requests (response time -1) and unrouted ones (instance -1),
    records split over several runs of the core, ties."""
    rng = np.random.default_rng(5)
    n, size = 4, 5000
    inst = rng.integers(-1, n - 1, size)  # instance 3 gets nothing
    rt = np.round(rng.exponential(0.05, size), 4)
    rt[rng.random(size) < 0.05] = -1.0
    cut = [0, 1200, 1201, 3700, size]
    records = [
        Records(inst[a:b], rt[a:b], rt[a:b], rt[a:b], np.zeros(n), np.zeros(n))
        for a, b in pairwise(cut)
    ]
    quantiles = (0.5, 0.95, 0.99)
    got = interval_stats(records, n, quantiles)
    ok = (inst >= 0) & (rt >= 0)
    inst_ok, rt_ok = inst[ok], rt[ok]
    counts = np.bincount(inst_ok, minlength=n)
    assert got.requests.tolist() == counts.tolist()
    assert got.rt_sum_s.tolist() == np.bincount(inst_ok, weights=rt_ok, minlength=n).tolist()
    assert got.unrouted == int(np.count_nonzero(inst < 0))
    for i in range(n):
        mine = rt_ok[inst_ok == i]
        for k, q in enumerate(quantiles):
            if mine.size == 0:
                assert np.isnan(got.rt_quantiles_s[k, i])
                continue
            ordered = np.sort(mine)
            pos = (mine.size - 1) * q
            lo = int(np.floor(pos))
            hi = min(lo + 1, mine.size - 1)
            frac = pos - lo
            assert got.rt_quantiles_s[k, i] == ordered[lo] * (1 - frac) + ordered[hi] * frac
            assert got.rt_quantiles_s[k, i] == pytest.approx(np.quantile(mine, q), rel=1e-12)
    empty = interval_stats([], n, quantiles)
    assert empty.requests.tolist() == [0] * n and np.isnan(empty.rt_quantiles_s).all()


def test_the_core_adds_up_every_probe_that_completes() -> None:
    # Alone on a 10 B/s resource a 10 B probe takes 1 s; three of them, one at a time.
    core = EventCore()
    core.add_instance(core.add_resource(10.0))
    probes = (np.array([0.0, 2.0, 4.0]), np.array([0, 0, 0]), np.array([10.0, 10.0, 10.0]))
    rec = core.run(6.0, np.empty(0), np.empty(0), *probes)
    assert rec.probe_sum_s.tolist() == [pytest.approx(3.0)]
    assert rec.probe_count.tolist() == [3.0]


def test_an_interval_reports_every_probe_completed_in_it() -> None:
    # A probe every 0.25 s on an idle 100 Mbit/s link: four per 1 s interval, each taking its
    # size over the link.
    s = scenario(duration_s=20, rate_rps=0.01, probe={"period_s": 0.25, "size_bytes": 125_000})
    env = SimEnvironment(s)
    snaps = [observe_at(env, t) for t in range(1, 11)]
    for sn in snaps[1:]:
        extra = sn.instances["i0"].extra
        assert extra["probe_samples"] == 4.0
        assert extra["probe_rt_seconds"] == pytest.approx(125_000 / 12.5e6, rel=1e-9)
