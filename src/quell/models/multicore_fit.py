"""Estimating the multicore model's parameters from measurements (Section 4.3 of the paper).

* μ1 by the utilisation law: the soft-interrupt time of the interrupt cores is X/μ1, so 1/μ1
  is the least-squares slope (through the origin) of soft-interrupt utilisation on throughput.
* p from the per-core utilisation split: the share of the non-interrupt busy time (application
  work) that falls on the interrupt cores.
* μ2 by maximum likelihood on the mean response times: each measured mean T'_i is ~ Normal(T_i,
  σ_i²/n_i), so μ2 minimises Σ (T'_i − T_i(μ2))² / (σ_i²/n_i). (The paper's Eq. 7–9 print
  2πσ²/n in the exponent; the normal density has 2σ²/n. The minimiser is the same.)

Every estimate comes with a standard error: μ1 from the regression residuals, p from the spread
of the per-rate splits, μ2 from the curvature of the χ² (Δχ² = 1), inflated by √(χ²/dof) when
the model fits worse than the measurement noise says it should.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from quell.errors import InputError, Problem
from quell.models.multicore import Discipline, MulticoreModel


@dataclass(frozen=True)
class RatePoint:
    """What was measured at one offered request rate. Utilisations are fractions of one core."""

    rate_rps: float
    throughput_rps: float
    mean_response_s: float
    response_sd_s: float
    responses: int
    util_per_core: tuple[float, ...]
    softirq_per_core: tuple[float, ...]


def _point_problems(points: Sequence[RatePoint], cores: int) -> list[Problem]:
    out = []
    if len(points) < 2:
        out.append(Problem("points", f"need at least 2 measured rates, got {len(points)}"))
    for k, pt in enumerate(points):
        where = f"points[{k}]"
        if len(pt.util_per_core) != cores or len(pt.softirq_per_core) != cores:
            out.append(
                Problem(where, f"needs utilisation and soft-interrupt time of {cores} cores")
            )
        values = (pt.rate_rps, pt.throughput_rps, pt.mean_response_s, pt.response_sd_s)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            out.append(
                Problem(where, "rates, response time and its deviation must be finite and ≥ 0")
            )
        elif pt.mean_response_s <= 0 or pt.throughput_rps <= 0 or pt.responses < 1:
            out.append(Problem(where, "no successful responses"))
    return out


class MulticoreEstimator:
    """Fits μ1, p and μ2 of a ``MulticoreModel`` on ``cores`` cores of which the first
    ``interrupt_cores`` handled the NIC's soft interrupts while measuring."""

    def __init__(
        self,
        cores: int = 2,
        interrupt_cores: int = 1,
        capacity: int = 1000,
        discipline: Discipline = "paper",
    ) -> None:
        self.cores = cores
        self.interrupt_cores = interrupt_cores
        self.capacity = capacity
        self.discipline = discipline

    def _model(self, mu1: float, mu2: float, p: float | None) -> MulticoreModel:
        return MulticoreModel(
            self.cores, self.interrupt_cores, mu1, mu2, p, self.capacity, self.discipline
        )

    def fit(self, points: Sequence[RatePoint]) -> MulticoreEstimator:
        self._model(1.0, 1.0, None).validate()
        problems = _point_problems(points, self.cores)
        if problems:
            raise InputError("multicore fit", problems)
        n, m = self.cores, self.interrupt_cores
        x = np.array([pt.throughput_rps for pt in points])
        si = np.array([sum(pt.softirq_per_core[:m]) for pt in points])
        # μ1: U_si = X / μ1, least squares through the origin.
        slope = float(x @ si / (x @ x))
        if slope <= 0:
            raise InputError(
                "multicore fit",
                [Problem("softirq_per_core", "no soft-interrupt time on the interrupt cores")],
            )
        resid = si - slope * x
        slope_se = math.sqrt(float(resid @ resid) / (len(x) - 1) / float(x @ x))
        self.mu1_ = 1.0 / slope
        self.mu1_se_ = slope_se / slope**2
        # p: share of application (non-interrupt) busy time on the interrupt cores.
        if n > m:
            b_int = np.array(
                [sum(pt.util_per_core[:m]) - sum(pt.softirq_per_core[:m]) for pt in points]
            )
            b_oth = np.array([sum(pt.util_per_core[m:]) for pt in points])
            b_int = np.clip(b_int, 0.0, None)
            total = b_int + b_oth
            self.p_ = float(np.clip(b_int.sum() / total.sum(), 0.0, 1.0))
            per_rate = b_int[total > 0] / total[total > 0]
            self.p_se_ = float(np.std(per_rate, ddof=1) / math.sqrt(per_rate.size))
        else:
            self.p_, self.p_se_ = 1.0, 0.0
        # μ2: weighted least squares on the mean response times.
        rates = [pt.rate_rps for pt in points]
        t_meas = np.array([pt.mean_response_s for pt in points])
        t_sd = np.array(
            [
                max(pt.response_sd_s / math.sqrt(pt.responses), 1e-3 * pt.mean_response_s)
                for pt in points
            ]
        )
        p_used = self.p_ if n > m else None
        # Below this μ2 a non-interrupt core would be unstable at the highest measured rate.
        lowest = max(r * (1 - self.p_) / (n - m) for r in rates) if n > m else 1e-9
        guess = 1.0 / max(float(t_meas.min()) - 1.0 / self.mu1_, 0.1 * float(t_meas.min()))
        lo = max(lowest * (1 + 1e-6), guess * 1e-3)
        hi = max(guess * 1e3, lo * 10)

        def chi2(log_mu2: float) -> float:
            model = self._model(self.mu1_, math.exp(log_mu2), p_used)
            try:
                pred = np.array([r.mean_response_s for r in model.predict(rates)])
            except InputError:
                return 1e300
            return float((((t_meas - pred) / t_sd) ** 2).sum())

        res = minimize_scalar(
            chi2, bounds=(math.log(lo), math.log(hi)), method="bounded", options={"xatol": 1e-10}
        )
        mu2 = math.exp(float(res.x))
        self.mu2_ = mu2
        self.chi2_ = float(res.fun)
        self.dof_ = len(points) - 1
        h = 1e-4
        c0 = self.chi2_
        cp, cm = chi2(math.log(mu2) + h), chi2(math.log(mu2) - h)
        curv_log = (cp - 2 * c0 + cm) / h**2  # d²χ²/d(log μ2)²
        se_log = math.sqrt(2.0 / curv_log) if curv_log > 0 else math.inf
        scale = math.sqrt(max(1.0, self.chi2_ / self.dof_)) if self.dof_ > 0 else 1.0
        self.mu2_se_ = mu2 * se_log * scale
        self.at_bound_ = not (lo * 1.001 < mu2 < hi / 1.001)
        return self

    def model(
        self,
        interrupt_cores: int | None = None,
        p: float | None = None,
        capacity: int | None = None,
    ) -> MulticoreModel:
        """The fitted model, for the measured configuration or another number of interrupt
        cores (a blind prediction). ``p`` defaults to the fitted one while some cores handle
        no interrupts, and to 1 when all do."""
        m = self.interrupt_cores if interrupt_cores is None else interrupt_cores
        if p is None and m < self.cores:
            p = self.p_
        cap = self.capacity if capacity is None else capacity
        return MulticoreModel(self.cores, m, self.mu1_, self.mu2_, p, cap, self.discipline)
