"""The models on synthetic data with known noise: the sparse GP's 95 % interval covers 93–97 %
of held-out points, it agrees with the exact GP, and it beats the run-queue baseline where the
truth is not the run-queue wait."""

from __future__ import annotations

import numpy as np
import pytest

from quell.attribute.models import (
    BoostingBaseline,
    ExactGP,
    LinearBaseline,
    OtherCgroupWaitBaseline,
    Prediction,
    RunQueueBaseline,
    SparseGP,
    provider_floor_seconds,
    provider_seconds,
    score,
)
from quell.errors import InputError

NOISE_SD = 0.05
NAMES = ("cpu_seconds", "runq_wait_seconds", "blocked_seconds")


def _data(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (n, 3))
    # Only part of the run-queue wait adds latency, and CPU time adds more past a knee.
    truth = 0.4 * x[:, 1] + 0.8 * np.maximum(x[:, 0] - 0.5, 0.0) ** 2 + 0.2 * np.sin(3 * x[:, 2])
    return x, truth + rng.normal(0.0, NOISE_SD, n), truth


@pytest.fixture(scope="module")
def fitted() -> tuple[SparseGP, np.ndarray, np.ndarray, np.ndarray]:
    x, y, _ = _data(0, 2500)
    return SparseGP(n_inducing=30, max_iters=40, seed=1).fit(x, y), *_data(1, 3000)


def test_sparse_gp_interval_is_calibrated_on_held_out_points(fitted) -> None:
    gp, xt, yt, truth = fitted
    s = score("sparse_gp", yt, gp.predict(xt))
    assert 0.93 <= s.coverage <= 0.97
    # The noise caps R² (at 0.887 here): the truth itself scores no better.
    assert s.r2 >= score("truth", yt, Prediction(truth)).r2 - 0.005
    assert s.rmse_seconds == pytest.approx(NOISE_SD, rel=0.1)
    # Its predictive sd is the noise's, where the data are dense.
    assert gp.posterior_.noise_variance * gp.posterior_.y_scale**2 == pytest.approx(
        NOISE_SD**2, rel=0.15
    )


def test_sparse_gp_beats_the_run_queue_baseline_by_far(fitted) -> None:
    gp, xt, yt, _ = fitted
    gp_mae = score("gp", yt, gp.predict(xt)).mae_seconds
    runq_mae = score("runq", yt, RunQueueBaseline(NAMES).fit(xt, yt).predict(xt)).mae_seconds
    assert gp_mae <= 0.7 * runq_mae
    assert gp_mae < 1.0 * NOISE_SD  # about the noise's own MAE, 0.8 sd


def test_sparse_gp_agrees_with_the_exact_gp(fitted) -> None:
    gp, xt, yt, _ = fitted
    x, y, _ = _data(0, 2500)
    exact = ExactGP(max_points=600, seed=0).fit(x, y).predict(xt)
    sparse = gp.predict(xt)
    assert np.abs(sparse.mean_seconds - exact.mean_seconds).mean() < 0.25 * NOISE_SD
    assert 0.93 <= score("exact", yt, exact).coverage <= 0.97


def test_the_baselines_fit_and_score() -> None:
    x, y, _ = _data(0, 2000)
    xt, yt, _ = _data(1, 2000)
    linear = score("linear", yt, LinearBaseline().fit(x, y).predict(xt))
    boosting = BoostingBaseline(seed=0, max_iter=60).fit(x, y)
    boost = score("boost", yt, boosting.predict(xt))
    assert linear.coverage is not None and boost.coverage is None
    assert boost.r2 > linear.r2 > 0.5  # the truth is not linear
    again = BoostingBaseline(seed=0, max_iter=60).fit(x, y).predict(xt).mean_seconds
    np.testing.assert_array_equal(again, boosting.predict(xt).mean_seconds)


def test_same_seed_same_sparse_gp() -> None:
    x, y, _ = _data(2, 300)
    a = SparseGP(n_inducing=10, max_iters=10, seed=4).fit(x, y).predict(x[:50])
    b = SparseGP(n_inducing=10, max_iters=10, seed=4).fit(x, y).predict(x[:50])
    np.testing.assert_array_equal(a.mean_seconds, b.mean_seconds)


def test_the_interval_and_the_provider_part() -> None:
    p = Prediction(np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    lo, hi = p.interval(0.95)
    np.testing.assert_allclose(hi - p.mean_seconds, [1.959964, 3.919928], rtol=1e-6)
    np.testing.assert_allclose(p.mean_seconds - lo, hi - p.mean_seconds)
    np.testing.assert_array_equal(
        provider_seconds(np.array([-0.1, 0.5, 3.0]), np.array([1.0, 1.0, 2.0])), [0.0, 0.5, 2.0]
    )


def test_bad_training_data_is_refused_naming_each_problem() -> None:
    with pytest.raises(InputError) as err:
        SparseGP().fit(np.array([[np.nan, 1.0]]), np.array([1.0, 2.0]))
    assert {p.location for p in err.value.problems} == {"x", "y"}
    with pytest.raises(InputError, match="runq_wait_seconds"):
        RunQueueBaseline(("cpu_seconds",))
    with pytest.raises(InputError, match="runq_wait_other_cgroup_seconds"):
        OtherCgroupWaitBaseline(("cpu_seconds", "runq_wait_seconds"))


def test_the_other_cgroup_baseline_answers_that_column_and_nothing_else() -> None:
    names = ("runq_wait_seconds", "runq_wait_other_cgroup_seconds")
    x = np.array([[0.004, 0.001], [0.002, 0.0]])
    other = OtherCgroupWaitBaseline(names).fit(x, np.zeros(2)).predict(x)
    assert other.mean_seconds.tolist() == [0.001, 0.0] and other.std_seconds is None
    assert RunQueueBaseline(names).predict(x).mean_seconds.tolist() == [0.004, 0.002]


def test_the_linear_mean_extrapolates_where_a_zero_mean_falls_back() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(0.0, 1.0, (300, 1))
    y = 2.0 * x[:, 0] + rng.normal(0.0, 0.05, 300)
    far = np.array([[5.0]])
    linear = SparseGP(n_inducing=10, max_iters=30, seed=0).fit(x, y).predict(far)
    zero = SparseGP(n_inducing=10, max_iters=30, seed=0, mean="zero").fit(x, y).predict(far)
    assert linear.mean_seconds[0] == pytest.approx(10.0, abs=0.5)
    assert abs(zero.mean_seconds[0] - 10.0) > 4 * abs(linear.mean_seconds[0] - 10.0)
    with pytest.raises(InputError, match="linear or zero"):
        SparseGP(mean="cubic").fit(x, y)


def test_the_exact_gp_predicts_in_blocks_as_in_one() -> None:
    x, y, _ = _data(0, 400)
    xt, _, _ = _data(1, 250)
    gp = ExactGP(max_points=200, seed=0).fit(x, y)
    whole, blocks = gp.predict(xt, chunk=1_000), gp.predict(xt, chunk=64)
    assert np.allclose(blocks.mean_seconds, whole.mean_seconds, rtol=0, atol=1e-12)
    assert blocks.std_seconds is not None and whole.std_seconds is not None
    assert np.allclose(blocks.std_seconds, whole.std_seconds, rtol=0, atol=1e-12)
    assert len(gp.predict(xt[:0]).mean_seconds) == 0


def test_the_provider_floor_keeps_what_is_above_it_and_drops_the_rest() -> None:
    """At or below the floor a request has no provider part; above it, the excess as before
    (held within [0, wall]); the floor is the quantile of the uncontended predictions."""
    excess = np.array([-0.1, 0.0002, 0.0003, 0.5, 3.0])
    wall = np.array([1.0, 1.0, 1.0, 1.0, 2.0])
    np.testing.assert_array_equal(
        provider_seconds(excess, wall, floor_seconds=0.0003), [0.0, 0.0, 0.0, 0.5, 2.0]
    )
    np.testing.assert_array_equal(provider_seconds(excess, wall), [0.0, 0.0002, 0.0003, 0.5, 2.0])
    # 1000 uncontended predictions 0, 1, …, 999 µs: the 99.5 % quantile by linear interpolation
    uncontended = np.arange(1000) * 1e-6
    assert provider_floor_seconds(uncontended, 0.995) == pytest.approx(994.005e-6, rel=1e-12)
    assert provider_floor_seconds(uncontended - 1.0, 0.995) == 0.0  # never below 0
    with pytest.raises(InputError, match="floor quantile"):
        provider_floor_seconds(uncontended, 1.0)
    with pytest.raises(InputError, match="finite predictions"):
        provider_floor_seconds(np.array([np.nan]), 0.5)
