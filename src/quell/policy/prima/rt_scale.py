"""PRIMA's fleet-wide response-time calibration (``rt_scale: fleet``): the models were built
under one arrival process (Poisson, one instance) and the service runs under another (a
weighted round robin over many instances gives each a far smoother stream, which meets R_th at
a higher utilisation). Section IV's calibration corrects an instance whose measured response
time exceeds the prediction; this one corrects the whole fleet both ways, from many instances at
once.

Each interval, every serving instance with a measured mean response time R_m and a prediction
R̂_m = RTM(U_m, IM(U_m + U_int,m)) at or above ``min_util_pct`` gives a ratio r_m = R_m / R̂_m.
Over the ratios of the last ``window`` intervals, with mean q and standard deviation s (the
scatter of one instance-interval's mean about the model, noise and model error together), an
instance-interval's mean response time is at most (q + z s) R̂ with the stated one-sided
confidence (z = ``rt_scale_z``, 2.33: 99 % under a normal scatter). PRIMA then plans with the
capacity model built for the target R_th / (q + z s): the capacities at which the *measured*
mean stays under R_th at that confidence. The factor is floored to ``rt_scale_step`` steps
(each step's model is built once, when first needed) and kept within [``rt_scale_min``,
``rt_scale_max``]; with fewer than ``min_samples`` ratios it is 1 (the models as built)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from numpy.typing import NDArray

from quell.models.bundle import ModelBundle
from quell.models.capacity import CapacityModel

FloatArray = NDArray[np.float64]


class _FactorModels:
    """A factor on R_th in force (``factor_``) and the capacity model of each factor used
    (``models_``, each built once, when first needed)."""

    def __init__(self, bundle: ModelBundle, base: CapacityModel, target_rt_s: float) -> None:
        self.bundle = bundle
        self.target_rt_s = target_rt_s
        self.factor_ = 1.0
        """The factor in force: capacities are planned for R_th × this."""
        self.models_: dict[float, CapacityModel] = {1.0: base}

    def model(self) -> CapacityModel:
        """The capacity model for R_th × the factor in force (built once per factor)."""
        f = self.factor_
        if f not in self.models_:
            self.models_[f] = self.bundle.capacity_model(self.target_rt_s * f)
        return self.models_[f]


class RtScale(_FactorModels):
    """The factor on R_th the capacities are planned for, from the fleet's measured against
    its predicted response times, and the capacity model of each factor used (``models_``)."""

    def __init__(
        self,
        bundle: ModelBundle,
        base: CapacityModel,
        target_rt_s: float,
        *,
        window: int,
        z: float,
        step: float,
        lo: float,
        hi: float,
        min_util_pct: float,
        min_samples: int = 3,
    ) -> None:
        super().__init__(bundle, base, target_rt_s)
        self.z = z
        self.step = step
        self.lo = lo
        self.hi = hi
        self.min_util_pct = min_util_pct
        self.min_samples = min_samples
        self.ratios_: deque[FloatArray] = deque(maxlen=window)
        """The ratios R_m / R̂_m of each of the last ``window`` intervals."""
        self.q_: float | None = None
        self.s_: float | None = None

    def update(
        self,
        util_pct: FloatArray,
        predicted_s: FloatArray,
        measured_s: list[float | None],
        use: NDArray[np.bool_] | None = None,
    ) -> None:
        """Add this interval's ratios and set the factor for the next (``use``: only the
        instances where it is true give one, e.g. those reading no neighbour)."""
        m = np.array([np.nan if r is None else r for r in measured_s], dtype=float)
        ok = np.isfinite(m) & np.isfinite(predicted_s) & (predicted_s > 0)
        ok &= util_pct >= self.min_util_pct
        if use is not None:
            ok &= use
        self.ratios_.append(m[ok] / predicted_s[ok])
        pooled = np.concatenate(list(self.ratios_)) if self.ratios_ else np.empty(0)
        if pooled.size < self.min_samples:
            self.factor_, self.q_, self.s_ = 1.0, None, None
            return
        q = float(pooled.mean())
        s = float(pooled.std(ddof=1))
        self.q_, self.s_ = q, s
        bound = q + self.z * s
        raw = 1.0 / bound if bound > 0 else self.hi
        stepped = math.floor(raw / self.step + 1e-9) * self.step
        self.factor_ = round(min(self.hi, max(self.lo, stepped)), 6)

    def describe(self) -> dict[str, object]:
        return {
            "rt_scale_factor": self.factor_,
            "rt_ratio_mean": None if self.q_ is None else round(self.q_, 4),
            "rt_ratio_sd": None if self.s_ is None else round(self.s_, 4),
        }


class SloScale(_FactorModels):
    """``rt_scale: slo``: the factor on R_th set by the interval SLO itself. The models give the
    mean response time of a Poisson stream; the SLO counts interval means, whose scatter at a
    given U depends on the balancer and the fleet. So instead of a ratio of means, count how
    often the instances loaded near their planned capacity (``near`` × U_max ≤ U ≤ U_max: an
    instance past its capacity, before a scale-out, says nothing of the model; no more
    neighbour load than ``max_u_int_pct`` if given) measure an interval mean above R_th: once
    the last ``window`` intervals hold ``min_samples`` such instance-intervals, a miss rate above
    ``miss_pct`` lowers the factor one ``step`` (plan for less), one below half of it raises it
    one step; the count then starts again under the new factor. Within [``lo``, ``hi``]."""

    def __init__(
        self,
        bundle: ModelBundle,
        base: CapacityModel,
        target_rt_s: float,
        *,
        window: int,
        step: float,
        lo: float,
        hi: float,
        miss_pct: float,
        near: float,
        min_samples: int,
        min_util_pct: float,
        max_u_int_pct: float | None,
    ) -> None:
        super().__init__(bundle, base, target_rt_s)
        self.window = window
        self.step = step
        self.lo = lo
        self.hi = hi
        self.miss_pct = miss_pct
        self.near = near
        self.min_samples = min_samples
        self.min_util_pct = min_util_pct
        self.max_u_int_pct = max_u_int_pct
        self.counts_: deque[tuple[int, int]] = deque(maxlen=window)
        """(misses, instance-intervals counted) of each interval since the factor last moved."""
        self.miss_rate_: float | None = None

    def update(
        self,
        util_pct: FloatArray,
        u_max_pct: FloatArray,
        u_int_pct: FloatArray,
        measured_s: list[float | None],
    ) -> None:
        """Count this interval's near-capacity instance-intervals and misses, and move the
        factor when the count is enough."""
        m = np.array([np.nan if r is None else r for r in measured_s], dtype=float)
        ok = np.isfinite(m) & (util_pct >= self.min_util_pct)
        ok &= (u_max_pct > 0) & (util_pct >= self.near * u_max_pct) & (util_pct <= u_max_pct)
        if self.max_u_int_pct is not None:
            ok &= u_int_pct <= self.max_u_int_pct
        self.counts_.append((int(np.count_nonzero(m[ok] > self.target_rt_s)), int(ok.sum())))
        misses = sum(c[0] for c in self.counts_)
        n = sum(c[1] for c in self.counts_)
        if n < self.min_samples:
            self.miss_rate_ = None
            return
        rate = 100.0 * misses / n
        self.miss_rate_ = rate
        f = self.factor_
        if rate > self.miss_pct:
            f = max(self.lo, f - self.step)
        elif rate < self.miss_pct / 2:
            f = min(self.hi, f + self.step)
        f = round(f, 6)
        if f != self.factor_:
            self.factor_ = f
            self.counts_.clear()

    def describe(self) -> dict[str, object]:
        return {
            "rt_scale_factor": self.factor_,
            "rt_miss_pct": None if self.miss_rate_ is None else round(self.miss_rate_, 3),
        }
