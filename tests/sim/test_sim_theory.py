"""The event core against closed-form queueing theory (seeded; warm-up removed; tolerances
stated per test). Every run also checks Little's law: ∫ N(t) dt over the run equals the sum of
response times once the system has drained."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from quell.core.rng import component_rng
from quell.models.queueing import (
    mg1_mean_wait_s,
    mm1_ps_mean_response_s,
    mm1k_blocking_probability,
    mmc_mean_wait_s,
)
from quell.sim.core import EventCore, Records
from quell.sim.service import (
    Deterministic,
    Empirical,
    Exponential,
    Lognormal,
    SizeDistribution,
)
from tests.models.test_queueing import batch_ci

WARMUP = 0.05
"""Share of the first requests dropped before averaging."""
EXPONENTIAL = Exponential(1.0)
SIZES = [
    EXPONENTIAL,
    Deterministic(1.0),
    Lognormal(1.0, sigma=1.0),
    Empirical([0.2, 0.5, 1.0, 3.0]),
]
"""One of each distribution ``service.size`` allows (``quell.sim.service``)."""


def run_single(
    rho: float,
    n: int,
    seed: int,
    sizes: SizeDistribution = EXPONENTIAL,
    queue_limit: int | None = None,
    workers: int = 1,
    discipline: str = "ps",
) -> tuple[EventCore, Records, NDArray[np.float64]]:
    """One instance on its own resource; sizes drawn from ``sizes``, capacity = workers bytes/s
    (so each FCFS worker, or the PS server in total per worker, serves 1 byte/s), λ =
    ρ·workers / E[S]."""
    rng = component_rng(seed, "test/arrivals")
    lam = rho * workers / sizes.mean
    arrivals = np.cumsum(rng.exponential(1.0 / lam, n))
    size = sizes.sample(component_rng(seed, "test/sizes"), n)
    core = EventCore()
    cap = float(workers)
    r = core.add_resource(cap, cap / workers if discipline == "fcfs" else math.inf)
    core.add_instance(
        r,
        concurrency_limit=workers if discipline == "fcfs" else None,
        queue_limit=queue_limit,
    )
    rec = _run_chunked(core, arrivals, size)
    check_little(core, rec)
    return core, rec, size


def _run_chunked(
    core: EventCore, arrivals: NDArray[np.float64], size: NDArray[np.float64]
) -> Records:
    """Run in chunks (bounded output buffers), then drain."""
    parts = []
    step = 1_000_000
    for k in range(0, arrivals.size, step):
        end = arrivals[k + step] if k + step < arrivals.size else arrivals[-1] + 1e-9
        parts.append(core.run(float(end), arrivals[k : k + step], size[k : k + step]))
    parts.append(core.run(float(arrivals[-1]) + 1e7, arrivals[:0], size[:0]))
    return Records(
        np.concatenate([p.instance for p in parts]),
        np.concatenate([p.start_s for p in parts]),
        np.concatenate([p.rt_s for p in parts]),
        np.concatenate([p.size_bytes for p in parts]),
        sum(p.probe_sum_s for p in parts),
        sum(p.probe_count for p in parts),
    )


def check_little(core: EventCore, rec: Records) -> None:
    """Little's law, L·T = λ·W·T: the integral of jobs in system equals the summed response times
    of the (drained) run, to 1e-6 relative."""
    assert core.in_system().sum() == 0
    done = rec.rt_s >= 0
    assert core.instances_.area.sum() == pytest.approx(rec.rt_s[done].sum(), rel=1e-6)


def steady_mean(rec: Records) -> float:
    """Mean response time of completed requests in arrival order, first WARMUP share dropped."""
    done = rec.rt_s >= 0
    order = np.argsort(rec.start_s[done], kind="stable")
    rt = rec.rt_s[done][order]
    return float(rt[int(WARMUP * rt.size) :].mean())


@pytest.mark.parametrize(
    ("rho", "n"),
    [(0.3, 400_000), (0.6, 1_000_000), (0.9, 8_000_000)],
)
def test_mm1_ps_mean_response_time_within_2_percent(rho: float, n: int) -> None:
    # M/M/1-PS: E[T] = 1/(μ - λ), μ = 1. ρ = 0.9 needs ~10^7 requests for a ~0.7 % standard
    # error (relaxation time ~ 1/(1-√ρ)² service times); tolerance 2 %.
    _, rec, _ = run_single(rho, n, seed=11)
    assert steady_mean(rec) == pytest.approx(mm1_ps_mean_response_s(rho, 1.0), rel=0.02)


@pytest.mark.parametrize("sizes", SIZES, ids=lambda d: type(d).__name__)
def test_ps_insensitivity(sizes: SizeDistribution) -> None:
    # M/G/1-PS mean response time depends on the size distribution only through its mean:
    # E[T] = E[S]/(1-ρ) = 2.5 E[S] at ρ = 0.6 on a capacity of 1 (Kleinrock Vol. 2 Eq. 4.18),
    # from the distribution's own stated mean; tolerance 2 %.
    _, rec, _ = run_single(0.6, 1_000_000, seed=5, sizes=sizes)
    expected = mm1_ps_mean_response_s(0.6 / sizes.mean, 1.0 / sizes.mean)
    assert steady_mean(rec) == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("sizes", SIZES, ids=lambda d: type(d).__name__)
def test_mg1_fcfs_wait_by_pollaczek_khinchine(sizes: SizeDistribution) -> None:
    # M/G/1 FCFS, unlike PS, waits by the second moment: W_q = λ E[S²] / (2(1-ρ)), from the
    # distribution's stated mean and variance; ρ = 0.5, 1M requests, within the estimate's 99 %
    # confidence interval by batch means (the interval itself under 5 %).
    rho = 0.5
    _, rec, _ = run_single(rho, 1_000_000, seed=6, sizes=sizes, discipline="fcfs")
    order = np.argsort(rec.start_s, kind="stable")
    wait = (rec.rt_s - rec.size_bytes)[order]  # the worker serves 1 byte/s
    mean, half = batch_ci(wait[int(WARMUP * wait.size) :])
    expected = mg1_mean_wait_s(rho / sizes.mean, sizes.mean, sizes.variance)
    assert abs(mean - expected) <= half
    assert half < 0.05 * expected


@pytest.mark.parametrize("sizes", SIZES, ids=lambda d: type(d).__name__)
def test_each_size_distribution_draws_its_stated_mean_and_variance(sizes: SizeDistribution) -> None:
    # 400,000 draws: the sample mean within 3 standard errors (sqrt(Var / n)) of the stated
    # mean, the sample variance within 3 of its own (sqrt((m4 - s^4) / n), m4 the sample's
    # fourth central moment) of the stated variance; a deterministic size exactly.
    x = sizes.sample(component_rng(9, "test/moments"), 400_000)
    n = x.size
    var = float(x.var(ddof=1))
    m4 = float(np.mean((x - x.mean()) ** 4))
    exact = 1e-12 * sizes.mean  # a sum's rounding
    assert abs(float(x.mean()) - sizes.mean) <= 3 * math.sqrt(sizes.variance / n) + exact
    assert abs(var - sizes.variance) <= 3 * math.sqrt(max(m4 - var**2, 0.0) / n) + exact**2
    assert sizes.variance > 0 or var == 0.0


def test_mm1k_blocking_probability() -> None:
    # M/M/1/K (K = 5 jobs in the instance), ρ = 0.8: P_block = (1-ρ)ρ^K / (1-ρ^(K+1)) (PASTA);
    # tolerance 3 % relative.
    rho, k = 0.8, 5
    _, rec, _ = run_single(rho, 2_000_000, seed=3, queue_limit=k)
    expected = mm1k_blocking_probability(rho, 1.0, k)
    blocked = float(np.mean(rec.rt_s < 0))
    assert blocked == pytest.approx(expected, rel=0.03)


def test_mmc_fcfs_mean_wait_by_erlang_c() -> None:
    # M/M/4 FCFS, ρ = 0.75 (λ = 3, μ = 1 per worker): W_q = C(c, a) / (cμ - λ); tolerance 3 %.
    c, rho = 4, 0.75
    _, rec, _ = run_single(rho, 2_000_000, seed=8, workers=c, discipline="fcfs")
    done = rec.rt_s >= 0
    order = np.argsort(rec.start_s[done], kind="stable")
    wait = (rec.rt_s[done] - rec.size_bytes[done])[order]  # each worker serves 1 byte/s
    wait = wait[int(WARMUP * wait.size) :]
    expected = mmc_mean_wait_s(c * rho, 1.0, c)
    assert float(wait.mean()) == pytest.approx(expected, rel=0.03)
    assert wait.min() > -1e-9  # nobody is served faster than a worker's speed


def test_mm1_fcfs_limit_one_matches_ps_mean() -> None:
    # With exponential sizes, M/M/1 FCFS and PS have the same mean response time 1/(μ-λ).
    _, rec, _ = run_single(0.5, 500_000, seed=2, workers=1, discipline="fcfs")
    assert steady_mean(rec) == pytest.approx(mm1_ps_mean_response_s(0.5, 1.0), rel=0.02)


def test_mm1_fcfs_sojourn_tail_is_what_users_felt() -> None:
    # M/M/1 FCFS: the sojourn time is exponential with rate μ - λ, P(T > t) = exp(-(μ-λ)t).
    # μ = 1, λ = 0.5, R_th = 2: the share above R_th is e^-1, above 2 R_th e^-2, and the p99
    # ln(100)/(μ-λ) = 9.21. The shares within their 99 % confidence interval by batch means of
    # the indicator; the p99 within 3 % (its standard error, ~√(0.01·0.99/n)/f(q), is 0.3 %
    # from independent draws, a few times that from these correlated ones).
    from quell.report.felt import felt

    _, rec, _ = run_single(0.5, 400_000, seed=12, discipline="fcfs")
    order = np.argsort(rec.start_s, kind="stable")
    rt = rec.rt_s[order][int(WARMUP * rec.rt_s.size) :]
    answered = rt >= 0
    assert answered.all()
    f = felt(rt, answered, 1e3, 2.0)
    for share, t in ((f.share_above_rth, 2.0), (f.share_above_2rth, 4.0)):
        mean, half = batch_ci((rt > t).astype(float))
        assert share == pytest.approx(mean)
        assert abs(share - math.exp(-0.5 * t)) <= half
    assert f.p99_rt_seconds == pytest.approx(math.log(100) / 0.5, rel=0.03)
