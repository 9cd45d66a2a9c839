"""The paper's outlier rule (Eq. 1) over a rolling window:

    | P_i − P_N/2 | > C × median( | {P_i} − P_N/2 | )

P_N/2 is the median of the window's N values and the right-hand median is their median absolute
deviation (MAD), unscaled as the paper writes it. Here the window is the last N measured values
up to and including the one judged (the paper's N values with P_i among them); a value is judged
only once N measured values are there, and a missing one (NaN) is neither judged nor counted.

The constant: the paper does not give it. ``C_GAUSS_3SIGMA`` = 3 / Φ⁻¹(3/4) ≈ 4.4478, the
three-sigma rule for noise that is Gaussian: the MAD of a normal sample is σ × Φ⁻¹(3/4) ≈
0.6745 σ, so C × MAD ≈ 3σ and a clean interval is flagged with probability 0.27 % — one
interval in 370, at 5 s one every half hour, few enough that a flag means something, while an
interference that doubles a response time whose noise is 15 % of it lies 6.7σ (~10 MADs)
out. A
smaller C (Leys et al.'s 2.5σ, C ≈ 3.71) flags 1.2 % of clean intervals. Response times are
skewed to the right, so their upper tail is flagged more often than the Gaussian rate: the
rule is a screen, not the detector (the tree is).

A window whose MAD is 0 (more than half its values equal) flags any value off the median, as
Eq. 1 says.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import NormalDist
from typing import Final

import numpy as np
from numpy.typing import NDArray

from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

C_GAUSS_3SIGMA: Final = 3.0 / NormalDist().inv_cdf(0.75)
"""Eq. 1's C that makes the rule three standard deviations for Gaussian noise (≈ 4.4478)."""


def _check(window_n: int, c: float) -> None:
    problems = []
    if window_n < 3:
        problems.append(Problem("window_n", f"must be at least 3, got {window_n}"))
    if not (c > 0 and math.isfinite(c)):
        problems.append(Problem("c", f"must be a positive number, got {c}"))
    if problems:
        raise InputError("MAD rule", problems)


def mad_flag(window: FloatArray, c: float) -> bool:
    """Eq. 1 for the last value of ``window`` (all measured) against the whole window."""
    med = float(np.median(window))
    mad = float(np.median(np.abs(window - med)))
    return abs(float(window[-1]) - med) > c * mad


def mad_outliers(values: FloatArray, window_n: int, c: float = C_GAUSS_3SIGMA) -> BoolArray:
    """For each value, whether Eq. 1 flags it against the last ``window_n`` measured values up
    to it. Values before the window first fills, and NaNs, are not flagged."""
    _check(window_n, c)
    x = np.asarray(values, dtype=float)
    out = np.zeros(x.shape, dtype=bool)
    measured = np.flatnonzero(~np.isnan(x))
    kept = x[measured]
    for j in range(window_n - 1, kept.size):
        out[measured[j]] = mad_flag(kept[j - window_n + 1 : j + 1], c)
    return out


class MadRule:
    """Eq. 1 one value at a time: ``update`` records a value and says whether it is an outlier
    against the last ``window_n`` measured values (itself included)."""

    def __init__(self, window_n: int, c: float = C_GAUSS_3SIGMA) -> None:
        _check(window_n, c)
        self.window_n = window_n
        self.c = c
        self.window_: deque[float] = deque(maxlen=window_n)

    def update(self, value: float | None) -> bool:
        """``None`` or NaN: not measured, not recorded, not an outlier."""
        if value is None or math.isnan(value):
            return False
        self.window_.append(float(value))
        if len(self.window_) < self.window_n:
            return False
        return mad_flag(np.fromiter(self.window_, float, len(self.window_)), self.c)


__all__ = ["C_GAUSS_3SIGMA", "MadRule", "mad_flag", "mad_outliers"]
