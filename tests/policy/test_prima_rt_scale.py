"""PRIMA's fleet-wide response-time calibration: the factor on R_th from the measured over
predicted response times, worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quell.models.bundle import load_bundle
from quell.policy.prima.rt_scale import RtScale, SloScale
from tests.policy.snapshots import write_bundle


def scale(tmp_path: Path, **over: float) -> RtScale:
    bundle = load_bundle(write_bundle(tmp_path / "m.json"), None)
    base = bundle.capacity_model(0.2)
    kw = {"window": 2, "z": 2.0, "step": 0.05, "lo": 0.5, "hi": 2.0, "min_util_pct": 5.0}
    kw |= over
    return RtScale(bundle, base, 0.2, **kw)  # type: ignore[arg-type]


def test_factor_is_one_over_mean_plus_z_sd_floored_to_its_step(tmp_path: Path) -> None:
    rs = scale(tmp_path)
    util = np.array([20.0, 20.0, 20.0, 2.0])
    # ratios 0.6, 0.7, 0.8 (the idle fourth gives none): q 0.7, sd 0.1, bound 0.9 → 1.111 → 1.10
    rs.update(util, np.array([0.1, 0.1, 0.1, 0.1]), [0.06, 0.07, 0.08, 0.5])
    assert rs.q_ == pytest.approx(0.7) and rs.s_ == pytest.approx(0.1)
    assert rs.factor_ == 1.1
    assert rs.model().target_rt_s == pytest.approx(0.22)
    assert rs.model() is rs.model()  # built once
    # a fleet slower than its model: ratios 1.2 x 3 and the window's 0.6..0.8 → bound > 1
    rs.update(util[:3], np.full(3, 0.1), [0.12, 0.12, 0.12])
    assert rs.factor_ < 1.0
    # the window forgets the first interval: all 1.2, sd 0 → 1 / 1.2 = 0.833 → 0.80
    rs.update(util[:3], np.full(3, 0.1), [0.12, 0.12, 0.12])
    assert rs.factor_ == 0.8


def test_too_few_ratios_keep_the_models_as_built(tmp_path: Path) -> None:
    rs = scale(tmp_path)
    rs.update(np.array([20.0, 20.0]), np.array([0.1, 0.1]), [0.05, None])
    assert rs.factor_ == 1.0 and rs.q_ is None


def test_only_the_instances_marked_give_ratios(tmp_path: Path) -> None:
    rs = scale(tmp_path)
    util = np.full(4, 20.0)
    # ratios 0.6, 0.7, 0.8 from the instances reading no neighbour; the fourth (2.0, an
    # interval a neighbour arrived in) is left out: q 0.7, sd 0.1, factor 1.10 as above.
    use = np.array([True, True, True, False])
    rs.update(util, np.full(4, 0.1), [0.06, 0.07, 0.08, 0.2], use)
    assert rs.q_ == pytest.approx(0.7) and rs.s_ == pytest.approx(0.1)
    assert rs.factor_ == 1.1
    # with it: ratios 0.6, 0.7, 0.8, 2.0: q 1.025, sd 0.6344 → bound 2.29 → 0.437 → lo 0.5
    every = scale(tmp_path)
    every.update(util, np.full(4, 0.1), [0.06, 0.07, 0.08, 0.2])
    assert every.q_ == pytest.approx(1.025)
    assert every.factor_ == 0.5


def slo_scale(tmp_path: Path, **over: float | None) -> SloScale:
    bundle = load_bundle(write_bundle(tmp_path / "m.json"), None)
    base = bundle.capacity_model(0.2)
    kw: dict[str, float | None] = {
        "window": 3,
        "step": 0.05,
        "lo": 0.9,
        "hi": 1.1,
        "miss_pct": 10.0,
        "near": 0.9,
        "min_samples": 4,
        "min_util_pct": 5.0,
        "max_u_int_pct": None,
    }
    kw |= over
    return SloScale(bundle, base, 0.2, **kw)  # type: ignore[arg-type]


def test_slo_scale_moves_by_the_near_capacity_miss_rate(tmp_path: Path) -> None:
    ss = slo_scale(tmp_path)
    u_max = np.full(4, 40.0)
    u_int = np.zeros(4)
    # U 36 (= 0.9 × 40, counted), 36, 30 (below 0.9 U_max: not counted), 4 (below min U)
    util = np.array([36.0, 36.0, 30.0, 4.0])
    # 2 counted, none over 0.2 s: fewer than 4 samples, no move
    ss.update(util, u_max, u_int, [0.1, 0.19, 0.5, 0.5])
    assert ss.factor_ == 1.0 and ss.miss_rate_ is None
    # 2 more, none over: 0 % of 4 < 10 % / 2 → up one step, the count starts again
    ss.update(util, u_max, u_int, [0.1, 0.1, None, None])
    assert ss.miss_rate_ == 0.0 and ss.factor_ == 1.05 and len(ss.counts_) == 0
    assert ss.model().target_rt_s == pytest.approx(0.21)
    # 4 counted, 1 over R_th (0.2 s, not the factor's 0.21): 25 % > 10 % → down one step
    ss.update(np.full(4, 38.0), u_max, u_int, [0.1, 0.1, 0.1, 0.205])
    assert ss.miss_rate_ == 25.0 and ss.factor_ == 1.0
    # 1 over of 4 again: 25 % → 0.95; then four intervals without a miss, each enough alone:
    # 1.0, 1.05, 1.1, and 1.1 again (the ceiling)
    ss.update(np.full(4, 38.0), u_max, u_int, [0.1, 0.1, 0.1, 0.3])
    assert ss.factor_ == 0.95
    seen = []
    for _ in range(4):
        ss.update(np.full(4, 38.0), u_max, u_int, [0.1] * 4)
        seen.append(ss.factor_)
    assert seen == [1.0, 1.05, 1.1, 1.1]


def test_slo_scale_holds_between_half_and_the_goal_over_its_window(tmp_path: Path) -> None:
    ss = slo_scale(tmp_path, min_samples=12)
    u_max, u_int, util = np.full(4, 40.0), np.zeros(4), np.full(4, 38.0)
    ss.update(util, u_max, u_int, [0.1, 0.1, 0.1, 0.3])  # 1 of 4
    ss.update(util, u_max, u_int, [0.1] * 4)  # 1 of 8
    ss.update(util, u_max, u_int, [0.1] * 4)  # 1 of 12 = 8.3 %: within [5, 10] %, no move
    assert ss.miss_rate_ == pytest.approx(100 / 12) and ss.factor_ == 1.0
    # the window keeps 3 intervals: the miss leaves it, 0 of 12 → up one step
    ss.update(util, u_max, u_int, [0.1] * 4)
    assert ss.miss_rate_ == 0.0 and ss.factor_ == 1.05


def test_slo_scale_stays_within_its_bounds_and_skips_neighbours(tmp_path: Path) -> None:
    ss = slo_scale(tmp_path, max_u_int_pct=2.0, min_samples=2)
    u_max = np.full(2, 40.0)
    # the second instance reads a neighbour (U_int 10): only the first counts, and its
    # misses lower the factor twice, to the floor 0.9, no further
    for _ in range(6):
        ss.update(np.full(2, 40.0), u_max, np.array([0.0, 10.0]), [0.3, 0.1])
    assert ss.factor_ == 0.9
    for _ in range(20):
        ss.update(np.full(2, 40.0), u_max, np.array([0.0, 10.0]), [0.1, 0.3])
    assert ss.factor_ == 1.1
