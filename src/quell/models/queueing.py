"""Classic closed forms of queueing theory used across quell: M/M/1-PS, M/M/1/K, M/M/c
(Erlang C), M/M/c/c (Erlang B), M/G/1 FCFS (Pollaczek-Khinchine), exact mean-value analysis of
a closed network, and Little's law. Plain functions over numbers; every bad argument raises
``InputError`` naming it, and an unstable queue is an error, never ``inf`` or ``NaN``.

Sources: L. Kleinrock, *Queueing Systems, Vol. 1: Theory* (Wiley, 1975), §3.2 (M/M/1), §3.5
(M/M/m, Erlang C), §3.6 (M/M/1/K), ch. 5 (M/G/1); §4.8 of Vol. 2 (1976) for processor sharing;
J. D. C. Little, "A proof for the queuing formula L = λW", Operations Research 9(3), 1961;
M. Reiser and S. S. Lavenberg, "Mean-value analysis of closed multichain queuing networks",
JACM 27(2), 1980 (MVA).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.special import gammaln, logsumexp

from quell.errors import InputError, Problem


def _check(source: str, **values: float) -> None:
    """Every named value must be a finite number; names ending in ``_rps`` must be > 0 for
    service rates (``mu``) and ≥ 0 for arrival rates (``lam``)."""
    problems = []
    for name, v in values.items():
        if not math.isfinite(v):
            problems.append(Problem(name, f"must be a finite number, got {v!r}"))
        elif name.startswith("mu") and v <= 0:
            problems.append(Problem(name, f"a service rate must be > 0, got {v:g}"))
        elif v < 0:
            problems.append(Problem(name, f"must be ≥ 0, got {v:g}"))
    if problems:
        raise InputError(source, problems)


def _stable(source: str, rho: float, what: str) -> None:
    if rho >= 1.0:
        raise InputError(
            source, [Problem("rate", f"unstable: {what} utilisation ρ = {rho:.6g} ≥ 1")]
        )


def mm1_ps_mean_jobs(lam_rps: float, mu_rps: float) -> float:
    """Mean number in an M/M/1-PS (or FCFS) queue, ρ/(1 − ρ), ρ = λ/μ.

    Kleinrock Vol. 1 Eq. 3.24; PS has the same queue-length distribution (Vol. 2 §4.8)."""
    _check("M/M/1-PS", lam_rps=lam_rps, mu_rps=mu_rps)
    rho = lam_rps / mu_rps
    _stable("M/M/1-PS", rho, "M/M/1-PS")
    return rho / (1.0 - rho)


def mm1_ps_mean_response_s(lam_rps: float, mu_rps: float) -> float:
    """Mean response time of M/M/1-PS, 1/(μ − λ); by insensitivity it holds for M/G/1-PS with
    mean service time 1/μ (Kleinrock Vol. 2 Eq. 4.18)."""
    _check("M/M/1-PS", lam_rps=lam_rps, mu_rps=mu_rps)
    _stable("M/M/1-PS", lam_rps / mu_rps, "M/M/1-PS")
    return 1.0 / (mu_rps - lam_rps)


def _mm1k_log_weights(rho: float, k: int) -> NDArray[np.float64]:
    """log ρ^j, j = 0..K (unnormalised M/M/1/K state probabilities)."""
    j = np.arange(k + 1, dtype=float)
    if rho == 0.0:
        return np.where(j == 0, 0.0, -np.inf)
    return j * math.log(rho)


def mm1k_state_probabilities(lam_rps: float, mu_rps: float, k: int) -> NDArray[np.float64]:
    """P(j jobs), j = 0..K, of M/M/1/K: ρ^j / Σ ρ^i (Kleinrock Vol. 1 Eq. 3.44). Stable for any
    ρ ≥ 0 (ρ = 1 gives the uniform distribution) and any K; computed in log space."""
    _check("M/M/1/K", lam_rps=lam_rps, mu_rps=mu_rps)
    if k < 1:
        raise InputError("M/M/1/K", [Problem("k", f"capacity must be ≥ 1, got {k}")])
    w = _mm1k_log_weights(lam_rps / mu_rps, k)
    probs: NDArray[np.float64] = np.exp(w - logsumexp(w))
    return probs


def mm1k_blocking_probability(lam_rps: float, mu_rps: float, k: int) -> float:
    """Probability an arrival finds K jobs and is lost, (1 − ρ)ρ^K/(1 − ρ^(K+1)) (PASTA)."""
    return float(mm1k_state_probabilities(lam_rps, mu_rps, k)[-1])


def mm1k_mean_jobs(lam_rps: float, mu_rps: float, k: int) -> float:
    """Mean number in M/M/1/K, Σ j P(j) (Kleinrock Vol. 1 Eq. 3.45 in closed form)."""
    p = mm1k_state_probabilities(lam_rps, mu_rps, k)
    return float(np.dot(np.arange(k + 1), p))


def mm1k_mean_response_s(lam_rps: float, mu_rps: float, k: int) -> float:
    """Mean response time of the accepted jobs of M/M/1/K: L / (λ (1 − P_K)) by Little's law."""
    if lam_rps == 0.0:
        _check("M/M/1/K", mu_rps=mu_rps)
        return 1.0 / mu_rps
    p = mm1k_state_probabilities(lam_rps, mu_rps, k)
    return float(np.dot(np.arange(k + 1), p)) / (lam_rps * float(p[:-1].sum()))


def erlang_c(c: int, offered_load: float) -> float:
    """Erlang C: probability that an arrival to M/M/c waits, offered load a = λ/μ < c
    (Kleinrock Vol. 1 Eq. 3.40). Evaluated in log space, so c in the thousands is fine."""
    problems = []
    if c < 1:
        problems.append(Problem("c", f"number of servers must be ≥ 1, got {c}"))
    if not math.isfinite(offered_load) or offered_load < 0:
        problems.append(Problem("offered_load", f"must be a finite number ≥ 0, got {offered_load}"))
    if problems:
        raise InputError("M/M/c", problems)
    if offered_load >= c:
        raise InputError(
            "M/M/c",
            [Problem("rate", f"unstable: offered load {offered_load:.6g} ≥ c = {c} servers")],
        )
    if offered_load == 0.0:
        return 0.0
    k = np.arange(c)
    log_terms = k * math.log(offered_load) - gammaln(k + 1)
    log_top = c * math.log(offered_load) - gammaln(c + 1) + math.log(c / (c - offered_load))
    return float(math.exp(log_top - logsumexp(np.append(log_terms, log_top))))


def erlang_b(c: int, offered_load: float) -> float:
    """Erlang B: probability that an arrival to M/M/c/c (c servers, no queue) finds them all
    busy and is lost, offered load a = λ/μ (Kleinrock Vol. 1 Eq. 3.46), by the recurrence
    B(k) = a B(k−1) / (k + a B(k−1)), which is stable for any c."""
    problems = []
    if c < 0:
        problems.append(Problem("c", f"number of servers must be ≥ 0, got {c}"))
    if not math.isfinite(offered_load) or offered_load < 0:
        problems.append(Problem("offered_load", f"must be a finite number ≥ 0, got {offered_load}"))
    if problems:
        raise InputError("M/M/c/c", problems)
    b = 1.0
    for k in range(1, c + 1):
        b = offered_load * b / (k + offered_load * b)
    return b


def mva_closed(
    demands_s: list[float], think_s: float, users: int
) -> tuple[float, float, list[float]]:
    """Exact mean-value analysis of a closed network: ``users`` customers cycle through a delay
    station of mean ``think_s`` (an infinite server) and queueing stations of mean service
    demand ``demands_s`` each (single-server FCFS with exponential service, or processor
    sharing with any service distribution: product form). Returns the throughput X (1/s), the
    response time R summed over the queueing stations, and their mean queue lengths, for N =
    ``users``: R_k(n) = D_k (1 + Q_k(n − 1)), X(n) = n / (Z + Σ R_k(n)), Q_k(n) = X(n) R_k(n)."""
    problems = []
    if users < 1:
        problems.append(Problem("users", f"must be ≥ 1, got {users}"))
    if not math.isfinite(think_s) or think_s < 0:
        problems.append(Problem("think_s", f"must be a finite number ≥ 0, got {think_s}"))
    if not demands_s or any(not math.isfinite(d) or d <= 0 for d in demands_s):
        problems.append(Problem("demands_s", f"must be finite numbers > 0, got {demands_s}"))
    if problems:
        raise InputError("MVA", problems)
    queue = [0.0] * len(demands_s)
    x = 0.0
    r = [0.0] * len(demands_s)
    for n in range(1, users + 1):
        r = [d * (1.0 + q) for d, q in zip(demands_s, queue, strict=True)]
        x = n / (think_s + sum(r))
        queue = [x * rk for rk in r]
    return x, sum(r), queue


def mmc_mean_wait_s(lam_rps: float, mu_rps: float, c: int) -> float:
    """Mean time in queue of M/M/c FCFS: C(c, a) / (cμ − λ), a = λ/μ (Kleinrock Eq. 3.43)."""
    _check("M/M/c", lam_rps=lam_rps, mu_rps=mu_rps)
    return erlang_c(c, lam_rps / mu_rps) / (c * mu_rps - lam_rps)


def mmc_mean_response_s(lam_rps: float, mu_rps: float, c: int) -> float:
    """Mean response time of M/M/c FCFS: wait plus one service time 1/μ."""
    return mmc_mean_wait_s(lam_rps, mu_rps, c) + 1.0 / mu_rps


def mg1_mean_wait_s(lam_rps: float, mean_service_s: float, service_variance_s2: float) -> float:
    """Mean time in queue of M/G/1 FCFS, λ E[S²] / (2 (1 − ρ)), E[S²] = Var S + E[S]²,
    ρ = λ E[S]: the Pollaczek-Khinchine mean-value formula (Kleinrock Vol. 1 ch. 5). Unlike
    processor sharing's, it grows with the service time's variance."""
    _check(
        "M/G/1",
        lam_rps=lam_rps,
        mean_service_s=mean_service_s,
        service_variance_s2=service_variance_s2,
    )
    rho = lam_rps * mean_service_s
    _stable("M/G/1", rho, "M/G/1")
    return lam_rps * (service_variance_s2 + mean_service_s**2) / (2.0 * (1.0 - rho))


def little_mean_jobs(throughput_rps: float, mean_response_s: float) -> float:
    """Little's law L = λW (Little 1961): mean number in a system from its throughput and mean
    time in system."""
    _check("Little's law", throughput_rps=throughput_rps, mean_response_s=mean_response_s)
    return throughput_rps * mean_response_s


def little_mean_response_s(mean_jobs: float, throughput_rps: float) -> float:
    """Little's law W = L/λ: mean time in system from mean number in it and its throughput."""
    _check("Little's law", mean_jobs=mean_jobs, throughput_rps=throughput_rps)
    if throughput_rps == 0.0:
        raise InputError("Little's law", [Problem("throughput_rps", "must be > 0 to divide by")])
    return mean_jobs / throughput_rps
