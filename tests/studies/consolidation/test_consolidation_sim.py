"""The consolidation simulator (quell.studies.consolidation.sim) against closed-form results: exact
mean-value analysis for one closed system, Little's law on each system, the quantum scheduler
tending to the fluid one as its quantum shrinks, a 50 % cap holding, and repeatability."""

from __future__ import annotations

import numpy as np
import pytest

from quell.errors import InputError
from quell.studies.consolidation.point import ConsolidationPoint, SystemLoad
from quell.studies.consolidation.sim import Costs, Tiers, simulate_point

WIDE = Tiers(web_workers=1000, app_workers=1000)
"""Pools no test population fills: the database core is the only queue."""


def point(const: int, inc: int, cap: float = 100.0, **kw: object) -> ConsolidationPoint:
    base: dict[str, object] = {
        "const": SystemLoad(users=const, cap_pct=cap),
        "inc": SystemLoad(users=inc, cap_pct=cap),
        "think_time_seconds": 0.1,
        "ramp_seconds": 5.0,
        "measure_seconds": 200.0,
        "seed": 3,
    }
    return ConsolidationPoint.model_validate(base | kw)


def mva(users: int, demand_s: float, think_s: float) -> tuple[float, float]:
    """Exact MVA for one processor-sharing station and a delay (BCMP: the mean demand is
    enough for processor sharing): throughput and response time at ``users``."""
    q = 0.0
    x = r = 0.0
    for n in range(1, users + 1):
        r = demand_s * (1.0 + q)
        x = n / (r + think_s)
        q = x * r
    return x, r


@pytest.mark.parametrize("scheduler", ["fluid", "quantum"])
def test_one_system_matches_exact_mva(scheduler: str) -> None:
    # 12 users, Z = 0.1 s, D = 0.9 ms + 0.1 * 50 ms = 5.9 ms: MVA gives X = 106.5/s, R = 12.6 ms
    # (the core 63 % busy). Tolerance: 2 % on X, 6 % on R (200 s, some 22,000 requests).
    costs = Costs(light_seconds=0.001, heavy_seconds=0.05)
    p = point(12, 0)
    m = simulate_point(p, scheduler=scheduler, tiers=WIDE, costs=costs)  # type: ignore[arg-type]
    x, r = mva(12, 0.9 * 0.001 + 0.1 * 0.05, 0.1)
    got = m.systems["const"]
    assert got.throughput_per_second == pytest.approx(x, rel=0.02)
    assert got.mean_rt_seconds == pytest.approx(r, rel=0.06)
    assert got.db_cpu_pct == pytest.approx(100.0 * x * 0.0059, rel=0.02)
    assert m.systems["inc"].requests_total == 0


@pytest.mark.parametrize(("scheduler", "cap"), [("fluid", 100.0), ("quantum", 50.0)])
def test_littles_law_holds_on_each_system(scheduler: str, cap: float) -> None:
    # N = X (R + Z) for both systems, the core shared and (at 50 %) throttling.
    m = simulate_point(point(10, 14, cap), scheduler=scheduler)  # type: ignore[arg-type]
    for name, users in (("const", 10), ("inc", 14)):
        s = m.systems[name]
        assert s.throughput_per_second * (s.mean_rt_seconds + 0.1) == pytest.approx(users, rel=0.02)


def test_quantum_round_robin_tends_to_fluid_as_the_quantum_shrinks() -> None:
    # 1,000 users a system with a 60 s think, 20 s from a cold start: almost every user sends
    # one request, at a time drawn before any scheduling, so the schedulers see the same
    # arrivals and differ only in how they share the core (52 % busy, 30 % heavy). Round robin
    # between the groups in quanta from 20 ms to 0.2 ms against capped processor sharing.
    p = ConsolidationPoint(
        const=SystemLoad(users=1000),
        inc=SystemLoad(users=1000),
        think_time_seconds=60.0,
        heavy_share=0.3,
        ramp_seconds=0.0,
        measure_seconds=20.0,
        seed=3,
    )
    fluid = simulate_point(p, scheduler="fluid").systems
    gaps = []
    for q in (0.02, 0.005, 0.001, 0.0002):
        got = simulate_point(p, scheduler="quantum", quantum_seconds=q, pick="rr").systems
        rel = [abs(got[k].mean_rt_seconds / fluid[k].mean_rt_seconds - 1.0) for k in fluid]
        gaps.append(sum(rel) / 2)
    assert gaps[0] > 0.02  # a 20 ms quantum is visibly not processor sharing
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 0.002


def test_fluid_caps_at_fifty_fifty_isolate() -> None:
    # The fluid scheduler's prediction: with 50/50 caps Sys_Const gets its 50 % whatever
    # Sys_Inc does (the same users; only rounding in the event times differs), while with caps
    # up to 100 % a busier Sys_Inc takes the core from it.
    def const_rt(inc: int, cap: float) -> float:
        m = simulate_point(point(8, inc, cap, measure_seconds=50.0), scheduler="fluid")
        return m.systems["const"].mean_rt_seconds

    assert const_rt(30, 50.0) == pytest.approx(const_rt(2, 50.0), rel=0.02)
    assert const_rt(30, 100.0) > 1.5 * const_rt(2, 100.0)


@pytest.mark.parametrize("scheduler", ["fluid", "quantum"])
def test_a_fifty_percent_cap_bounds_the_groups_cpu(scheduler: str) -> None:
    # Both systems overloaded (40 users, Z = 0.1 s want some 170 % of the core each).
    m = simulate_point(point(40, 40, 50.0, measure_seconds=30.0), scheduler=scheduler)  # type: ignore[arg-type]
    for s in m.systems.values():
        assert s.db_cpu_pct <= 50.0 + 1e-6
        assert s.db_cpu_pct > 49.0
        # The 0.1 s samples line up with the 0.1 s periods: none above the quota.
        assert max(s.cpu_pct_100ms) <= 50.0 + 1e-6
        assert len(s.cpu_pct_100ms) == 300
    if scheduler == "quantum":
        # In every period at least one of them spends its quota before the period ends.
        assert sum(s.throttled_periods_total for s in m.systems.values()) >= 300


def test_alone_under_a_cap_the_quota_is_used_in_bursts_and_throttled() -> None:
    # One overloaded system alone under a 50 % quota: it runs flat out until the quota is
    # spent, every period; the 0.1 s samples sit at the cap, the periods are all throttled.
    m = simulate_point(point(40, 0, 50.0, measure_seconds=10.0), scheduler="quantum")
    s = m.systems["const"]
    assert s.throttled_periods_total == 100
    assert s.db_cpu_pct == pytest.approx(50.0, abs=1e-6)


def test_cross_tier_priority_serves_light_transactions_first() -> None:
    # Two application workers, an overloaded core: light transactions overtake heavy ones.
    tiers = Tiers(web_workers=100, app_workers=2)
    base = point(30, 0, measure_seconds=60.0)
    fifo = simulate_point(base, scheduler="fluid", tiers=tiers).systems["const"]
    ctp = simulate_point(
        base.model_copy(update={"ctp": True}), scheduler="fluid", tiers=tiers
    ).systems["const"]
    assert fifo.light_mean_rt_seconds is not None and ctp.light_mean_rt_seconds is not None
    assert ctp.light_mean_rt_seconds < 0.8 * fifo.light_mean_rt_seconds
    assert ctp.throughput_per_second == pytest.approx(fifo.throughput_per_second, rel=0.05)


def test_same_seed_same_result_and_another_seed_another() -> None:
    p = point(20, 20, 60.0, dispersion_index=100.0, measure_seconds=20.0)
    a = simulate_point(p, scheduler="quantum")
    b = simulate_point(p, scheduler="quantum")
    c = simulate_point(p.model_copy(update={"seed": 4}), scheduler="quantum")
    assert a == b
    assert a.systems["const"] != c.systems["const"]


def test_bad_scheduler_settings_are_refused_together() -> None:
    with pytest.raises(InputError) as exc:
        simulate_point(point(1, 1), scheduler="quantum", quantum_seconds=-1.0, period_seconds=5.0)
    assert len(exc.value.problems) == 2


@pytest.mark.parametrize("index", [1.0, 20.0])
def test_sys_inc_bursts_have_the_index_of_dispersion_asked(index: float) -> None:
    # Jobs of 10 µs: the users almost always think, so Sys_Inc's requests are the MMPP2 of
    # Mmpp2.fit (50 users, 1 s think: 50/s). Its CPU per 0.1 s counts them; the index of
    # dispersion of the counts in 5 s windows (about 25 burst cycles long at I = 20) is I's
    # within sampling error (80 windows: about 15 %); Sys_Const keeps I = 1.
    tiny = Costs(light_seconds=1e-5, heavy_seconds=1e-5)
    p = point(50, 50, think_time_seconds=1.0, dispersion_index=index, measure_seconds=400.0)
    m = simulate_point(p, scheduler="fluid", costs=tiny)
    for name, want in (("inc", index), ("const", 1.0)):
        s = m.systems[name]
        counts = np.asarray(s.cpu_pct_100ms).reshape(-1, 50).sum(axis=1) * 0.1 / 100.0 / 1e-5
        assert counts.sum() == pytest.approx(s.requests_total, abs=100)
        assert s.throughput_per_second == pytest.approx(50.0, rel=0.1)
        assert counts.var() / counts.mean() == pytest.approx(want, rel=0.4)
