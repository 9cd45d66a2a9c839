"""Closed forms of quell.models.queueing: against independent textbook expressions, and against
the simulator's event core within the confidence interval of its estimate (batch means)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from quell.core.rng import component_rng
from quell.errors import InputError
from quell.models.queueing import (
    erlang_b,
    erlang_c,
    little_mean_jobs,
    little_mean_response_s,
    mg1_mean_wait_s,
    mm1_ps_mean_jobs,
    mm1_ps_mean_response_s,
    mm1k_blocking_probability,
    mm1k_mean_jobs,
    mm1k_mean_response_s,
    mmc_mean_response_s,
    mmc_mean_wait_s,
    mva_closed,
)
from quell.sim.core import EventCore


def test_mm1_ps() -> None:
    assert mm1_ps_mean_jobs(3.0, 4.0) == pytest.approx(3.0)
    assert mm1_ps_mean_response_s(3.0, 4.0) == pytest.approx(1.0)
    assert little_mean_jobs(3.0, mm1_ps_mean_response_s(3.0, 4.0)) == pytest.approx(3.0)


@pytest.mark.parametrize(("rho", "k"), [(0.5, 1), (0.8, 5), (1.0, 7), (2.5, 12)])
def test_mm1k_against_textbook_form(rho: float, k: int) -> None:
    if rho == 1.0:
        block, jobs = 1 / (k + 1), k / 2
    else:
        block = (1 - rho) * rho**k / (1 - rho ** (k + 1))
        jobs = rho / (1 - rho) - (k + 1) * rho ** (k + 1) / (1 - rho ** (k + 1))
    assert mm1k_blocking_probability(rho, 1.0, k) == pytest.approx(block, rel=1e-12)
    assert mm1k_mean_jobs(rho, 1.0, k) == pytest.approx(jobs, rel=1e-12)
    t = mm1k_mean_response_s(rho, 1.0, k)
    assert t == pytest.approx(little_mean_response_s(jobs, rho * (1 - block)), rel=1e-12)


def test_mm1k_huge_capacity_does_not_overflow() -> None:
    assert mm1k_blocking_probability(3.0, 1.0, 100_000) == pytest.approx(2 / 3, rel=1e-12)
    assert mm1k_mean_jobs(0.5, 1.0, 100_000) == pytest.approx(1.0, rel=1e-12)


def test_erlang_c_known_values() -> None:
    assert erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: wait with probability ρ
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    # c = 4, a = 3: top = 3^4/4! · 4/(4−3) = 13.5; terms 1 + 3 + 4.5 + 4.5 = 13
    assert erlang_c(4, 3.0) == pytest.approx(13.5 / 26.5)
    assert 0.0 < erlang_c(2000, 1990.0) < 1.0
    assert mmc_mean_response_s(3.0, 1.0, 4) == pytest.approx(13.5 / 26.5 + 1.0)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: mm1_ps_mean_jobs(-1.0, 2.0), "lam_rps"),
        (lambda: mm1_ps_mean_response_s(2.0, 2.0), "unstable"),
        (lambda: mm1k_mean_jobs(1.0, 0.0, 3), "mu_rps"),
        (lambda: mm1k_blocking_probability(1.0, 1.0, 0), "capacity must be ≥ 1"),
        (lambda: erlang_c(0, 1.0), "number of servers"),
        (lambda: erlang_c(3, 3.0), "unstable"),
        (lambda: mmc_mean_wait_s(float("nan"), 1.0, 2), "finite"),
        (lambda: little_mean_response_s(1.0, 0.0), "throughput_rps"),
    ],
)
def test_bad_input_is_a_clear_error(call: object, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        call()  # type: ignore[operator]


# -- against the simulator ---------------------------------------------------------------------
BATCHES = 20


def simulate(
    rho: float, n: int, seed: int, workers: int = 1, queue_limit: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One instance, μ = 1 per worker, λ = ρ·workers: a PS server for one worker, FCFS workers
    otherwise. Returns send times, response times (−1 when refused) and sizes in arrival order,
    the first 5 % dropped as warm-up."""
    lam = rho * workers
    arrivals = np.cumsum(component_rng(seed, "models/arrivals").exponential(1 / lam, n))
    sizes = component_rng(seed, "models/sizes").exponential(1.0, n)
    core = EventCore()
    cap = float(workers)
    if workers == 1:
        r = core.add_resource(cap)
        core.add_instance(r, queue_limit=queue_limit)
    else:
        r = core.add_resource(cap, 1.0)
        core.add_instance(r, concurrency_limit=workers)
    rec = core.run(float(arrivals[-1]) + 1e7, arrivals, sizes)
    order = np.argsort(rec.start_s, kind="stable")
    keep = order[n // 20 :]
    return rec.start_s[keep], rec.rt_s[keep], rec.size_bytes[keep]


def batch_ci(values: np.ndarray, confidence: float = 0.99) -> tuple[float, float]:
    """Mean and half-width of its confidence interval by non-overlapping batch means."""
    means = np.array([b.mean() for b in np.array_split(values, BATCHES)])
    half = stats.t.ppf(0.5 + confidence / 2, BATCHES - 1) * means.std(ddof=1) / math.sqrt(BATCHES)
    return float(means.mean()), float(half)


def test_mm1_ps_response_time_within_simulator_ci() -> None:
    _, rt, _ = simulate(0.6, 400_000, seed=21)
    mean, half = batch_ci(rt)
    assert abs(mean - mm1_ps_mean_response_s(0.6, 1.0)) <= half
    assert half < 0.03 * mean  # the interval is informative


def test_mm1k_blocking_within_simulator_ci() -> None:
    _, rt, _ = simulate(0.9, 400_000, seed=22, queue_limit=6)
    mean, half = batch_ci((rt < 0).astype(float))
    assert abs(mean - mm1k_blocking_probability(0.9, 1.0, 6)) <= half
    ok = rt >= 0
    t_mean, t_half = batch_ci(rt[ok])
    assert abs(t_mean - mm1k_mean_response_s(0.9, 1.0, 6)) <= t_half


def test_mmc_wait_within_simulator_ci() -> None:
    _, rt, size = simulate(0.75, 400_000, seed=23, workers=4)
    mean, half = batch_ci(rt - size)  # each FCFS worker serves 1 byte/s
    assert abs(mean - mmc_mean_wait_s(3.0, 1.0, 4)) <= half


def test_erlang_b_against_its_sum() -> None:
    # B(c, a) = (a^c / c!) / Σ_k a^k / k!
    for c, a in [(1, 0.5), (4, 3.0), (10, 7.5), (50, 40.0)]:
        terms = [a**k / math.factorial(k) for k in range(c + 1)]
        assert erlang_b(c, a) == pytest.approx(terms[-1] / sum(terms), rel=1e-12)
    assert erlang_b(0, 2.0) == 1.0
    # thousands of servers: no overflow (the sum in log space)
    k = np.arange(2001)
    log_terms = k * math.log(1900.0) - special.gammaln(k + 1)
    expected = math.exp(log_terms[-1] - special.logsumexp(log_terms))
    assert erlang_b(2000, 1900.0) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("users", [1, 2, 7, 40])
def test_mva_of_one_station_is_the_machine_repairman(users: int) -> None:
    # One exponential station (demand D) and a delay Z: the finite-source queue M/M/1//N,
    # p(n) ∝ N! / (N - n)! (D / Z)^n, X = (1 - p(0)) / D, R = N / X - Z.
    d, z = 0.2, 1.5
    w = np.array(
        [math.factorial(users) / math.factorial(users - n) * (d / z) ** n for n in range(users + 1)]
    )
    p = w / w.sum()
    x_exact = (1 - p[0]) / d
    x, r, queue = mva_closed([d], z, users)
    assert x == pytest.approx(x_exact, rel=1e-12)
    assert r == pytest.approx(users / x_exact - z, rel=1e-9)
    assert queue[0] == pytest.approx(float(np.dot(np.arange(users + 1), p)), rel=1e-9)


def test_mva_bounds_and_bad_input() -> None:
    x, r, _ = mva_closed([0.1, 0.05], 1.0, 200)
    assert x == pytest.approx(10.0, rel=1e-6)  # the bottleneck's 1 / D_max
    assert r == pytest.approx(200 / x - 1.0, rel=1e-9)
    with pytest.raises(InputError, match="users"):
        mva_closed([0.1], 1.0, 0)
    with pytest.raises(InputError, match="demands_s"):
        mva_closed([0.0], 1.0, 3)


def test_pollaczek_khinchine_is_m_m_1_with_exponential_service_and_half_of_it_deterministic() -> (
    None
):
    lam, mu = 0.7, 1.0
    mm1_wait = mmc_mean_wait_s(lam, mu, 1)  # ρ / (μ - λ)
    assert mg1_mean_wait_s(lam, 1 / mu, 1 / mu**2) == pytest.approx(mm1_wait, rel=1e-12)
    assert mg1_mean_wait_s(lam, 1 / mu, 0.0) == pytest.approx(mm1_wait / 2, rel=1e-12)
    with pytest.raises(InputError, match="unstable"):
        mg1_mean_wait_s(1.0, 1.0, 1.0)
    with pytest.raises(InputError) as bad:
        mg1_mean_wait_s(-1.0, 1.0, float("nan"))
    assert {p.location for p in bad.value.problems} == {"lam_rps", "service_variance_s2"}
