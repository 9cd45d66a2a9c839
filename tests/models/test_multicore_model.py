"""The multicore model's closed forms against the chain they describe: the CTMC of Fig. 6
solved numerically (GTH, small N) and a direct positive-term summation of the product form
(large N). Exact coincidences α = 1, β = 1, α = β are in the grids on purpose."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from quell.errors import InputError
from quell.models.multicore import (
    CONFLUENT_GAP,
    InterruptCore,
    MulticoreModel,
    ctmc_interrupt_core,
    interrupt_core,
    log_h,
)
from quell.models.queueing import mm1k_blocking_probability, mm1k_mean_jobs

FIELDS = (
    "mean_jobs_a",
    "mean_jobs_b",
    "blocking_probability",
    "p_idle",
    "p_no_class_a",
    "mean_response_s",
    "mean_service_s",
    "utilisation",
)
REL = 1e-9


def assert_close(a: InterruptCore, b: InterruptCore, rel: float = REL) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert math.isfinite(x), f
        # values that are exactly zero in one solution are rounding noise in the other
        assert x == pytest.approx(y, rel=rel, abs=1e-15), f


# λ, μ1, μ2, p: (2, 2, 1, .5) is α = β = 1; (1, 1, ·, ·) α = 1; (2, 1, 1, 1) α = β = 2;
# (1, 2, 1, 1) β = 1; (3, 1, 1.5, .5) α = 3, β = 1.
GRID = sorted(
    set(itertools.product([0.5, 1.0, 2.0, 3.0], [1.0, 2.0], [1.0, 0.5, 1.5], [0.3, 0.5, 1.0]))
)


@pytest.mark.parametrize("discipline", ["paper", "shared"])
@pytest.mark.parametrize("capacity", [1, 2, 7, 20])
def test_closed_forms_match_ctmc(discipline: str, capacity: int) -> None:
    worst = 0.0
    for lam, mu1, mu2, p in GRID:
        closed = interrupt_core(lam, mu1, mu2, p, capacity, discipline)  # type: ignore[arg-type]
        numeric = ctmc_interrupt_core(lam, mu1, mu2, p, capacity, discipline)  # type: ignore[arg-type]
        assert_close(closed, numeric)
        for f in FIELDS:
            y = getattr(numeric, f)
            if y:
                worst = max(worst, abs(getattr(closed, f) - y) / abs(y))
    assert worst < REL


def test_grid_contains_the_singular_points() -> None:
    pts = {(lam / mu1, p * lam / mu2) for lam, mu1, mu2, p in GRID}
    assert (1.0, 1.0) in pts  # α = β = 1
    assert any(a == 1.0 and b != 1.0 for a, b in pts)
    assert any(b == 1.0 and a != 1.0 for a, b in pts)
    assert any(a == b and a != 1.0 for a, b in pts)


def test_no_class_b_on_cpu0_is_mm1k() -> None:
    # p = 0: class a alone, M/M/1/N with ρ = α (the chain's class-b states are transient)
    for lam, n in [(0.5, 5), (1.0, 8), (2.5, 30)]:
        c = interrupt_core(lam, 1.0, 2.0, 0.0, n)
        assert c.mean_jobs_b == 0.0
        assert c.mean_jobs == pytest.approx(mm1k_mean_jobs(lam, 1.0, n), rel=1e-12)
        assert c.blocking_probability == pytest.approx(
            mm1k_blocking_probability(lam, 1.0, n), rel=1e-12
        )


def reference_paper(lam: float, mu1: float, mu2: float, p: float, n: int) -> dict[str, float]:
    """E(k), E(n_a), P_N and P(n_a = 0) by summing the product form α^i β^j directly, after
    dividing every weight by max(α, β, 1)^N, so all terms are positive and ≤ 1."""
    a, b = lam / mu1, p * lam / mu2
    top = max(a, b, 1.0)
    u, v, w = a / top, b / top, 1.0 / top
    hk = np.empty(n + 1)  # h_k(u, v) = Σ_{i+j=k} u^i v^j
    hk[0] = 1.0
    for k in range(1, n + 1):
        hk[k] = u**k + v * hk[k - 1]
    hm = np.empty(n + 1)  # h_m(v, w)
    hm[0] = 1.0
    for m in range(1, n + 1):
        hm[m] = v**m + w * hm[m - 1]
    k = np.arange(n + 1)
    by_total = hk * w ** (n - k)  # ∝ P(i + j = k)
    by_a = u**k * hm[n - k]  # ∝ P(n_a = i)
    g = by_total.sum()
    return {
        "mean_jobs": float(k @ by_total / g),
        "mean_jobs_a": float(k @ by_a / by_a.sum()),
        "blocking_probability": float(by_total[n] / g),
        "p_no_class_a": float(by_a[0] / by_a.sum()),
    }


@pytest.mark.parametrize(
    ("lam", "mu2", "p", "n"),
    [
        (1.0, 1.0, 1.0, 100_000),  # α = β = 1
        (1.0, 3.0, 0.5, 100_000),  # α = 1
        (2.5, 1.0, 1.0, 100_000),  # α = β = 2.5, overloaded
        (0.3, 0.3, 1.0, 100_000),  # β = 1
        (1 + 1e-9, 1.0, 1.0, 100_000),  # all three points within 1e-9
        (1.0003, 0.9999, 1.0, 1000),  # near-confluent: the recurrence path
        (1.04, 0.97, 1.0, 100_000),  # spread 6.7 %, just above CONFLUENT_GAP: differences
        (1.2, 0.9, 0.5, 1000),  # well separated: the divided-difference path
        (0.3, 1.0, 0.5, 1000),
    ],
)
def test_closed_forms_match_direct_sum_for_large_n(
    lam: float, mu2: float, p: float, n: int
) -> None:
    c = interrupt_core(lam, 1.0, mu2, p, n)
    for key, want in reference_paper(lam, 1.0, mu2, p, n).items():
        got = c.mean_jobs if key == "mean_jobs" else getattr(c, key)
        assert math.isfinite(got)
        assert got == pytest.approx(want, rel=REL, abs=1e-300), key


def test_paper_equations_1_and_4_as_printed() -> None:
    # Eq. (1) and (4) verbatim, where they are well conditioned (no coinciding points).
    def pi00(a: float, b: float, n: int) -> float:
        return (
            (a - 1) * (a - b) * (b - 1) / (a ** (n + 2) * (b - 1) + b ** (n + 2) * (1 - a) + a - b)
        )

    def g(x: float, y: float, n: int) -> float:
        return x ** (n + 2) * (y - 1) ** 2 * (x * n - n - 1)

    def ek(a: float, b: float, n: int) -> float:
        den = (a ** (n + 2) * (b - 1) + b ** (n + 2) * (1 - a) + a - b) * (a - 1) * (b - 1)
        return (g(a, b, n) - g(b, a, n) + (b - a) * (2 * a * b - a - b)) / den

    for lam, mu1, mu2, p, n in [
        (0.5, 1, 2, 0.5, 5),
        (2.0, 1, 0.7, 0.3, 10),
        (0.3, 0.7, 0.5, 1, 20),
    ]:
        c = interrupt_core(lam, mu1, mu2, p, n)
        a, b = lam / mu1, p * lam / mu2
        assert c.p_idle == pytest.approx(pi00(a, b, n), rel=1e-12)
        assert c.mean_jobs == pytest.approx(ek(a, b, n), rel=1e-12)


def test_class_a_busy_probability_is_its_utilisation() -> None:
    # With the paper's discipline class a is served at μ1 whenever present:
    # P(n_a > 0) = X/μ1 = α (1 − P_N).
    for lam, mu2, p, n in [(0.7, 0.5, 0.5, 3), (1.0, 1.0, 1.0, 50), (4.0, 2.0, 0.2, 200)]:
        c = interrupt_core(lam, 1.0, mu2, p, n)
        assert 1 - c.p_no_class_a == pytest.approx(lam * (1 - c.blocking_probability), rel=1e-12)


def test_mean_jobs_against_capacity_has_the_shape_of_fig7() -> None:
    # Fig. 7: E(k) against N rises and, for a stable core (α, β < 1), flattens onto the
    # infinite-capacity value α/(1−α) + β/(1−β); the numerical (CTMC) points lie on the curve.
    lam, mu1, mu2, p = 0.6, 1.0, 0.8, 0.9
    a, b = lam / mu1, p * lam / mu2
    sizes = np.arange(1, 61)
    ek = np.array([interrupt_core(lam, mu1, mu2, p, int(n)).mean_jobs for n in sizes])
    assert np.all(np.diff(ek) > 0)
    assert np.all(np.diff(ek, 2) < 1e-12)  # concave: each extra slot adds less
    assert ek[-1] == pytest.approx(a / (1 - a) + b / (1 - b), rel=1e-4)
    assert ek[0] < 0.5 * ek[-1]
    for n in (1, 3, 10):
        assert ek[n - 1] == pytest.approx(
            ctmc_interrupt_core(lam, mu1, mu2, p, n).mean_jobs, rel=REL
        )
    # overloaded (α > 1): E(k) grows with N without bound, ~ N minus a constant
    big = [interrupt_core(1.5, 1.0, 0.8, 0.9, n).mean_jobs for n in (100, 1000, 10_000)]
    assert big[2] - big[1] == pytest.approx(9000, rel=1e-9)
    assert big[1] - big[0] == pytest.approx(900, rel=1e-7)  # (α/β)^100 ≈ 1e-5 left at N = 100


def test_log_h_small_cases_exact() -> None:
    assert math.exp(log_h(3, [2.0, 1.0])) == pytest.approx(8 + 4 + 2 + 1, rel=1e-15)
    assert math.exp(log_h(2, [1.0, 1.0, 1.0])) == pytest.approx(6, rel=1e-15)
    assert math.exp(log_h(2, [3.0, 2.0, 1.0])) == pytest.approx(9 + 4 + 1 + 6 + 3 + 2, rel=1e-14)
    assert log_h(-1, [1.0]) == -math.inf
    assert log_h(4, [0.0, 0.0]) == -math.inf
    assert log_h(0, []) == 0.0
    # a point set inside the confluent gap takes the recurrence path and stays exact
    close = [1.0, 1.0 - CONFLUENT_GAP / 3, 1.0 - CONFLUENT_GAP / 2]
    brute = sum(
        close[0] ** i * close[1] ** j * close[2] ** (5 - i - j)
        for i in range(6)
        for j in range(6 - i)
    )
    assert math.exp(log_h(5, close)) == pytest.approx(brute, rel=1e-14)


def test_no_overflow_for_huge_load_and_capacity() -> None:
    c = interrupt_core(1e4, 1.0, 2.0, 1.0, 100_000)
    assert all(math.isfinite(getattr(c, f)) for f in FIELDS)
    assert c.blocking_probability == pytest.approx(1 - 1e-4, rel=1e-6)


# -- the combined model ------------------------------------------------------------------------
def test_one_core_system_is_its_interrupt_core() -> None:
    (pr,) = MulticoreModel(1, 1, 3.0, 2.0, None, 40).predict([1.5])
    core = interrupt_core(1.5, 3.0, 2.0, 1.0, 40)
    assert pr.mean_response_s == pytest.approx(core.mean_response_s, rel=1e-12)
    assert pr.util_per_core == (core.utilisation,)


def test_other_cores_are_mm1_ps_on_the_accepted_flow() -> None:
    model = MulticoreModel(4, 1, 10.0, 3.0, 0.4, 50)
    (pr,) = model.predict([4.0])
    core = interrupt_core(4.0, 10.0, 3.0, 0.4, 50)
    lam_other = 4.0 * (1 - core.blocking_probability) * 0.6 / 3
    assert pr.other_utilisation == pytest.approx(lam_other / 3.0, rel=1e-12)
    rho = lam_other / 3.0
    jobs = core.mean_jobs + 3 * rho / (1 - rho)
    assert pr.mean_response_s == pytest.approx(jobs / pr.throughput_rps, rel=1e-12)
    assert sum(pr.util_per_core) == pytest.approx(4.0 * (1 / 10.0 + 1 / 3.0), rel=1e-9)


def test_m_interrupt_cores_split_the_interrupts() -> None:
    (pr,) = MulticoreModel(4, 2, 10.0, 3.0, 0.5, 50).predict([4.0])
    core = interrupt_core(2.0, 10.0, 3.0, 0.5, 50)
    assert pr.interrupt.mean_jobs == pytest.approx(core.mean_jobs, rel=1e-12)
    assert pr.util_per_core[:2] == (core.utilisation, core.utilisation)


def test_zero_rate_is_the_zero_load_limit() -> None:
    (pr,) = MulticoreModel(2, 1, 10.0, 4.0, 0.5, 10).predict([0.0])
    assert pr.mean_response_s == pytest.approx(1 / 10 + 1 / 4)
    assert pr.throughput_rps == 0.0
    (low,) = MulticoreModel(2, 1, 10.0, 4.0, 0.5, 10).predict([1e-9])
    assert low.mean_response_s == pytest.approx(pr.mean_response_s, rel=1e-6)


def test_knee_positions_follow_the_papers_order() -> None:
    # Section 5.3, 4 cores, μ1 = 3301, μ2 = 300 (Table 2): knees ≈ 800 / 1000 / 1200 req/s for
    # 1 / 2 / 4 NICs; here with application work spread evenly (p = m/n).
    knees = [MulticoreModel(4, m, 3301.0, 300.0, None, 10_000).knee_rps() for m in (1, 2, 4)]
    assert knees[0] < knees[1] < knees[2]
    assert knees == pytest.approx([880.07, 1015.4, 1100.0], rel=1e-4)


def test_shared_discipline_total_is_mm1n() -> None:
    c = interrupt_core(0.9, 2.0, 1.5, 0.6, 25, "shared")
    rho = 0.9 / 2.0 + 0.6 * 0.9 / 1.5
    assert c.mean_jobs == pytest.approx(mm1k_mean_jobs(rho, 1.0, 25), rel=1e-12)
    assert c.utilisation == pytest.approx(1 - c.p_idle, rel=1e-12)


# -- bad input ---------------------------------------------------------------------------------
def test_every_bad_parameter_is_reported_at_once() -> None:
    with pytest.raises(InputError) as info:
        MulticoreModel(2, 3, -1.0, float("nan"), 1.5, 0, "fifo").predict([-5.0, float("inf")])  # type: ignore[arg-type]
    text = str(info.value)
    for fragment in ("interrupt_cores", "mu1_rps", "mu2_rps", "p:", "capacity", "discipline"):
        assert fragment in text
    assert "rate[0]" in text and "rate[1]" in text
    assert len(info.value.problems) == 8


def test_p_must_be_one_when_every_core_takes_interrupts() -> None:
    with pytest.raises(InputError, match="p must be 1"):
        MulticoreModel(2, 2, 10.0, 5.0, 0.5).predict([1.0])
    assert MulticoreModel(2, 2, 10.0, 5.0, None).p_effective == 1.0


def test_unstable_rates_are_listed() -> None:
    model = MulticoreModel(2, 1, 100.0, 10.0, 0.1, 100)
    with pytest.raises(InputError) as info:
        model.predict([5.0, 25.0, 12.0])
    assert [p.location for p in info.value.problems] == ["rate[1]", "rate[2]"]
    assert "unstable at 25 req/s: each non-interrupt core gets 22.5 req/s" in str(info.value)
