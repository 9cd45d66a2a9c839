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
    mm1_ps_mean_response_s,
    mm1k_blocking_probability,
    mmc_mean_wait_s,
)
from quell.sim.core import EventCore, Records

WARMUP = 0.05
"""Share of the first requests dropped before averaging."""


def run_single(
    rho: float,
    n: int,
    seed: int,
    sizes: str = "exponential",
    queue_limit: int | None = None,
    workers: int = 1,
    discipline: str = "ps",
) -> tuple[EventCore, Records, NDArray[np.float64]]:
    """One instance on its own resource; mean size 1 byte, capacity = workers bytes/s (so each
    FCFS worker, or the PS server in total per worker, serves at rate μ = 1), λ = ρ·workers."""
    rng = component_rng(seed, "test/arrivals")
    lam = rho * workers
    arrivals = np.cumsum(rng.exponential(1.0 / lam, n))
    srng = component_rng(seed, "test/sizes")
    if sizes == "exponential":
        size = srng.exponential(1.0, n)
    elif sizes == "deterministic":
        size = np.ones(n)
    else:  # lognormal, mean 1, σ = 1
        size = np.exp(srng.standard_normal(n) - 0.5)
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


@pytest.mark.parametrize("sizes", ["deterministic", "lognormal"])
def test_ps_insensitivity(sizes: str) -> None:
    # M/G/1-PS mean response time depends on the size distribution only through its mean:
    # E[T] = E[S]/(1-ρ) = 2.5 at ρ = 0.6; tolerance 2 %.
    _, rec, _ = run_single(0.6, 1_000_000, seed=5, sizes=sizes)
    assert steady_mean(rec) == pytest.approx(mm1_ps_mean_response_s(0.6, 1.0), rel=0.02)


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
