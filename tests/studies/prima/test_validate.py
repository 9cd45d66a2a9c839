"""Validation rows and their noise floor, with exact values on a closed-form bundle."""

from __future__ import annotations

import math

import pytest

from quell.studies.prima.profile import CellResult, MeasuredPoint
from quell.studies.prima.validate import noise_floor_pct, scatter, summary, validate
from tests.prima import bundles as sb


def cell(u: float, total: float, rt_s: float, rep: int = -1) -> CellResult:
    return CellResult("holdout", u, 0.0, rep, u, total, [0.1], rt_s, 100, "run")


def point(u: float, total: float, rt_reps: list[float], sf_reps: list[float]) -> MeasuredPoint:
    reps = tuple(cell(u, total, r, k) for k, r in enumerate(rt_reps))
    pooled = cell(u, total, sum(rt_reps) / len(rt_reps))
    return MeasuredPoint(pooled, sum(sf_reps) / len(sf_reps), reps, tuple(sf_reps))


def test_rows_carry_each_points_scatter_and_the_summary_its_floor() -> None:
    bundle = sb.linear_bundle()
    points = [
        # IM(60) = 0.1 × (60 − 40) = 2.0; the two runs read 1.8 and 2.2
        point(50.0, 60.0, [0.030, 0.034], [1.8, 2.2]),
        # SF near zero: no relative SF error or scatter; RT runs agree exactly
        point(20.0, 40.5, [0.020, 0.020], [0.04, 0.06]),
        # one run: no scatter to read
        point(30.0, 70.0, [0.025], [3.0]),
    ]
    rows = validate(bundle, points)
    assert rows[0].sf_pred == pytest.approx(2.0)
    assert rows[0].sf_error_pct == pytest.approx(0.0, abs=1e-9)
    # sd(1.8, 2.2) = 0.2·√2, over √2 runs = 0.2, over the mean 2.0 = 10 %
    assert rows[0].sf_noise_pct == pytest.approx(10.0)
    # sd(30, 34 ms) = 2·√2 ms, over √2 = 2 ms, over 32 ms = 6.25 %
    assert rows[0].rt_noise_pct == pytest.approx(6.25)
    assert rows[1].sf_noise_pct is None and rows[1].rt_noise_pct == 0.0
    assert rows[2].sf_noise_pct is None and rows[2].rt_noise_pct is None
    s = summary(rows)
    k = math.sqrt(2 / math.pi)
    assert s["im_sf_noise_pct"] == pytest.approx(k * 10.0)
    assert s["im_sf_noise_points"] == 1
    assert s["rtm_noise_pct"] == pytest.approx(k * math.sqrt((6.25**2 + 0.0) / 2))
    assert s["rtm_noise_points"] == 2
    assert s["rows"][0]["sf_reps"] == [1.8, 2.2]  # type: ignore[index]
    # The model's own cells get the same floor from the same points, with no model involved.
    assert scatter(points) == {
        "rt_noise_pct": s["rtm_noise_pct"],
        "rt_noise_points": 2,
        "sf_noise_pct": s["im_sf_noise_pct"],
        "sf_noise_points": 1,
    }


def test_the_floor_is_the_mean_absolute_error_of_normal_noise() -> None:
    assert noise_floor_pct([]) is None
    # E|N(0, σ²)| = σ·√(2/π); with unequal σ the root mean square stands for them
    assert noise_floor_pct([3.0, 4.0]) == pytest.approx(math.sqrt(2 / math.pi) * math.sqrt(12.5))
