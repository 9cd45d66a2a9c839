"""Host-level interference (``service.interference``): the capacity it takes, exactly as the event
core applies it, as queueing theory predicts it, as the probe and ``link_util_pct`` see it, and
as the oracle reads it; seeded, independent per host, for instances added later too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from quell.core.action import AddInstance
from quell.core.observation import Snapshot
from quell.errors import InputError
from quell.experiment.run import scenario_loop
from quell.policy.static import StaticPolicy
from quell.scenario.model import Scenario
from quell.scenario.service import HostInterference
from quell.sim import SimEnvironment
from quell.sim.core import EventCore
from quell.sim.headroom import available_hosts, host_capacity
from quell.sim.service import interference_changes
from tests.sim.build import LINK_BYTES_PER_S, build_scenario

LINK = LINK_BYTES_PER_S


def fleet(**over: Any) -> Scenario:
    over = {
        "seed": 5,
        "duration_s": 200,
        "service": {"size": {"distribution": "exponential"}},
    } | over
    return build_scenario(n_hosts=3, rate_rps=40, **over)


def interference(**spec: Any) -> dict[str, Any]:
    return {"size": {"distribution": "exponential"}, "interference": [spec]}


def run(s: Scenario) -> tuple[SimEnvironment, list[Snapshot]]:
    env = SimEnvironment(s, log_capacity=True)
    snaps: list[Snapshot] = []
    scenario_loop(s, env, StaticPolicy(), on_snapshot=snaps.append).run()
    return env, snaps


def test_a_capacity_change_moves_a_job_s_finish_exactly() -> None:
    # 10 bytes at 1 B/s; at t = 4 the capacity halves: 6 bytes left at 0.5 B/s → done at 16
    core = EventCore()
    r = core.add_resource(1.0)
    core.add_instance(r)
    code = EventCore.capacity_code(r)
    rec = core.run(
        100.0,
        np.array([0.0]),
        np.array([10.0]),
        change_s=np.array([4.0]),
        change_instance=np.array([code]),
        change_factor=np.array([0.5]),
    )
    assert rec.rt_s.tolist() == pytest.approx([16.0], abs=1e-12)
    assert core.resources_.cap[r] == 0.5


def test_reduced_link_gives_mm1_ps_response_time_of_the_capacity_left() -> None:
    # 40 Mbit/s of 100 taken all run long: C = 7.5 MB/s; 100 kB mean, 40 req/s: ρ = 0.533
    svc = interference(bitrate_mbit=40, on_seconds=1e6, off_seconds=1, start="on")
    _, snaps = run(fleet(duration_s=1500, service=svc))
    obs = [s.instances["i0"] for s in snaps[5:]]
    n = sum(o.requests for o in obs)
    mean = sum(o.requests * (o.mean_rt_seconds or 0.0) for o in obs) / n
    cap = 0.6 * LINK
    theory = (1e5 / cap) / (1.0 - 40 * 1e5 / cap)
    assert mean == pytest.approx(theory, rel=0.06)
    # the link is used by the instance and by the neighbour's 40 %
    for o in obs:
        assert o.extra["link_util_pct"] == pytest.approx((o.util_pct or 0.0) + 40.0, abs=1e-6)


def test_probe_and_link_utilisation_see_the_neighbour_come_and_go() -> None:
    svc = interference(
        bitrate_mbit=60, on_seconds=100, off_seconds=100, durations="fixed", start="off"
    )
    probe = {"period_s": 10, "size_bytes": 200_000}
    _, snaps = run(fleet(duration_s=400, probe=probe, service=svc))

    def mean_probe(lo: float, hi: float) -> float:
        rts = [
            s.instances["i0"].extra["probe_rt_seconds"]
            for s in snaps
            if lo < s.time_s <= hi and "probe_rt_seconds" in s.instances["i0"].extra
        ]
        assert len(rts) >= 6
        return float(np.mean(rts))

    off, on = mean_probe(10, 100), mean_probe(110, 200)
    # alone the probe takes 16 ms at ρ = 0.32; with 60 % of the link gone, ρ = 0.8 on 40 %
    assert on > 4.0 * off
    util_on = [s.instances["i0"].extra["link_util_pct"] for s in snaps if 110 < s.time_s <= 200]
    util_off = [s.instances["i0"].extra["link_util_pct"] for s in snaps if 210 < s.time_s <= 300]
    assert np.mean(util_on) == pytest.approx(np.mean(util_off) + 60.0, abs=5.0)


def test_unlimited_iperf3_streams_fill_the_link() -> None:
    s = fleet(
        duration_s=60,
        antagonists=[{"id": "n", "kind": "iperf3", "host": "h0", "streams": 2}],
        events=[{"at_s": 20, "start": ["n"]}, {"at_s": 40, "stop": ["n"]}],
    )
    _, snaps = run(s)
    util = {s.time_s: s.instances["i0"].extra["link_util_pct"] for s in snaps}
    assert util[30.0] == pytest.approx(100.0, abs=0.5)
    assert util[60.0] == pytest.approx(snaps[-1].instances["i0"].util_pct, abs=1e-9)


def test_an_instance_added_later_suffers_its_host_s_neighbour() -> None:
    svc = interference(hosts=["h1"], bitrate_mbit=60, on_seconds=1e6, off_seconds=1, start="on")
    s = fleet(duration_s=300, scaling={"hosts": ["h1"], "boot_s": 0}, service=svc)
    env = SimEnvironment(s)
    env.clock.sleep_until(10)
    env.observe()
    env.apply([AddInstance("i1", "h1")])
    rt: dict[str, list[float]] = {"i0": [], "i1": []}
    for t in range(20, 310, 10):
        env.clock.sleep_until(t)
        snap = env.observe()
        for iid in rt:
            o = snap.instances[iid]
            rt[iid].append(o.mean_rt_seconds or 0.0)
            assert o.extra["link_util_pct"] > (60.0 if iid == "i1" else 0.0)
    # each gets 20 req/s: i0 alone on 12.5 MB/s (ρ = 0.16), i1 on 5 MB/s (ρ = 0.4)
    assert np.mean(rt["i1"]) > 2.5 * np.mean(rt["i0"])


def test_timelines_are_seeded_independent_per_host_and_start_stationary() -> None:
    hosts = build_scenario(n_hosts=400, duration_s=1, interval_s=1).hosts
    spec = HostInterference(bitrate_mbit=8, on_seconds=100, off_seconds=300)
    a = interference_changes([spec], hosts, 5000, seed=1)
    b = interference_changes([spec], hosts, 5000, seed=1)
    c = interference_changes([spec], hosts, 5000, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    t, h, level = a
    on_at_0 = np.unique(h[(t == 0.0) & (level > 0)]).size
    assert on_at_0 / 400 == pytest.approx(0.25, abs=0.07)  # on 100 of every 400 s
    # a host's timeline is its own: the same with fewer hosts covered
    only = HostInterference(hosts=["h7"], bitrate_mbit=8, on_seconds=100, off_seconds=300)
    t7, _, l7 = interference_changes([only], hosts, 5000, seed=1)
    assert np.array_equal(t7, t[h == 7]) and np.array_equal(l7, level[h == 7])
    assert set(np.round(level / (8e6 / 8.0), 9).tolist()) <= {0.0, 1.0}


def test_sources_add_up_and_are_capped_at_95_percent() -> None:
    svc = {
        "interference": [
            {"bitrate_mbit": 60, "on_seconds": 1e6, "off_seconds": 1, "start": "on"},
            {"bitrate_mbit": 60, "on_seconds": 1e6, "off_seconds": 1, "start": "on"},
        ]
    }
    env, _ = run(fleet(duration_s=20, service=svc))
    assert env.core_.resources_.cap[0] == pytest.approx(0.05 * LINK)
    assert env.capacity_log_[-1][0] == pytest.approx(0.05 * LINK)


def test_bad_interference_hosts_are_all_named() -> None:
    svc = interference(hosts=["nowhere", "h9"], bitrate_mbit=10, on_seconds=1, off_seconds=1)
    with pytest.raises(InputError) as info:  # the scenario check names both
        fleet(hosts=[{"id": "h0", "link_mbit": 100}, {"id": "h9"}], service=svc)
    text = str(info.value)
    assert "unknown host 'nowhere'" in text and "'h9' has no link_mbit" in text


def test_the_oracle_reads_the_capacity_the_simulator_applies() -> None:
    svc = interference(bitrate_mbit=40, on_seconds=30, off_seconds=50)
    s = fleet(
        duration_s=300,
        scaling={"hosts": ["h1", "h2"]},
        antagonists=[{"id": "n", "kind": "iperf3", "host": "h1", "streams": 2, "bitrate_mbit": 10}],
        events=[{"at_s": 55, "start": ["n"]}, {"at_s": 123, "stop": ["n"]}],
        service=svc,
    )
    env, _ = run(s)
    assert available_hosts(s) == ["h0", "h1", "h2"]
    simulated = np.array(env.capacity_log_)
    assert host_capacity(s, ["h0", "h1", "h2"]) == pytest.approx(simulated, rel=1e-9)
    assert simulated.min() <= 0.6 * LINK  # the neighbours did come
