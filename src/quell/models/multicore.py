"""The multicore web-server model of Chen, Ho, Osman, Harrison and Knottenbelt, "Understanding,
Modelling, and Improving the Performance of Web Applications in Multicore Virtualised
Environments", ICPE 2014 (``seeds/003``).

A request arrives (Poisson, rate λ) as a *class a* job (soft-interrupt work, rate μ1) at a core
that handles NIC interrupts; when done it becomes a *class b* job (application work, rate μ2)
that stays on that core with probability p or goes to one of the other cores (M/M/1-PS each).
An interrupt core holds at most N jobs; arrivals beyond that are lost.

One interrupt core is a two-class Markov chain on (i, j), i + j ≤ N (the paper's Fig. 6). Two
service disciplines for it:

* ``"paper"`` — the paper's approximating assumption: each class is served at its full rate
  whenever present (a tandem of two PS queues under one population limit). Product form
  π_ij = π00 α^i β^j, α = λ/μ1, β = pλ/μ2 (Proposition 1; Lam 1977).
* ``"shared"`` — one processor shared by all jobs (BCMP PS with class switching):
  π_ij ∝ C(i+j, i) α^i β^j, so the total is M/M/1/N with ρ = α + β. The core saturates where
  its CPU demand λ(1/μ1 + p/μ2) reaches 1, which the paper's discipline never does.

Every quantity is a ratio of complete homogeneous symmetric polynomials h_n(x₁..x_d) at points
drawn from {α, β, 1} (e.g. Σ_{i+j≤N} α^i β^j = h_N(α, β, 1)). The paper's closed forms are their
divided-difference (Lagrange) forms, singular where two points meet (α = 1, β = 1, α = β) and
overflowing for large N. Here they are evaluated after scaling by the largest point (no
overflow, results in log space), with the two-point form written through ``expm1`` (exact at
coinciding points), and, where all points lie within ``CONFLUENT_GAP`` of each other, by a
positive-term recurrence instead of the cancelling difference. ``ctmc_stationary`` solves the
chain itself (GTH state reduction) to check all of this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray
from scipy.signal import lfilter

from quell.errors import InputError, Problem

Discipline = Literal["paper", "shared"]
DISCIPLINES: tuple[str, ...] = get_args(Discipline)

CONFLUENT_GAP = 0.05
"""Relative spread of the points below which the divided difference is replaced by the
recurrence (its rounding error grows like ε/gap² through two levels of differences)."""

MAX_CAPACITY = 1_000_000
MAX_CORES = 8192
"""The most cores a model has (Linux's largest ``NR_CPUS``); each core is a list entry."""


# -- complete homogeneous symmetric polynomials ------------------------------------------------
def _h_two(n: int, q: float) -> float:
    """h_n(1, q) = Σ_{k≤n} q^k for 0 < q ≤ 1, exact at q = 1 and free of cancellation near it."""
    if q == 1.0:
        return float(n + 1)
    log_q = math.log(q)
    return math.expm1((n + 1) * log_q) / math.expm1(log_q)


def _h_recurrence(n: int, y: Sequence[float]) -> float:
    """h_n(y) by the generating function Π 1/(1 − y_i t): one first-order recurrence per point,
    positive terms only, O(n·d)."""
    seq = np.zeros(n + 1)
    seq[0] = 1.0
    for v in y:
        seq = lfilter([1.0], [1.0, -v], seq)
    return float(seq[n])


def _h_scaled(n: int, y: Sequence[float]) -> float:
    """h_n(y) for points sorted in decreasing order with y[0] = 1 and all in (0, 1]; ≥ 1."""
    d = len(y)
    if n == 0 or d == 1:
        return 1.0
    if y[-1] == 1.0:
        return float(math.comb(n + d - 1, d - 1))
    if d == 2:
        return _h_two(n, y[1])
    if 1.0 - y[-1] < CONFLUENT_GAP:
        return _h_recurrence(n, y)
    # [y0..y_{d-1}] t^{n+d-1} = ([y0..y_{d-2}] − [y1..y_{d-1}]) / (y0 − y_{d-1})
    head = _h_scaled(n + 1, y[:-1])
    top = y[1]
    tail = top ** (n + 1) * _h_scaled(n + 1, [v / top for v in y[1:]])
    return (head - tail) / (1.0 - y[-1])


def log_h(n: int, points: Sequence[float]) -> float:
    """log h_n(points): the sum over all monomials of degree n in the points (all ≥ 0).

    h_n(x, y, 1) = Σ_{i+j≤n} x^i y^j; h_{-1} = 0 and h_n of no points is 0 (n > 0), so the
    result is −inf there. Never overflows: the largest point is factored out as n·log(max).
    """
    if n < 0:
        return -math.inf
    pts = sorted((float(x) for x in points if x > 0.0), reverse=True)
    if n == 0:
        return 0.0
    if not pts:
        return -math.inf
    top = pts[0]
    return n * math.log(top) + math.log(_h_scaled(n, [x / top for x in pts]))


# -- one interrupt-handling core -----------------------------------------------------------------
@dataclass(frozen=True)
class InterruptCore:
    """Stationary measures of one interrupt core (CPU 0 of the paper) at arrival rate λ.

    ``mean_jobs`` is E(k) (Proposition 2), ``blocking_probability`` P_N, ``mean_response_s``
    E(T) = E(k)/(λ(1 − P_N)) by Little's law, ``mean_service_s`` E(T_s) of Proposition 3,
    ``utilisation`` the CPU time its jobs use per second (utilisation law: X_a/μ1 + X_b/μ2;
    with the paper's discipline it can exceed 1, and then this core is past its knee).
    """

    rate_rps: float
    mean_jobs_a: float
    mean_jobs_b: float
    blocking_probability: float
    p_idle: float
    p_no_class_a: float
    mean_response_s: float
    mean_service_s: float
    utilisation: float

    @property
    def mean_jobs(self) -> float:
        return self.mean_jobs_a + self.mean_jobs_b

    @property
    def throughput_rps(self) -> float:
        return self.rate_rps * (1.0 - self.blocking_probability)

    @property
    def utilisation_prop3(self) -> float:
        """The paper's U = λ·E(T_s); see docs/reference/models.md for why the CLI reports the
        utilisation law instead (this one tends to λ/μ1, missing the class-b work, at low load)."""
        return self.rate_rps * self.mean_service_s


def interrupt_core(
    rate_rps: float,
    mu1_rps: float,
    mu2_rps: float,
    p: float,
    capacity: int,
    discipline: Discipline = "paper",
) -> InterruptCore:
    """Closed-form measures of one two-class core; arguments are assumed valid (see
    ``MulticoreModel`` for the checked entry point)."""
    lam = rate_rps
    alpha = lam / mu1_rps
    beta = p * lam / mu2_rps
    n = capacity
    if discipline == "paper":
        log_g = log_h(n, (alpha, beta, 1.0))
        p_block = math.exp(log_h(n, (alpha, beta)) - log_g)
        accept = math.exp(log_h(n - 1, (alpha, beta, 1.0)) - log_g)
        jobs_a = alpha * math.exp(log_h(n - 1, (alpha, alpha, beta, 1.0)) - log_g)
        jobs_b = beta * math.exp(log_h(n - 1, (alpha, beta, beta, 1.0)) - log_g)
    else:
        rho = alpha + beta
        log_g = log_h(n, (rho, 1.0))
        p_block = math.exp(n * math.log(rho) - log_g) if rho > 0 else 0.0
        accept = math.exp(log_h(n - 1, (rho, 1.0)) - log_g)
        jobs = rho * math.exp(log_h(n - 1, (rho, rho, 1.0)) - log_g)
        jobs_a = jobs * alpha / rho if rho > 0 else 0.0
        jobs_b = jobs * beta / rho if rho > 0 else 0.0
    p_idle = math.exp(-log_g)
    p_no_a = math.exp(log_h(n, (beta, 1.0)) - log_g)
    return _measures(rate_rps, mu1_rps, mu2_rps, p, jobs_a, jobs_b, p_block, accept, p_idle, p_no_a)


def _measures(
    lam: float,
    mu1_rps: float,
    mu2_rps: float,
    p: float,
    jobs_a: float,
    jobs_b: float,
    p_block: float,
    accept: float,
    p_idle: float,
    p_no_a: float,
) -> InterruptCore:
    """Response time (Little), E(T_s) (Proposition 3, Appendix B, with n_a^0 = P(no class-a
    job)) and utilisation (utilisation law) from the stationary measures of one core."""
    if lam > 0.0:
        share_a = lam / (lam + p * mu1_rps)
        mean_service = p_no_a / mu1_rps + (1.0 - p_no_a) * (
            share_a / mu1_rps + (1.0 - share_a) / mu2_rps
        )
        mean_response = (jobs_a + jobs_b) / (lam * accept)
    else:
        mean_service = 1.0 / mu1_rps
        mean_response = 1.0 / mu1_rps + p / mu2_rps  # the zero-load limit of E(k)/λ
    x = lam * accept
    return InterruptCore(
        rate_rps=lam,
        mean_jobs_a=jobs_a,
        mean_jobs_b=jobs_b,
        blocking_probability=p_block,
        p_idle=p_idle,
        p_no_class_a=p_no_a,
        mean_response_s=mean_response,
        mean_service_s=mean_service,
        utilisation=x / mu1_rps + p * x / mu2_rps,
    )


# -- the CTMC of Fig. 6, solved numerically ---------------------------------------------------------
def ctmc_states(capacity: int) -> list[tuple[int, int]]:
    """States (i, j), i + j ≤ N, ordered by total then i, so (0, 0) comes first."""
    return [(i, k - i) for k in range(capacity + 1) for i in range(k, -1, -1)]


def ctmc_generator(
    rate_rps: float,
    mu1_rps: float,
    mu2_rps: float,
    p: float,
    capacity: int,
    discipline: Discipline = "paper",
) -> NDArray[np.float64]:
    """The dense generator Q of the two-class chain (Fig. 6): arrival (i+1, j) at λ while
    i + j < N; class a done → (i−1, j+1) at p·r_a or (i−1, j) at (1−p)·r_a; class b done
    → (i, j−1) at r_b; r_a = μ1 and r_b = μ2 for the paper's discipline, shared in proportion
    to the jobs of each class (μ1·i/(i+j), μ2·j/(i+j)) for ``"shared"``."""
    states = ctmc_states(capacity)
    index = {s: k for k, s in enumerate(states)}
    q = np.zeros((len(states), len(states)))
    for (i, j), k in index.items():
        total = i + j
        share_a = 1.0 if discipline == "paper" else (i / total if total else 0.0)
        share_b = 1.0 if discipline == "paper" else (j / total if total else 0.0)
        if total < capacity:
            q[k, index[(i + 1, j)]] += rate_rps
        if i > 0:
            if p > 0:
                q[k, index[(i - 1, j + 1)]] += p * mu1_rps * share_a
            if p < 1:
                q[k, index[(i - 1, j)]] += (1 - p) * mu1_rps * share_a
        if j > 0:
            q[k, index[(i, j - 1)]] += mu2_rps * share_b
    q[np.diag_indices_from(q)] = -q.sum(axis=1)
    return q


def ctmc_stationary(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Stationary distribution of a generator by GTH state reduction (Grassmann, Taksar and
    Heyman 1985): no subtractions, so even tiny probabilities come out to full relative
    precision. O(S³); meant for small chains."""
    a = np.array(q, dtype=float)
    np.fill_diagonal(a, 0.0)
    size = a.shape[0]
    for k in range(size - 1, 0, -1):
        leaving = a[k, :k].sum()
        a[:k, k] /= leaving
        a[:k, :k] += np.outer(a[:k, k], a[k, :k])
    pi = np.zeros(size)
    pi[0] = 1.0
    for k in range(1, size):
        pi[k] = pi[:k] @ a[:k, k]
    out: NDArray[np.float64] = pi / pi.sum()
    return out


def ctmc_interrupt_core(
    rate_rps: float,
    mu1_rps: float,
    mu2_rps: float,
    p: float,
    capacity: int,
    discipline: Discipline = "paper",
) -> InterruptCore:
    """The same measures as ``interrupt_core``, from the numerically solved chain."""
    states = ctmc_states(capacity)
    pi = ctmc_stationary(ctmc_generator(rate_rps, mu1_rps, mu2_rps, p, capacity, discipline))
    i = np.array([s[0] for s in states], dtype=float)
    j = np.array([s[1] for s in states], dtype=float)
    full = (i + j) == capacity
    p_block = float(pi[full].sum())
    accept = float(pi[~full].sum())
    jobs_a, jobs_b = float(pi @ i), float(pi @ j)
    p_no_a = float(pi[i == 0].sum())
    return _measures(
        rate_rps, mu1_rps, mu2_rps, p, jobs_a, jobs_b, p_block, accept, float(pi[0]), p_no_a
    )


# -- the whole server ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """The model at one request rate. Cores 0..m−1 handle interrupts, m..n−1 do not."""

    rate_rps: float
    interrupt: InterruptCore
    other_mean_jobs: float
    other_utilisation: float
    throughput_rps: float
    mean_response_s: float
    util_per_core: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        c = self.interrupt
        return {
            "rate": self.rate_rps,
            "cpu0": {
                "E_k": c.mean_jobs,
                "P_N": c.blocking_probability,
                "E_T_s": c.mean_response_s,
                "E_Ts_s": c.mean_service_s,
                "util": c.utilisation,
            },
            "system": {
                "E_T_s": self.mean_response_s,
                "throughput_rps": self.throughput_rps,
                "util_per_core": list(self.util_per_core),
            },
        }


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


class MulticoreModel:
    """The n-core server with m interrupt cores (Sections 4.4 and 5.2).

    Parameters are stored as given and checked together by ``validate`` (every problem at
    once). ``p`` is the probability that a class-b job stays on the interrupt core that ran its
    soft interrupt; ``None`` means m/n (application work spread evenly over all cores), which is
    also the only value allowed when every core handles interrupts (then p = 1). ``capacity``
    is N, the job limit of each interrupt core.
    """

    def __init__(
        self,
        cores: int = 1,
        interrupt_cores: int = 1,
        mu1_rps: float = 1.0,
        mu2_rps: float = 1.0,
        p: float | None = None,
        capacity: int = 1000,
        discipline: Discipline = "paper",
    ) -> None:
        self.cores = cores
        self.interrupt_cores = interrupt_cores
        self.mu1_rps = mu1_rps
        self.mu2_rps = mu2_rps
        self.p = p
        self.capacity = capacity
        self.discipline = discipline

    # -- checks --
    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        n, m = self.cores, self.interrupt_cores
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CORES:
            out.append(Problem("cores", f"must be a whole number in [1, {MAX_CORES}], got {n!r}"))
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            out.append(Problem("interrupt_cores", f"must be a whole number ≥ 1, got {m!r}"))
        elif isinstance(n, int) and n >= 1 and m > n:
            out.append(Problem("interrupt_cores", f"{m} is more than the {n} cores"))
        for name in ("mu1_rps", "mu2_rps"):
            v = getattr(self, name)
            if not _finite(v) or v <= 0:
                out.append(Problem(name, f"a service rate must be a finite number > 0, got {v!r}"))
        if self.p is not None:
            if not _finite(self.p) or not 0.0 <= self.p <= 1.0:
                out.append(Problem("p", f"must be a probability in [0, 1], got {self.p!r}"))
            elif isinstance(n, int) and isinstance(m, int) and m == n and self.p != 1.0:
                out.append(
                    Problem("p", f"with every core handling interrupts p must be 1, got {self.p}")
                )
        cap = self.capacity
        if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= MAX_CAPACITY:
            out.append(Problem("capacity", f"N must be a whole number in [1, {MAX_CAPACITY:,}]"))
        if self.discipline not in DISCIPLINES:
            out.append(
                Problem(
                    "discipline",
                    f"must be one of {', '.join(DISCIPLINES)}, got {self.discipline!r}",
                )
            )
        return out

    def validate(self) -> None:
        problems = self.problems()
        if problems:
            raise InputError("multicore model", problems)

    @property
    def p_effective(self) -> float:
        return self.interrupt_cores / self.cores if self.p is None else float(self.p)

    # -- the model --
    def knee_rps(self) -> float:
        """The request rate at which the busiest core's CPU demand reaches one core (the
        asymptotic bound of the open network): 1 / max_core D_core."""
        self.validate()
        n, m, p = self.cores, self.interrupt_cores, self.p_effective
        d_int = 1.0 / (m * self.mu1_rps) + p / (m * self.mu2_rps)
        d_other = (1.0 - p) / ((n - m) * self.mu2_rps) if n > m else 0.0
        return 1.0 / max(d_int, d_other)

    def _core(self, rate_rps: float) -> InterruptCore:
        m = self.interrupt_cores
        return interrupt_core(
            rate_rps / m,
            self.mu1_rps,
            self.mu2_rps,
            self.p_effective,
            self.capacity,
            self.discipline,
        )

    def predict(self, rates_rps: Sequence[float]) -> list[Prediction]:
        """The model at each rate. Raises ``InputError`` listing every problem at once: bad
        parameters, bad rates, then rates at which a non-interrupt core is unstable."""
        problems = self.problems()
        for k, lam in enumerate(rates_rps):
            if not _finite(lam) or lam < 0:
                problems.append(
                    Problem(
                        f"rate[{k}]", f"a request rate must be a finite number ≥ 0, got {lam!r}"
                    )
                )
        if problems:
            raise InputError("multicore model", problems)
        results: list[Prediction] = []
        n, m, p = self.cores, self.interrupt_cores, self.p_effective
        for k, lam in enumerate(rates_rps):
            core = self._core(float(lam))
            x = core.throughput_rps * m
            other_jobs, other_util = 0.0, 0.0
            if n > m:
                lam_other = x * (1.0 - p) / (n - m)
                other_util = lam_other / self.mu2_rps
                if other_util >= 1.0:
                    problems.append(
                        Problem(
                            f"rate[{k}]",
                            f"unstable at {lam:g} req/s: each non-interrupt core gets "
                            f"{lam_other:.6g} req/s ≥ μ2 = {self.mu2_rps:g}",
                        )
                    )
                    continue
                other_jobs = other_util / (1.0 - other_util)
            if x > 0:
                mean_rt = (m * core.mean_jobs + (n - m) * other_jobs) / x
            else:  # the zero-load limit: one class-a and one class-b service, no waiting
                mean_rt = 1.0 / self.mu1_rps + 1.0 / self.mu2_rps
            util = (core.utilisation,) * m + (other_util,) * (n - m)
            results.append(Prediction(float(lam), core, other_jobs, other_util, x, mean_rt, util))
        if problems:
            raise InputError("multicore model", problems)
        return results


def as_discipline(value: str) -> Discipline:
    """``value`` as a discipline, or ``InputError`` naming the ones there are."""
    if value not in DISCIPLINES:
        message = f"must be one of {', '.join(DISCIPLINES)}, got {value!r}"
        raise InputError("--discipline", [Problem("", message)])
    return "paper" if value == "paper" else "shared"


def prediction_document(model: MulticoreModel, rates_rps: Sequence[float]) -> dict[str, Any]:
    """The model, its knee and its prediction at each rate, as one JSON document (``quell
    model multicore predict --json``)."""
    predictions = model.predict(rates_rps)
    return {
        "model": {
            "cores": model.cores,
            "interrupt_cores": model.interrupt_cores,
            "mu1_rps": model.mu1_rps,
            "mu2_rps": model.mu2_rps,
            "p": model.p_effective,
            "capacity": model.capacity,
            "discipline": model.discipline,
        },
        "knee_rps": model.knee_rps(),
        "rates": [pr.as_dict() for pr in predictions],
    }
