"""PRIMA's fleet-wide response-time calibration: the factor on R_th from the measured over
predicted response times, worked out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quell.models.bundle import load_bundle
from quell.policy.prima.rt_scale import RtScale
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
