"""The detector's features read off hand-built observations: the paper's LPO and WorkDone,
the tenant's extras per second, and NaN (never 0) where nothing was measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quell.core.observation import THROTTLED_KEY, Observation
from quell.detect.features import (
    CORE_FEATURES,
    DEFAULT_FEATURES,
    LINK_UTIL_KEY,
    LLC_MISS_RATE_KEY,
    check_features,
    feature_matrix,
    feature_row,
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
