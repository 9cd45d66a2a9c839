"""The detector's features read off hand-built observations: the paper's LPO and WorkDone,
the tenant's extras per second, and NaN (never 0) where nothing was measured."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from quell.core.observation import THROTTLED_KEY, Observation
from quell.detect.features import (
    CORE_FEATURES,
    DEFAULT_FEATURES,
    LINK_UTIL_KEY,
    LLC_MISS_RATE_KEY,
    RT,
    FeatureWindow,
    check_features,
    core_index,
    feature_matrix,
    feature_row,
    roll,
)
from quell.errors import InputError


def _obs(**kw: object) -> Observation:
    base: dict[str, object] = {"time_s": 10.0, "instance_id": "i1", "interval_s": 5.0}
    return Observation(**{**base, **kw})  # type: ignore[arg-type]


def test_lpo_and_workdone_are_the_papers() -> None:
    obs = _obs(
        requests=200,
        throughput_rps=40.0,
        mean_rt_seconds=0.25,
        cpu_util=0.8,
        psi_cpu_some_pct=12.0,
        runqueue_wait_seconds=0.5,
        extra={THROTTLED_KEY: 1.5, LINK_UTIL_KEY: 30.0},
    )
    row = dict(zip(DEFAULT_FEATURES, feature_row(obs, DEFAULT_FEATURES), strict=True))
    assert row["lpo_cpu_s_per_req"] == pytest.approx(0.8 / 40.0)  # CPU-s per request
    assert row["workdone_req_cores"] == pytest.approx(0.25 * 40.0 * 0.8)  # RT × THPT × CPU
    assert row["rt_s"] == 0.25 and row["throughput_rps"] == 40.0 and row["cpu_cores"] == 0.8
    assert row["runqueue_wait_s_per_s"] == pytest.approx(0.1)
    assert row["cfs_throttled_s_per_s"] == pytest.approx(0.3)
    assert row[LINK_UTIL_KEY] == 30.0 and row["psi_cpu_some_pct"] == 12.0
    assert math.isnan(row["psi_memory_some_pct"])


def test_what_was_not_measured_is_nan_not_zero() -> None:
    idle = _obs(requests=0, throughput_rps=0.0, cpu_util=0.1)
    row = dict(zip(DEFAULT_FEATURES, feature_row(idle, DEFAULT_FEATURES), strict=True))
    assert row["throughput_rps"] == 0.0  # measured: nothing completed
    for name in ("rt_s", "lpo_cpu_s_per_req", "workdone_req_cores", "cfs_throttled_s_per_s"):
        assert math.isnan(row[name]), name
    blank = feature_matrix([_obs()], CORE_FEATURES)
    assert blank.shape == (1, 3) and np.isnan(blank).all()


def test_hardware_counters_are_read_when_present() -> None:
    names = (*CORE_FEATURES, LLC_MISS_RATE_KEY)
    assert feature_row(_obs(extra={LLC_MISS_RATE_KEY: 15.0}), names)[-1] == 15.0
    assert math.isnan(feature_row(_obs(), names)[-1])


def test_unknown_repeated_or_incomplete_feature_lists_are_refused() -> None:
    with pytest.raises(InputError) as info:
        check_features(("rt_s", "rt_s", "bogus"))
    text = str(info.value)
    assert "unknown feature 'bogus'" in text
    assert "named twice" in text
    assert "required" in text and "lpo_cpu_s_per_req" in text


def test_a_window_reads_each_feature_as_its_median_by_hand() -> None:
    rts = [0.1, 0.5, 0.2, None, 0.3, 0.9]
    obs = [
        _obs(
            time_s=float(k),
            interval_s=1.0,
            requests=0 if rt is None else 40,
            throughput_rps=0.0 if rt is None else 40.0,
            mean_rt_seconds=rt,
            cpu_util=0.5,
        )
        for k, rt in enumerate(rts)
    ]
    rolled = feature_matrix(obs, DEFAULT_FEATURES, 3)
    rt = rolled[:, DEFAULT_FEATURES.index(RT)]
    # 0.1 | (0.1 + 0.5) / 2 | median(0.1, 0.5, 0.2) | no completion: no core feature |
    # median(0.2, —, 0.3) = 0.25 | median(—, 0.3, 0.9) = 0.6
    assert rt[:3] == pytest.approx([0.1, 0.3, 0.2])
    assert math.isnan(rt[3])
    assert rt[4:] == pytest.approx([0.25, 0.6])
    # throughput was measured in interval 3 (0 completed): median(40, 40, 0) = 40
    assert rolled[3, DEFAULT_FEATURES.index("throughput_rps")] == 40.0
    raw = feature_matrix(obs, DEFAULT_FEATURES)
    assert np.array_equal(feature_matrix(obs, DEFAULT_FEATURES, 1), raw, equal_nan=True)


def test_the_online_window_gives_the_rows_of_the_whole_run() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 0.5, (200, len(DEFAULT_FEATURES)))
    x[rng.random(x.shape) < 0.2] = np.nan
    core = core_index(DEFAULT_FEATURES)
    for k in (1, 2, 3, 5):
        win = FeatureWindow(k, core)
        online = np.array([win.push(r) for r in x.tolist()])
        batch = roll(x, k, core)
        assert np.array_equal(online, batch, equal_nan=True)
        # away from rows that lack a core feature, the rows are numpy's nanmedian
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN window: NaN
            ref = np.array(
                [np.nanmedian(x[max(0, i - k + 1) : i + 1, 5:], axis=0) for i in range(200)]
            )
        assert np.allclose(batch[:, 5:], ref, equal_nan=True)
        # a core feature the interval did not measure stays NaN: no verdict for it
        assert np.array_equal(np.isnan(batch[:, list(core)]), np.isnan(x[:, list(core)]))
    with pytest.raises(ValueError, match="window_intervals must be >= 1"):
        FeatureWindow(0, core)
