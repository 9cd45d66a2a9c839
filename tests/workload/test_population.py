"""Closed-loop users without a network: each user's draws (seeded, exponential think times, the
mix), the ramp, the bounds, a scenario's population, and thinking on an MMPP2-modulated clock."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from quell.core.rng import component_rng
from quell.scenario import parse_scenario
from quell.scenario.schedule import build_population
from quell.workload.arrival import Mmpp2, index_of_dispersion
from quell.workload.population import (
    USER_STREAM,
    Population,
    RequestBudget,
    ThinkModulation,
    response_time_law_rps,
)
from tests.sim.build import scenario_data
from tests.workload.build import population


def draw(pop: Population, user: int, n: int) -> tuple[list[int], list[float]]:
    d = pop.draws(user)
    pairs = [d.next() for _ in range(n)]
    return [p for p, _ in pairs], [t for _, t in pairs]


def test_each_user_has_its_own_seeded_stream() -> None:
    pop = population()
    paths, thinks = draw(pop, 3, 500)
    assert draw(population(), 3, 500) == (paths, thinks)  # same seed, same user: same draws
    assert draw(pop, 4, 500)[1] != thinks  # another user
    assert draw(population(seed=8), 3, 500)[1] != thinks  # another seed
    # request j uses uniforms 2j (path) and 2j + 1 (think) of stream workload/users/3
    u = component_rng(7, USER_STREAM.format(3)).random((500, 2))
    assert thinks == pytest.approx((-0.5 * np.log1p(-u[:, 1])).tolist(), rel=1e-12)
    assert paths == np.searchsorted([6.0, 9.0, 10.0], u[:, 0] * 10.0, side="right").tolist()


def test_think_times_are_exponential_with_the_mean_asked() -> None:
    # 20 000 draws over 20 users: the mean within 2 % (its standard error is 0.7 %), and a
    # Kolmogorov-Smirnov test against Exp(0.5 s) does not reject at 1 %.
    pop = population()
    thinks = np.concatenate([draw(pop, k, 1000)[1] for k in range(20)])
    assert thinks.min() >= 0.0
    assert thinks.mean() == pytest.approx(0.5, rel=0.02)
    assert thinks.std() / thinks.mean() == pytest.approx(1.0, rel=0.03)
    assert stats.kstest(thinks, stats.expon(scale=0.5).cdf).pvalue > 0.01


def test_paths_follow_the_mix_weights() -> None:
    pop = population()
    paths = np.concatenate([draw(pop, k, 1000)[0] for k in range(10)])
    shares = np.bincount(paths, minlength=3) / paths.size
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.015)
    assert draw(population(paths=("/only",), weights=(2.0,)), 0, 50)[0] == [0] * 50


def test_zero_think_time_thinks_nothing() -> None:
    assert draw(population(think_time_s=0.0), 0, 100)[1] == [0.0] * 100


def test_users_start_evenly_over_the_ramp() -> None:
    pop = population(users=4, ramp_s=2.0)
    assert [pop.start_s(k) for k in range(4)] == [0.0, 0.5, 1.0, 1.5]
    assert [population(ramp_s=0.0).start_s(k) for k in range(10)] == [0.0] * 10


def test_the_budget_stops_at_the_duration_and_the_request_bound() -> None:
    budget = RequestBudget(max_requests=3, duration_s=10.0)
    assert budget.take(0.0) and budget.take(9.999)
    assert not budget.take(10.0)  # none at or after the duration
    assert budget.wakes_in_time(9.5) and not budget.wakes_in_time(10.0)
    assert budget.take(5.0)
    assert not budget.take(5.0) and budget.taken == 3  # spent
    assert not budget.wakes_in_time(1.0)


def test_response_time_law() -> None:
    assert response_time_law_rps(200, 0.005, 0.495) == pytest.approx(400.0)
    assert response_time_law_rps(1, 0.0, 0.0) == float("inf")


def test_a_scenario_with_closed_loop_users_has_a_population_and_others_none() -> None:
    data = scenario_data()
    assert build_population(parse_scenario(data)) is None
    data["workload"]["arrival"] = {
        "process": "closed",
        "users": 40,
        "think_time_s": 0.5,
        "ramp_s": 4,
        "keepalive": False,
    }
    data["workload"]["max_requests"] = 5000
    s = parse_scenario(data)
    pop = build_population(s)
    assert pop is not None
    assert (pop.users, pop.think_time_s, pop.ramp_s, pop.keepalive) == (40, 0.5, 4.0, False)
    assert pop.paths == tuple(r.path for r in s.workload.requests or [])
    assert (pop.duration_s, pop.max_requests, pop.seed) == (s.duration_s, 5000, s.seed)


def test_think_modulation_stretches_time_by_its_factors() -> None:
    m = ThinkModulation((0.0, 10.0, 12.0), (0.5, 4.0, 1.0))
    assert m.end_s(0.0, 2.0) == pytest.approx(4.0)  # half speed
    assert m.end_s(9.0, 2.0) == pytest.approx(10.0 + 1.5 / 4.0)  # 0.5 s, then 1.5 at 4x
    assert m.end_s(11.0, 10.0) == pytest.approx(12.0 + 6.0)  # 4 in 1 s, then 6 at 1x
    assert m.end_s(-1.0, 0.5) == pytest.approx(0.0)  # before the first start: first factor


def test_mmpp2_modulation_averages_one_and_keeps_its_seed() -> None:
    m = ThinkModulation.mmpp2(100.0, 40.0, 20_000.0, seed=1)
    assert m == ThinkModulation.mmpp2(100.0, 40.0, 20_000.0, seed=1)
    assert m != ThinkModulation.mmpp2(100.0, 40.0, 20_000.0, seed=2)
    fit = Mmpp2.fit(40.0, 100.0)
    assert set(m.factors) == {fit.rate_high / fit.mean_rate_rps, fit.rate_low / fit.mean_rate_rps}
    starts = np.asarray(m.starts_s)
    lengths = np.diff([*starts, 20_000.0])
    mean = float(np.sum(lengths * np.asarray(m.factors)) / 20_000.0)
    assert mean == pytest.approx(1.0, abs=0.05)  # ~2000 sojourns
    # without users blocking, a think clock at rate 40/s modulated so is that MMPP2: its
    # thinks-ending process has the index of dispersion asked for
    rng = np.random.default_rng(0)
    t, ends = 0.0, []
    while t < 20_000.0:
        t = m.end_s(t, float(rng.exponential(1 / 40.0)))
        ends.append(t)
    assert index_of_dispersion(np.asarray(ends), 200.0) == pytest.approx(100.0, rel=0.35)
