"""Model validation like PRIMA's Table II: held-out measurements against RTM and IM."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quell.prima.bundle import ModelBundle
from quell.prima.profile import CellResult


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

    @property
    def rt_error_pct(self) -> float:
        return 100.0 * abs(self.rt_pred_s - self.rt_s) / self.rt_s

    @property
    def total_error_pct(self) -> float:
        return 100.0 * abs(self.total_pred_pct - self.total_util_pct) / self.total_util_pct

    @property
    def sf_error_pct(self) -> float | None:
        """Relative SF error; ``None`` where SF is near zero and a ratio means nothing."""
        if self.sf < 0.1:
            return None
        return 100.0 * abs(self.sf_pred - self.sf) / self.sf


def validate(bundle: ModelBundle, cells: list[tuple[CellResult, float]]) -> list[ValidationRow]:
    rows = []
    for cell, sf in cells:
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
            )
        )
    return rows


def summary(rows: list[ValidationRow]) -> dict[str, object]:
    sf_err = [e for r in rows if (e := r.sf_error_pct) is not None]
    return {
        "points": len(rows),
        "rtm_mape_pct": float(np.mean([r.rt_error_pct for r in rows])) if rows else None,
        "im_sf_mape_pct": float(np.mean(sf_err)) if sf_err else None,
        "im_total_mape_pct": float(np.mean([r.total_error_pct for r in rows])) if rows else None,
        "im_sf_points": len(sf_err),
        "clamped_points": sum(r.clamped for r in rows),
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
            }
            for r in rows
        ],
    }
