"""The interval's calibration by left-out group on synthetic data with a known group effect:
each group (a run) shifts every one of its requests by its own offset, drawn N(0, 0.1²), over a
noise of sd 0.05 within the group; a feature names the group (as a run's PSI level does), so a
model that learns from near neighbours fits each training group's offset and its noise is the
within-group noise alone. On groups it never saw its interval under-covers; calibrated by
leaving training groups out, it covers 93–97 %."""

from __future__ import annotations

import numpy as np
import pytest

from quell.attribute.calibration import MIN_SCALE, calibrate_by_group, conformal_quantile
from quell.attribute.models import Prediction, SparseGP, score
from quell.errors import InputError

OFFSET_SD = 0.1
NOISE_SD = 0.05


def _groups(seed: int, n_groups: int, per_group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.0, 100.0, n_groups)  # what names the group
    offset = rng.normal(0.0, OFFSET_SD, n_groups)  # the group effect
    g = np.repeat(np.arange(n_groups), per_group)
    u = rng.uniform(0.0, 1.0, len(g))
    x = np.column_stack([u, level[g]])
    y = np.sin(3 * u) + offset[g] + rng.normal(0.0, NOISE_SD, len(g))
    return x, y, np.char.add(f"s{seed}-", g.astype(str))


class Neighbours:
    """The mean of the 10 nearest training requests; the interval from the training residuals'
    spread, the same everywhere (it knows the noise within a group, not between groups)."""

    def fit(self, x: np.ndarray, y: np.ndarray) -> Neighbours:
        from sklearn.neighbors import KNeighborsRegressor

        self.model_ = KNeighborsRegressor(10).fit(x, y)
        self.sd_ = float(np.sqrt(np.mean((y - self.model_.predict(x)) ** 2)))
        return self

    def predict(self, x: np.ndarray) -> Prediction:
        return Prediction(self.model_.predict(x), np.full(len(x), self.sd_))


def test_the_calibrated_interval_covers_groups_the_model_never_saw() -> None:
    x, y, g = _groups(0, 400, 20)
    xt, yt, _ = _groups(100, 400, 20)  # 400 other groups: never given to the calibration
    model = Neighbours().fit(x, y)
    before = score("neighbours", yt, model.predict(xt))
    assert before.coverage is not None and before.coverage < 0.88  # under-covers

    cal = calibrate_by_group(Neighbours, x, y, g, list(dict.fromkeys(g.tolist())), folds=10)
    assert len(cal.groups) == 400 and cal.n == len(y)
    pred = model.predict(xt)
    assert pred.std_seconds is not None
    after = score("calibrated", yt, Prediction(pred.mean_seconds, cal.scale * pred.std_seconds))
    assert after.coverage is not None and 0.93 <= after.coverage <= 0.97
    # The whole group effect must be added: sd sqrt(0.05² + (about 0.1)²) over the noise's 0.05.
    assert 1.5 <= cal.scale <= 2.0
    # On the groups left out, the uncalibrated interval fell as short as on the test groups.
    left_out = np.mean([r.coverage for r in cal.groups])
    assert left_out == pytest.approx(before.coverage, abs=0.04)


def test_calibration_sees_only_the_rows_it_is_given() -> None:
    """The scale is a function of the training rows alone: test rows never enter it, and a fold
    model never sees the group it is scored on."""
    x, y, g = _groups(1, 60, 10)
    seen: list[np.ndarray] = []

    class Spy(Neighbours):
        def fit(self, x: np.ndarray, y: np.ndarray) -> Spy:
            seen.append(x)
            return super().fit(x, y)  # type: ignore[return-value]

    names = list(dict.fromkeys(g.tolist()))
    cal = calibrate_by_group(Spy, x, y, g, names, folds=6)
    assert len(seen) == 6
    for fold, fitted in enumerate(seen):
        left = np.isin(g, names[fold::6])
        assert len(fitted) == int((~left).sum())
        np.testing.assert_array_equal(fitted, x[~left])
    again = calibrate_by_group(Neighbours, x, y, g, names, folds=6)
    assert again.scale == cal.scale


def test_the_sparse_gp_calibrated_on_left_out_runs() -> None:
    """The GP itself: a few runs of many requests each, as in the campaign; its fitted noise is
    the within-run noise, and the calibration widens its interval for a run it did not see."""
    x, y, g = _groups(2, 6, 150)
    cal = calibrate_by_group(
        lambda: SparseGP(n_inducing=20, max_iters=30, seed=0), x, y, g, sorted(set(g.tolist()))
    )
    assert len(cal.groups) == 6
    assert cal.scale > 1.2
    assert np.mean([r.coverage for r in cal.groups]) < 0.9


def test_the_conformal_quantile_and_bad_input() -> None:
    v = np.arange(1.0, 20.0)  # 19 values: rank ceil(20 · 0.95) = 19
    assert conformal_quantile(v, 0.95) == 19.0
    assert conformal_quantile(v, 0.5) == 10.0
    x, y, g = _groups(3, 3, 5)
    with pytest.raises(InputError) as err:
        calibrate_by_group(Neighbours, x, y[:-1], g, ["s3-0"], level=1.5)
    assert [p.location for p in err.value.problems] == [
        "level",
        "groups",
        "calibration_groups",
    ]
    with pytest.raises(InputError, match="no rows of nowhere"):
        calibrate_by_group(Neighbours, x, y, g, ["s3-0", "nowhere"])


SEED = 7


def test_a_scale_per_class_where_classes_err_differently() -> None:
    """Requests of class "/heavy" carry three times the group effect of "/light": their scale is
    larger, and each class's calibrated interval covers 93–97 % of its requests in new groups."""

    def data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x, y, g = _groups(seed, 400, 20)
        heavy = np.random.default_rng(seed + 1).random(len(y)) < 0.5
        offset = y - np.sin(3 * x[:, 0])  # the group's offset plus the noise
        y = np.sin(3 * x[:, 0]) + np.where(heavy, 3.0, 1.0) * offset
        cls = np.where(heavy, "/heavy", "/light")
        return np.column_stack([x, heavy]), y, g, cls

    x, y, g, cls = data(SEED)
    xt, yt, _, clst = data(200)
    names = list(dict.fromkeys(g.tolist()))
    cal = calibrate_by_group(Neighbours, x, y, g, names, folds=10, strata=cls)
    assert set(cal.strata) == {"/heavy", "/light"}
    assert cal.strata["/heavy"] > 1.3 * cal.strata["/light"]
    pred = Neighbours().fit(x, y).predict(xt)
    assert pred.std_seconds is not None
    scale = np.where(clst == "/heavy", cal.strata["/heavy"], cal.strata["/light"])
    for c in ("/heavy", "/light"):
        k = clst == c
        covered = np.abs(yt[k] - pred.mean_seconds[k]) <= 1.959964 * scale[k] * pred.std_seconds[k]
        assert 0.93 <= covered.mean() <= 0.97, c


def test_errors_of_zero_give_the_smallest_scale_not_zero() -> None:
    class Exact:
        def fit(self, x: np.ndarray, y: np.ndarray) -> Exact:
            return self

        def predict(self, x: np.ndarray) -> Prediction:
            return Prediction(np.sin(3 * x[:, 0]), np.ones(len(x)))

    x, _, g = _groups(4, 5, 10)
    cal = calibrate_by_group(Exact, x, np.sin(3 * x[:, 0]), g, sorted(set(g.tolist())))
    assert cal.scale == MIN_SCALE
