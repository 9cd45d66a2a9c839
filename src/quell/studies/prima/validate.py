"""Model validation like PRIMA's Table II: held-out measurements against RTM and IM.

Beside each error it puts the error the held-out measurements' own scatter would give against
a perfect model: the standard error of each point's pooled mean, from how far its repetitions
differ, as a fraction of that mean. Over the points, ``√(2/π)`` times its root mean square is
the mean absolute error normal noise of that size gives. The model's own cells were measured
the same way, so it is a floor, not an allowance: an error near it says more repetitions (or
longer runs) would tell more, not a better model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quell.models.bundle import ModelBundle
from quell.studies.prima.profile import MeasuredPoint

SF_RATIO_MIN = 0.1
"""Below this SF a relative SF error or scatter means nothing (below the IM's knee a zero SF
fits any total load), so those points are left out of both."""


@dataclass(frozen=True)
class ValidationRow:
    util_pct: float
    sf: float
    total_util_pct: float
    rt_s: float
    rt_pred_s: float
    sf_pred: float
    """IM(U_total): the SF the interference model expects at the measured total load."""
    total_pred_pct: float
    """IM⁻¹(SF): the total load the interference model reads from the measured SF."""
    clamped: bool
    sf_reps: tuple[float, ...] = ()
    """Each repetition's SF on its own."""
    rt_reps_s: tuple[float, ...] = ()
    """Each repetition's mean RT on its own."""

    @property
    def rt_error_pct(self) -> float:
        return 100.0 * abs(self.rt_pred_s - self.rt_s) / self.rt_s

    @property
    def total_error_pct(self) -> float:
        return 100.0 * abs(self.total_pred_pct - self.total_util_pct) / self.total_util_pct

    @property
    def sf_error_pct(self) -> float | None:
        """Relative SF error; ``None`` where SF is near zero and a ratio means nothing."""
        if self.sf < SF_RATIO_MIN:
            return None
        return 100.0 * abs(self.sf_pred - self.sf) / self.sf

    @property
    def sf_noise_pct(self) -> float | None:
        """Standard error of the pooled SF from its repetitions' scatter, relative to it;
        ``None`` with fewer than two repetitions or where SF is near zero."""
        return _relative_se_pcts(self.sf, self.sf_reps, self.rt_s, self.rt_reps_s)[0]

    @property
    def rt_noise_pct(self) -> float | None:
        """Standard error of the pooled mean RT from its repetitions' scatter, relative to it."""
        return _relative_se_pcts(self.sf, self.sf_reps, self.rt_s, self.rt_reps_s)[1]


def _relative_se_pct(reps: tuple[float, ...], mean: float) -> float | None:
    if len(reps) < 2 or mean <= 0:
        return None
    return float(100.0 * np.std(reps, ddof=1) / np.sqrt(len(reps)) / mean)


def _relative_se_pcts(
    sf: float, sf_reps: tuple[float, ...], rt_s: float, rt_reps_s: tuple[float, ...]
) -> tuple[float | None, float | None]:
    """A point's relative standard errors: (SF, or ``None`` below ``SF_RATIO_MIN``; RT)."""
    sf_se = None if sf < SF_RATIO_MIN else _relative_se_pct(sf_reps, sf)
    return sf_se, _relative_se_pct(rt_reps_s, rt_s)


def _floors(ses: list[tuple[float | None, float | None]]) -> dict[str, float | int | None]:
    sf = [s for s, _ in ses if s is not None]
    rt = [r for _, r in ses if r is not None]
    return {
        "rt_noise_pct": noise_floor_pct(rt),
        "rt_noise_points": len(rt),
        "sf_noise_pct": noise_floor_pct(sf),
        "sf_noise_points": len(sf),
    }


def noise_floor_pct(relative_se_pct: list[float]) -> float | None:
    """The mean absolute error that normal noise with these relative standard errors gives:
    √(2/π) × their root mean square."""
    if not relative_se_pct:
        return None
    return float(np.sqrt(2.0 / np.pi) * np.sqrt(np.mean(np.square(relative_se_pct))))


def scatter(points: list[MeasuredPoint]) -> dict[str, float | int | None]:
    """The noise floor of measured points (the model's cells, say): the mean absolute error
    their repetitions' scatter alone gives in RT and, over points with SF ≥ ``SF_RATIO_MIN``, in SF."""
    rt_reps = [tuple(r.mean_rt_s for r in p.reps) for p in points]
    return _floors(
        [
            _relative_se_pcts(p.sf, p.rep_sf, p.cell.mean_rt_s, reps)
            for p, reps in zip(points, rt_reps, strict=True)
        ]
    )


def validate(bundle: ModelBundle, points: list[MeasuredPoint]) -> list[ValidationRow]:
    rows = []
    for p in points:
        cell, sf = p.cell, p.sf
        rt = bundle.rtm.predict(np.array([cell.util_pct]), np.array([sf]))
        sfp = bundle.im.predict(np.array([cell.total_util_pct]), np.array([cell.util_pct]))
        tot = bundle.im.inverse(np.array([sf]), np.array([cell.util_pct]))
        rows.append(
            ValidationRow(
                util_pct=cell.util_pct,
                sf=sf,
                total_util_pct=cell.total_util_pct,
                rt_s=cell.mean_rt_s,
                rt_pred_s=float(rt.value[0]),
                sf_pred=float(sfp.value[0]),
                total_pred_pct=float(tot.value[0]),
                clamped=bool(rt.clamped[0] or sfp.clamped[0] or tot.clamped[0]),
                sf_reps=p.rep_sf,
                rt_reps_s=tuple(r.mean_rt_s for r in p.reps),
            )
        )
    return rows


def summary(rows: list[ValidationRow]) -> dict[str, object]:
    sf_err = [e for r in rows if (e := r.sf_error_pct) is not None]
    noise = _floors([(r.sf_noise_pct, r.rt_noise_pct) for r in rows])
    return {
        "points": len(rows),
        "rtm_mape_pct": float(np.mean([r.rt_error_pct for r in rows])) if rows else None,
        "im_sf_mape_pct": float(np.mean(sf_err)) if sf_err else None,
        "im_total_mape_pct": float(np.mean([r.total_error_pct for r in rows])) if rows else None,
        "im_sf_points": len(sf_err),
        "clamped_points": sum(r.clamped for r in rows),
        "rtm_noise_pct": noise["rt_noise_pct"],
        "rtm_noise_points": noise["rt_noise_points"],
        "im_sf_noise_pct": noise["sf_noise_pct"],
        "im_sf_noise_points": noise["sf_noise_points"],
        "rows": [
            {
                "util_pct": r.util_pct,
                "sf": r.sf,
                "total_util_pct": r.total_util_pct,
                "rt_s": r.rt_s,
                "rt_pred_s": r.rt_pred_s,
                "rt_error_pct": r.rt_error_pct,
                "sf_pred": r.sf_pred,
                "total_pred_pct": r.total_pred_pct,
                "total_error_pct": r.total_error_pct,
                "clamped": r.clamped,
                "sf_reps": list(r.sf_reps),
                "rt_reps_s": list(r.rt_reps_s),
            }
            for r in rows
        ],
    }
