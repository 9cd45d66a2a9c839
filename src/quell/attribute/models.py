"""Models from per-request features to the excess latency the co-located load added, as plain
fit/predict objects: parameters stored as given, learned state with a trailing ``_``, an
explicit seed, ``predict`` returning a ``Prediction`` (mean and, where the model has one, a
predictive standard deviation).

* ``SparseGP``: the seed's Gaussian-process regression, sparse so that it fits the seed's
  ~50,000 requests per experiment on two cores in under a minute: GPy's
  ``SparseGPRegression`` (variational DTC, Titsias 2009) with an ARD RBF kernel over the
  standardised features, the inducing inputs drawn from the training points with the seed and
  then optimised with the hyperparameters by L-BFGS-B. Prediction needs only the posterior's
  Woodbury vector and matrix over the inducing inputs, so it is numpy (no GPy) and the bundle is
  numbers.
* ``ExactGP``: scikit-learn's exact GP (the same kernel plus a white-noise term) on a seeded
  subsample: the reference the sparse one is checked against.
* Baselines: ``RunQueueBaseline`` (the excess is the run-queue wait: the naive answer the seed's
  Fig. 2 argues against), ``OtherCgroupWaitBaseline`` (the same with the eBPF split's wait
  behind other cgroups only), ``LinearBaseline`` (least squares, with the residual spread as its
  interval), ``BoostingBaseline`` (histogram gradient boosting, no interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from quell.attribute.features import RUNQ_WAIT
from quell.errors import InputError, Problem

FloatArray = NDArray[np.float64]
LEVEL: Final = 0.95


@dataclass(frozen=True)
class Prediction:
    """Predicted excess per request in seconds; ``std_seconds`` the predictive standard deviation
    of a new observation (noise included), ``None`` for a model without one."""

    mean_seconds: FloatArray
    std_seconds: FloatArray | None = None

    def interval(self, level: float = LEVEL) -> tuple[FloatArray, FloatArray] | None:
        """The central ``level`` predictive interval (Gaussian), or ``None``."""
        if self.std_seconds is None:
            return None
        z = float(norm.ppf(0.5 + level / 2))
        return self.mean_seconds - z * self.std_seconds, self.mean_seconds + z * self.std_seconds


class ExcessModel(Protocol):
    name: str

    def fit(self, x: FloatArray, y: FloatArray) -> ExcessModel: ...

    def predict(self, x: FloatArray) -> Prediction: ...


def _check_xy(x: FloatArray, y: FloatArray | None, what: str) -> None:
    problems = []
    if np.ndim(x) != 2:
        problems.append(Problem("x", "not a matrix (requests × features)"))
    elif not np.all(np.isfinite(x)):
        problems.append(Problem("x", "has NaN or infinite values"))
    if y is not None:
        if np.shape(y) != (np.shape(x)[0],):
            problems.append(Problem("y", "not one label per request"))
        elif not np.all(np.isfinite(y)):
            problems.append(Problem("y", "has NaN or infinite values"))
        elif len(y) < 2:
            problems.append(Problem("y", "needs at least two requests"))
    if problems:
        raise InputError(what, problems)


@dataclass(frozen=True)
class Standardiser:
    mean: FloatArray
    scale: FloatArray

    @classmethod
    def of(cls, x: FloatArray) -> Standardiser:
        scale = x.std(axis=0)
        return cls(x.mean(axis=0), np.where(scale > 0, scale, 1.0))

    def __call__(self, x: FloatArray) -> FloatArray:
        return np.asarray((x - self.mean) / self.scale, dtype=np.float64)


def rbf(a: FloatArray, b: FloatArray, lengthscale: FloatArray, variance: float) -> FloatArray:
    """The ARD RBF kernel matrix k(a_i, b_j) = variance · exp(−½ Σ ((a−b)/ℓ)²)."""
    a_s = a / lengthscale
    b_s = b / lengthscale
    sq = (a_s**2).sum(1)[:, None] + (b_s**2).sum(1)[None, :] - 2.0 * a_s @ b_s.T
    return np.asarray(variance * np.exp(-0.5 * np.maximum(sq, 0.0)), dtype=np.float64)


@dataclass(frozen=True)
class SparsePosterior:
    """What a fitted sparse GP predicts from, in standardised units: inducing inputs, kernel,
    noise and the posterior's Woodbury vector (M) and matrix (M × M)."""

    x_scaler: Standardiser
    y_mean: float
    y_scale: float
    inducing: FloatArray
    lengthscale: FloatArray
    variance: float
    noise_variance: float
    woodbury_vector: FloatArray
    woodbury_inv: FloatArray
    linear: FloatArray | None = None
    """The linear mean function's coefficients over the standardised features (``None``: a
    zero mean)."""
    interval_scale: float = 1.0
    """What multiplies the predictive standard deviation: 1 as fitted, else the calibration's
    (``quell.attribute.calibration``: the interval honest on runs the model did not see)."""
    class_interval_scale: FloatArray | None = None
    """Per request class, in the order of the trailing one-hot class columns, the scale for a
    request of that class instead of ``interval_scale`` (``None``: one scale for all)."""

    def predict(self, x: FloatArray, chunk: int = 20_000) -> Prediction:
        means, stds = [], []
        for i in range(0, len(x), chunk):
            xs = self.x_scaler(x[i : i + chunk])
            k = rbf(xs, self.inducing, self.lengthscale, self.variance)
            mu = k @ self.woodbury_vector
            if self.linear is not None:
                mu = mu + xs @ self.linear
            var = self.variance - np.einsum("ij,jk,ik->i", k, self.woodbury_inv, k)
            var = np.maximum(var, 0.0) + self.noise_variance
            means.append(self.y_mean + self.y_scale * mu)
            stds.append(self.scale_of(x[i : i + chunk]) * self.y_scale * np.sqrt(var))
        if not means:
            return Prediction(np.zeros(0), np.zeros(0))
        return Prediction(np.concatenate(means), np.concatenate(stds))

    def scale_of(self, x: FloatArray) -> FloatArray | float:
        """Each request's interval scale: its class's (read from the one-hot columns, the
        last ones of ``x``), or the one scale."""
        per_class = self.class_interval_scale
        if per_class is None:
            return self.interval_scale
        onehot = x[:, x.shape[1] - len(per_class) :]
        return np.asarray(per_class[np.argmax(onehot, axis=1)], dtype=np.float64)


class SparseGP:
    """Sparse variational GP regression (GPy) from features to excess seconds. ``mean``:
    ``"linear"`` (default) fits a ridge least-squares line over the standardised features first
    and the GP to what it leaves, so that far from the training requests the prediction follows
    the line instead of falling back to the mean excess; ``"zero"``, the GP alone."""

    name = "sparse_gp"

    def __init__(
        self, n_inducing: int = 200, max_iters: int = 50, seed: int = 0, mean: str = "linear"
    ) -> None:
        self.n_inducing = n_inducing
        self.max_iters = max_iters
        self.seed = seed
        self.mean = mean

    def fit(self, x: FloatArray, y: FloatArray) -> SparseGP:
        import GPy  # heavy: only when fitting

        _check_xy(x, y, "sparse GP training data")
        scaler = Standardiser.of(x)
        xs = scaler(x)
        y_mean = float(y.mean())
        y_scale = float(y.std()) or 1.0
        ys = ((y - y_mean) / y_scale)[:, None]
        linear = None
        if self.mean == "linear":
            gram = xs.T @ xs + 1e-3 * len(xs) * np.eye(xs.shape[1])
            linear = np.asarray(np.linalg.solve(gram, xs.T @ ys[:, 0]), dtype=np.float64)
            ys = ys - (xs @ linear)[:, None]
        elif self.mean != "zero":
            raise InputError("sparse GP", [Problem("mean", f"linear or zero, not {self.mean!r}")])
        rng = np.random.default_rng(self.seed)
        m = min(self.n_inducing, len(x))
        z = xs[rng.choice(len(xs), m, replace=False)].copy()
        d = xs.shape[1]
        kernel = GPy.kern.RBF(d, ARD=True, lengthscale=np.full(d, math.sqrt(d)))
        model = GPy.models.SparseGPRegression(xs, ys, kernel=kernel, Z=z)
        model.likelihood.variance = 0.1
        model.optimize("lbfgsb", max_iters=self.max_iters)
        post = model.posterior
        self.posterior_ = SparsePosterior(
            x_scaler=scaler,
            y_mean=y_mean,
            y_scale=y_scale,
            inducing=np.asarray(model.Z, dtype=np.float64).copy(),
            lengthscale=np.asarray(kernel.lengthscale.values, dtype=np.float64).copy(),
            variance=float(kernel.variance.values[0]),
            noise_variance=float(model.likelihood.variance.values[0]),
            woodbury_vector=np.asarray(post.woodbury_vector[:, 0], dtype=np.float64).copy(),
            woodbury_inv=np.asarray(post.woodbury_inv, dtype=np.float64).copy(),
            linear=linear,
        )
        self.n_train_ = len(x)
        self.log_likelihood_ = float(np.asarray(model.log_likelihood()).ravel()[0])
        return self

    def with_interval_scale(
        self, scale: float, class_scales: Sequence[float] | None = None
    ) -> SparseGP:
        """A copy of this fitted GP whose predictive standard deviation is ``scale`` times its
        own, or for a request of class k (the k-th of the trailing one-hot columns)
        ``class_scales[k]`` times (the mean unchanged)."""
        scales = [scale, *(class_scales or ())]
        bad = [s for s in scales if not (math.isfinite(s) and s > 0)]
        if bad:
            raise InputError("sparse GP", [Problem("interval_scale", f"> 0, not {bad[0]}")])
        per_class = None if class_scales is None else np.asarray(class_scales, dtype=np.float64)
        if per_class is not None and not 2 <= len(per_class) <= self.posterior_.inducing.shape[1]:
            message = f"{len(per_class)} class scales: needs one per one-hot class column"
            raise InputError("sparse GP", [Problem("class_scales", message)])
        out = SparseGP(self.n_inducing, self.max_iters, self.seed, self.mean)
        out.posterior_ = replace(
            self.posterior_, interval_scale=scale, class_interval_scale=per_class
        )
        out.n_train_ = self.n_train_
        if hasattr(self, "log_likelihood_"):
            out.log_likelihood_ = self.log_likelihood_
        return out

    def predict(self, x: FloatArray) -> Prediction:
        _check_xy(x, None, "sparse GP inputs")
        post: SparsePosterior = self.posterior_
        if x.shape[1] != post.inducing.shape[1]:
            message = f"{x.shape[1]} features, the model has {post.inducing.shape[1]}"
            raise InputError("sparse GP inputs", [Problem("x", message)])
        return post.predict(x)


class ExactGP:
    """scikit-learn's exact GP (ARD RBF + white noise) on at most ``max_points`` training
    requests drawn with the seed: the reference for the sparse GP."""

    name = "exact_gp"

    def __init__(self, max_points: int = 2000, seed: int = 0) -> None:
        self.max_points = max_points
        self.seed = seed

    def fit(self, x: FloatArray, y: FloatArray) -> ExactGP:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        _check_xy(x, y, "exact GP training data")
        rng = np.random.default_rng(self.seed)
        rows = rng.choice(len(x), min(self.max_points, len(x)), replace=False)
        self.scaler_ = Standardiser.of(x[rows])
        d = x.shape[1]
        kernel = ConstantKernel(1.0) * RBF(np.full(d, math.sqrt(d))) + WhiteKernel(0.1)
        self.gp_ = GaussianProcessRegressor(kernel, normalize_y=True, random_state=self.seed)
        with warnings.catch_warnings():
            # A length scale at its upper bound is a feature the labels do not depend on.
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp_.fit(self.scaler_(x[rows]), y[rows])
        self.n_train_ = len(rows)
        return self

    def predict(self, x: FloatArray, chunk: int = 20_000) -> Prediction:
        """In blocks of ``chunk`` requests: scikit-learn holds a points × training-points
        matrix while it predicts, 4 GB for 500,000 requests against 1,000."""
        _check_xy(x, None, "exact GP inputs")
        means, stds = [], []
        for i in range(0, len(x), chunk):
            mean, std = self.gp_.predict(self.scaler_(x[i : i + chunk]), return_std=True)
            means.append(np.asarray(mean, dtype=np.float64))
            stds.append(np.asarray(std, dtype=np.float64))
        if not means:
            return Prediction(np.zeros(0), np.zeros(0))
        return Prediction(np.concatenate(means), np.concatenate(stds))


class RunQueueBaseline:
    """The excess is the request's run-queue wait. Nothing to learn."""

    name = "runq_wait"
    column = RUNQ_WAIT

    def __init__(self, features: Sequence[str]) -> None:
        self.features = tuple(features)
        if self.column not in self.features:
            where = f"{self.name} baseline"
            raise InputError(where, [Problem(self.column, "not among the features")])

    def fit(self, x: FloatArray, y: FloatArray) -> RunQueueBaseline:
        """Nothing to learn; the training data are checked as every model checks them."""
        _check_xy(x, y, f"{self.name} baseline training data")
        return self

    def predict(self, x: FloatArray) -> Prediction:
        return Prediction(np.asarray(x[:, self.features.index(self.column)], dtype=np.float64))


class OtherCgroupWaitBaseline(RunQueueBaseline):
    """The excess is the request's run-queue wait behind other cgroups (the eBPF split's
    column): the naive answer once the wait behind the service's own workers is set apart."""

    name = "runq_wait_other_cgroup"
    column = "runq_wait_other_cgroup_seconds"


class LinearBaseline:
    """Least squares; its interval is the training residuals' spread, the same everywhere."""

    name = "linear"

    def fit(self, x: FloatArray, y: FloatArray) -> LinearBaseline:
        from sklearn.linear_model import LinearRegression

        _check_xy(x, y, "linear baseline training data")
        self.model_: Any = LinearRegression().fit(x, y)
        residual = y - self.model_.predict(x)
        self.residual_std_ = float(residual.std(ddof=min(x.shape[1] + 1, len(y) - 1)))
        return self

    def predict(self, x: FloatArray) -> Prediction:
        mean = np.asarray(self.model_.predict(x), dtype=np.float64)
        return Prediction(mean, np.full(len(mean), self.residual_std_))


class BoostingBaseline:
    """Histogram gradient boosting (scikit-learn), seeded; no interval."""

    name = "boosting"

    def __init__(self, seed: int = 0, max_iter: int = 200) -> None:
        self.seed = seed
        self.max_iter = max_iter

    def fit(self, x: FloatArray, y: FloatArray) -> BoostingBaseline:
        from sklearn.ensemble import HistGradientBoostingRegressor

        _check_xy(x, y, "boosting baseline training data")
        self.model_: Any = HistGradientBoostingRegressor(
            max_iter=self.max_iter, random_state=self.seed
        ).fit(x, y)
        return self

    def predict(self, x: FloatArray) -> Prediction:
        return Prediction(np.asarray(self.model_.predict(x), dtype=np.float64))


@dataclass(frozen=True)
class Score:
    """How a model's predictions meet held-out labels."""

    model: str
    n: int
    r2: float
    mae_seconds: float
    rmse_seconds: float
    coverage: float | None
    """Share of labels inside the 95 % interval; ``None`` without an interval."""
    mean_interval_width_seconds: float | None


def score(name: str, y: FloatArray, prediction: Prediction, level: float = LEVEL) -> Score:
    """R², MAE, RMSE and the ``level`` interval's coverage of ``prediction`` against ``y``."""
    y = np.asarray(y, dtype=np.float64)
    err = prediction.mean_seconds - y
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((err**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    interval = prediction.interval(level)
    coverage = width = None
    if interval is not None:
        lo, hi = interval
        coverage = float(np.mean((y >= lo) & (y <= hi)))
        width = float(np.mean(hi - lo))
    return Score(
        model=name,
        n=len(y),
        r2=r2,
        mae_seconds=float(np.abs(err).mean()),
        rmse_seconds=float(np.sqrt((err**2).mean())),
        coverage=coverage,
        mean_interval_width_seconds=width,
    )


def provider_seconds(
    excess_seconds: FloatArray, wall_seconds: FloatArray, floor_seconds: float = 0.0
) -> FloatArray:
    """The part of each request's latency attributed to the provider: the predicted excess held
    within [0, the request's wall time], and none where it is not above ``floor_seconds`` (what
    the model predicts for requests no neighbour delayed, ``provider_floor_seconds``); the rest
    is the service's own."""
    part = np.clip(excess_seconds, 0.0, wall_seconds)
    return np.asarray(np.where(excess_seconds > floor_seconds, part, 0.0), dtype=np.float64)


FLOOR_QUANTILE: Final = 0.995
"""The share of uncontended requests whose predicted excess the provider floor lies above: a
request is attributed a provider part only when its prediction is beyond what the model
predicts for all but 0.5 % of the requests no neighbour delayed (an empirical null at half the
1 % the false-attribution criterion, the p99 of a clean run, allows)."""


def provider_floor_seconds(
    uncontended_excess_seconds: FloatArray, quantile: float = FLOOR_QUANTILE
) -> float:
    """The provider floor: the ``quantile`` of the predicted excess over requests of runs with no
    co-located load (0 where it is not positive)."""
    if not 0.0 < quantile < 1.0:
        raise InputError("floor quantile", [Problem("", f"must be in (0, 1), got {quantile}")])
    pred = np.asarray(uncontended_excess_seconds, dtype=np.float64)
    if pred.size == 0 or not np.all(np.isfinite(pred)):
        raise InputError("floor", [Problem("", "needs finite predictions of uncontended requests")])
    return max(float(np.quantile(pred, quantile)), 0.0)
