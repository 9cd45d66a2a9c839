"""R_iso(U): the probe's mean download time on an interference-free instance at each service
utilisation, and the stopping rule for measuring it (95 % CI width within 5 % of the mean)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quell.errors import InputError, Problem


def confidence_width(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Full width of the Student-t confidence interval of the mean (``inf`` below 2 samples)."""
    from scipy import stats  # slow to import, and only probe training needs it

    x = np.asarray(samples, dtype=float)
    if x.size < 2:
        return float("inf")
    half = stats.t.ppf(0.5 + confidence / 2.0, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return float(2.0 * half)


@dataclass(frozen=True)
class TrainingLevel:
    """The probe times measured at one utilisation level, and whether they met the rule."""

    util_pct: float
    """Mean service utilisation measured while these samples were taken."""
    samples_s: tuple[float, ...]

    @property
    def mean_s(self) -> float:
        return float(np.mean(self.samples_s))

    def ci_width_ratio(self, confidence: float = 0.95) -> float:
        """CI width over the mean: the training rule wants this ≤ ``rel_width``."""
        return confidence_width(self.samples_s, confidence) / self.mean_s


class ProbeTable:
    """Look-up table R_iso(U), linear between measured levels, clamped (and flagged) outside.

    Parameters
    ----------
    rel_width : the 95 % confidence interval of each level's mean must be at most this fraction
        of the mean for the level to count as converged (PRIMA: 0.05).
    confidence : the interval's confidence level.
    """

    def __init__(self, rel_width: float = 0.05, confidence: float = 0.95) -> None:
        self.rel_width = rel_width
        self.confidence = confidence

    def fit(self, levels: Sequence[TrainingLevel]) -> ProbeTable:
        problems = []
        if len(levels) < 2:
            problems.append(
                Problem("levels", f"need at least 2 utilisation levels, got {len(levels)}")
            )
        for k, lv in enumerate(levels):
            if not lv.samples_s:
                problems.append(Problem(f"levels[{k}]", "no probe samples"))
            elif min(lv.samples_s) <= 0:
                problems.append(Problem(f"levels[{k}]", "probe times must be positive"))
        if problems:
            raise InputError("probe table", problems)
        order = sorted(levels, key=lambda lv: lv.util_pct)
        self.util_pct_ = np.array([lv.util_pct for lv in order])
        self.r_iso_s_ = np.array([lv.mean_s for lv in order])
        self.ci_ratio_ = np.array([lv.ci_width_ratio(self.confidence) for lv in order])
        self.converged_ = self.ci_ratio_ <= self.rel_width
        self.samples_ = np.array([len(lv.samples_s) for lv in order])
        return self

    def needs_more(self, level: TrainingLevel) -> bool:
        """True while ``level`` has not met the stopping rule."""
        return level.ci_width_ratio(self.confidence) > self.rel_width

    def predict(self, util_pct: np.ndarray | float) -> np.ndarray:
        """R_iso at each utilisation (seconds), linear between levels, flat beyond the ends."""
        return np.asarray(
            np.interp(np.asarray(util_pct, dtype=float), self.util_pct_, self.r_iso_s_)
        )

    def spread_levels(self) -> np.ndarray:
        """Per level, the standard deviation of one probe sample over the level's mean,
        recovered from its confidence interval: width / mean = 2 t σ / (√n mean). A level of
        fewer than two samples has none known: 0."""
        from scipy import stats  # slow to import; a controller asks once

        n = self.samples_.astype(float)
        t = stats.t.ppf(0.5 + self.confidence / 2.0, np.maximum(n - 1.0, 1.0))
        sd = self.ci_ratio_ * np.sqrt(n) / (2.0 * t)
        return np.asarray(np.where((n >= 2) & np.isfinite(sd), sd, 0.0))

    def out_of_range(self, util_pct: np.ndarray | float) -> np.ndarray:
        u = np.asarray(util_pct, dtype=float)
        return np.asarray((u < self.util_pct_[0]) | (u > self.util_pct_[-1]))

    def to_dict(self) -> dict[str, object]:
        return {
            "util_pct": self.util_pct_.tolist(),
            "r_iso_s": self.r_iso_s_.tolist(),
            "ci_width_ratio": self.ci_ratio_.tolist(),
            "samples": self.samples_.tolist(),
            "rel_width": self.rel_width,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> ProbeTable:
        """Rebuild a fitted table; the caller has validated the shape (see ``prima.bundle``)."""
        t = cls(float(d["rel_width"]), float(d["confidence"]))  # type: ignore[arg-type]
        t.util_pct_ = np.asarray(d["util_pct"], dtype=float)
        t.r_iso_s_ = np.asarray(d["r_iso_s"], dtype=float)
        t.ci_ratio_ = np.asarray(d["ci_width_ratio"], dtype=float)
        t.converged_ = t.ci_ratio_ <= t.rel_width
        t.samples_ = np.asarray(d["samples"], dtype=int)
        return t
